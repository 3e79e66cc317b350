"""dspark-lab: a study kit for host-to-device sync pitfalls in PyTorch GPU code.

`dspark_lab.no_host_syncs` (guard.py) keeps a hot path sync-free; it is imported on first use so
that `import dspark_lab` stays light."""


def __getattr__(name):
    if name == "no_host_syncs":
        from dspark_lab.guard import no_host_syncs

        return no_host_syncs
    raise AttributeError(f"module 'dspark_lab' has no attribute {name!r}")
