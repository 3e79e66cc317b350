"""Noise: disturbed trials detected, counted and kept out of the headline (results/rules/noise.py);
per-trial diagnostics on CPU; adaptive stopping; the calibration cache; the plotly-free live path."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dspark_lab.model import calibration, workload
from dspark_lab.cli import main as cli
from dspark_lab.views import figures
from dspark_lab.results.record import schema
from dspark_lab.config import LabConfig
from dspark_lab.measure import diagnostics, loop, probe, timing, waits
from dspark_lab.results.rules import noise
from dspark_lab.results.loading import load as run_load
from dspark_lab.run.point import point_id  # the point's own id, as measure_point's rows carry it

REPO = Path(__file__).resolve().parent.parent
RECORDED = sorted((REPO / "data" / "runs").glob("h200-sglang-profile-*.jsonl"))
INJECT_MS = 2.4  # the size of the host-side disturbances measured on the shared H200 machine


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    """Calibrations go to a fresh folder, never the user's cache."""
    monkeypatch.setenv(calibration.CACHE_ENV, str(tmp_path / "cache"))


# -- disturbed trials in recorded data -----------------------------------------------------------------

def recorded_point(ep: int = 8) -> pd.DataFrame:
    """The committed H200 sglang_profile run's point at `ep`, with a host-work column: the
    profiled host work of its strategy plus the trial's own deviation from the strategy's median
    (host-side noise shows in both)."""
    rows = run_load.load(RECORDED).rows
    pt = rows[(rows.ep_size == ep) & (rows.status == "ok")].copy()
    assert len(pt) and pt.point_id.nunique() == 1
    base = pt[["host_launch_ms", "host_other_ms", "host_copy_ms"]].astype(float).sum(axis=1)
    dev = pt.step_ms - pt.groupby("strategy").step_ms.transform("median")
    pt["host_work_ms"] = base + dev
    return pt.reset_index(drop=True)


def inject(pt: pd.DataFrame, where: list[tuple[str, int]], ms: float = INJECT_MS) -> pd.DataFrame:
    out = pt.copy()
    for s, t in where:
        m = (out.strategy == s) & (out.trial == t)
        assert m.sum() == 1
        out.loc[m, "step_ms"] += ms
        out.loc[m, "host_work_ms"] += ms
    return out


INJECTED = [("device_direct", 2), ("device_direct", 7), ("non_blocking", 4), ("persistent_fill", 0)]


def test_injected_disturbances_are_detected_counted_and_kept_out_of_the_headline():
    quiet = noise.mark_disturbed(recorded_point())
    noisy = noise.mark_disturbed(inject(recorded_point(), INJECTED))
    # Detected: every injected trial, for its host work.
    for s, t in INJECTED:
        r = noisy[(noisy.strategy == s) & (noisy.trial == t)].iloc[0]
        assert r.disturbed and "host work" in r.disturbed_reason, (s, t, r.disturbed_reason)
    # Nothing else changes its verdict (the bound comes from each group's own median and MAD).
    key = ["strategy", "trial"]
    before = quiet.set_index(key).disturbed
    after = noisy.set_index(key).disturbed
    changed = sorted(after.index[after != before])
    assert changed == sorted(INJECTED)
    # Counted per point and strategy.
    counts = noise.disturbed_counts(noisy).set_index("strategy")
    for s in counts.index:
        expected = int(before[s].sum()) + sum(1 for x, _ in INJECTED if x == s)
        assert counts.at[s, "disturbed"] == expected and counts.at[s, "trials"] == (noisy.strategy == s).sum()
    # Kept out of the headline: the rounds holding a disturbed dd or nb trial are left out, and
    # the ratio over the rest is exactly the one the undisturbed data give on those rounds.
    h = noise.headline(noisy)
    assert (h["a"], h["b"]) == ("device_direct", "non_blocking")
    bad_rounds = set(noisy[noisy.disturbed & noisy.strategy.isin(["device_direct", "non_blocking"])].trial)
    assert {2, 7, 4} <= bad_rounds and h["excluded_rounds"] == len(bad_rounds)
    keep = sorted(set(noisy.trial) - bad_rounds)
    orig = recorded_point().set_index(key).step_ms
    ref = noise.paired_ratio([orig["device_direct", t] for t in keep], [orig["non_blocking", t] for t in keep])
    assert h["ratio"] == pytest.approx(ref["ratio"]) and h["quiet_rounds"] == len(keep)
    assert h["disturbed_total"] == int(noisy.disturbed.sum()) and f"{h['disturbed_total']} of" in h["text"]
    # The injected device_direct trials would have moved a headline that kept them.
    all_ratio = noise.paired_ratio(noisy[noisy.strategy == "device_direct"].sort_values("trial").step_ms,
                                   noisy[noisy.strategy == "non_blocking"].sort_values("trial").step_ms)
    assert all_ratio["ci_high"] != pytest.approx(h["ci_high"])


