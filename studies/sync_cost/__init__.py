"""What a sync costs at three point types, profiled and profiler-free (point_types; --smoke on
CPU); the run file lands in data/runs/."""
