"""The tidy row: one per config point x strategy x trial. Everything downstream reads these columns.

A recorded run is a JSON-lines file, written by results/record/store.py (RunWriter): a header record with the
machine fingerprint, then per point its `row` records (the columns below), `timeline` records (a few
profiled steps as segments) and a closing `point` record that marks the point finished. Read them with
`dspark_lab.results.Runs.load()` (results/loading/load.py reads and validates them); rows are built by
`results.record.rows.build_row`.
"""
from __future__ import annotations

# 2: the header may carry `name` (a label given at record time) and rows may carry extra columns
# (e.g. `disturbed`). Version-1 files are still read: columns they lack load as NaN.
SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)

# Config columns (LabConfig fields that vary in a sweep, plus the derived ones shown to users).
CONFIG_COLUMNS = (
    "point_id",  # stable hash of the config point without the strategy (for resume)
    "ep_size", "batch_size", "gamma", "strategy", "model", "workload", "graph", "device",
    "query_token_num", "bucket_batch_size", "num_tokens", "target_verify_ms", "predicate",
)
# Outcome of the point.
STATUS_COLUMNS = ("status", "error")  # status: "ok" | "failed"; error: message or ""
# Profiler-free timing of this trial (host clock, synchronized at trial boundaries).
TIMING_COLUMNS = (
    "trial", "steps", "step_ms",  # step_ms: wall time of the trial / steps
    "step_ms_p50", "step_ms_p90",  # per-step host-clock distribution inside the trial
)
# From one profiled pass per point x strategy (repeated on each trial row of that pair).
TRACE_COLUMNS = (
    "profiled_step_ms",
    "syncs_per_step",  # host-blocking calls outside the by-design readback
    "stream_syncs_per_step", "device_syncs_per_step", "event_syncs_per_step", "sync_memcpy_per_step",
    "copy_waits_per_step",  # waits inside a copy call with no sync call of its own (a pageable D2H)
    "readback_syncs_per_step",  # the step's by-design result readback (excluded above)
    "h2d_pageable_per_step", "h2d_pinned_per_step", "allocs_per_step",
    "host_prep_ms", "host_blocked_ms", "host_readback_ms", "host_copy_ms", "host_launch_ms", "host_other_ms",
    "gpu_busy_ms", "gpu_idle_ms", "gpu_idle_after_sync_ms",
    # Where the first sync outside the readback comes from, "" if none: on CUDA the exact line from
    # sync debug mode ("dspark_lab/strategies.py:25 device_direct"); from a trace alone, the
    # function as the profiler names it ("dspark_lab/strategies.py(20): device_direct", the line
    # of its `def`) with Python stacks, else the ATen op and phase ("aten::to in dspark:...").
    "sync_site",
    # Syncs per step outside the readback as torch's sync debug mode counts them (CUDA only), a
    # second count independent of the trace's; run on every strategy.
    "debug_syncs_per_step",
    # True where debug_syncs_per_step != syncs_per_step (a sync one of them missed); null where not
    # compared (no CUDA, or a run recorded before this column existed).
    "sync_count_mismatch",
    # Why the sync counts read as they do: "not measurable without CUDA" (sync columns are NaN on
    # CPU, never 0), the two counts where they disagree, else "".
    "sync_note",
    # GPU idle caused by the step's syncs (breakdown.SYNC_COST_RULE): every gap where the GPU waits
    # for the host from a draining sync until the host is ahead again, capped at the time blocked.
    # Recorded runs from before it have only gpu_idle_after_sync_ms (the first such gap).
    "gpu_idle_sync_caused_ms",
    # The waits by kind (results.facts.wait_kinds), JSON: {kind: {per_step, blocked_ms, charged_ms}};
    # and each wait outside the readback charged nothing, with why ("" when every one was charged).
    "wait_charges", "wait_note",
    # Device-to-host copies issued in the step (GPU-side "Memcpy DtoH"), and those into pageable memory.
    "d2h_per_step", "d2h_pageable_per_step",
)
# Per-trial diagnostics (measure/diagnostics.py), the noise verdict (results/rules/noise.py) and how the
# point's trials were stopped (measure/loop.py stop rules). Per-step values are trial means.
DIAG_COLUMNS = (
    "gpu_ms",  # GPU time per step of the step's GPU work (CUDA events around it; None on CPU)
    "host_work_ms",  # host time per step in real work: wall time outside deliberate waits
    "host_wait_ms",  # host time per step in deliberate waits (emulated host cost, by-design syncs)
    "offcpu_ms",  # time per step the measuring thread was not on a CPU (descheduled or sleeping)
    "ctx_switches_invol", "ctx_switches_vol",  # context switches of the thread during the trial
    "cpu_steal_ms",  # CPU steal during the trial, all CPUs (/proc/stat); None where not reported
    "sm_clock_mhz",  # GPU SM clock (NVML, lower of trial start/end); None without NVML
    "throttle_reasons",  # NVML clock-event reasons that slow the GPU, as a bitmask; None without NVML
    "disturbed",  # bool: the trial is disturbed by the rule in results/rules/noise.py
    "disturbed_reason",  # why, "" when quiet
    "stop_reason",  # "ci_target" | "time_cap" | "fixed_trials": why the point stopped measuring
    "ci_half_width_pct",  # the point's headline ratio CI half-width when it stopped, % (None if none)
    "order_seed", "trial_position",  # the seed of the rounds' random order, and this trial's place in its round (0 first)
)
# A machine, as runs are compared and resumed: the fingerprint keys that must agree.
MACHINE_KEYS = ("gpu", "driver", "cuda", "torch")
FINGERPRINT_COLUMNS = MACHINE_KEYS + ("run_id", "recorded_at")