def test_the_verdict_is_recomputed_from_the_rows_not_taken_from_a_recorded_column():
    pt = inject(recorded_point(), INJECTED)
    marked = noise.mark_disturbed(pt)
    assert noise.disturbed_flags(marked).equals(marked.disturbed)
    # a recorded verdict (e.g. from an older rule) does not override the diagnostics
    assert noise.disturbed_flags(marked.assign(disturbed=False)).equals(marked.disturbed)
    assert noise.disturbed_flags(marked.assign(disturbed=True)).equals(marked.disturbed)


def test_the_software_power_cap_reason_alone_marks_nothing():
    n = 8
    base = pd.DataFrame({"run_id": "r", "point_id": "p", "strategy": "device_direct", "status": "ok",
                         "trial": range(n), "step_ms": 8.0, "host_work_ms": 1.0, "gpu_ms": 5.0,
                         "sm_clock_mhz": 1980.0, "throttle_reasons": 0x4})  # what the H200 reports
    assert not noise.mark_disturbed(base).disturbed.any()
    base.loc[2, "throttle_reasons"] = 0x4 | 0x8  # plus a hardware slowdown
    r = noise.mark_disturbed(base)
    assert r.disturbed.tolist() == [i == 2 for i in range(n)] and "hw_slowdown" in r.disturbed_reason[2]


def test_without_host_diagnostics_the_step_time_is_judged():
    pt = recorded_point().drop(columns=["host_work_ms"])
    s, t = "non_blocking", 5
    pt.loc[(pt.strategy == s) & (pt.trial == t), "step_ms"] += INJECT_MS
    r = noise.mark_disturbed(pt)
    row = r[(r.strategy == s) & (r.trial == t)].iloc[0]
    assert row.disturbed and "step time" in row.disturbed_reason


def test_gpu_time_clock_and_nvml_reasons_mark_a_trial():
    n = 8
    base = pd.DataFrame({"run_id": "r", "point_id": "p", "strategy": "device_direct", "status": "ok",
                         "trial": range(n), "step_ms": 8.0, "host_work_ms": 1.0, "gpu_ms": 5.0,
                         "sm_clock_mhz": 1980.0, "throttle_reasons": 0})
    base.loc[1, "gpu_ms"] = 6.5  # +1.5 ms > 10% of 8 ms
    base.loc[2, "sm_clock_mhz"] = 1500.0
    base.loc[3, "throttle_reasons"] = 0x40
    r = noise.mark_disturbed(base)
    assert r.disturbed.tolist() == [False, True, True, True] + [False] * (n - 4)
    assert "GPU time" in r.disturbed_reason[1] and "SM clock" in r.disturbed_reason[2]
    assert "hw_thermal" in r.disturbed_reason[3]
    # Too few trials to judge on statistics; NVML reasons still count.
    small = noise.mark_disturbed(base.iloc[:2])
    assert not small.disturbed.any()
    assert noise.mark_disturbed(base.iloc[2:4]).disturbed.tolist() == [False, True]


def test_a_bound_of_a_tenth_of_the_step_leaves_ordinary_jitter_alone():
    rng = np.random.default_rng(0)
    n = 40
    df = pd.DataFrame({"point_id": "p", "strategy": "s", "status": "ok", "trial": range(n),
                       "step_ms": 8 + rng.normal(0, 0.05, n), "host_work_ms": 1 + rng.normal(0, 0.05, n)})
    assert not noise.mark_disturbed(df).disturbed.any()


