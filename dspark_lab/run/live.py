"""The live backend of the panel, without plotly or ipywidgets (so it runs on a bare GPU box):
`LiveBackend().get(settings)` measures all strategies at one setting with run.point.measure_point;
`open_backend()` picks it on a CUDA machine, else the recorded runs (results.backend).

A backend starts a warm-up on a daemon thread when it is created: it measures the default
setting, which initialises CUDA, cuBLAS, the calibrations (read from the on-disk cache when
present, see calibration.py), the profiler and the graph captures, and keeps that measurement for
the panel's first update (the default setting) — so by the time the notebook shows the panel, the
first update is either done or under way. `get()` waits for the warm-up to finish.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from functools import partial
from typing import Callable, Optional

import pandas as pd
import torch

from dspark_lab import strategies
from dspark_lab.config import CAPTURE_BUCKETS, MODEL_PRESETS, WORKLOAD_PRESETS, LabConfig, choose_mode
from dspark_lab.measure.probe import fingerprint as machine_fingerprint
from dspark_lab.parallel import workers
from dspark_lab.parallel.run import EPLive
from dspark_lab.results import frames
from dspark_lab.results.backend import PointData, RecordedBackend, load_recorded
from dspark_lab.results.runs import gpu_name, point_label
from dspark_lab.run.point import measure_point


# Live measurement size: 3 interleaved trials of 8 steps per strategy and 4 profiled steps, so an
# update of all five strategies fits in about 3 s on an H200 (sglang_profile steps are 6-9 ms;
# 12 steps and 5 profiled steps took 2.9-3.7 s there).
LIVE_STEPS, LIVE_WARMUP, LIVE_TRIALS, LIVE_PROFILE_STEPS = 8, 2, 3, 4


class LiveBackend:
    """Measures on this machine's CUDA device: run.point.measure_point with all strategies."""

    mode = "live"

    def __init__(self, base: Optional[LabConfig] = None, measure: Optional[Callable] = None,
                 fingerprint: Optional[dict] = None, warm: Optional[bool] = None):
        """`warm` (default: when `measure` is the real runner) starts the background warm-up."""
        # Sized for a live update of all strategies within ~3 s on an H200 (see LIVE_* below).
        self.base = base or LabConfig(steps=LIVE_STEPS, warmup=LIVE_WARMUP, trials=LIVE_TRIALS)
        real = measure is None
        if measure is None:
            measure = partial(measure_point, profile_steps=LIVE_PROFILE_STEPS, keep_traces=False)
        self._measure = measure
        self._fingerprint = fingerprint
        self.run_id = "live-" + datetime.now().strftime("%Y%m%d-%H%M%S")
        self.warm_s: Optional[float] = None  # how long the warm-up took
        self.warm_parts: dict = {}  # its parts, seconds (for the live benchmark)
        self.warm_error: Optional[BaseException] = None  # a failed warm-up is kept here, get() goes on
        self._prefetched: Optional[tuple[LabConfig, PointData]] = None  # the warm-up's measurement
        self._warm: Optional[threading.Thread] = None
        if real if warm is None else warm:
            self._warm = threading.Thread(target=self.warm_up, name="dspark-warm-up", daemon=True)
            self._warm.start()

    def warm_up(self) -> None:
        """Measure the default setting (all one-time start-up costs fall here) and keep it."""
        t0 = time.perf_counter()
        try:
            self.fingerprint  # noqa: B018 - reads the driver once, off the user's path
            settings = self.defaults()
            cfg = self.config(settings)
            self.warm_parts["fingerprint_s"] = time.perf_counter() - t0
            if cfg.resolved_device() == "cuda":  # CUDA context and cuBLAS, timed apart
                t1 = time.perf_counter()
                torch.cuda.init()
                x = torch.ones(64, 64, device="cuda")
                (x @ x).sum().item()
                self.warm_parts["cuda_init_s"] = time.perf_counter() - t1
            t1 = time.perf_counter()
            self._prefetched = (cfg, self._point(cfg, settings, None))
            self.warm_parts["first_measurement_s"] = time.perf_counter() - t1
        except Exception as e:  # noqa: BLE001 - the user's own request will measure and report
            self.warm_error = e
        self.warm_s = time.perf_counter() - t0

    def wait_warm(self, timeout: Optional[float] = None) -> bool:
        """Wait for the warm-up (if any); True when none is running."""
        t = self._warm
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        return t is None or not t.is_alive()

    @property
    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = machine_fingerprint()
        return self._fingerprint

    def options(self) -> dict:
        experts = MODEL_PRESETS[self.base.model].experts
        return {
            "ep_size": [d for d in range(1, experts + 1) if experts % d == 0],
            "batch_size": [b for b in CAPTURE_BUCKETS if b in (1, 2, 4, 8, 16, 32, 64, 128, 256)],
            "gamma": [1, 2, 3, 4, 6, 8, 12, 16],
            "strategy": list(strategies.names()),
            "workload": list(WORKLOAD_PRESETS),
        }

    def defaults(self) -> dict:
        return {"ep_size": max(self.options()["ep_size"]), "batch_size": self.base.batch_size,
                "gamma": self.base.gamma, "strategy": frames.default_strategy(strategies.names()),
                "workload": self.base.workload}

    def describe(self) -> str:
        fp = self.fingerprint
        return (f"LIVE on {gpu_name(fp.get('gpu'))} · driver {fp.get('driver')} · torch {fp.get('torch')}: each setting is "
                f"measured now with all strategies ({self.base.trials} trials × {self.base.steps} steps).")

    def config(self, settings: dict) -> LabConfig:
        return self.base.with_(**{k: settings[k] for k in ("ep_size", "batch_size", "gamma", "workload") if k in settings})

    def get(self, settings: dict, on_progress: Optional[Callable] = None) -> PointData:
        if on_progress is not None and not self.wait_warm(0):
            on_progress("warming up (CUDA, calibrations, first graphs)", 0.0)
        self.wait_warm()
        cfg = self.config(settings)
        pre, self._prefetched = self._prefetched, None  # used once: later requests measure anew
        if pre is not None and pre[0] == cfg:
            return PointData(pre[1].rows, pre[1].timelines, pre[1].note, dict(settings))
        return self._point(cfg, settings, on_progress)

    # EP sizes that fit the GPUs present run on real ranks (parallel.EPLive: a persistent worker
    # group, one process per GPU); larger ones stay one process with the predicate flipped.
    real_ep = True
    _ep_live = None

    def runs_real_ep(self, ep_size: int) -> bool:
        return self.real_ep and 1 < ep_size <= workers.device_count()

    def _measure_real_ep(self, cfg: LabConfig):
        if self._ep_live is None:
            self._ep_live = EPLive()
        res = self._ep_live.measure(cfg, list(strategies.names()))
        # Rank 0's rows and timelines stand for the point (the ranks run in lockstep; every row
        # also carries step_ms_max_rank); timelines are keyed by strategy as the figures expect.
        rows = [r for r in res.rows if r["rank"] == 0]
        tls = [dict(t, strategy=t["rank_case"].split(",")[0]) for t in res.timelines if t["rank"] == 0]
        return type(res)(rows, tls, res.samples, res.info)

    def _point(self, cfg: LabConfig, settings: dict, on_progress: Optional[Callable]) -> PointData:
        if self.runs_real_ep(cfg.ep_size):
            result = self._measure_real_ep(cfg)
        else:
            result = self._measure(cfg, list(strategies.names()), on_progress=on_progress)
        rows = pd.DataFrame(result.rows)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        fp = self.fingerprint
        for k in ("gpu", "driver", "cuda", "torch"):
            rows[k] = fp.get(k, "unknown")
        rows["run_id"], rows["recorded_at"] = self.run_id, now
        tl = frames.flatten_timelines(getattr(result, "timelines", None) or [])
        failed = rows[rows["status"] != "ok"] if "status" in rows.columns else rows.iloc[0:0]
        if len(failed) and failed["strategy"].nunique() == rows["strategy"].nunique():
            raise RuntimeError(str(failed["error"].iloc[0]))
        return PointData(rows, tl, f"measured now: {point_label(rows.iloc[0])}", dict(settings))


def open_backend():
    """The panel's backend on this machine: live on a CUDA device (config.choose_mode), else the
    recorded runs; a backend that cannot be made is returned as the panel's error backend."""
    if choose_mode() == "live":
        return LiveBackend()
    return load_recorded()
