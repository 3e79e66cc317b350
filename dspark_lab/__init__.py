"""dspark-lab: a study kit for host-to-device sync pitfalls in PyTorch GPU code.

`from dspark_lab.guard import no_host_syncs` keeps a hot path sync-free. This package imports
nothing heavy itself: every `import dspark_lab.<module>` runs this file first, and the guard needs
torch (about 1.2 s to import here, 3-5 s on a GPU host), which recorded data, the report and the
config never need. It imports only the start-up guard (standard library), which changes nothing
unless this process is the `dspark-lab` command."""

from dspark_lab.startup import guard_start

guard_start()  # first of all: Ctrl-C while the command starts is one line and 130 (startup.py)