def test_headline_pair_falls_back_to_baseline_versus_best_fix():
    assert noise.headline_pair(["device_direct", "non_blocking", "persistent_fill"]) == ("device_direct", "non_blocking")
    assert noise.headline_pair(["device_direct", "persistent_fill", "on_demand"],
                               {"persistent_fill": 5.0, "on_demand": 6.0}) == ("device_direct", "persistent_fill")
    with pytest.raises(ValueError, match="device_direct"):
        noise.headline_pair(["non_blocking", "on_demand"])


def test_profiler_inflation_per_strategy():
    pt = recorded_point()
    inf = noise.profiler_inflation(pt).set_index("strategy")
    assert set(inf.index) == set(pt.strategy)
    s = "device_direct"
    quiet = noise.mark_disturbed(pt)
    med = quiet[(quiet.strategy == s) & ~quiet.disturbed].step_ms.median()
    prof = pt[pt.strategy == s].profiled_step_ms.iloc[0]
    assert inf.at[s, "inflation_pct"] == pytest.approx((prof / med - 1) * 100)


def test_strategy_comparison_draws_disturbed_trials_apart():
    pt = noise.mark_disturbed(inject(recorded_point(), INJECTED))
    fig = figures.strategy_comparison(pt)
    bars = [t for t in fig.data if t.type == "bar"]
    crosses = [t for t in fig.data if t.type == "scatter"]
    assert len(bars) == 1 and len(crosses) == 1
    assert len(crosses[0].y) == int(pt.disturbed.sum())
    dd = pt[(pt.strategy == "device_direct") & ~pt.disturbed].step_ms.median()
    assert bars[0].y[list(bars[0].x).index("device_direct")] == pytest.approx(dd)
    assert any("disturbed" in (a.text or "") for a in fig.layout.annotations)


# -- diagnostics on CPU ------------------------------------------------------------------------------

def tiny_step(strategy="device_direct"):
    return workload.LabStep(LabConfig(model="tiny", workload="tiny", device="cpu", ep_size=2, batch_size=4, gamma=2), strategy)


def test_diagnostics_on_cpu_fields_present_and_none_where_unknown():
    s = tiny_step()
    d = diagnostics.TrialDiagnostics(s)
    t = timing.time_trial(s.step, 6, 1, s.drain, diag=d)
    assert set(t.diag) == set(diagnostics.DIAG_FIELDS) and set(diagnostics.DIAG_FIELDS) <= set(schema.DIAG_COLUMNS)
    assert t.diag["gpu_ms"] is None and t.diag["sm_clock_mhz"] is None and t.diag["throttle_reasons"] is None
    for k in ("ctx_switches_invol", "ctx_switches_vol"):
        assert type(t.diag[k]) is int and t.diag[k] >= 0
    assert t.diag["cpu_steal_ms"] is None or t.diag["cpu_steal_ms"] >= 0
    # Work and wait split the trial's wall time; the tiny workload's spins are wait.
    assert t.diag["host_work_ms"] + t.diag["host_wait_ms"] == pytest.approx(t.step_ms)
    assert t.diag["host_wait_ms"] > 0 and t.diag["host_work_ms"] > 0
    assert s.gpu_clock is None  # the hook is only set during the trial


def test_spin_until_counts_its_time_up_to_the_deadline_as_deliberate_wait(monkeypatch):
    added = []
    monkeypatch.setattr(waits, "add", added.append)  # this spin's own count, not the process's
    now = [10.0]

    def clock() -> float:  # every reading 1 ms later
        now[0] += 1e-3
        return now[0]

    workload.spin_until(10.0035, clock=clock)
    # Started at 10.001, saw 10.002 and 10.003 (spun), 10.004 (past the deadline), ended at 10.005:
    # the wait up to the deadline counts, the overshoot (a descheduled thread) does not.
    assert added == [pytest.approx(0.0025)]


