"""Orchestration: measure one config point, a sweep of them, or live for the panel.

  point.py  one config point, every strategy, trials interleaved -> tidy rows (`measure_point`)
  sweep.py  a grid of points into a run file, resumable, a failed point recorded and passed
  live.py   the panel's live backend (`LiveBackend`), without plotly or ipywidgets
  target.py a user's step named as `module:callable` or `file.py:callable`, loaded with one-line errors
  inspect.py a user's step measured into an inspect record (`inspect_step`, `inspect_pair`)
  callable_executor.py  the PointExecutor of a user's step callables (inspect's, through PointRun)
  worker.py a named target inspected in a worker process a time limit can stop
"""