ROW_COLUMNS = CONFIG_COLUMNS + STATUS_COLUMNS + TIMING_COLUMNS + TRACE_COLUMNS + DIAG_COLUMNS

# Parts of a step on each side; each side sums to the step's wall time.
HOST_PARTS = ("host_prep_ms", "host_blocked_ms", "host_readback_ms", "host_copy_ms", "host_launch_ms", "host_other_ms")
GPU_PARTS = ("gpu_busy_ms", "gpu_idle_ms")

# Timeline record: {"kind": "timeline", "point_id", "strategy", "segments": [[lane, part, start_ms, end_ms, label], ...]}
# Rank dimension (parallel/measure.py). Rows from one process carry rank 0, world_size 1 and
# ep_mode "single" at EP 1 or "predicate_only" at EP > 1 (one process, the predicate flipped, all
# experts local); "real" rows come from `world_size` rank processes joined by torch.distributed;
# "predicted" rows from results/analyses/ep_predict.py. Kept out of ROW_COLUMNS: the store keeps them as extras.
RANK_COLUMNS = (
    "rank", "world_size",
    # Where the rank ran: its host's name, its node's rank (torchrun's GROUP_RANK; 0 on one host) and
    # its rank on that node (LOCAL_RANK, which picks its GPU). Runs from before these load them as NaN.
    "node", "node_rank", "local_rank",
    "ep_mode",  # "single" | "predicate_only" | "real" | "predicted"
    "dispatch",  # "allreduce" | "a2a_fixed" | "a2a_dynamic" ("" when no ranks are joined)
    "rank_case",  # the case's name: per-rank strategies, delays and jitter
    "rank_strategies",  # every rank's strategy in rank order, e.g. "device_direct,non_blocking"
    "host_delay_ms", "host_jitter_ms",  # this rank's added host delay and uniform jitter bound
    # Time inside the MoE's collectives per step: NCCL kernels on GPU (its own GPU part, taken out
    # of gpu_busy_ms), the collective calls' host wall time on gloo.
    "gpu_collective_ms",
    "step_ms_max_rank",  # this trial's step_ms, maximum over the ranks
    # Who waits for whom: the rise of this rank's host wait (blocked + readback) and collective time
    # over the case where every rank runs exactly as this one does (None if that case was not run).
    "blocked_from_others_ms", "collective_from_others_ms",
    "sync_sites",  # JSON {"file:line function": syncs per step} from sync debug mode, this rank (CUDA)
)
