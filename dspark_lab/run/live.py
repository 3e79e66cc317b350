"""The live backend of the panel, without plotly or ipywidgets (so it runs on a bare GPU box):
`LiveBackend().stream(settings, on_update, cancel)` measures all strategies at one setting and
hands over what it has as it goes; `get(settings)` is the same without the partial updates;
`open_backend()` picks it on a CUDA machine, else the recorded runs (results.viewmodels.backend).

A setting's measurement streams: the timed trials (run.point.measure_point,
measure.loop.run_rounds), each one passed on as it ends, so the first strategies' bars are drawn
while the rest are measured, with how many trials so far and the headline's CI. The profiled pass
(counts, breakdown, timeline) runs after the first round and is analysed in a worker process
(measure.analysis_worker) while the other rounds are timed; then the complete update. `cancel`
(a threading.Event) set by a newer setting ends it at the next trial boundary (`Cancelled`).

A cheap start: a backend starts a warm-up on a daemon thread when it is made, doing only what the
first figure needs: the fingerprint (on its own thread: it reads the driver), the CUDA context,
and the default strategy's step at the default setting, built and graph-captured, with its two
cold halves side by side (model.workload.LabStep.warmed): the target verify, whose calibration is
read from the on-disk cache or, when the cache is cold, measured and stored on that helper thread
(model/calibration.py), while the draft model is built and its kernels load. Nothing is measured
ahead. The first request at that setting starts with a first look: one timed trial of that
strategy, drawn at once (LiveUpdate.first_look); then the other strategies are built and the
interleaved rounds measure them all, the first look's trial not among them (it ran before the
others existed, so it has no round to be paired in). The warm-up runs with a short GIL switch
interval (_short_gil_switch, below).
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Callable, Optional, Sequence

import pandas as pd
import torch

from dspark_lab import strategies
from dspark_lab.config import CAPTURE_BUCKETS, MODEL_PRESETS, WORKLOAD_PRESETS, LabConfig, choose_mode
from dspark_lab.measure import loop
from dspark_lab.measure.analysis_worker import AnalysisWorker
from dspark_lab.measure.probe import fingerprint as machine_fingerprint
from dspark_lab.model.dispatch import DISPATCH_MODES, check_mode
from dspark_lab.model.workload import LabStep
from dspark_lab.parallel import workers
from dspark_lab.parallel.run import EPLive, RanksCancelled, RanksExecutor
from dspark_lab.parallel.spec import PointPlan, PointResult, PointSpec
from dspark_lab.results.viewmodels import frames
from dspark_lab.results.record import schema
from dspark_lab.results.record.row_record import RowRecord
from dspark_lab.results.rules import noise
from dspark_lab.results.viewmodels.backend import PointData, load_recorded
from dspark_lab.results.viewmodels.backend_protocol import STREAMS
from dspark_lab.results.query.runs import gpu_name, point_label
from dspark_lab.parallel.orchestrator import PointExecutor, PointObserver, PointRun
from dspark_lab.run.point import LocalExecutor, build_steps, timing_rows


# Live measurement size: 3 interleaved trials (the fewest the noise rule judges) of 5 steps per
# strategy after 1 warm-up step, and 3 profiled steps (the first left out of the breakdown), so a
# complete update of every strategy of the table fits its budget on an H200 (sglang_profile steps
# are 6-9 ms; results.facts.time_budgets.LIVE_UPDATE, checked against the newest record below
# scaled to the table's strategy count). Later complete updates measured there
# (data/machines/h200-live-stream-20261201*.json, median of five): 8 steps after 2 warm-up ones and 4 profiled, 2.8 s; with the profiled pass
# analysed in a worker, 6 after 1 and 4 profiled, 2.4 s (-s6p4), 5 after 1 and 3 profiled, 2.0 s
# (-s5p3); then with the panel's debounce at 0.05 s instead of 0.3 s and no partial drawn just
# before the complete one, 1.74 s (-1447); with the cheaper cold start below, 1.45-1.92 s over
# five calls (-1619, -1624, -1632, -1641 and the file without a suffix; host speed differs between
# calls, and each file records it).
LIVE_STEPS, LIVE_WARMUP, LIVE_TRIALS, LIVE_PROFILE_STEPS = 5, 1, 3, 3
PROFILE_AFTER_ROUND = 1  # the profiled pass runs after this many rounds; its analysis overlaps the rest
DEFAULT_DISPATCH = "allreduce"  # SGLang's MoE without an all-to-all backend (measurements.md)


class Cancelled(Exception):
    """A newer setting replaced this measurement; it stopped at a trial boundary."""


@dataclass
class LiveUpdate:
    """One step of a streamed measurement: `data` so far (timing rows only until `final`)."""

    data: PointData
    final: bool
    trials: int  # timed trials so far, all strategies
    planned: int  # timed trials the setting runs
    half_width_pct: Optional[float]  # the headline's CI half-width over the rounds so far
    ranks: Optional[pd.DataFrame] = None  # real EP, final: every rank's rows (the per-rank view)
    first_look: bool = False  # one trial of one strategy, before the others are built (not a round's)
    analysed_in: Optional[str] = None  # final: where the profiled pass was analysed (parallel.spec.PointResult)

    def line(self) -> str:
        """The progress line: trials so far and the current CI."""
        ci = (f"headline CI ±{self.half_width_pct:.1f}%" if self.half_width_pct is not None else
              f"no CI yet (needs {noise.MIN_QUIET_ROUNDS} quiet rounds)")
        if self.first_look:
            name = self.data.rows["strategy"].iloc[0] if len(self.data.rows) else "one strategy"
            return f"first look: 1 trial of {name}; building the other strategies, then {self.planned} trials"
        if self.final:
            return f"complete: {self.trials} trials, {ci}"
        return f"{self.trials}/{self.planned} trials so far, {ci}"


class LiveBackend:
    """Measures on this machine's CUDA device: run.point.measure_point with all strategies."""

    mode = "live"
    capabilities = frozenset({STREAMS})  # a StreamingBackend (results.viewmodels.backend_protocol)

    def __init__(self, base: Optional[LabConfig] = None, measure: Optional[Callable] = None,
                 fingerprint: Optional[dict] = None, warm: Optional[bool] = None, ep_live: Optional[EPLive] = None,
                 names: Optional[Sequence[str]] = None, profile_steps: int = LIVE_PROFILE_STEPS):
        """`measure(cfg, strategies, *, on_progress, on_trial)` stands in for measure_point (tests);
        `profile_steps` per strategy in the profiled pass (the first is left out of the breakdown);
        `warm` (default: when `measure` is the real runner) starts the background warm-up;
        `ep_live` the real-rank group (made on first use); `names` the strategies measured (all)."""
        self.names = [strategies.get(n).name for n in names] if names else list(strategies.names())
        self.base = base or LabConfig(steps=LIVE_STEPS, warmup=LIVE_WARMUP, trials=LIVE_TRIALS)
        self._real = measure is None
        if not isinstance(profile_steps, int) or isinstance(profile_steps, bool) or profile_steps < 2:
            raise ValueError(f"profile_steps must be an integer >= 2 (the first profiled step is left out); got {profile_steps!r}")
        # The real runner profiles after the first round and has the trace analysed in a worker
        # process while the other rounds are timed (measure.analysis_worker; run.point).
        self._analysis: Optional[AnalysisWorker] = AnalysisWorker() if measure is None else None
        self._measure = measure  # None: the real runner (run.point.LocalExecutor)
        self._profile_steps = profile_steps
        self._fingerprint = fingerprint
        self._ep_live = ep_live
        self.run_id = "live-" + datetime.now().strftime("%Y%m%d-%H%M%S")
        self.warm_s: Optional[float] = None  # how long the warm-up took
        self.warm_ended_at: Optional[float] = None  # time.perf_counter() when it ended (the cold-start study)
        self.warm_parts: dict = {}  # its parts, seconds (for the live benchmark)
        self.warm_error: Optional[BaseException] = None  # a failed warm-up is kept here, get() goes on
        self._steps: Optional[tuple[LabConfig, dict]] = None  # the default strategy's step at the default setting (warm-up)
        self._warm: Optional[threading.Thread] = None
        self._fp_thread: Optional[threading.Thread] = None
        if self._real if warm is None else warm:
            self._warm = threading.Thread(target=self.warm_up, name="dspark-warm-up", daemon=True)
            self._warm.start()

    # -- the cheap start -------------------------------------------------------------------------
    def warm_up(self) -> None:
        """What the first figure needs, nothing more: CUDA, calibrations, one strategy's step and graphs."""
        t0 = time.perf_counter()
        try:
            with _short_gil_switch():
                self._warm_up()
        except Exception as e:  # noqa: BLE001 - the user's own request will measure and report
            self.warm_error = e
        self.warm_ended_at = time.perf_counter()
        self.warm_s = self.warm_ended_at - t0

    def _warm_up(self) -> None:
        if self._fingerprint is None:  # reads the driver: off the first figure's path
            t = threading.Thread(target=lambda: self.fingerprint, name="dspark-fingerprint", daemon=True)
            t.start()
            self._fp_thread = t  # only once started: another thread may join it at once
        cfg = self.config(self.defaults())
        t1 = time.perf_counter()
        if cfg.resolved_device() == "cuda":  # the driver (is_available) and the context, timed apart
            torch.cuda.init()
            torch.ones(1, device="cuda").sum().item()
            # No matmul here: the fp32 GEMM's kernels would load (0.10-0.16 s on an H200) for a
            # step that runs in bf16; cuBLAS is set up by the target verify's own GEMMs.
            self.warm_parts["cuda_init_s"] = time.perf_counter() - t1
        if self._real and not self.runs_real_ep(cfg.ep_size):
            # The step's two cold halves side by side (LabStep.warmed): the target verify, with
            # its calibration read from the on-disk cache or, when cold, measured there and
            # stored, on a helper thread while the draft model is built and its kernels load.
            # Its first step captures the draft graph. The other strategies are built by the
            # first request, after its first look.
            t1 = time.perf_counter()
            name = frames.default_strategy(self.names)
            step = LabStep.warmed(cfg, name)
            step.step()
            step.drain()
            self._steps = (cfg, {name: step})
            self.warm_parts["first_step_and_graphs_s"] = time.perf_counter() - t1

    def wait_warm(self, timeout: Optional[float] = None) -> bool:
        """Wait for the warm-up (if any); True when none is running."""
        t = self._warm
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        return t is None or not t.is_alive()

    @property
    def fingerprint(self) -> dict:
        t = self._fp_thread
        if self._fingerprint is None and t is not None and t is not threading.current_thread():
            t.join()  # the warm-up is reading it already: once is enough
        if self._fingerprint is None:
            self._fingerprint = machine_fingerprint()
        return self._fingerprint

    # -- the backend interface -------------------------------------------------------------------
    def options(self) -> dict:
        experts = MODEL_PRESETS[self.base.model].experts
        return {
            "ep_size": [d for d in range(1, experts + 1) if experts % d == 0],
            "batch_size": [b for b in CAPTURE_BUCKETS if b in (1, 2, 4, 8, 16, 32, 64, 128, 256)],
            "gamma": [1, 2, 3, 4, 6, 8, 12, 16],
            "strategy": list(self.names),
            "workload": list(WORKLOAD_PRESETS),
            "dispatch": list(DISPATCH_MODES),  # real ranks only (runs_real_ep)
        }

    def defaults(self) -> dict:
        return {"ep_size": max(self.options()["ep_size"]), "batch_size": self.base.batch_size,
                "gamma": self.base.gamma, "strategy": frames.default_strategy(self.names),
                "workload": self.base.workload, "dispatch": DEFAULT_DISPATCH}

    def describe(self) -> str:
        fp = self.fingerprint
        return (f"LIVE on {gpu_name(fp.get('gpu'))} · driver {fp.get('driver')} · torch {fp.get('torch')}: each setting is "
                f"measured now with all strategies ({self.base.trials} trials × {self.base.steps} steps), "
                "drawn as its trials arrive.")

    def config(self, settings: dict) -> LabConfig:
        return self.base.with_(**{k: settings[k] for k in ("ep_size", "batch_size", "gamma", "workload") if k in settings})

    def get(self, settings: dict, on_progress: Optional[Callable] = None) -> PointData:
        return self.stream(settings, on_progress=on_progress).data

    # EP sizes that fit the GPUs present run on real ranks (parallel.EPLive: a persistent worker
    # group, one process per GPU); larger ones stay one process with the predicate flipped.
    real_ep = True

    def runs_real_ep(self, ep_size: int) -> bool:
        return self.real_ep and 1 < ep_size <= workers.device_count()

    def stream(self, settings: dict, on_update: Optional[Callable[[LiveUpdate], None]] = None,
               on_progress: Optional[Callable] = None, cancel: Optional[threading.Event] = None) -> LiveUpdate:
        """Measure `settings`; `on_update(LiveUpdate)` after the first trial and after each round
        (timing rows so far), then once complete. Returns the complete update.
        Raises Cancelled when `cancel` is set (checked at every trial and progress report)."""
        cancel = cancel or threading.Event()
        check = partial(_check, cancel, settings)

        def progress(msg, frac=None, *args):
            check()
            if on_progress is not None:
                on_progress(msg, frac, *args)

        if not self.wait_warm(0):
            progress("warming up (CUDA, calibrations, first graphs)", 0.0)
            self.wait_warm()
        check()
        spec = self.spec(settings)
        built = None
        if spec.world_size == 1:
            pre, self._steps = self._steps, None  # the warm-up's step serves one measurement
            built = pre[1] if pre is not None and pre[0] == spec.cfg else None
        view = _LiveView(self, spec, settings, on_update, check, built_ahead=built is not None)
        run = PointRun(PointPlan(spec, self.names), self._executor(spec, progress, cancel), [view])
        try:
            run.run(built=built, look_first=on_update is not None)
        except RanksCancelled as e:
            raise Cancelled(str(e)) from None
        return view.final

    def spec(self, settings: dict) -> PointSpec:
        """The point `settings` name, fixed before it is measured: on real ranks (runs_real_ep) with
        its dispatch, else in this process."""
        cfg = self.config(settings)
        if not self.runs_real_ep(cfg.ep_size):
            return PointSpec(cfg)
        dispatch = check_mode(settings.get("dispatch") or DEFAULT_DISPATCH)
        return PointSpec.on_ranks(cfg, cfg.ep_size, dispatch, cfg.resolved_device())

    def _executor(self, spec: PointSpec, progress: Callable, cancel: threading.Event) -> PointExecutor:
        """Who measures the point (one PointExecutor): the real ranks (parallel.run.RanksExecutor),
        this process's runner (run.point.LocalExecutor), or the given measurer (MeasureExecutor)."""
        if spec.world_size > 1:
            return RanksExecutor(self._ep(), cancel)
        if self._measure is None:
            return LocalExecutor(on_progress=progress, profile_steps=self._profile_steps, keep_traces=False,
                                 profile_after_round=PROFILE_AFTER_ROUND, analysis_worker=self._analysis)
        return MeasureExecutor(self._measure, progress)

    def close(self) -> None:
        """End the real-rank workers and the analysis worker, if any (the panel's close)."""
        if self._ep_live is not None:
            self._ep_live.close()
        if self._analysis is not None:
            self._analysis.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _ep(self) -> EPLive:
        if self._ep_live is None:
            self._ep_live = EPLive()
        return self._ep_live

    def machine(self) -> dict:
        """Where this backend's rows are measured (schema.FINGERPRINT_COLUMNS), as a recorded run's
        header gives it to its loaded rows: the fingerprint's machine keys, this backend's run id, now."""
        fp = self.fingerprint
        return {**{k: fp.get(k, "unknown") for k in schema.MACHINE_KEYS}, "run_id": self.run_id,
                "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}

    def frame(self, rows: Sequence[dict]) -> pd.DataFrame:
        """The rows as the panel shows them: each one's record (RowRecord, checked) with the machine."""
        machine = self.machine()
        return pd.DataFrame([RowRecord.of(r, machine).row() for r in rows])

    def _data(self, rows: list, timelines, settings: dict, what: str) -> PointData:
        frame = self.frame(rows)
        failed = frame[frame["status"] != "ok"] if "status" in frame.columns else frame.iloc[0:0]
        if len(failed) and failed["strategy"].nunique() == frame["strategy"].nunique():
            raise RuntimeError(str(failed["error"].iloc[0]))
        tl = frames.flatten_timelines(timelines or [])
        return PointData(frame, tl, f"{what}: {point_label(frame.iloc[0])}", dict(settings))


def _check(cancel: threading.Event, settings: dict) -> None:
    if cancel.is_set():
        raise Cancelled(f"cancelled: {settings}")


class _LiveView(PointObserver):
    """The live backend's subscriber to a point run (a PointObserver): the first look, the first trial and each round
    but the last (the complete update follows it at once) as partial updates, then the complete one.
    Drawn between trials: in one process on the measuring thread, outside every timed span, so
    drawing never competes with a timed step for the GIL (real ranks run in their own processes;
    this runs on the group's reader thread). Drawing stays a small share of the time."""

    def __init__(self, backend: "LiveBackend", spec: PointSpec, settings: dict, on_update: Optional[Callable],
                 check: Callable[[], None], built_ahead: bool):
        self.backend, self.spec, self.settings, self.on_update, self.check = backend, spec, settings, on_update, check
        self.built_ahead = built_ahead
        self.planned = spec.cfg.trials * len(backend.names)
        self.timings: dict = {n: [] for n in backend.names}
        self.looked: dict = {}  # the first look's trial, shown until its strategy's rounds have one
        self.final: Optional[LiveUpdate] = None

    @property
    def done(self) -> int:
        return sum(len(v) for v in self.timings.values())

    def on_first_look(self, strategy: str, timing) -> None:
        self.looked[strategy] = [timing]
        if self.on_update is not None:
            data = self.backend._data(timing_rows(self.spec, self.looked), None, self.settings, "first look")
            self.on_update(LiveUpdate(data, False, 0, self.planned, None, first_look=True))
        self.check()

    def on_built(self, seconds) -> None:
        if self.built_ahead:
            self.backend.warm_parts.setdefault("other_steps_s", seconds)

    def on_trial(self, strategy, timing) -> None:
        self.check()
        self.timings[strategy].append(timing)
        if self.done == 1:  # the first figure
            self._draw()
        self.check()

    def on_round(self, rounds, timings) -> None:
        if 1 < self.done < self.planned:
            self._draw()
            self.check()

    def _draw(self) -> None:
        if self.on_update is None:
            return
        shown = {n: ts or self.looked[n] for n, ts in self.timings.items() if ts or n in self.looked}
        hw = loop.headline_half_width(self.timings) if self.done % len(self.timings) == 0 else None
        data = self.backend._data(timing_rows(self.spec, shown), None, self.settings, "measuring now")
        self.on_update(LiveUpdate(data, False, self.done, self.planned, hw))

    def on_done(self, result: PointResult) -> None:
        self.check()
        data = self.backend._data(result.point_rows(), result.point_timelines(), self.settings, "measured now")
        ok = data.rows[data.rows["status"] == "ok"] if "status" in data.rows.columns else data.rows
        hw = loop.headline_half_width(self.timings) if any(self.timings.values()) else _half_width_of(ok)
        ranks = self.backend.frame(result.rows) if self.spec.world_size > 1 else None
        self.final = LiveUpdate(data, True, int(len(ok)), self.planned, hw, ranks,
                                analysed_in=result.analysed_in)
        if self.on_update is not None:
            self.on_update(self.final)


class MeasureExecutor:
    """A measurer shaped as measure_point, `(cfg, names, *, on_progress, on_trial[, steps]) -> result`
    (a test's stand-in), as the executor of a point run (a PointExecutor); its result read as a PointResult."""

    def __init__(self, measure: Callable, on_progress: Callable):
        self.measure, self.on_progress = measure, on_progress

    def build(self, plan: PointPlan, built: Optional[dict] = None) -> Optional[dict]:
        return build_steps(plan.spec.cfg, plan.names, built) if built else None

    def execute(self, plan: PointPlan, observer: PointObserver, steps: Optional[dict]) -> PointResult:
        kw = {"steps": steps} if steps is not None else {}
        res = self.measure(plan.spec.cfg, list(plan.names), on_progress=self.on_progress, on_trial=observer.on_trial,
                           **kw)
        return PointResult(list(res.rows), getattr(res, "timelines", None) or [],
                           analysed_in=getattr(res, "analysed_in", None))


# CPython hands the GIL to a thread that asks for it back only after the holder has run for the
# switch interval (5 ms by default). The warm-up lets go of the GIL in every torch op and takes it
# back after, so while the kernel's main thread runs Python (the panel being made), each of its
# hundreds of ops could wait up to 5 ms. Shorter during the warm-up only: measured on an H200 in
# fresh processes, the panel's first figure came 37-95 ms sooner in 3 of 3 pairs (0.93 / 0.93 /
# 0.88 s against 0.97 / 0.97 / 0.98 s; data/machines/h200-live-cold-path-20261201.json), and no
# sooner without a panel.
WARM_UP_SWITCH_INTERVAL_S = 0.0002


@contextmanager
def _short_gil_switch(interval_s: float = WARM_UP_SWITCH_INTERVAL_S):
    """sys.setswitchinterval(interval_s) inside, the previous interval after (unless someone else
    changed it meanwhile: theirs is kept)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, interval_s))
    mine = sys.getswitchinterval()
    try:
        yield
    finally:
        if sys.getswitchinterval() == mine:
            sys.setswitchinterval(before)


def _half_width_of(rows: pd.DataFrame) -> Optional[float]:
    """The rows' own CI half-width column (a measurer that gave no trials as they ran)."""
    col = rows.get("ci_half_width_pct") if len(rows) else None
    vals = col.dropna() if col is not None else ()
    return float(vals.iloc[0]) if len(vals) else None


def live_backend() -> Optional[LiveBackend]:
    """A live backend on a CUDA device (config.choose_mode), else None: notebook 01's cold start
    (views/cold_start.py) calls it on a thread, once the recorded panel is drawn."""
    return LiveBackend() if choose_mode() == "live" else None


def open_backend():
    """The panel's backend on this machine: live on a CUDA device (config.choose_mode), else the
    recorded runs; a backend that cannot be made is returned as the panel's error backend."""
    if choose_mode() == "live":
        return LiveBackend()
    return load_recorded()
