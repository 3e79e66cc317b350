"""The command line: `dspark-lab` (main.py: the parser, sweep, report, main), its options generated
from LabConfig's fields (options.py) and grid lists (lists.py), `doctor` (doctor.py), `ep` (ep.py),
the text summary of recorded runs (summary.py), and the JupyterLab launcher behind `bash lab.sh`
(launch.py)."""

from dspark_lab.cli.startup import guard_start

guard_start()  # before anything heavy is imported: Ctrl-C while starting is one line and 130