def test_runner_rows_carry_diagnostics_and_the_verdict():
    from dspark_lab.run.point import measure_point

    cfg = LabConfig(model="tiny", workload="tiny", steps=4, warmup=1, trials=3, device="cpu")
    r = measure_point(cfg, ["device_direct", "non_blocking"], profile_steps=2, keep_traces=False)
    df = pd.DataFrame(r.rows)
    assert set(schema.DIAG_COLUMNS) <= set(df.columns)
    assert df.stop_reason.eq("fixed_trials").all() and df.groupby("strategy").trial.apply(list).eq([[0, 1, 2]] * 2).all()
    # The verdict recorded is the rule's on the rows' own diagnostics, reasons included.
    again = noise.mark_disturbed(df.drop(columns=["disturbed", "disturbed_reason"]))
    assert df.disturbed.map(type).eq(bool).all() and df.disturbed.tolist() == again.disturbed.tolist()
    assert df.disturbed_reason.tolist() == again.disturbed_reason.tolist()
    # The half-width recorded is the headline's over the quiet rounds (None with fewer than ten).
    h = noise.headline(df)
    assert df.ci_half_width_pct.nunique(dropna=False) == 1
    recorded = df.ci_half_width_pct.iloc[0]
    assert (h["half_width_pct"] is None and pd.isna(recorded)) or recorded == h["half_width_pct"]
    assert df.gpu_ms.isna().all() and df.host_work_ms.gt(0).all()
    with pytest.raises(ValueError, match="target_ci_pct and time_cap_s"):
        measure_point(cfg, target_ci_pct=3.0)


# -- the measurement loop's stop rules (fake clocks: step durations are synthetic, nothing is timed) --

class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def synthetic(sigma: float):
    """Two steps that advance a fake clock by ~8 and ~6 ms (lognormal spread `sigma`)."""
    clock = FakeClock()
    rng = np.random.default_rng(1)

    def step_of(ms):
        def step():
            clock.now += ms * float(np.exp(rng.normal(0, sigma))) * 1e-3
        return step

    return clock, {"device_direct": step_of(8.0), "non_blocking": step_of(6.0)}


def rounds(clock, steps, stop, **kw):
    return loop.run_rounds(steps, stop, steps=5, warmup=0, sync=lambda: None, timer=clock, clock=clock, **kw)


def test_fixed_rounds_time_each_step_on_the_timer_and_fill_the_bar():
    clock = FakeClock()
    steps = {"A": lambda: setattr(clock, "now", clock.now + 0.002), "B": lambda: setattr(clock, "now", clock.now + 0.003)}
    seen = []
    res = rounds(clock, steps, loop.FixedRounds(3), progress=lambda m, f: seen.append((m, f)))
    assert res.stop_reason == "fixed_trials" and res.rounds == 3
    assert [t.step_ms for t in res.timings["A"]] == pytest.approx([2.0] * 3)
    assert [t.step_ms for t in res.timings["B"]] == pytest.approx([3.0] * 3)
    assert res.timings["B"][0].per_step_ms == pytest.approx(np.full(5, 3.0))
    assert [m for m, _ in seen[:3]] == [f"trial 1/3: {res.orders[0][0]}", f"trial 1/3: {res.orders[0][1]}",
                                        f"trial 2/3: {res.orders[1][0]}"]  # in the recorded random order
    assert [f for _, f in seen] == pytest.approx([k / 6 for k in range(1, 7)])


def test_adaptive_stops_at_the_ci_target_when_quiet():
    clock, steps = synthetic(sigma=0.002)
    res = rounds(clock, steps, loop.CITarget(3.0, 1e6, min_trials=2))
    assert res.stop_reason == "ci_target" and res.half_width_pct <= 3.0
    assert res.rounds == loop.MIN_ADAPTIVE_ROUNDS  # the earliest it may stop
    assert all(len(v) == res.rounds for v in res.timings.values())
    assert res.half_width_pct == noise.headline(loop.trial_frame(res.timings))["half_width_pct"]


def test_adaptive_stops_at_the_time_cap_when_noisy():
    clock, steps = synthetic(sigma=0.6)
    cap = 2.0  # fake seconds: a round is 5 steps x 2 strategies x ~7 ms
    seen = []
    res = rounds(clock, steps, loop.CITarget(3.0, cap, min_trials=2), progress=lambda m, f: seen.append((m, f)))
    assert res.stop_reason == "time_cap" and res.half_width_pct > 3.0
    per_round = [sum(v[i].step_ms * v[i].steps for v in res.timings.values()) / 1e3 for i in range(res.rounds)]
    assert sum(per_round) == pytest.approx(clock.now)
    assert sum(per_round) >= cap > sum(per_round[:-1])  # stopped at the first round past the cap
    shares = [f for _, f in seen]
    assert shares == sorted(shares) and shares[-1] == 0.99 and shares[0] == pytest.approx(1 / 4)
    assert seen[0][0] == f"round 1 (to ±3% or 2 s): {res.orders[0][0]}"


