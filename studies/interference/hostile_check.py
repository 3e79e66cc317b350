"""Numbers that survive a hostile check: known idle, the guard, host interference (one H200, at most ~280 s).

  python -m studies.interference.hostile_check            on a CUDA machine (fails with a clear message without one)
  python -m studies.interference.hostile_check --smoke    on CPU: the interference stage with the tiny model (a check
                                           of the code path; the CUDA stages say they were skipped)

Stages, each bounded (a global budget skips what would not fit; progress goes to stdout):
  1. known idle: the step functions of dspark_lab/gallery/known_idle.py; per case the expected idle
     (the queue model's number, not a measurement), the GPU idle the trace charges to the syncs, the
     profiler-free loss (paired per round, 95% CI) and whether the charge is within 10% of the loss.
  2. guard: one `.item()` inside `no_host_syncs(count=True)`: one sync, the exact line, two
     witnesses; and per gallery case the guard's sync count against the documented one.
  3. interference at the reference point (sglang_profile, EP 8, batch 8, gamma 4; device_direct and
     non_blocking, the headline pair), the measuring process pinned to two cores, each run adaptive
     (a 1.5% CI target with a time cap) and its own run file: three quiet runs (the false-alarm rate),
     one with CPU burners pinned to the same cores on 1.5 s / off 1.5 s, one with them on for the
     whole run, and, if time is left, a quiet run with the spin done in one piece (the measurement
     before the fix) beside them. The calibration cache is a fresh folder, so the quiet runs make
     the lone-run baseline the later runs' headers carry; each run is then loaded ALONE and judged.

Writes under $OUT/interference/ (default out/gpu/interference/), laid out as the repository paths to commit:
  studies/interference/<gpu>-interference-<name>-<stamp>.jsonl  run files (Runs.load("studies/interference"))
  studies/interference/<gpu>-summary-<date>.json                the summary: fingerprint, every table, checks
  studies/interference/<gpu>-summary-<date>.txt                 the printed tables
The run files stay out of data/: the default load reads data/ recursively, and these two-strategy
runs would become the machine's newest runs of the reference point (its headline and the runs the
views compare by default).
The measuring process is pinned to two CPUs chosen by `choose_cores` (least busy, SMT siblings
counted, one per physical core); the intermittent run is measured between quiet runs.
The summary table is printed last. Expected on an H200: 200-280 s (start-up ~15 s, known idle
~25 s, guard ~10 s, each quiet run up to ~20 s, the intermittent run up to ~35 s, the whole-run one ~15 s).
"""
from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)
# A fresh calibration cache: the lone-run baseline must come from this session's quiet runs.
os.environ["DSPARK_CACHE"] = tempfile.mkdtemp(prefix="dspark-interference-cache-")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()  # as the guard names a sync's site

BUDGET_S = 280.0  # within device_round.sh's 300 s for this stage; no stage starts that would not fit
# The adaptive runs' CI target: the check below asks two runs to agree within ±3%, so each run's own
# CI must be well inside that (at ±3% the three quiet runs of the first H200 run spread by 3.5%).
TARGET_CI_PCT = 1.5
AGREE_PCT = 3.0  # the intermittent run's headline within ±3% of the quiet runs'
FALSE_ALARM_MAX_PCT = 5.0
PAIR = ["device_direct", "non_blocking"]
INTERFERENCE_DIR = Path("studies") / "interference"  # the run files' repository folder (not under data/)
BURN_ON_S, BURN_OFF_S = 1.5, 1.5
# A CPU burner: pinned to the given cores, busy for `on` seconds then asleep for `off` (0: always
# busy), at the given niceness (--smoke: 19, so a CPU check does not starve a shared machine).
BURNER = """
import os, sys, time
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
on, off = float(sys.argv[2]), float(sys.argv[3])
os.nice(int(sys.argv[4]))
while True:
    end = time.perf_counter() + on
    while time.perf_counter() < end:
        pass
    if off > 0:
        time.sleep(off)
"""


