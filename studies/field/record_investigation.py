"""On a GPU: record notebook 06's worked investigation alone, in under a minute: the decode step slow and
fixed (the fix finds each row's owner on the device, no size read back) inspected together, trials
interleaved, and guarded with the CI allow-list; the race check of the fixed step (GPU work queued
ahead, its host lengths changing each step); and the two ways of finding each row's owner timed alone.

    OUT=/some/folder python -m studies.field.record_investigation [--steps 20] [--rounds 10] [--cpu-dry-run]

Expected: about 30 s on an H200 (torch's import and CUDA's start included), at most 60.
File: $OUT/data/investigation/<gpu>-decode-step-<yyyymmdd>.json (results.record.investigation's format,
with "races" and "owner_forms"), laid out as the repository path to commit. The table is printed last:
the step times, every line's wait before and after (results.analyses.wait_ledger), diff's verdict on
whether the wait went or moved, the guard, the race check and the owner forms.
Without CUDA it stops (exit 2) unless --cpu-dry-run: the smoke scale, into $OUT/investigation-cpu-dry-run/
(nothing to commit).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from dspark_lab.gallery import decode_step as D  # noqa: E402
from dspark_lab.gallery import race_cases  # noqa: E402
from dspark_lab.gallery.cases import make_state, target_verify  # noqa: E402
from dspark_lab.gallery.targets import default_scale  # noqa: E402
from dspark_lab.measure import races  # noqa: E402
from dspark_lab.results.analyses import headroom as headroom_results  # noqa: E402
from dspark_lab.results.analyses import step_diff, verdict, wait_ledger  # noqa: E402
from dspark_lab.results.record import investigation  # noqa: E402
from dspark_lab.results.record.paths import machine_file_name  # noqa: E402
from dspark_lab.run import investigation as run_investigation  # noqa: E402

T0 = time.perf_counter()
TARGETS = ("dspark_lab.gallery.decode_step:slow_step()", "dspark_lab.gallery.decode_step:fixed_step()")
RACE_STEPS = 40


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def _per_call_ms(fn, calls: int, sync) -> float:
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t) * 1e3 / calls


def owner_forms(calls: int, repeats: int = 5) -> dict:
    """Each way of finding the rows' owners, `calls` back to back on the decode step's state with nothing
    else queued (median of `repeats`), and whether the device form's rows before the padding are the same."""
    s = make_state(scale_name=default_scale())  # the decode step's factories' scale
    tokens, reps = D._sample(s, target_verify(s)), s.accept.sum(1) + 1
    bound = s.accept.shape[0] * (s.accept.shape[1] + 1)
    slow, fixed = D._owner_of_rows(tokens, reps), D._owner_of_rows_padded(tokens, reps, bound)
    equal = bool(torch.equal(fixed[: slow.numel()], slow)) and bool((fixed[slow.numel():] == D.PAD_OWNER).all())
    sync = torch.cuda.synchronize if s.device.type == "cuda" else (lambda: None)
    times = {k: [] for k in ("slow", "fixed")}
    for _ in range(repeats):  # the two forms interleaved, so a drift of the machine touches both
        times["slow"].append(_per_call_ms(lambda: D._owner_of_rows(tokens, reps), calls, sync))
        times["fixed"].append(_per_call_ms(lambda: D._owner_of_rows_padded(tokens, reps, bound), calls, sync))
    return {"calls": calls, "rows": int(slow.numel()), "bound": bound, "equal": equal, "device": s.device.type,
            "slow_ms_per_call": statistics.median(times["slow"]), "fixed_ms_per_call": statistics.median(times["fixed"])}


def record(steps: int, rounds: int, calls: int) -> dict:
    rec = run_investigation.record(D.slow_step(), D.fixed_step(), targets=TARGETS, allow=D.CI_ALLOW, steps=steps,
                                   trials=rounds, source_root=Path(D.__file__).parent)
    say(f"inspected: before {rec['before']['step_ms']:.3f} ms, after {rec['after']['step_ms']:.3f} ms per step")
    rec["races"] = races.check(race_cases.with_changing_lengths(D.decode_step_fixed), steps=RACE_STEPS)
    say(headroom_results.races_text(rec["races"]))
    rec["owner_forms"] = owner_forms(calls)
    return investigation.validate(rec)


def table(rec: dict) -> str:
    d = step_diff.diff(rec["before"], rec["after"])
    waits = wait_ledger.ledger(rec["before"], rec["after"])
    st = d["step_time"]
    lines = [f"step time, ms (median, 95% CI, no profiler): before {st['before'][0]:.3f} "
             f"({st['before'][1]:.3f}-{st['before'][2]:.3f}), after {st['after'][0]:.3f} ({st['after'][1]:.3f}-"
             f"{st['after'][2]:.3f}): {st['difference']}",
             "where every wait went (ms per step):", waits.round(3).to_string(index=False, na_rep="-"),
             step_diff.moves_text(d["waits"]),
             "rows whose wait grew: " + ("; ".join(wait_ledger.grown(waits)) or "none"),
             "inspect: " + verdict.inspect_line(rec["before"]), "diff:    " + verdict.diff_line(d),
             investigation.guard_text(rec), headroom_results.races_text(rec["races"]),
             investigation.owner_forms_text(rec)]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10, help="profiler-free trials of each step, interleaved (paired)")
    ap.add_argument("--calls", type=int, default=200, help="calls of each owner form per timing")
    ap.add_argument("--cpu-dry-run", action="store_true", help="without CUDA: the smoke scale, into $OUT/investigation-cpu-dry-run/")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not a.cpu_dry_run:
        say("no CUDA device: the investigation's record needs one (--cpu-dry-run checks the script)")
        return 2
    out = Path(os.environ.get("OUT", "out/gpu")) / ("" if cuda else "investigation-cpu-dry-run")
    rec = record(a.steps, a.rounds, a.calls)
    path = investigation.save(rec, out / "data" / "investigation" / machine_file_name(rec["fingerprint"], rec["recorded_at"], "decode-step"))
    say(f"investigation -> {path}")
    print(f"\nsummary (investigation, scale {default_scale()}, wall time {time.perf_counter() - T0:.1f} s)\n" + "-" * 40)
    print(table(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
