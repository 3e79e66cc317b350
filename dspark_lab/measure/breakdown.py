"""Step-time breakdown from a trace: where each step's wall time went, on the host and on the GPU.

Host side, each instant of a step is given to one part, by precedence:
  blocked (host waits outside the readback, measure.syncs.host_waits: a copy call that blocked by
  itself included) > readback (the by-design result wait) > copy (async
  memcpy calls) > launch (other CUDA API calls) > prep (the step's `*prep*` phases) > other.
GPU side: busy (kernels, copies, memsets) and idle; of the idle time, the part in gaps that
contain the end of a step sync is "idle after sync" (the first gap only, kept for old recorded
runs). Blocked time is not lost time; idle the sync caused is:

The rule (SYNC_COST_RULE, details in `sync_caused_gaps`): a GPU idle gap is charged to the latest
step sync that drained the GPU's queue while the GPU waits there for a host launch and every launch
since that sync found the GPU idle (the host has not got ahead again). Syncs of one step that drain the
queue one after another while the host never gets ahead in between form a chain; the chain's gaps together are
charged up to the summed host time of the calls that made its syncs (the whole `.item()`, not only the
cudaStreamSynchronize inside it).
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from dspark_lab.measure.frame_memo import per_frame
from dspark_lab.measure.ranges import PHASE_PREFIX
from dspark_lab.measure import idle_causes, run_ahead
from dspark_lab.measure import intervals as iv
from dspark_lab.measure.syncs import (ASYNC_COPY_APIS, HOST_AHEAD_US, host_events, host_waits, other_thread_waits,
                                      step_windows, sync_calls)
from dspark_lab.measure.trace import GPU_CATS, HOST_API_CATS, HOST_RANGE_CAT
from dspark_lab.results.facts import wait_kinds
from dspark_lab.results.rules.stats import mean_ci

GPU_MERGE_GAP_US = 2.0  # GPU ops closer than this are drawn as one busy span
PARTS_PRECEDENCE = ("blocked", "readback", "copy", "launch", "prep")
SYNC_COST_RULE = ("GPU idle caused by a host wait (a sync call, or a copy call that blocked by itself: a D2H into "
                  "pageable memory, a pageable H2D the driver synchronized before staging): each gap where the GPU waits for the "
                  "host, from the wait that drained its queue until the host is ahead again; waits of one step that "
                  "follow each other while the host never gets ahead form a chain, whose gaps are charged up to the "
                  "summed host time of the framework calls that made its waits (each gap to the wait that drained the "
                  "queue before it); a launch made by the framework call that then waits (.item()'s copy) does not "
                  "put the host ahead")


def host_sets(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None) -> dict[str, list]:
    host = host_events(ev)
    calls = sync_calls(ev) if calls is None else calls
    api = host[host.cat.isin(HOST_API_CATS)]
    prep = host[(host.cat == HOST_RANGE_CAT) & host.name.str.startswith(PHASE_PREFIX) & host.name.str.contains("prep")]
    pairs = lambda d: list(zip(d.ts, d.end))  # noqa: E731
    return {
        "blocked": pairs(calls[~calls.readback]),
        "readback": pairs(calls[calls.readback]),
        "copy": pairs(api[api.name.isin(ASYNC_COPY_APIS)]),
        "launch": pairs(api[~api.name.isin(ASYNC_COPY_APIS)]),
        "prep": pairs(prep),
    }


def gpu_intervals(ev: pd.DataFrame) -> list[tuple[float, float]]:
    g = ev[ev.cat.isin(GPU_CATS)]
    return iv.union(zip(g.ts, g.end))


@per_frame
def launches(ev: pd.DataFrame) -> pd.DataFrame:
    """Host API calls on the step thread that queued GPU work (kernel, graph, copy or memset
    launches, matched by correlation), with their GPU work's first start and last end, and
    `waited`: the first op started more than HOST_AHEAD_US after the call returned, so it was
    queued behind earlier work (the host was ahead of the GPU)."""
    host = host_events(ev)
    api = host[host.cat.isin(HOST_API_CATS) & host.correlation.notna()]
    g = ev[ev.cat.isin(GPU_CATS) & ev.correlation.notna()]
    work = g.groupby("correlation").agg(gpu_start=("ts", "min"), gpu_end=("end", "max"))
    out = api[["name", "ts", "end", "correlation"]].join(work, on="correlation", how="inner")
    out = out.sort_values("ts", kind="stable").reset_index(drop=True)
    out["waited"] = (out.gpu_start - out.end) > HOST_AHEAD_US
    return out


def sync_caused_gaps(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None,
                     caps_us: Optional[Sequence[float]] = None) -> pd.DataFrame:
    """GPU idle caused by step syncs, one row per charged gap: start, end (µs; the charged part),
    gap_end (the whole gap's end), and the sync that caused it (`sync`: its row in `calls`,
    `sync_name`, `sync_site`, `sync_step`).

    The rule: a blocking call drains the queue when the GPU had work pending when it began and none
    left when it returned. From then on, while every launch finds the GPU idle or about to be (its
    first op starts within HOST_AHEAD_US of the call's return), the host is not ahead, and each gap
    the GPU spends waiting for the host's next launch is charged to that sync, in time order, up to
    the time the host was blocked in it; this spans the rest of the step and the next step's host
    work before its first queued-up launch. The first launch that waits behind queued work ends the
    charge; a later draining sync takes over. Why the cap: without the sync each later launch comes
    exactly as much earlier as the host was blocked, so the sync cannot have caused more idle than
    that; the rest is the host's own (a host-bound loop idles there with no sync at all).
    Chains: a sync that drains the queue while an earlier one of the same step is still in charge (the
    host never got ahead in between) joins that sync's chain, and the cap applies to the chain, the
    summed host time of its syncs' calls: without any of them every later launch comes that much earlier,
    so together they can cost up to that (on an H200, two syncs per step capped one by one were charged
    2.50 ms against a measured loss of 3.04 ms). Each gap is still charged to the sync that drained
    before it. A chain never spans steps: a host that never gets ahead would otherwise make one chain of
    the whole trace, whose pooled budget the first steps spend on idle beyond their own syncs' blocked
    time, leaving the last step almost nothing (on an H200, two syncs per step: 2.1 ms charged to each
    step but the last, 0.05 ms to the last; a per-step mean 11% below the loss).
    Readback syncs (by design) and blocking calls outside the steps drain too but are charged
    nothing here: the gaps after them stay "idle, other" (readback_caused_per_step charges the
    readback by this rule, apart). Gaps between the ops of a running CUDA graph or
    between queued kernels are not the host's and are not charged.
    What the host was blocked in: the framework call that made the sync (the innermost ATen op around
    the blocking API call, e.g. aten::_local_scalar_dense for `.item()`), not the API call alone:
    without the sync the host saves the whole call, the copy it issues and the wake-up after the wait
    too (call_spans_us). The bare cudaStreamSynchronize under-charges a host-bound step: the profiler's
    own host time before each sync (in launches and the op's preamble) shortens the wait it records
    (verify's cost group holds the op's span against the loss timed without a profiler).
    `caps_us`: each sync's cap (µs, one per row of `calls`) where it was measured some other way."""
    calls = sync_calls(ev) if calls is None else calls
    cols = ["start", "end", "gap_end", "sync", "sync_name", "sync_site", "sync_step"]
    wins = step_windows(ev)
    if not wins:
        return pd.DataFrame(columns=cols)
    lau = launches(ev)
    cause_of_launch, end_cause, chain_of, _ = _causes_of_launches(ev, lau, calls, wins[-1][1])
    blocked = call_spans_us(ev, calls) if caps_us is None else np.asarray(caps_us, float)
    if len(blocked) != len(calls):
        raise ValueError(f"caps_us must give one cap per sync call: {len(calls)} calls, {len(blocked)} caps")
    rows = _charged_gaps(ev, lau, calls, blocked, cause_of_launch, end_cause, chain_of, wins[0][0], wins[-1][1])
    return pd.DataFrame(rows, columns=cols)


def call_spans_us(ev: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
    """Per wait: the host time (µs) of the innermost ATen op on its thread that encloses it, or
    of the API call itself where no op does (a trace without CPU ops, a sync made outside ATen).
    Rows of syncs.host_waits carry that span already (`op_ts`, `op_end`)."""
    if {"op_ts", "op_end"} <= set(calls.columns):
        return np.array(calls["op_end"] - calls["op_ts"], dtype=float)
    spans = np.array(calls["end"] - calls["ts"], dtype=float)
    ops = ev[(ev.cat == "cpu_op") & (ev.ph == "X")]
    if calls.empty or ops.empty:
        return spans
    by_thread = {k: (g.ts.to_numpy(float), g.end.to_numpy(float)) for k, g in ops.groupby(["pid", "tid"])}
    for i, c in enumerate(calls.itertuples()):
        o_ts, o_end = by_thread.get((c.pid, c.tid), (np.empty(0), np.empty(0)))
        around = np.flatnonzero((o_ts <= c.ts) & (o_end >= c.end))
        if len(around):
            k = around[np.argmax(o_ts[around])]  # the latest to start: the innermost
            spans[i] = o_end[k] - o_ts[k]
    return spans


def _causes_of_launches(ev: pd.DataFrame, lau: pd.DataFrame, calls: pd.DataFrame, hi: float,
                        waits: Optional[pd.DataFrame] = None) -> tuple[dict, Optional[int], dict, dict]:
    """Walk the host's launches and waits in host time (a launch counts at its start, a wait at its
    return): per launch (correlation), the draining wait in charge of it (its row in `calls`, or
    None), the one in charge when the last step ends at `hi`, per draining wait the first wait of its
    chain (itself, unless it drained while another was in charge), and per wait of `calls` what it
    found (DRAINED, ALREADY_IDLE or STILL_QUEUED). `waits`: syncs.host_waits(ev) where the caller has it."""
    waits = host_waits(ev) if waits is None else waits
    causes = {(r.ts, r.end): i for i, r in enumerate(calls.itertuples()) if not r.readback}
    steps = calls["step"].tolist() if "step" in calls else [0] * len(calls)
    # GPU work pending when a wait begins / returns: the last end of work launched before.
    launch_ts = lau.ts.to_numpy()
    pending = lau.gpu_end.cummax().to_numpy()

    def pending_at(t: float) -> float:
        k = int(np.searchsorted(launch_ts, t, side="left"))
        return float(pending[k - 1]) if k else float("-inf")

    own_copy_of_a_wait = _own_launch_test(waits)
    timeline_ = [(r.ts, 0, "launch", r) for r in lau.itertuples()] + \
                [(r.end, 1, "wait", r) for r in waits.itertuples()]
    cause: Optional[int] = None
    end_cause: Optional[int] = None  # in charge when the last step ends (a drain after it does not count)
    cause_of_launch: dict = {}
    chain_of: dict = {}  # draining wait -> the first wait of its chain
    found: dict = {}  # wait (row in calls) -> what it found
    for t, _, kind, r in sorted(timeline_, key=lambda x: (x[0], x[1])):
        if kind == "launch":
            if r.waited and not own_copy_of_a_wait(r):
                cause = None
            cause_of_launch[r.correlation] = cause
        else:
            p = pending_at(r.end)
            new = causes.get((r.ts, r.end))
            if r.ts + HOST_AHEAD_US < p <= r.end + HOST_AHEAD_US:  # it waited for work and left none
                if new is not None:
                    joins = cause is not None and steps[cause] == steps[new]
                    chain_of[new] = chain_of[cause] if joins else new
                    found[new] = DRAINED
                cause = new
            elif new is not None:
                found[new] = ALREADY_IDLE if p <= r.ts + HOST_AHEAD_US else STILL_QUEUED
        if t <= hi:
            end_cause = cause
    return cause_of_launch, end_cause, chain_of, found


def _own_launch_test(waits: pd.DataFrame):
    """Is a launch a wait's own? One made by the framework call that then waits (`.item()`'s copy,
    `nonzero`'s count kernel, the copy a `.cpu()` waits in): queued behind the GPU's work, it does not
    put the host ahead, so it does not end a chain. Its own: inside the wait's framework call, or (a
    trace without ATen ops) ending within HOST_AHEAD_US before the wait begins."""
    op_lo = waits["op_ts"].to_numpy(float) if "op_ts" in waits else waits.ts.to_numpy(float)
    op_hi = waits["op_end"].to_numpy(float) if "op_end" in waits else waits.end.to_numpy(float)
    block_starts = np.sort(waits.ts.to_numpy(float))

    def own(r) -> bool:
        if ((op_lo <= r.ts) & (r.ts <= op_hi)).any():
            return True
        k = int(np.searchsorted(block_starts, r.end, side="left"))
        return k < len(block_starts) and block_starts[k] - r.end <= HOST_AHEAD_US
    return own


# What a wait found when it returned (the reason a wait is charged nothing, wait_charges).
DRAINED, ALREADY_IDLE, STILL_QUEUED = "drained", "already_idle", "still_queued"
WHY_NOTHING = {
    ALREADY_IDLE: "the GPU was already idle when it began: nothing queued to wait for",
    STILL_QUEUED: "work was still queued when it returned: the GPU never ran dry",
    DRAINED: "the host was ahead again before the GPU ran dry (or its chain's cap went to earlier gaps)",
    "readback": "the step's by-design readback: left out of the step's charge (its own: gpu_idle_readback_caused_ms)",
    "other_thread": "made on another thread: the step's thread did not wait in it",
}


def _charged_gaps(ev: pd.DataFrame, lau: pd.DataFrame, calls: pd.DataFrame, blocked: np.ndarray,
                  cause_of_launch: dict, end_cause: Optional[int], chain_of: dict, lo: float, hi: float) -> list[list]:
    """Each idle gap in [lo, hi): did the GPU wait for the host (the op after it started right after
    its launch returned), and which sync was in charge of that launch? Charged up to the cap of
    that sync's chain."""
    g = ev[ev.cat.isin(GPU_CATS)]
    starts = g.sort_values("ts", kind="stable")
    op_ts, op_corr = starts.ts.to_numpy(), starts.correlation.to_numpy()
    first_op = {r.correlation: (r.gpu_start, r.waited) for r in lau.itertuples()}
    budget: dict = {}  # per chain (its first sync): how much more idle its syncs can be charged
    for member, head in chain_of.items():
        budget[head] = budget.get(head, 0.0) + float(blocked[member])
    rows = []
    for a, b in iv.complement(gpu_intervals(ev), lo, hi):
        k = int(np.searchsorted(op_ts, b, side="left"))
        if k == len(op_ts):  # nothing ran after it in the trace: the GPU was left waiting
            who = end_cause
        else:
            # The GPU waited for the host when the gap ends with a launch's first op, started right
            # after its call (gaps between the ops of one graph or one queue are not the host's).
            corr = op_corr[k]
            start, waited = first_op.get(corr, (None, True))
            who = cause_of_launch.get(corr) if start == op_ts[k] and not waited else None
        if who is None:
            continue
        # The cap (see sync_caused_gaps): no more idle than the host was blocked in the chain's syncs.
        c, head = calls.iloc[who], chain_of.get(who, who)
        budget.setdefault(head, float(blocked[who]))
        charged = min(b - a, budget[head])
        budget[head] -= charged
        if charged > 0:
            rows.append([a, a + charged, b, who, c["name"], c["site"], int(c["step"])])
    return rows


def resolve_host(sets: dict[str, list], lo: float, hi: float) -> dict[str, list]:
    """Disjoint host intervals per part inside [lo, hi), by precedence."""
    taken: list = []
    out = {}
    for part in PARTS_PRECEDENCE:
        mine = iv.subtract(iv.clip(sets[part], lo, hi), taken)
        out[part] = mine
        taken = iv.union(taken + mine)
    out["other"] = iv.complement(taken, lo, hi)
    return out


def per_step(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None, *, caused: Optional[pd.DataFrame] = None,
             sets: Optional[dict] = None) -> pd.DataFrame:
    """One row per step: wall_ms, the host parts, the GPU parts (all in ms), the GPU idle by cause
    (measure/idle_causes.py: sync-caused + host-bound + other = idle) and the run-ahead columns
    (measure/run_ahead.py). `caused` and `sets` (sync_caused_gaps, host_sets of the same trace) are
    computed here unless given."""
    calls = sync_calls(ev) if calls is None else calls
    sets = host_sets(ev, calls) if sets is None else sets
    gpu = gpu_intervals(ev)
    step_sync_ends = sorted(e for _, e in sets["blocked"])
    caused = sync_caused_gaps(ev, calls) if caused is None else caused
    caused_spans = list(zip(caused.start, caused.end))
    by_cause, ahead = _causes_and_leads(ev, gpu, caused)
    rows = []
    for i, (lo, hi) in enumerate(step_windows(ev)):
        host = resolve_host(sets, lo, hi)
        busy = iv.clip(gpu, lo, hi)
        gaps = iv.complement(gpu, lo, hi)
        after_sync = [g for g in gaps if any(g[0] <= t <= g[1] for t in step_sync_ends if lo <= t < hi)]
        row = {"step": i, "wall_ms": (hi - lo) / 1e3}
        row.update({f"host_{p}_ms": iv.length(v) / 1e3 for p, v in host.items()})
        row.update(gpu_busy_ms=iv.length(busy) / 1e3, gpu_idle_ms=iv.length(gaps) / 1e3,
                   gpu_idle_after_sync_ms=iv.length(after_sync) / 1e3,
                   gpu_idle_sync_caused_ms=iv.length(iv.clip(caused_spans, lo, hi)) / 1e3)
        row.update(idle_causes.per_window(by_cause, lo, hi))
        row.update(ahead[i])
        rows.append(row)
    return pd.DataFrame(rows)


def _causes_and_leads(ev: pd.DataFrame, gpu: list, caused: pd.DataFrame) -> tuple[dict, list]:
    """The GPU idle intervals by cause over all steps, and each step's run-ahead numbers."""
    wins = step_windows(ev)
    if not wins:
        return {c: [] for c in idle_causes.CAUSES}, []
    lau = launches(ev)
    gaps = iv.complement(gpu, wins[0][0], wins[-1][1])
    return idle_causes.spans(ev, lau, caused, gaps), run_ahead.per_step(ev, lau)


WAIT_CHARGE_COLUMNS = ("step", "wait", "label", "name", "calls", "site", "blocked_ms", "cap_ms", "charged_ms",
                       "why_nothing")


def wait_charges(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None, *, caused: Optional[pd.DataFrame] = None,
                 waits: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per host wait in the steps, then one per sync call (SYNC_KINDS) another thread made there: its
    step, kind of wait (results.facts.wait_kinds) and label, sync call, API calls and site, the time
    the host waited in it (blocked_ms: first call's start to last call's end), its cap (the framework
    call's host time), the GPU idle charged to it, and where that is 0 why (WHY_NOTHING), never a
    bare 0. `calls`, `caused`, `waits`: sync_calls, sync_caused_gaps, syncs.host_waits of the trace."""
    waits = host_waits(ev) if waits is None else waits
    calls = waits[waits.step >= 0].reset_index(drop=True) if calls is None else calls
    wins = step_windows(ev)
    found: dict = {}
    if wins and len(calls):
        _, _, _, found = _causes_of_launches(ev, launches(ev), calls, wins[-1][1], waits)
    caused = sync_caused_gaps(ev, calls) if caused is None else caused
    charged = (caused.end - caused.start).groupby(caused["sync"]).sum() if len(caused) else pd.Series(dtype=float)
    caps = call_spans_us(ev, calls)
    rows = []
    for i, r in enumerate(calls.itertuples()):
        wait = getattr(r, "wait", None) or wait_kinds.of_api(getattr(r, "kind", None))
        c = float(charged.get(i, 0.0)) / 1e3
        why = "" if c > 0 else WHY_NOTHING["readback" if r.readback else found.get(i, ALREADY_IDLE)]
        rows.append([int(getattr(r, "step", 0)), wait, wait_kinds.label(wait), r.name, getattr(r, "calls", r.name),
                     r.site, (r.end - r.ts) / 1e3, caps[i] / 1e3, c, why])
    for r in other_thread_waits(ev).itertuples():
        wait = wait_kinds.of_api(r.kind)
        rows.append([int(r.step), wait, wait_kinds.label(wait), r.name, r.name, f"thread {r.tid}", (r.end - r.ts) / 1e3,
                     (r.end - r.ts) / 1e3, 0.0, WHY_NOTHING["other_thread"]])
    return pd.DataFrame(rows, columns=list(WAIT_CHARGE_COLUMNS))


def wait_summary(table: pd.DataFrame, n_steps: int) -> dict:
    """`wait_charges` (JSON): per kind of wait, per step, how many, the host's time in them and the GPU
    idle charged; `wait_note`: each wait outside the readback charged nothing and why."""
    n = max(n_steps, 1)
    outside = table[table.why_nothing != WHY_NOTHING["readback"]]
    charges = {k: {"per_step": len(g) / n, "blocked_ms": float(g.blocked_ms.sum()) / n,
                   "charged_ms": float(g.charged_ms.sum()) / n} for k, g in outside.groupby("wait")}
    zero = outside[outside.charged_ms <= 0]
    note = "; ".join(sorted({f"{r.label} ({r.calls}) at {r.site}: {r.why_nothing}" for r in zero.itertuples()}))
    return {"wait_charges": json.dumps(charges, sort_keys=True), "wait_note": note}


def readback_caused_per_step(ev: pd.DataFrame, calls: pd.DataFrame, charged_ms: Sequence[float]) -> list[float]:
    """Per step: the GPU idle the by-design readback causes, by the same rule: the step's charge with the
    readback counted among its waits, less `charged_ms` (its charge without it, per_step's). The step's
    charge leaves the readback out (every way of making the step needs it); a comparison of two steps
    whose readbacks differ (a fix that moves a wait into its readback) needs it."""
    wins = step_windows(ev)
    if not wins or not len(calls) or not calls["readback"].any():
        return [0.0 if c == c else float("nan") for c in charged_ms]  # NaN where the step has no charge (no GPU)
    with_readback = sync_caused_gaps(ev, calls.assign(readback=False))
    spans = list(zip(with_readback.start, with_readback.end))
    return [max(0.0, iv.length(iv.clip(spans, lo, hi)) / 1e3 - c) if c == c else float("nan")
            for (lo, hi), c in zip(wins, charged_ms)]


def _charge_ci_half_width(df: pd.DataFrame) -> float:
    """Half the 95% CI of the steps' mean charge, the readback's included (0 with one step)."""
    per = (df["gpu_idle_sync_caused_ms"] + df["gpu_idle_readback_caused_ms"]).tolist()
    if len(per) < 2:
        return 0.0
    _, lo, hi = mean_ci(per)
    return (hi - lo) / 2


def summary(ev: pd.DataFrame, skip_first: int = 1, calls: Optional[pd.DataFrame] = None, **shared) -> dict:
    """Mean over steps of each part, so the parts still add up to the mean step (medians would
    not). The first step is skipped: it pays the profiler's start. `shared`: per_step's. With them,
    the waits by kind and the ones charged nothing (wait_summary), the readback's own charge
    (readback_caused_per_step: gpu_idle_readback_caused_ms) and half the 95% CI of the mean charge,
    the readback's included, over the steps (charge_ci_half_width_ms)."""
    calls = sync_calls(ev) if calls is None else calls
    df = per_step(ev, calls, **shared)
    if len(df):
        df["gpu_idle_readback_caused_ms"] = readback_caused_per_step(ev, calls, df.gpu_idle_sync_caused_ms.tolist())
    skip = skip_first if len(df) > skip_first else 0
    df = df.iloc[skip:]
    mean = df.mean(numeric_only=True)
    out = {k: float(mean[k]) for k in df.columns if k.endswith("_ms") and k != "wall_ms"}
    if len(df):
        out["charge_ci_half_width_ms"] = _charge_ci_half_width(df)
        table = wait_charges(ev, calls, caused=shared.get("caused"))
        out.update(wait_summary(table[table.step >= skip], len(df)))
    out["profiled_step_ms"] = float(mean["wall_ms"])
    if step_windows(ev):  # the launch lead over every launch of those steps, not a mean of medians
        pooled = run_ahead.over_steps(ev, launches(ev), skip_first=skip_first if len(step_windows(ev)) > skip_first else 0)
        out.update({k: v for k, v in pooled.items() if k != "launches"})
        out["launches_per_step"] = float(mean["launches"])
    return out


def timeline(ev: pd.DataFrame, first_step: int = 1, n_steps: int = 3, calls: Optional[pd.DataFrame] = None, *,
             caused: Optional[pd.DataFrame] = None, sets: Optional[dict] = None) -> list[list]:
    """Segments [lane, part, start_ms, end_ms, label] for a few steps, times relative to the first
    shown step's start: host parts by precedence, GPU busy spans, each step sync's span, and the
    GPU idle each sync caused ("idle_sync_caused", labelled with the sync and its site), the rest of
    the idle by cause ("idle_host_bound", "idle_other"), and each step's run-ahead in its label.
    `caused` and `sets` as in per_step."""
    wins = step_windows(ev)
    if not wins:
        return []
    first_step = min(first_step, max(len(wins) - n_steps, 0))
    shown = wins[first_step:first_step + n_steps]
    lo, hi = shown[0][0], shown[-1][1]
    calls = sync_calls(ev) if calls is None else calls
    sets = host_sets(ev, calls) if sets is None else sets
    segs: list[list] = []
    for part, spans in resolve_host(sets, lo, hi).items():
        segs += [["host", part, (s - lo) / 1e3, (e - lo) / 1e3, part] for s, e in spans if e - s > 0.5]
    g = ev[ev.cat.isin(GPU_CATS)]
    g = g[(g.end > lo) & (g.ts < hi)]
    # Host-to-device copies one by one (they are the subject); other GPU work merged into busy spans.
    for r in g[g.name.str.contains("HtoD")].itertuples():
        segs.append(["gpu", "h2d_copy", (max(r.ts, lo) - lo) / 1e3, (min(r.end, hi) - lo) / 1e3, r.name[:60]])
    for s, e in iv.union((max(a, lo), min(b, hi)) for a, b in zip(g.ts, g.end + GPU_MERGE_GAP_US)):
        n = int(((g.ts >= s) & (g.ts < e)).sum())
        segs.append(["gpu", "busy", (s - lo) / 1e3, (e - GPU_MERGE_GAP_US - lo) / 1e3, f"{n} GPU ops"])
    caused = sync_caused_gaps(ev, calls) if caused is None else caused
    for r in caused[(caused.end > lo) & (caused.start < hi)].itertuples():
        segs.append(["gpu", "idle_sync_caused", (max(r.start, lo) - lo) / 1e3, (min(r.end, hi) - lo) / 1e3,
                     f"GPU idle caused by {_wait_label(calls, r.sync)} ({r.sync_name}) at {r.sync_site}"])
    for i, r in enumerate(calls.itertuples()):
        if lo <= r.ts < hi:
            segs.append(["host", "sync" if not r.readback else "readback_sync", (r.ts - lo) / 1e3, (r.end - lo) / 1e3,
                         f"{_wait_label(calls, i)}: {getattr(r, 'calls', r.name)} at {r.site}"])
    by_cause, ahead = _causes_and_leads(ev, gpu_intervals(ev), caused)
    segs += _cause_segments(by_cause, lo, hi)
    for k, (s, e) in enumerate(shown):
        segs.append(["host", "step", (s - lo) / 1e3, (e - lo) / 1e3, _step_label(first_step + k, ahead[first_step + k])])
    return segs


def _wait_label(calls: pd.DataFrame, i: int) -> str:
    """The kind of wait of row `i` of `calls`, as views name it."""
    row = calls.iloc[int(i)]
    return wait_kinds.label(row["wait"] if "wait" in calls else wait_kinds.of_api(row.get("kind")))


def _cause_segments(by_cause: dict, lo: float, hi: float) -> list[list]:
    """The GPU idle that is not a sync's, by cause (the sync's own is "idle_sync_caused"); gaps shorter than
    GPU_MERGE_GAP_US are drawn inside the busy spans."""
    names = {"host_bound": "GPU idle, waiting for the host to launch (host-bound)",
             "other": "GPU idle, other (launch latency, between queued ops, another stream)"}
    return [["gpu", f"idle_{cause}", (a - lo) / 1e3, (b - lo) / 1e3, label]
            for cause, label in names.items() for a, b in iv.clip(by_cause[cause], lo, hi) if b - a > GPU_MERGE_GAP_US]


def _step_label(k: int, ahead: dict) -> str:
    if not ahead.get("launches"):
        return f"step {k}"
    return (f"step {k} · launch lead median {ahead['launch_lead_median_ms']:+.2f} ms, min "
            f"{ahead['launch_lead_min_ms']:+.2f} ms; run-ahead {ahead['run_ahead_fraction']:.2f} of {ahead['launches']} launches")
