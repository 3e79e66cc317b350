"""Measurement of any step: sync accounting with source lines, step-time breakdown, timing.

`measure_step(fn)` (measure/step.py) takes any callable that runs one step (your own hot path,
e.g. a function with an `.item()` in it) and returns the same accounting the lab's draft step gets:

    from dspark_lab.measure.step import measure_step

Mark phases inside your step with `dspark_lab.measure.ranges.phase("host_prep")` etc. to split host
time further. This package's face imports nothing: reading a trace needs no torch (the analysis
worker is a fresh interpreter that imports measure/profile.py without it), so each module is
imported by its own name and every edge is one the import contracts see.
"""
