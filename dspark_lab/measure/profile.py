"""One profiled pass over several steps, and what a Chrome trace of it says.

`profile_strategies` runs each step in turn inside one profiler session (starting a profiler costs
more than a few steps), each in a `dspark:strategy:<name>` range; `analyse` turns a trace window
into sync counts, the step-time breakdown and a timeline. The single-process point (run/point.py)
and every rank of an EP run (parallel/measure.py) use the same two.
"""
from __future__ import annotations

from dspark_lab.measure import breakdown, syncs, trace

PROFILE_STEPS = 12  # profiled steps per strategy (the first is dropped from the breakdown's means)
DEBUG_STEPS = 3  # steps per strategy under sync debug mode (counts and the exact line)
STRATEGY_RANGE = "dspark:strategy:"


def profile_strategies(steps: dict, profile_steps: int, with_stack: bool = False, keep_file: bool = False):
    """One profiler session over all strategies in turn (starting a profiler costs more than a few
    steps); each strategy's steps sit in a `dspark:strategy:<name>` range, drained at its end.
    Returns the trace (with `keep_file`: the path of its JSON file, which the caller removes)."""
    import torch  # here, not at the top: the analysis worker imports this module without torch

    def run_all() -> None:
        for n, s in steps.items():
            with torch.profiler.record_function(STRATEGY_RANGE + n):
                for _ in range(profile_steps):
                    s.step()
                s.drain()

    for s in steps.values():  # the trials left them warm; make sure nothing is queued
        s.drain()
    return trace.capture(run_all, 1, warmup=0, with_stack=with_stack, sync=lambda: None, keep_file=keep_file)


def strategy_windows(src, names) -> dict:
    """{strategy: its window} of one profile_strategies trace (a dict or its JSON file)."""
    whole = trace.load_json(src)
    return {n: trace.window(whole, STRATEGY_RANGE + n) for n in names}


def analyse_strategies(src, names) -> dict:
    """{strategy: analyse(its window)} of one profile_strategies trace (a dict or its JSON file)."""
    return {n: analyse(w) for n, w in strategy_windows(src, names).items()}


def analyse(tr: dict) -> tuple[dict, list]:
    """Counts, breakdown means and a timeline from one Chrome trace (live or recorded)."""
    ev = trace.events(tr)
    calls = syncs.sync_calls(ev)
    out = syncs.counts_per_step(ev, calls)
    # The charged gaps and the host's interval sets, once for both the breakdown and the timeline.
    shared = dict(caused=breakdown.sync_caused_gaps(ev, calls), sets=breakdown.host_sets(ev, calls))
    out.update(breakdown.summary(ev, calls=calls, **shared))
    # Up to three steps after the first (it pays the profiler's start), fewer when fewer were profiled.
    shown = min(3, max(len(syncs.step_windows(ev)) - 1, 1))
    return out, breakdown.timeline(ev, first_step=1, n_steps=shown, calls=calls, **shared)
