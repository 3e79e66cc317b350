"""The headroom of each read-back site: what serving that one read from a warm-up step's value (no sync)
buys, measured, beside what the kit charges it (the GPU idle its wait caused, measure.breakdown's rule).

`headroom(fn)`: the step inspected as `inspect` does (the charge per site), its reads recorded over
warm-up steps (measure.read_stub), then one arm per servable site and the real step, all under the same
wrappers, timed in interleaved rounds (measure.loop: paired per round). A site's headroom is the median
over rounds of the real step's time minus the stubbed step's, with its 95% bootstrap CI. Where the charge
lies outside that CI, the stubbed step is inspected too and the difference is split into what changed
(results.analyses.headroom.explain): the wait moved (GPU idle now charged to other waits), the GPU's own
work, GPU idle charged to no wait (the host's work after the read), and the rest (profiled vs
profiler-free). The record is results.analyses.headroom's format.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Callable, Optional

import torch

from dspark_lab.measure import loop, probe
from dspark_lab.measure.read_stub import ReadStub
from dspark_lab.results.analyses import headroom as results
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.run.inspect import inspect_step

REAL = "real step"
RECORD_STEPS = 2  # warm-up steps recorded: a value or a shape that differs between them is seen to vary
TRY_STEPS = 2  # stubbed steps run once before timing: one that raises cannot be stubbed


def _sync() -> Callable[[], None]:
    return torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)


def _unservable(stub: ReadStub, fn: Callable, read) -> str:
    """Why a site cannot be served ("" when it can): its shape varies, or the stubbed step raised."""
    if read.unservable():
        return read.unservable()
    stepped = stub.step(fn, read.site)
    try:
        for _ in range(TRY_STEPS):
            stepped()
        _sync()()
    except Exception as e:  # noqa: BLE001 -- the recorded value does not fit: that is the finding
        return f"the step raised {type(e).__name__} with the recorded value: {str(e).splitlines()[0][:160]}"
    if stub.overflow.get(read.site):
        return "it ran more often than in the recorded steps: a recorded value cannot stand for each call"
    return ""


def _arm_row(site: str, read, why_not: str, timings: dict) -> dict:
    row = {"site": site, "kind": read.kind, "per_step": read.per_step, "varies": read.varies,
           "stubbed": not why_not, "why_not": why_not}
    if not why_not:
        real, stub = [t.step_ms for t in timings[REAL]], [t.step_ms for t in timings[site]]
        med, lo, hi = median_ci([a - b for a, b in zip(real, stub)])
        row.update(headroom_ms=med, headroom_lo=lo, headroom_hi=hi, stubbed_trials=stub)
    return row


def measure(fn: Callable[[], object], *, devices=None, steps: int = 20, trials: int = 5, warmup: int = 3,
            explain: bool = True, inspect_opts: Optional[dict] = None) -> tuple[dict, list, list, dict]:
    """(the real step's inspect record, the site rows, the real arm's trial times, {site: the stubbed
    step's inspect record} for the sites whose headroom and charge disagree)."""
    devices = devices if devices is not None else (("cuda",) if torch.cuda.is_available() else ())
    opts = dict(steps=steps, trials=1, warmup=warmup, **(inspect_opts or {}))
    base = inspect_step(fn, **opts)
    with ReadStub(devices) as stub:
        reads = stub.record(fn, RECORD_STEPS)
        why_not = {s: _unservable(stub, fn, r) for s, r in reads.items()}
        arms = {REAL: stub.step(fn, None), **{s: stub.step(fn, s) for s in reads if not why_not[s]}}
        timings = loop.run_rounds(arms, loop.FixedRounds(trials), steps=steps, warmup=warmup, sync=_sync()).timings
        rows = results.with_charges([_arm_row(s, r, why_not[s], timings) for s, r in reads.items()], base)
        stubbed = {}
        for r in rows:
            if explain and r.get("agree") is False:
                stubbed[r["site"]] = inspect_step(stub.step(fn, r["site"]), **opts)
    return base, rows, [t.step_ms for t in timings[REAL]], stubbed


def headroom(fn: Callable[[], object], *, target: str = "(a Python callable)", label: Optional[str] = None,
             steps: int = 20, trials: int = 5, warmup: int = 3, source_root: Optional[Path] = None,
             explain: bool = True, devices=None) -> dict:
    """The headroom record of `fn` (a zero-argument step): results.analyses.headroom's format."""
    label = label or getattr(fn, "__name__", "step")
    base, rows, real, stubbed = measure(fn, devices=devices, steps=steps, trials=trials, warmup=warmup,
                                        explain=explain, inspect_opts=dict(target=target, label=label,
                                                                           source_root=source_root))
    med, lo, hi = median_ci(real)
    for r in rows:
        if r["site"] in stubbed:
            r["why"] = results.explain(base, stubbed[r["site"]], r, step_ms=med)
    return results.validate({
        "kind": results.KIND, "schema": results.SCHEMA, "target": target, "label": label,
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": base["device"], "fingerprint": probe.fingerprint(),
        "options": {"steps": steps, "trials": trials, "warmup": warmup, "recorded_steps": RECORD_STEPS},
        "step_ms": med, "step_ms_lo": lo, "step_ms_hi": hi, "trials": real,
        "sites": results.with_unseen(rows, base), "inspect": {k: base[k] for k in ("parts", "counts", "sites")},
    })