def test_adaptive_runs_the_minimum_even_past_the_cap():
    clock, steps = synthetic(sigma=0.6)
    res = rounds(clock, steps, loop.CITarget(3.0, 1e-9, min_trials=4))
    assert res.stop_reason == "time_cap" and res.rounds == 4


def test_adaptive_rejects_bad_targets():
    with pytest.raises(ValueError, match="target_ci_pct"):
        loop.CITarget(0, 1)
    with pytest.raises(ValueError, match="time_cap_s"):
        loop.CITarget(3, -1)
    with pytest.raises(ValueError, match="at least one step"):
        loop.run_rounds({}, loop.FixedRounds(1), steps=1, warmup=0, sync=lambda: None)


def test_sweep_target_ci_reaches_the_measure_and_the_header(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))
    seen = []

    def measure(cfg, strategies=None, *, on_progress=None, **kw):
        seen.append(kw)
        rows = [dict({c: None for c in schema.ROW_COLUMNS}, point_id=point_id(cfg), ep_size=cfg.ep_size, batch_size=cfg.batch_size,
                     gamma=cfg.gamma, strategy=s, status="ok", error="", trial=0, step_ms=1.0) for s in strategies]
        return SimpleNamespace(rows=rows, timelines=[], traces={})

    args = ["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", "--model", "tiny", "--workload", "tiny",
            "--device", "cpu", "--no-progress", "--target-ci", "3", "--time-cap", "12", "--out", str(tmp_path / "r.jsonl")]
    parser = cli.build_parser()
    ns = parser.parse_args(args)
    assert cli.cmd_sweep(ns, parser, measure=measure) == 0
    assert seen == [{"target_ci_pct": 3.0, "time_cap_s": 12.0}]
    header = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert header["adaptive"] == {"target_ci_pct": 3.0, "time_cap_s": 12.0}
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--time-cap", "5", "--out", str(tmp_path / "x.jsonl")])
    assert "--time-cap: only with --target-ci" in capsys.readouterr().err


# -- calibration cache -------------------------------------------------------------------------------

def test_calibration_cache_write_read_and_corrupt_file_ignored():
    key = calibration.gpu_key("GPU X", "580.1", "2.11")
    assert calibration.load(key) is None
    assert calibration.store(key, {"target_layers_per_ms": 12.5})
    assert calibration.load(key) == {"target_layers_per_ms": 12.5}
    calibration.store(key, {"other": 1})
    assert calibration.load(key) == {"target_layers_per_ms": 12.5, "other": 1}
    calibration.cache_file().write_text("{not json")
    assert calibration.load(key) is None  # ignored
    assert calibration.store(key, {"target_layers_per_ms": 3.0})  # and rewritten whole
    assert json.loads(calibration.cache_file().read_text()) == {key: {"target_layers_per_ms": 3.0}}
    calibration.cache_file().write_text("[1, 2]")  # valid JSON of the wrong shape
    assert calibration.load(key) is None


def test_spin_rate_comes_from_the_cache(monkeypatch):
    import platform

    key = calibration.host_key(workload._cpu_name(), platform.python_version())
    calibration.store(key, {"spin_iters_per_us": 123.0})
    monkeypatch.setattr(workload, "_ITERS_PER_US", [])
    assert workload._iters_per_us() == 123.0
    calibration.cache_file().write_text("garbage")
    monkeypatch.setattr(workload, "_ITERS_PER_US", [])
    rate = workload._iters_per_us()  # measured again, and stored
    assert rate > 0 and calibration.load(key) == {"spin_iters_per_us": rate}


@pytest.mark.cuda
def test_target_verify_calibration_is_cached_per_gpu_driver_and_torch(monkeypatch):
    import torch

    monkeypatch.setattr(workload.TargetVerify, "_layers_per_ms", {})
    workload.TargetVerify(2.0, torch.device("cuda"), 256, 4)
    key = calibration.gpu_key(torch.cuda.get_device_name(0), probe.driver_version(), torch.__version__)
    assert calibration.load(key)["target_layers_per_ms"] > 0


# -- the live backend ----------------------------------------------------------------------------------

