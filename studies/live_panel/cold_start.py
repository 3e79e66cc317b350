"""Where the cold first figure's second goes (a diagnosis; studies.live_panel.benchmark is the benchmark). Each case is
a fresh Python process with an empty calibration cache, after one primer process (OS and driver
caches as after any earlier torch process):

  detail   the parts of a first step one after the other on the main thread, each ended by a
           torch.cuda.synchronize, with a ticker thread that records the longest time the GIL was
           held away from it during each part (torch lets go of the GIL inside ops: the driver's
           module loads run without it, so two threads can load at once);
  variants the detail path with one change each (--variant): no-fp32 (the old warm-up's fp32
           matmul left out), warmed (the warm-up's path: LabStep.warmed), ops (each aten op of the
           first eager forward timed, synchronized), sdpa-math and warmup1 (by hand);
  backend  LiveBackend() then stream(defaults) at once, no panel: first update and its parts;
  panel    the same through views.panel.Panel when ipywidgets is importable (as the benchmark).

  OUT=/tmp/o python -m studies.live_panel.cold_start            # CUDA machine, about 60 s
  OUT=/tmp/o python -m studies.live_panel.cold_start --cpu-dry-run
Writes $OUT/cold-start/cold.json and prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CASE_TIMEOUT_S = 60


class Ticker:
    """A thread that wakes every 0.5 ms: the gaps between its wake-ups are the GIL held elsewhere."""

    def __init__(self):
        self.stamps: list = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.stamps.append(time.perf_counter())
            time.sleep(0.0005)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def longest_gap(self, a: float, b: float) -> float:
        inside = [t for t in self.stamps if a <= t <= b]
        pts = [a] + inside + [b]
        return max((y - x for x, y in zip(pts, pts[1:])), default=0.0)


def detail(cpu: bool, variant: str, with_cprofile: bool) -> dict:
    t_imp = time.perf_counter()
    import torch

    from dspark_lab import strategies  # noqa: F401
    from dspark_lab.config import LabConfig
    from dspark_lab.measure import diagnostics
    from dspark_lab.measure.probe import driver_version, fingerprint
    from dspark_lab.measure.timing import time_trial
    from dspark_lab.model import draft, workload
    from dspark_lab.results.viewmodels import frames
    from dspark_lab.run import live
    from dspark_lab.run.point import timing_rows
    imports_s = time.perf_counter() - t_imp

    if variant == "warmup1":  # the capture's side-stream warm-up: one eager forward instead of two
        def capture(self):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s), torch.no_grad():
                self._forward_static()
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph), torch.no_grad():
                self.static_out = self._forward_static()
        draft.DraftRunner.capture = capture

    if variant == "sdpa-math":  # the attention's math kernels (matmul, softmax) instead of its own
        from torch.nn.attention import SDPBackend, sdpa_kernel
        fwd = draft.DraftLayer.forward

        def layer_forward(self, *a, **k):
            with sdpa_kernel(SDPBackend.MATH):
                return fwd(self, *a, **k)
        draft.DraftLayer.forward = layer_forward

    base = (LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, device="cpu") if cpu else
            LabConfig(steps=live.LIVE_STEPS, warmup=live.LIVE_WARMUP, trials=live.LIVE_TRIALS))
    cfg = base
    name = frames.default_strategy(list(strategies.names()))
    cuda = cfg.resolved_device() == "cuda"
    parts: list = []  # (part, seconds, longest GIL gap seen by the ticker)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile() if with_cprofile else None

    spans = {}
    # The parts of LabStep's construction and first step, timed where they are called.
    for owner, attr, part in ((workload.TargetVerify, "_layers_for", "target verify calibration"),
                              (workload.TargetVerify, "_capture", "target verify capture"),
                              (draft.DraftModel, "__init__", "draft model built"),
                              (draft.DraftRunner, "capture", "draft graph capture"),
                              (draft.DraftRunner, "_forward_static", "draft eager forward")):
        fn = getattr(owner, attr)

        def timed(*a, _fn=fn, _part=part, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spans.setdefault(_part, []).append((t, time.perf_counter()))
        setattr(owner, attr, timed)

    with Ticker() as tick:
        def part(label, fn):
            t = time.perf_counter()
            out = fn()
            sync()
            e = time.perf_counter()
            parts.append([label, e - t, tick.longest_gap(t, e)])
            return out

        if prof:
            prof.enable()
        t_all = time.perf_counter()
        if cuda:
            part("torch.cuda.init", torch.cuda.init)
            x = part("first tensor on the GPU", lambda: torch.ones(64, 64, device="cuda"))
            if variant not in ("no-fp32", "warmed"):
                part("fp32 matmul (cuBLAS)", lambda: (x @ x).sum().item())
            if variant != "warmed":
                y = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
                part("bf16 matmul", lambda: (y @ y).float().sum().item())
            part("driver version (NVML)", driver_version)
        part("fingerprint", fingerprint)
        part("spin calibration", workload._iters_per_us)
        if variant == "warmed":  # the warm-up's path: target verify on a helper thread
            st = part("LabStep.warmed", lambda: workload.LabStep.warmed(cfg, name))
        else:
            st = part("LabStep made", lambda: workload.LabStep(cfg, name))
        if variant == "ops" and cuda:  # each aten op of the first eager forward, synchronized
            from torch.utils._python_dispatch import TorchDispatchMode

            class OpTimes(TorchDispatchMode):
                def __init__(self):
                    super().__init__()
                    self.seen = {}

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    t = time.perf_counter()
                    r = func(*args, **(kwargs or {}))
                    torch.cuda.synchronize()
                    key = str(func)
                    self.seen.setdefault(key, []).append(time.perf_counter() - t)
                    return r
            m = OpTimes()
            with m, torch.no_grad():
                part("first eager forward, each op synchronized", st.runner._forward_static)
            first = sorted(((v[0], k, len(v), sum(v[1:]) / max(1, len(v) - 1)) for k, v in m.seen.items()), reverse=True)
            for t0_, k, n, later in first[:25]:
                parts.append([f"(op {k} first / later ms, x{n})", t0_ * 1e3, later])
        part("first step (captures)", lambda: (st.step(), st.drain()))
        part("second step", lambda: (st.step(), st.drain()))
        nvml = part("NVML for diagnostics", lambda: diagnostics.nvml_for(0) if cuda else None)
        timing = part("first look trial", lambda: time_trial(st.step, cfg.steps, cfg.warmup, st.drain, trial=0,
                                                             diag=diagnostics.TrialDiagnostics(st, nvml=nvml)))
        part("timing rows", lambda: timing_rows(cfg, {name: [timing]}))
        total = time.perf_counter() - t_all
        if prof:
            prof.disable()
    if cuda:  # could an eager timing stand in for the graph calibration? (no capture: cheaper cold)
        tv = st.target
        rate = workload.TargetVerify._layers_per_ms[torch.cuda.get_device_name(0)]
        saved = tv.layers
        tv.layers = 64
        est = []
        for _ in range(4):
            t = time.perf_counter()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            tv._body()
            b.record()
            b.synchronize()
            est.append((64 / a.elapsed_time(b), time.perf_counter() - t))
        tv.layers = saved
        parts.append(["(graph layers/ms vs eager)", rate, 0.0])
        for i, (r, s_) in enumerate(est):
            parts.append([f"(eager estimate {i}, its s)", r, s_])
    out = {"variant": variant, "imports_s": imports_s, "total_s": total, "parts": parts,
           "inner": {k: [round(b - a, 4) for a, b in v] for k, v in spans.items()}}
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(35)
        out["cprofile"] = buf.getvalue()
    return out


def backend_case(cpu: bool, with_panel: bool) -> dict:
    if with_panel:
        import ipywidgets  # noqa: F401
        import plotly.graph_objects as go
        go.FigureWidget()
    from dspark_lab.config import LabConfig
    from dspark_lab.run import live
    base = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, device="cpu") if cpu else None
    marks: list = []
    done = threading.Event()
    t0 = time.perf_counter()
    b = live.LiveBackend(base)
    if with_panel:
        from dspark_lab.views import panel as panel_mod

        class P(panel_mod.Panel):
            def show_partial(self, data):
                super().show_partial(data)
                marks.append(("partial drawn", time.perf_counter() - t0))

            def show(self, data):
                super().show(data)
                marks.append(("complete drawn", time.perf_counter() - t0))
                done.set()
        p = P(b)
        marks.append(("panel made", time.perf_counter() - t0))
        done.wait(30)
        p.close()
    else:
        def on_update(u):
            marks.append(("first look" if u.first_look else ("complete" if u.final else f"{u.trials} trials"),
                          time.perf_counter() - t0))
        b.stream(b.defaults(), on_update=on_update)
        b.close()
    return {"marks": marks, "warm_s": b.warm_s, "warm_parts": b.warm_parts,
            "warm_error": repr(b.warm_error) if b.warm_error else None}


PRIMER = """
import torch
x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
(x @ x).float().sum().item()
"""


def run_child(args: list, env_extra: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="dspark-cold-") as d:
        env = {**os.environ, "DSPARK_CACHE": d, **env_extra}
        out = Path(d) / "out.json"
        r = subprocess.run([sys.executable, __file__, "--child", str(out)] + args, env=env,
                           capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
        if r.returncode != 0 or not out.exists():
            return {"error": (r.stderr or r.stdout)[-2000:]}
        return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-dry-run", action="store_true", help="tiny model on CPU: the code path, no GPU numbers")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--case", default="detail", help="detail, cprofile, backend or panel (default: %(default)s)")
    ap.add_argument("--variant", default="as-is", help="the detail path with one change (default: %(default)s)")
    a = ap.parse_args(argv)
    if a.child:
        if os.environ.get("DSPARK_COLD_SWITCH_S"):  # a shorter GIL switch interval (CPython's default: 5 ms)
            sys.setswitchinterval(float(os.environ["DSPARK_COLD_SWITCH_S"]))
        if a.case == "detail":
            res = detail(a.cpu_dry_run, a.variant, with_cprofile=False)
        elif a.case == "cprofile":
            res = detail(a.cpu_dry_run, a.variant, with_cprofile=True)
        else:
            res = backend_case(a.cpu_dry_run, a.case == "panel")
        Path(a.child).write_text(json.dumps(res, indent=1))
        return 0
    dry = ["--cpu-dry-run"] if a.cpu_dry_run else []
    if not a.cpu_dry_run:
        subprocess.run([sys.executable, "-c", PRIMER], timeout=CASE_TIMEOUT_S)
    sw = {"DSPARK_COLD_SWITCH_S": "0.0002"}
    cases = {  # the variants interleaved: host speed drifts within a call
        "detail 1": (["--case", "detail"], {}),
        "detail no-fp32": (["--case", "detail", "--variant", "no-fp32"], {}),
        "detail warmed 1": (["--case", "detail", "--variant", "warmed"], {}),
        "detail warmed switch": (["--case", "detail", "--variant", "warmed"], sw),
        "detail warmed 2": (["--case", "detail", "--variant", "warmed"], {}),
        "backend 1": (["--case", "backend"], {}),
        "backend switch 1": (["--case", "backend"], sw),
        "backend 2": (["--case", "backend"], {}),
        "backend switch 2": (["--case", "backend"], sw),
    }
    try:
        import ipywidgets  # noqa: F401
        for i in (1, 2, 3):
            cases[f"panel {i}"] = (["--case", "panel"], {})
            cases[f"panel switch {i}"] = (["--case", "panel"], sw)
    except ImportError:
        pass
    results = {}
    for label, (args, env) in cases.items():
        t = time.perf_counter()
        results[label] = run_child(args + dry, env)
        results[label]["wall_s"] = time.perf_counter() - t
        print(f"[{label}] {results[label]['wall_s']:.1f} s", flush=True)
    from dspark_lab.measure.probe import fingerprint  # after the cases: this process stays torch-free till now

    record = {"what": "where the cold first figure's time goes (studies/live_panel/cold_start.py)",
              "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "fingerprint": fingerprint(), "cases": results}
    out = Path(os.environ.get("OUT", "out")) / "cold-start"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold.json").write_text(json.dumps(record, indent=1))
    for label, r in results.items():
        if "error" in r:
            print(f"{label}: ERROR {r['error'][-600:]}")
        elif "parts" in r:
            print(f"--- {label}: total {r['total_s']:.3f} s (imports {r['imports_s']:.2f} s)")
            for p, s, gap in r["parts"]:
                if p.startswith("("):
                    print(f"  {p:28s} {s:8.2f}      {gap * 1e3:7.1f} ms")
                else:
                    print(f"  {p:28s} {s * 1e3:8.1f} ms   longest GIL gap {gap * 1e3:7.1f} ms")
            print("  inner: " + "; ".join(f"{k} {v}" for k, v in r["inner"].items()))
        else:
            print(f"--- {label}: " + ", ".join(f"{m} {t:.3f}" for m, t in r["marks"]) + f"  warm {r['warm_parts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
