"""Real expert parallelism: the draft step on N ranks (one process per GPU, NCCL; gloo on CPU).

  ranks.py     one rank's context (rank, world size, group, device); world size 1 = one process
  step.py      one rank's decode step: the lab step with a group, per-rank delay and jitter
  measure.py   every rank measures its own steps; rows gain a rank dimension (schema.RANK_COLUMNS)
  workers.py   a persistent group of rank processes the kernel talks to (WorkerGroup)
  orchestrator.py  one point run in phases (PointRun) and its two seams (PointExecutor, PointObserver)
  run.py       an EP run: a PointRun per dispatch mode on a worker group (GroupExecutor), written to a run file
  torchrun.py  the same run launched by torchrun: each rank joins from its environment, rank 0 writes
  checks.py    EP output equals the single-process reference; padded rows never dispatched

The MoE's dispatch modes live beside the MoE (model/dispatch.py); the EP-N prediction is
torch-free analysis of recorded rows (results/analyses/ep_predict.py).
"""
