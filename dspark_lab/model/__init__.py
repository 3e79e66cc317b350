"""The re-implementation of SGLang's DSpark draft step on torch, small but faithful.

  draft.py           a ForwardBatch-like record, the draft model and its MoE top-k (which reads
                     `num_token_non_padded`), CUDA-graph replay over padded capture buckets
  dispatch.py        the MoE's three ways to join expert-parallel ranks (allreduce, a2a_fixed,
                     a2a_dynamic), beside the MoE that calls them
  workload.py        one decode step around the draft forward (`LabStep`, the measured callable)
  calibration.py     on-disk cache of the host-spin and GPU-sleep calibrations, per machine
  sglang_adapter.py  an installed SGLang's own predicate and helper, for conformance
"""
