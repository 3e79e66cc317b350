"""What people see, drawn from results only (no torch): plotly figures, the standalone report,
the widget panel. Each takes DataFrames or a `results` object, never a profiler object.
"""