def left_s() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def slug(gpu: str) -> str:
    return "h200" if "H200" in gpu else (re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")[:20] or "cpu")


# -- 1. known idle ----------------------------------------------------------------------------------

def known_idle_stage() -> dict:
    from dspark_lab.gallery import known_idle as ki
    from studies.known_idle import recheck as fb

    results = []
    for case in ki.CASES:
        if left_s() < 175:  # keep the interference runs' share of the budget
            say(f"known idle: out of budget before {case.name}")
            break
        t = time.perf_counter()
        results.append(fb.measure_case(case, rounds=6, steps=20, warmup=3, profile_steps=6))
        r = results[-1]
        say(f"known idle {case.name}: charged {r['charged_idle_ms']:.2f} ms, loss {r['loss_ms']:+.2f} ms "
            f"({time.perf_counter() - t:.1f} s)")
    note = (f"expected: the queue model's number (known_idle.simulate), not a measurement; within: |charged - loss| "
            f"<= max({fb.WITHIN_FRACTION:.0%} of the loss, {fb.ABS_FLOOR_MS} ms)")
    return {"cases": results, "note": note, "lines": fb.table_lines(results, note)}


# -- 2. guard ---------------------------------------------------------------------------------------

def _item_line() -> int:
    import inspect

    return inspect.currentframe().f_back.f_lineno


def guard_stage() -> dict:
    import torch

    from dspark_lab import guard
    from dspark_lab.gallery import get, make_state, names

    x = torch.ones(4, device="cuda")
    x.sum().item()
    with guard.no_host_syncs(count=True) as rep:
        x.sum().item(); line = _item_line()  # noqa: E702
    one = {"syncs": [{"site": s.site, "kind": s.kind, "witnesses": list(s.witnesses),
                      "witness_sites": [list(w) for w in s.witness_sites]} for s in rep.syncs],
           "count": rep.count(), "violations": len(rep.violations), "summary": rep.summary(),
           "expected_site": f"{THIS_FILE}:{line} guard_stage"}
    one["ok"] = (rep.count() == 1 and rep.syncs[0].site == one["expected_site"]
                 and set(rep.syncs[0].witnesses) >= {guard.DEBUG_MODE, guard.CUPTI})
    say(f"guard: one .item() -> {rep.count()} sync(s): {rep.summary().splitlines()[0]}")
    state = make_state("cuda", "smoke")
    gallery = []
    for name in names():
        case = get(name)
        case.step(state)
        with guard.no_host_syncs(count=True, allow=case.allow) as g:
            case.step(state)
        gallery.append({"case": name, "documented_syncs": case.expected_syncs, "guard_count": g.count(),
                        "lines": [s.describe() for s in g.syncs]})
    return {"one_item": one, "gallery": gallery}


# -- 3. interference --------------------------------------------------------------------------------

def _cpu_list(text: str) -> set:
    """A sysfs CPU list ("0-3,8") as a set of ints."""
    out: set = set()
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out


def _busy_fractions(cpus: list, sample_s: float) -> dict:
    """Each CPU's busy share over `sample_s` seconds, from /proc/stat (idle + iowait count as idle)."""
    def snap() -> dict:
        out = {}
        with open("/proc/stat") as f:
            for line in f:
                name, *vals = line.split()
                if name.startswith("cpu") and name[3:].isdigit():
                    v = [int(x) for x in vals]
                    out[int(name[3:])] = (sum(v), v[3] + (v[4] if len(v) > 4 else 0))
        return out

    a = snap()
    time.sleep(sample_s)  # a sampling interval of the kernel's counters, not a synchronisation
    b = snap()
    return {c: 1.0 - (b[c][1] - a[c][1]) / max(b[c][0] - a[c][0], 1) for c in cpus if c in a and c in b}


def choose_cores(n: int = 2, sample_s: float = 1.0) -> tuple:
    """The `n` CPUs to pin the measuring process (and the burners) to: the least busy over a
    sample, each counted with its SMT siblings' load (a busy sibling slows a core's Python), no two
    sharing a physical core, CPU 0 last (interrupts and housekeeping land there). The first H200
    run pinned to CPUs 0 and 1 and saw the quiet runs' host work switch between 0.8 and 1.6 ms
    per step in stretches of seconds, which moved their ratios by up to 5%."""
    allowed = sorted(os.sched_getaffinity(0))
    siblings = {}
    for c in allowed:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
                siblings[c] = _cpu_list(f.read())
        except (OSError, ValueError):
            siblings[c] = {c}
    busy = _busy_fractions(allowed, sample_s)
    score = {c: busy.get(c, 1.0) + max((busy.get(s, 0.0) for s in siblings[c] if s != c), default=0.0)
             + (1.0 if c == 0 else 0.0) for c in allowed}
    chosen: list = []
    for c in sorted(allowed, key=lambda c: (score[c], c)):
        if len(chosen) < n and not any(c in siblings[o] for o in chosen):
            chosen.append(c)
    for c in allowed:  # fewer physical cores than n: take siblings too
        if len(chosen) < n and c not in chosen:
            chosen.append(c)
    info = {"allowed": allowed, "busy_before": {c: round(v, 3) for c, v in busy.items()},
            "smt_siblings": {c: sorted(v) for c, v in siblings.items() if len(v) > 1}, "chosen": sorted(chosen),
            "rule": "least busy over a 1 s sample, counting SMT siblings' load, no two on one physical core, CPU 0 last"}
    return sorted(chosen), info


def pin_process(cores: list) -> None:
    """Every thread of this process onto `cores` (threads made later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that ended meanwhile
            pass


class Burners:
    """One CPU-burning child process per pinned core, on `on` s / off `off` s (off 0: always on)."""

    def __init__(self, cores: list, on: float, off: float, nice: int = 0):
        self.procs = [subprocess.Popen([sys.executable, "-c", BURNER, ",".join(map(str, cores)), str(on), str(off),
                                        str(nice)]) for _ in cores]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:  # our own children, by their handles
            p.terminate()
        for p in self.procs:
            p.wait(timeout=10)


def reference_config(smoke: bool):
    from dspark_lab.config import LabConfig

    if smoke:
        return LabConfig(ep_size=8, batch_size=8, gamma=4, model="tiny", workload="tiny", steps=4, warmup=1,
                         trials=2, device="cpu")
    return LabConfig(ep_size=8, batch_size=8, gamma=4, workload="sglang_profile", model="small", steps=20, warmup=4,
                     trials=4, device="auto")


def one_run(name: str, what: str, cfg, cap_s: float, folder: Path, fp: dict, burn: tuple | None,
            keep_baseline: bool, cores: list, nice: int = 0) -> Path:
    from dspark_lab.results.record import store
    from dspark_lab.run import baseline
    from dspark_lab.run.point import measure_point, point_id
    from dspark_lab.run.sweep import SweepSpec

    spec = SweepSpec(ep_sizes=(cfg.ep_size,), batch_sizes=(cfg.batch_size,), gammas=(cfg.gamma,), base=cfg,
                     strategies=tuple(PAIR))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = folder / f"{slug(fp['gpu'])}-interference-{name}-{stamp}.jsonl"
    t = time.perf_counter()
    with store.RunWriter.create(path, fingerprint=fp, sweep=spec.to_dict(), run_kind="reference", name=f"interference {name}",
                                adaptive={"target_ci_pct": TARGET_CI_PCT, "time_cap_s": cap_s},
                                interference={"what": what, "pinned_cores": cores,
                                              "burner_on_s": burn[0] if burn else None,
                                              "burner_off_s": burn[1] if burn else None},
                                **baseline.header_fields(fp)) as w:
        if burn:
            with Burners(cores, *burn, nice=nice):
                r = measure_point(cfg, PAIR, target_ci_pct=TARGET_CI_PCT, time_cap_s=cap_s, keep_traces=False)
        else:
            r = measure_point(cfg, PAIR, target_ci_pct=TARGET_CI_PCT, time_cap_s=cap_s, keep_traces=False)
        w.write_point(point_id(cfg), r.rows, r.timelines)
    if keep_baseline:
        baseline.keep(fp, r.rows)
    say(f"run {name}: {len(r.rows)} trials, stopped by {r.rows[0]['stop_reason']} ({time.perf_counter() - t:.1f} s)")
    return path


def judge_alone(path: Path, name: str, what: str) -> dict:
    """The run loaded ALONE: its headline, its flagged trials and reasons, the run rule's verdict."""
    from dspark_lab.results.rules import noise
    from dspark_lab.results.query.runs import Runs

    runs = Runs.load([path])
    ok = runs.ok
    h = noise.headline(ok)
    rd = runs.run_disturbance()
    kinds: dict = {}  # "host work", "GPU time", "SM clock", "NVML slowdown", "step time" -> trials
    for why in ok.loc[ok["disturbed"], "disturbed_reason"]:
        for part in why.split("; "):
            k = re.match(r"[A-Za-z ]*[A-Za-z]", part).group()
            kinds[k] = kinds.get(k, 0) + 1
    host = ok.groupby("disturbed")["host_work_ms"].median().to_dict()
    return {"name": name, "what": what, "file": str(INTERFERENCE_DIR / path.name), "trials": int(len(ok)),
            "flagged": int(ok["disturbed"].sum()), "flagged_pct": float(100 * ok["disturbed"].mean()),
            "flag_reasons": kinds, "host_work_ms_quiet": host.get(False), "host_work_ms_flagged": host.get(True),
            "rounds": h["rounds"], "quiet_rounds": h["quiet_rounds"], "stop_reason": str(ok["stop_reason"].iloc[0]),
            "ratio": h["ratio"], "ci_low": h["ci_low"], "ci_high": h["ci_high"], "headline_text": h["text"],
            "run_disturbed_alone": bool(rd["run_disturbed"].any()) if len(rd) else False,
            "run_reason_alone": "; ".join(rd["run_disturbed_reason"].astype(str)) if len(rd) else "",
            "headline_alone": runs.headline().lines()}


def interference_stage(smoke: bool, out: Path, fp: dict) -> dict:
    from dspark_lab.model import workload

    folder = out / INTERFERENCE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    cores, placement = choose_cores(2, 0.2 if smoke else 1.0)
    pin_process(cores)
    say(f"interference: measuring process pinned to cores {cores} ({placement['rule']}; "
        f"busy before {[placement['busy_before'].get(c) for c in cores]}, SMT siblings "
        f"{len(placement['smt_siblings'])} CPUs have them)")
    cfg = reference_config(smoke)
    # Time caps of the adaptive loop (trials only; set-up and the profiled pass come on top). A quiet
    # run stops at its CI target after 10 quiet rounds (~4 s of trials on an H200).
    caps = dict(quiet=2.0, burst=3.0, whole=2.0) if smoke else dict(quiet=16.0, burst=30.0, whole=8.0)
    burn_on, burn_off = (0.3, 0.3) if smoke else (BURN_ON_S, BURN_OFF_S)
    # The intermittent run sits between quiet ones (the machine's own noise comes and goes in
    # minutes, so its references are measured around it), the whole-run burner last.
    quiet = "quiet: pinned cores, no burner"
    plan = [("quiet1", quiet, caps["quiet"], None, True),
            ("quiet2", quiet, caps["quiet"], None, True),
            ("intermittent", f"burners on {burn_on} s / off {burn_off} s on the pinned cores", caps["burst"],
             (burn_on, burn_off), False),
            ("quiet3", quiet, caps["quiet"], None, True),
            ("whole", "burners on the pinned cores for the whole run", caps["whole"], (1e9, 0.0), False)]
    need = {"quiet1": 24, "quiet2": 24, "quiet3": 24, "intermittent": 40, "whole": 16}  # seconds, with set-up
    runs = []
    for name, what, cap, burn, keep in plan:
        if left_s() < need[name] and not smoke:
            say(f"interference: out of budget before {name}")
            continue
        path = one_run(name, what, cfg, cap, folder, fp, burn, keep, cores, nice=19 if smoke else 0)
        runs.append(judge_alone(path, name, what))
    if left_s() > 24 or smoke:  # the measurement before the fix, beside the quiet runs
        piece = workload.SPIN_PIECE_US
        workload.SPIN_PIECE_US = float("inf")  # one sum(range(n)) for the whole remaining spin, as before
        try:
            what = "quiet, spin in one piece (the measurement before the fix)"
            path = one_run("quiet-one-piece-spin", what, cfg, caps["quiet"], folder, fp, None, False, cores)
            runs.append(judge_alone(path, "quiet-one-piece-spin", what))
        finally:
            workload.SPIN_PIECE_US = piece
    return {"pinned_cores": cores, "placement": placement, "runs": runs, "checks": interference_checks(runs)}


def interference_checks(runs: list) -> dict:
    by = {r["name"]: r for r in runs}
    quiet = [by[n] for n in ("quiet1", "quiet2", "quiet3") if n in by]
    out: dict = {}
    if quiet:
        flagged, trials = sum(r["flagged"] for r in quiet), sum(r["trials"] for r in quiet)
        out["false_alarm_pct"] = 100 * flagged / trials
        out["false_alarm_per_run_pct"] = [r["flagged_pct"] for r in quiet]
        out["false_alarms_ok"] = out["false_alarm_pct"] <= FALSE_ALARM_MAX_PCT
        ratios = [r["ratio"] for r in quiet if r["ratio"] is not None]
        out["quiet_ratio_median"] = sorted(ratios)[len(ratios) // 2] if ratios else None
    if "intermittent" in by and out.get("quiet_ratio_median"):
        b = by["intermittent"]
        dev = (b["ratio"] / out["quiet_ratio_median"] - 1) * 100 if b["ratio"] else None
        out["intermittent_vs_quiet_pct"] = dev
        out["intermittent_ok"] = bool(dev is not None and abs(dev) <= AGREE_PCT and b["quiet_rounds"] >= 10)
    if "whole" in by:
        out["whole_flagged_alone"] = by["whole"]["run_disturbed_alone"]
    return out


# -- the summary ------------------------------------------------------------------------------------

def summary_lines(s: dict) -> list:
    lines = [f"hostile check on {s['fingerprint']['gpu']} (driver {s['fingerprint']['driver']}, CUDA "
             f"{s['fingerprint']['cuda']}, torch {s['fingerprint']['torch']}), {s['elapsed_s']:.0f} s"]
    ki = s.get("known_idle")
    if ki:
        lines += ["", "known caused idle (ms per step):"] + ki["lines"]
    g = s.get("guard")
    if g:
        o = g["one_item"]
        lines += ["", f"guard, one .item(): {o['count']} sync(s), site {o['syncs'][0]['site'] if o['syncs'] else '-'}, "
                      f"witnesses {', '.join(o['syncs'][0]['witnesses']) if o['syncs'] else '-'}: "
                      f"{'OK' if o['ok'] else 'NOT AS EXPECTED'}"]
        lines += [f"  gallery {c['case']:<24} guard {c['guard_count']} sync(s), documented {c['documented_syncs']}"
                  for c in g["gallery"]]
    it = s.get("interference")
    if it:
        lines += ["", f"reference point, pinned to cores {it['pinned_cores']} (each run judged alone):",
                  f"{'run':<22}{'trials':>7}{'flagged':>9}{'rounds':>7}{'quiet':>6}{'ratio':>8}  {'95% CI':<14}"
                  f"{'stop':<11}run rule alone"]
        for r in it["runs"]:
            ci = f"{r['ci_low']:.3f}-{r['ci_high']:.3f}" if r["ci_low"] is not None else "none"
            ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
            lines.append(f"{r['name']:<22}{r['trials']:>7}{r['flagged_pct']:>8.1f}%{r['rounds']:>7}{r['quiet_rounds']:>6}"
                         f"{ratio:>8}  {ci:<14}{r['stop_reason']:<11}"
                         f"{'DISTURBED' if r['run_disturbed_alone'] else r['run_reason_alone'][:40] or 'quiet'}")
        c = it["checks"]
        if "false_alarm_pct" in c:
            lines.append(f"false alarms in the quiet runs: {c['false_alarm_pct']:.1f}% of trials "
                         f"(per run {', '.join(f'{v:.1f}%' for v in c['false_alarm_per_run_pct'])}; "
                         f"must be <= {FALSE_ALARM_MAX_PCT:g}%: {'OK' if c['false_alarms_ok'] else 'NOT MET'})")
        if "intermittent_vs_quiet_pct" in c and c["intermittent_vs_quiet_pct"] is not None:
            lines.append(f"intermittent headline {c['intermittent_vs_quiet_pct']:+.1f}% from the quiet runs' median, "
                         f"needs within ±{AGREE_PCT:g}% over >= 10 quiet rounds: {'OK' if c['intermittent_ok'] else 'NOT MET'}")
        if "whole_flagged_alone" in c:
            lines.append(f"whole-run interference flagged when loaded alone: {'OK' if c['whole_flagged_alone'] else 'NOT MET'}")
    for k, why in s.get("skipped", {}).items():
        lines.append(f"skipped {k}: {why}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CPU: the interference stage with the tiny model only")
    args = ap.parse_args(argv)
    import torch

    from dspark_lab.measure import probe

    if not torch.cuda.is_available() and not args.smoke:
        print(f"{THIS_FILE} needs a CUDA device (its idle, syncs and witnesses come from a GPU); "
              "use --smoke for a CPU check of the code path", file=sys.stderr)
        return 2
    out = Path(os.environ.get("OUT", "out/gpu")) / "interference"
    summaries = out / INTERFERENCE_DIR
    summaries.mkdir(parents=True, exist_ok=True)
    fp = probe.fingerprint()
    say(f"fingerprint: {fp['gpu']}, driver {fp['driver']}, CUDA {fp['cuda']}, torch {fp['torch']}")
    s: dict = {"kind": "interference_study", "script": THIS_FILE, "fingerprint": fp,
               "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "skipped": {}}
    if torch.cuda.is_available():
        s["known_idle"] = known_idle_stage()
        s["guard"] = guard_stage()
    else:
        s["skipped"]["known idle, guard"] = "no CUDA device"
    s["interference"] = interference_stage(args.smoke, out, fp)
    s["elapsed_s"] = time.perf_counter() - T0
    lines = summary_lines(s)
    base = summaries / f"{slug(fp['gpu'])}-summary-{time.strftime('%Y%m%d', time.gmtime())}"
    base.with_suffix(".json").write_text(json.dumps(s, indent=1, default=str) + "\n")
    base.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    say(f"wrote {base.with_suffix('.json')} and the run files under {out / INTERFERENCE_DIR}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
