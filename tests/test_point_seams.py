"""The point run's two seams are typing.Protocols that every implementation satisfies: each executor
is a parallel.orchestrator.PointExecutor and each observer a PointObserver, by isinstance
(runtime_checkable) and by the signatures of their methods; a deliberately wrong one is refused by
both checks; and every parameter of the run wing that takes an executor or an observer is
annotated with its Protocol, so a reader following one reaches the Protocol."""
from __future__ import annotations

import inspect
import typing

import numpy as np
import pytest

from dspark_lab.parallel import measure as rank_measure, orchestrator, run as ep_run, torchrun
from dspark_lab.run import live, point
from dspark_lab.parallel.orchestrator import PointExecutor, PointObserver

EXECUTORS = (point.LocalExecutor, live.MeasureExecutor, ep_run.RanksExecutor, ep_run.GroupExecutor,
             rank_measure.RankExecutor)
OBSERVERS = (orchestrator._Observers, orchestrator.OnTrial, live._LiveView, ep_run.PointWriter, ep_run._OnPoint,
             torchrun._Finished)


def protocol_methods(protocol) -> list[str]:
    return [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]


def signature_problems(impl: type, protocol) -> list[str]:
    """Where `impl`'s methods differ from `protocol`'s: a method missing, a parameter of another
    name, kind or place, a default the protocol has and the implementation lacks, or an extra
    parameter without a default (a caller of the protocol could not fill it)."""
    problems = []
    for name in protocol_methods(protocol):
        fn = getattr(impl, name, None)
        if not callable(fn):
            problems.append(f"{impl.__name__}.{name}: missing")
            continue
        want = list(inspect.signature(getattr(protocol, name)).parameters.values())
        have = list(inspect.signature(fn).parameters.values())
        for i, p in enumerate(want):
            q = have[i] if i < len(have) else None
            if q is None or (q.name, q.kind) != (p.name, p.kind):
                problems.append(f"{impl.__name__}.{name}: parameter {i} is {q and q.name!r}, the protocol's is {p.name!r}")
            elif p.default is not inspect.Parameter.empty and q.default != p.default:
                problems.append(f"{impl.__name__}.{name}: {p.name} has no default {p.default!r}")
        problems += [f"{impl.__name__}.{name}: extra parameter {q.name!r} without a default" for q in have[len(want):]
                     if q.default is inspect.Parameter.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
    return problems


def bare(cls: type):
    """An instance without its __init__ (isinstance of a runtime_checkable protocol looks at members only)."""
    return object.__new__(cls)


@pytest.mark.parametrize("impl", EXECUTORS, ids=lambda c: c.__name__)
def test_every_executor_is_a_point_executor(impl):
    assert isinstance(bare(impl), PointExecutor)
    assert signature_problems(impl, PointExecutor) == []


@pytest.mark.parametrize("impl", OBSERVERS, ids=lambda c: c.__name__)
def test_every_observer_is_a_point_observer(impl):
    assert isinstance(bare(impl), PointObserver)
    assert signature_problems(impl, PointObserver) == []


class SwappedExecutor:
    """Both methods there, the parameters of execute in another order and build's default missing."""

    def build(self, plan, built):
        return None

    def execute(self, plan, steps, observer):
        return None


class NoExecute:
    def build(self, plan, built=None):
        return None


class TrialOnly:
    def on_trial(self, strategy, timing):
        pass


def test_a_wrong_executor_is_refused():
    assert isinstance(SwappedExecutor(), PointExecutor)  # isinstance sees the names only...
    problems = signature_problems(SwappedExecutor, PointExecutor)  # ...the signatures see the rest
    assert any("build: built has no default" in p for p in problems), problems
    assert any("execute: parameter 2 is 'steps'" in p for p in problems), problems
    assert not isinstance(NoExecute(), PointExecutor)
    assert signature_problems(NoExecute, PointExecutor) == ["NoExecute.execute: missing"]


def test_a_wrong_observer_is_refused():
    assert not isinstance(TrialOnly(), PointObserver)
    assert "TrialOnly.on_done: missing" in signature_problems(TrialOnly, PointObserver)

    class ExtraArgument(PointObserver):
        def on_trial(self, strategy, timing, when):
            pass

    assert signature_problems(ExtraArgument, PointObserver) == [
        "ExtraArgument.on_trial: extra parameter 'when' without a default"]


def _functions(module):
    for _, obj in inspect.getmembers(module):
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            yield obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            yield from (f for f in vars(obj).values() if inspect.isfunction(f))


SEAM_PARAMETERS = {"executor": PointExecutor, "observer": PointObserver, "observers": typing.Sequence[PointObserver]}


@pytest.mark.parametrize("module", (orchestrator, point, live, rank_measure, ep_run), ids=lambda m: m.__name__)
def test_every_parameter_taking_a_seam_is_annotated_with_its_protocol(module):
    seen = 0
    for fn in _functions(module):
        hints = typing.get_type_hints(fn, vars(module))
        for name, want in SEAM_PARAMETERS.items():
            if name in inspect.signature(fn).parameters:
                seen += 1
                assert hints.get(name) == want, f"{fn.__qualname__}({name}) is annotated {hints.get(name)!r}, not {want}"
    assert seen >= 1


def test_the_live_backend_hands_its_point_run_an_executor():
    assert typing.get_type_hints(live.LiveBackend._executor, vars(live))["return"] is PointExecutor


def test_a_point_s_rows_are_built_once_with_the_noise_verdict_in_their_records(monkeypatch):
    """The noise verdict is a column of each trial's record when its row is built (TrialRecord.row,
    through results.record.rows.build_row), not written into the rows afterwards: a row handed on
    is the builder's own dict, untouched since."""
    from dspark_lab.config import LabConfig
    from dspark_lab.measure.timing import TrialTiming
    from dspark_lab.parallel.spec import PointSpec, TrialRecord

    built: list = []
    real_row = TrialRecord.row

    def row(self):
        r = real_row(self)
        built.append((r, dict(r)))
        return r

    monkeypatch.setattr(TrialRecord, "row", row)
    cfg = LabConfig(model="tiny", workload="tiny", device="cpu")
    slow = 50.0  # one trial far above the others: disturbed by the step-time bound
    timings = {"device_direct": [TrialTiming(trial=i, steps=5, step_ms=ms, per_step_ms=np.full(5, ms))
                                 for i, ms in enumerate((8.0, 8.1, 7.9, slow))]}
    rows = point.timing_rows(PointSpec(cfg), timings)
    assert [r["disturbed"] for r in rows] == [False, False, False, True] and rows[3]["disturbed_reason"]
    for r in rows:  # each row handed on is one the builder made, as it made it
        same = [snapshot for made, snapshot in built if made is r]
        assert same == [r]
