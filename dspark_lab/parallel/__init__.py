"""Real expert parallelism: the draft step on N ranks (one process per GPU, NCCL; gloo on CPU).

  dispatch.py  the MoE's three ways to join the ranks (allreduce, a2a_fixed, a2a_dynamic)
  ranks.py     one rank's context (rank, world size, group, device); world size 1 = one process
  step.py      one rank's decode step: the lab step with a group, per-rank delay and jitter
  measure.py   every rank measures its own steps; rows gain a rank dimension (schema.RANK_COLUMNS)
  workers.py   a persistent group of rank processes the kernel talks to (WorkerGroup)
  predict.py   EP N step time from one rank's timings and the per-rank jitter (torch-free)
  checks.py    EP output equals the single-process reference; padded rows never dispatched
"""
