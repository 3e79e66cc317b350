"""Names and colours every figure shares: sync kinds, step parts, strategies, runs, timeline parts."""
from __future__ import annotations

from dspark_lab.results.facts import strategy_table

SYNC_KINDS = (  # (column, legend name); the first four add up to syncs_per_step
    ("stream_syncs_per_step", "stream sync"),
    ("device_syncs_per_step", "device sync"),
    ("event_syncs_per_step", "event sync"),
    ("sync_memcpy_per_step", "synchronous memcpy"),
)
READBACK_KIND = ("readback_syncs_per_step", "by-design result readback (not counted)")
SYNC_COLORS = {"stream_syncs_per_step": "#d62728", "device_syncs_per_step": "#8c1c13",
               "event_syncs_per_step": "#ff9896", "sync_memcpy_per_step": "#e377c2",
               "readback_syncs_per_step": "#c7c7c7"}

PART_NAMES = {
    "host_prep_ms": "host: batch prep", "host_blocked_ms": "host: blocked in a sync",
    "host_readback_ms": "host: result readback", "host_copy_ms": "host: async copy call",
    "host_launch_ms": "host: launch / CUDA API", "host_other_ms": "host: other Python",
    "gpu_busy_ms": "GPU: busy", "gpu_idle_after_sync_ms": "GPU: idle after a sync (starved)",
    "gpu_idle_other_ms": "GPU: idle, other",
    "gpu_idle_sync_caused_ms": "GPU: idle a sync caused (waiting for the host from the sync until the host "
                               "is ahead again; a chain of syncs at most their calls' summed host time)",
}
PART_COLORS = {
    "host_prep_ms": "#9ecae1", "host_blocked_ms": "#d62728", "host_readback_ms": "#bdbdbd",
    "host_copy_ms": "#ff7f0e", "host_launch_ms": "#2ca02c", "host_other_ms": "#dadaeb",
    "gpu_busy_ms": "#3f3f8f", "gpu_idle_after_sync_ms": "#f4a582", "gpu_idle_other_ms": "#eeeeee",
    "gpu_idle_sync_caused_ms": "#f4a582",
}

# The GPU idle by cause (measure/idle_causes.py): the idle-by-cause bars and the timeline's idle spans.
CAUSE_COLORS = {"sync": "#d6604d", "host_bound": "#92c5de", "other": "#e0e0e0"}

STRATEGY_COLORS = strategy_table.Column(lambda row: row.colour)  # each strategy's row says its colour
# Runs side by side: 24 distinct colours (the first eight as before, then plotly's Dark24 and
# Light24 less near-repeats), so runs stay apart well past ten; beyond 24 a colour repeats.
RUN_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
              "#17becf", "#ff7f0e", "#2E91E5", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100",
              "#750D86", "#EB663B", "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32")


def run_color(i: int) -> str:
    return RUN_COLORS[i % len(RUN_COLORS)]
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
NOTE_COLOR = "#8c1c13"  # a figure's failure / left-out note

# Timeline parts (measure.breakdown.timeline): host parts by precedence, sync calls, GPU work.
TIMELINE_HOST_PARTS = ("prep", "blocked", "readback", "copy", "launch", "other")
TIMELINE_SYNC_PARTS = ("sync", "readback_sync")
TIMELINE_GPU_PARTS = ("kernel", "h2d_copy", "memcpy")
TIMELINE_COLORS = {
    "prep": PART_COLORS["host_prep_ms"], "blocked": PART_COLORS["host_blocked_ms"],
    "readback": PART_COLORS["host_readback_ms"], "copy": PART_COLORS["host_copy_ms"],
    "launch": PART_COLORS["host_launch_ms"], "other": PART_COLORS["host_other_ms"],
    "sync": "#8c1c13", "readback_sync": "#969696",
    "kernel": PART_COLORS["gpu_busy_ms"], "h2d_copy": "#ff7f0e", "memcpy": "#e377c2",
    "idle_sync_caused": PART_COLORS["gpu_idle_sync_caused_ms"],
    "idle_host_bound": CAUSE_COLORS["host_bound"], "idle_other": CAUSE_COLORS["other"],
}
TIMELINE_NAMES = {
    "prep": "host: batch prep", "blocked": "host: blocked in a sync", "readback": "host: result readback",
    "copy": "host: async copy call", "launch": "host: launch / CUDA API", "other": "host: other Python",
    "sync": "sync call (blocking)", "readback_sync": "readback sync (by design)",
    "kernel": "GPU: busy (kernels)", "h2d_copy": "GPU: host-to-device copy", "memcpy": "GPU: other copy",
    "idle_sync_caused": "GPU: idle a sync caused",
    "idle_host_bound": "GPU: idle, host-bound (waiting for a launch)", "idle_other": "GPU: idle, other",
}