def test_the_live_path_imports_neither_plotly_nor_ipywidgets():
    code = ("import sys; from dspark_lab.run.live import LiveBackend; from dspark_lab.run.point import measure_point; "
            "from dspark_lab.results.rules import noise; "
            "bad = [m for m in ('plotly', 'ipywidgets') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout + p.stderr


def test_live_warm_up_measures_nothing_ahead():
    """The warm-up does only what the first figure needs (CUDA, calibrations, the default
    steps' graphs), no measurement of every strategy: each request measures."""
    from dspark_lab.run.live import LiveBackend

    calls = []

    def measure(cfg, strategies=None, *, on_progress=None, on_trial=None):
        calls.append((cfg.ep_size, cfg.batch_size, cfg.gamma))
        rows = [dict({c: None for c in schema.ROW_COLUMNS}, point_id=point_id(cfg), ep_size=cfg.ep_size, batch_size=cfg.batch_size,
                     gamma=cfg.gamma, workload=cfg.workload, model=cfg.model, strategy=s, status="ok", error="",
                     trial=0, step_ms=1.0) for s in strategies]
        return SimpleNamespace(rows=rows, timelines=[], traces={})

    b = LiveBackend(measure=measure, fingerprint={"gpu": "FAKE"}, warm=True)
    assert b.wait_warm(30) and b.warm_error is None and b.warm_s is not None
    assert calls == []
    d = b.defaults()
    key = (d["ep_size"], d["batch_size"], d["gamma"])
    b.get(d)
    b.get({**d, "gamma": 8})
    b.get(d)
    assert calls == [key, (key[0], key[1], 8), key]


def test_nvml_fields_through_a_stand_in_pynvml(monkeypatch):
    """The NVML path without a GPU: a stand-in module with the calls diagnostics makes."""
    clocks = iter([1980, 1500])
    reasons = iter([0x1, 0x1 | 0x40])  # idle (not a slowdown), then idle + HW thermal
    fake = SimpleNamespace(
        NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetHandleByUUID=lambda u: (_ for _ in ()).throw(RuntimeError("no such uuid")),
        nvmlDeviceGetClockInfo=lambda h, kind: next(clocks),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: next(reasons),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nv = diagnostics.Nvml(0)
    assert nv.available, nv.error
    d = diagnostics.TrialDiagnostics(None, cuda=False, nvml=nv)
    out = d.end(d.begin(), 4)
    assert out["sm_clock_mhz"] == 1500 and out["throttle_reasons"] == 0x40
    assert diagnostics.describe_reasons(out["throttle_reasons"]) == "hw_thermal"
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert not diagnostics.Nvml(0).available and diagnostics.Nvml(0).sm_clock_mhz() is None


@pytest.mark.cuda
def test_diagnostics_on_cuda_time_the_gpu_work():
    from dspark_lab.run.point import measure_point

    cfg = LabConfig(workload="sglang_profile", steps=6, warmup=2, trials=3, device="cuda")
    df = pd.DataFrame(measure_point(cfg, ["device_direct", "non_blocking"], profile_steps=3, keep_traces=False).rows)
    assert df.gpu_ms.notna().all() and (df.gpu_ms > 0).all()
    assert (df.host_work_ms + df.host_wait_ms - df.step_ms).abs().max() < 1e-6


def test_adaptive_point_through_the_runner_on_a_fake_clock():
    """measure_point with a CI target: a fake clock that jumps past the cap after the minimum
    rounds stops it at the cap; rows say so, and progress never runs backwards."""
    from dspark_lab.run.point import measure_point

    ticks = iter(range(10**6))
    clock = lambda: float(next(ticks)) * 100.0  # noqa: E731 - every reading is 100 s later
    seen = []
    cfg = LabConfig(model="tiny", workload="tiny", steps=3, warmup=1, trials=2, device="cpu")
    r = measure_point(cfg, ["device_direct", "non_blocking"], profile_steps=2, keep_traces=False,
                      target_ci_pct=0.001, time_cap_s=150.0, clock=clock, on_progress=lambda m, f: seen.append(f))
    df = pd.DataFrame(r.rows)
    assert df.stop_reason.eq("time_cap").all() and df.groupby("strategy").size().eq(cfg.trials).all()
    assert seen == sorted(seen) and seen[-1] == 1.0


class SteppingTimer:
    """A fake step timer: each reading advances by a seeded lognormal ~1 ms, so a trial's step times are
    the same on any machine under any load (the verdicts judged on them too)."""

    def __init__(self, seed: int = 3, sigma: float = 0.01):
        self.now, self.rng, self.sigma = 0.0, np.random.default_rng(seed), sigma

    def __call__(self) -> float:
        self.now += 1e-3 * float(np.exp(self.rng.normal(0, self.sigma)))
        return self.now


def test_the_ci_rule_judges_the_half_width_the_rows_headline_gives():
    """The CI target through the runner: the half-width the stop rule computed on the trials'
    arrays is recorded, and equals results.rules.noise.headline on the final rows. The step times come
    from a fake timer, so the rows' verdicts, judged on every trial, find exactly the quiet rounds the
    stop rule counted (with real time a loaded machine made more of them quiet)."""
    from dspark_lab.run.point import measure_point

    cfg = LabConfig(model="tiny", workload="tiny", steps=3, warmup=1, trials=2, device="cpu")
    r = measure_point(cfg, ["device_direct", "non_blocking"], profile_steps=2, keep_traces=False, diagnose=False,
                      target_ci_pct=1e9, time_cap_s=1e9, clock=FakeClock(), timer=SteppingTimer())
    df = pd.DataFrame(r.rows)
    h = noise.headline(df)
    assert df.stop_reason.eq("ci_target").all() and h["quiet_rounds"] == loop.MIN_ADAPTIVE_ROUNDS
    assert h["half_width_pct"] is not None and df.ci_half_width_pct.eq(h["half_width_pct"]).all()


# -- run-long disturbance (results.rules.noise.RUN_RULE) -------------------------------------------------------

REFERENCE_RUNS = sorted((REPO / "data" / "runs").glob("h200-reference-*.jsonl"))


def synthetic_run(run_id: str, host_ms: float, *, rounds: int = 8, step_ms: float = 6.0, jitter: float = 0.02,
                  gpu: str = "G", at: str = "2026-01-01T00:00:00", **point) -> pd.DataFrame:
    """One run of one point, two strategies, host work `host_ms` per step +- a fixed jitter pattern."""
    rows = []
    for t in range(rounds):
        wiggle = jitter * ((t % 3) - 1)  # -j, 0, +j: a MAD of j
        for s, f in (("device_direct", 1.4), ("non_blocking", 1.0)):
            rows.append({"run_id": run_id, "point_id": f"p-{run_id}", "strategy": s, "trial": t, "status": "ok",
                         "step_ms": step_ms * f + wiggle, "host_work_ms": host_ms + wiggle, "gpu": gpu,
                         "driver": "1", "cuda": "13", "torch": "2", "recorded_at": at, "workload": "sglang_profile",
                         "model": "m", "ep_size": point.get("ep_size", 8), "batch_size": 8, "gamma": 4})
    return pd.DataFrame(rows)


def verdict(rows: pd.DataFrame) -> dict:
    rd = noise.run_disturbance(rows)
    return dict(zip(rd["run_id"], rd["run_disturbed"]))


def test_a_run_disturbed_from_start_to_end_is_flagged_against_the_quietest_run():
    # bound = max(3 MADs of the quiet run, 10% of its median step): 10% of (6.0 and 8.4 -> 7.2) = 0.72 ms
    quiet, just_under, over = (synthetic_run("a", 0.45), synthetic_run("b", 0.45 + 0.70),
                               synthetic_run("c", 0.45 + 0.75))
    rows = pd.concat([quiet, just_under, over], ignore_index=True)
    assert not noise.disturbed_flags(rows).any()  # the trial rule sees nothing: each run is uniform
    assert verdict(rows) == {"a": False, "b": False, "c": True}
    rd = noise.run_disturbance(rows).set_index("run_id")
    assert set(rd["reference_run_id"]) == {"a"} and rd.at["c", "bound_ms"] == pytest.approx(0.72)
    assert "quietest run" in rd.at["c", "run_disturbed_reason"]


def test_the_run_bound_widens_with_the_quiet_runs_own_spread():
    # a quiet run with a MAD of 0.3 ms: 3 MADs (~1.3 ms after the 1.4826 scale) beat 10% of the step
    rows = pd.concat([synthetic_run("a", 0.45, jitter=0.3), synthetic_run("b", 0.45 + 1.0)], ignore_index=True)
    assert verdict(rows) == {"a": False, "b": False}


def test_runs_are_compared_only_within_machine_and_point():
    rows = pd.concat([synthetic_run("a", 0.45), synthetic_run("b", 2.0, gpu="other"),
                      synthetic_run("c", 2.0, ep_size=4)], ignore_index=True)
    rd = noise.run_disturbance(rows).set_index("run_id")
    assert not rd["run_disturbed"].any()
    assert rd["run_disturbed_reason"].str.contains("no other run").all()


def test_runs_without_host_diagnostics_or_quiet_trials_are_not_judged():
    old = synthetic_run("a", 0.45).drop(columns="host_work_ms")
    short = synthetic_run("b", 3.0, rounds=1)  # 2 trials: fewer than MIN_TRIALS
    rows = pd.concat([old, short, synthetic_run("c", 0.45)], ignore_index=True)
    rd = noise.run_disturbance(rows).set_index("run_id")
    assert not rd["run_disturbed"].any()
    assert rd.loc[["a", "b"], "run_disturbed_reason"].str.contains("fewer than").all()


def test_headline_skips_a_disturbed_run_for_the_most_recent_quiet_one_and_says_so():
    from dspark_lab.results.query.runs import Runs
    rows = pd.concat([synthetic_run("old", 0.45, at="2026-01-01T00:00:00"),
                      synthetic_run("quiet", 0.46, at="2026-01-02T00:00:00"),
                      synthetic_run("new", 2.0, at="2026-01-03T00:00:00")], ignore_index=True)
    headers = [{"run_id": r, "created_at": a} for r, a in
               (("old", "2026-01-01T00:00:00"), ("quiet", "2026-01-02T00:00:00"), ("new", "2026-01-03T00:00:00"))]
    runs = Runs(rows, headers=headers)
    head = runs.headline()
    (entry,) = head.entries
    assert entry["run_id"] == "quiet" and [s["run_id"] for s in entry["skipped_runs"]] == ["new"]
    assert any(line.strip().startswith("skipped ") and "disturbed run" in line for line in head.blocks()[0][1:])
    assert "RUN_RULE" in head.rule
    table = runs.table().set_index("run id")
    assert table.at["new", "disturbed run at"] == "1 of 1 points" and table.at["old", "disturbed run at"] == "0 of 1 points"


@pytest.mark.skipif(not REFERENCE_RUNS, reason="the recorded H200 reference runs are not in data/runs")
def test_recorded_reference_runs_the_boot_time_run_is_flagged_the_long_runs_are_not():
    from dspark_lab.results.query.runs import Runs
    runs = Runs.load(REFERENCE_RUNS)
    rd = runs.run_disturbance()
    name = {Runs.load([p]).run_ids()[0]: p.stem.rsplit("-", 3)[0] for p in REFERENCE_RUNS}
    flagged = {name[r] for r in rd.loc[rd["run_disturbed"], "run_id"]}
    assert "h200-reference-short-run1" in flagged  # started seconds after boot: ~4x the host work
    assert not any(n.startswith("h200-reference-run") for n in flagged)  # the three long runs
    entry = runs.headline().entries[0]
    assert entry["run_id"] not in set(rd.loc[rd["run_disturbed"], "run_id"])


@pytest.mark.skipif(not REFERENCE_RUNS, reason="the recorded H200 reference runs are not in data/runs")
def test_the_adaptive_floor_is_where_the_long_runs_ratio_had_settled():
    """MIN_ADAPTIVE_ROUNDS comes from prefixes of the runs that ran to the time cap: by then each
    prefix's headline ratio is within the CI target (3%) of the whole run's."""
    from dspark_lab.results.query.runs import Runs
    ok = Runs.load(REFERENCE_RUNS).ok
    capped = ok[ok["stop_reason"] == "time_cap"]
    assert capped["run_id"].nunique() >= 2
    for _, g in capped.groupby("run_id"):
        full = noise.headline(g)["ratio"]
        for n in range(loop.MIN_ADAPTIVE_ROUNDS, int(g["trial"].max()) + 2):
            assert abs(noise.headline(g[g["trial"] < n])["ratio"] / full - 1) < 0.03
