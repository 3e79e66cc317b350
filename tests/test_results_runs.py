"""results.Runs: unique labels, THE reference point, the headline's rule (most recent run per machine,
not pooled, disturbed trials left out), per-run and pooled summaries, comparisons within and across runs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dspark_lab.results import HEADLINE_RULE, REFERENCE, Runs
from dspark_lab.results.record.rows import build_row
from dspark_lab.results.rules.stats import compare, median_ci


def header(run_id, gpu="GPU-A", at="2026-01-01T10:00:00+00:00", name=None, driver="1"):
    h = {"kind": "header", "run_id": run_id, "created_at": at,
         "fingerprint": {"gpu": gpu, "driver": driver, "cuda": "13.0", "torch": "2.x"}}
    return {**h, "name": name} if name else h


def rows_for(h, eps=(1, 8), batch=8, gamma=4, dd_ms=8.0, fix_ms=6.0, trials=4, slow=None, workload="sglang_profile"):
    fp = h["fingerprint"]
    out = []
    for ep in eps:
        for t in range(trials):
            for s, ms in (("device_direct", dd_ms), ("persistent_fill", fix_ms), ("non_blocking", fix_ms + 0.5)):
                extra = slow(ep, t, s) if slow is not None else 0.0  # a disturbance, e.g. host interference
                r = build_row(point_id=f"ep{ep}-b{batch}-g{gamma}-{workload}", strategy=s, trial=t,
                              step_ms=ms + 0.01 * t + extra, ep_size=ep, batch_size=batch, gamma=gamma, workload=workload)
                r.update({k: fp[k] for k in ("gpu", "driver", "cuda", "torch")}, run_id=h["run_id"],
                         recorded_at=h["created_at"])
                out.append(r)
    return out


def make(*specs):
    headers, rows = [], []
    for h, kw in specs:
        headers.append(h)
        rows += rows_for(h, **kw)
    return Runs(pd.DataFrame(rows), None, headers)


def test_labels_are_short_and_unique():
    runs = make((header("a", at="2026-01-01T10:00:05+00:00"), {}), (header("b", at="2026-01-01T10:00:40+00:00"), {}),
                (header("c", at="2026-01-02T09:00:00+00:00", name="after the driver update"), {}),
                (header("d", at="2026-01-01T10:00:40+00:00"), {}))
    labels = runs.labels()
    assert len(set(labels.values())) == 4
    assert labels["c"] == "after the driver update"
    kind = runs.kind_name("a")
    assert labels["a"] == f"GPU-A · {kind} · 01-01 10:00:05"  # the same minute as b: seconds added
    # the same second too: an ordinal by start, never the run id
    assert {labels["b"], labels["d"]} == {f"GPU-A · {kind} · 01-01 10:00:40 #1", f"GPU-A · {kind} · 01-01 10:00:40 #2"}
    assert not any(rid in lab for rid in "abd" for lab in (labels["a"], labels["b"], labels["d"]) if len(rid) > 3)
    assert set(runs.rows.run_label) == set(labels.values())


def test_reference_point_is_batch_8_gamma_4_at_the_largest_ep_above_1():
    runs = make((header("a"), {"eps": (1, 2, 8)}))
    ref = runs.reference()
    assert set(ref.ep_size) == {8} and set(ref.batch_size) == {REFERENCE.batch_size} and set(ref.gamma) == {REFERENCE.gamma}
    assert set(runs.reference(ep_size=1).ep_size) == {1}


def test_headline_takes_the_most_recent_run_per_machine_not_pooled():
    runs = make((header("old", at="2026-01-01T10:00:00+00:00"), {"dd_ms": 10.0}),
                (header("new", at="2026-01-03T10:00:00+00:00"), {"dd_ms": 8.0}),
                (header("other-gpu", gpu="GPU-B", at="2026-01-02T10:00:00+00:00"), {"dd_ms": 20.0}),
                (header("newest-no-ref", at="2026-01-04T10:00:00+00:00"), {"batch": 32}))
    head = runs.headline()
    assert head.rule == HEADLINE_RULE and "most recent run" in head.rule and "not pooled" in head.rule
    assert [e["run_id"] for e in head.entries] == ["new", "other-gpu"]
    new = runs.rows[(runs.rows.run_id == "new") & (runs.rows.ep_size == 8) & (runs.rows.strategy == "device_direct")]
    dd = head.entries[0]["strategies"][0]
    assert dd["strategy"] == "device_direct" and dd["median_ms"] == pytest.approx(new.step_ms.median())
    assert f"device_direct {new.step_ms.median():.2f} ms" in "\n".join(head.blocks()[0])  # the machine's lines
    # the comparison: device_direct against the fastest other strategy of that run, paired by trial
    c = head.entries[0]["comparison"]
    fix = runs.rows[(runs.rows.run_id == "new") & (runs.rows.ep_size == 8) & (runs.rows.strategy == "persistent_fill")]
    want = compare(fix.sort_values("trial").step_ms.tolist(), new.sort_values("trial").step_ms.tolist(),
                   "persistent_fill", "device_direct")
    assert c["best"] == "persistent_fill" and c["pct"] == pytest.approx(want["pct"]) and c["pct"] < 0
    # these runs hold 4 rounds: the headline's comparison gives no CI from fewer than 10 quiet rounds
    assert c["ci_low"] is None and "over 4 quiet rounds, too few quiet rounds for a confidence interval" in c["verdict"]
    assert head.text().endswith(HEADLINE_RULE)


def test_disturbed_trials_are_left_out_and_counted():
    # trial 0 of device_direct runs 3 ms per step slower: the rule (results.rules.noise) marks it
    runs = make((header("a"), {"slow": lambda ep, t, s: 3.0 if (t == 0 and s == "device_direct") else 0.0}))
    summ = runs.summary(runs.reference())
    dd = summ[summ.strategy == "device_direct"].iloc[0]
    assert dd.trials == 3 and dd.disturbed_left_out == 1
    kept = runs.reference()
    kept = kept[(kept.strategy == "device_direct") & (kept.trial > 0)]
    assert dd.median_ms == pytest.approx(median_ci(kept.step_ms.tolist())[0])
    head = runs.headline()
    assert head.entries[0]["disturbed_left_out"] == 1 and "(1 disturbed trials left out)" in "\n".join(head.blocks()[0])
    assert head.entries[0]["comparison"]["n_a"] == 3  # the round with a disturbed trial is left out of the pairs


def test_pooled_and_per_run_summaries_and_cross_run():
    runs = make((header("a"), {"dd_ms": 8.0}), (header("b", at="2026-01-02T10:00:00+00:00"), {"dd_ms": 12.0}))
    ref = runs.reference()
    per_run = runs.summary(ref)
    pooled = runs.summary(ref, pooled=True)
    assert len(per_run) == 6 and len(pooled) == 3 and "run_id" not in pooled
    dd_all = ref[ref.strategy == "device_direct"].step_ms
    assert pooled[pooled.strategy == "device_direct"].median_ms.iloc[0] == pytest.approx(np.median(dd_all))
    cross = runs.cross_run(ref)
    assert [c["run_id"] for c in cross] == ["a", "b"] and all(c["best"] == "persistent_fill" for c in cross)
    with pytest.raises(ValueError, match="one run"):
        Runs.compare(ref, "persistent_fill", "device_direct")


def test_nearest_keeps_every_run_holding_the_nearest_point():
    runs = make((header("a"), {"batch": 8}), (header("b", at="2026-01-02T10:00:00+00:00"), {"batch": 16}))
    got = runs.nearest(ep_size=8, batch_size=10, gamma=4)
    assert set(got.run_id) == {"a"} and set(got.batch_size) == {8}
    got = runs.nearest(ep_size=8, batch_size=16, gamma=4)
    assert set(got.run_id) == {"b"}
