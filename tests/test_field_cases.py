"""The gallery's cases from the field: each documented with its public PR and shape, registered as a
gallery case and an inspect target; the cases grouped by what their syncs cost, from a recording
(synthetic numbers on CPU); the verdict line of inspect and diff; notebook 06's decode step computing
the same values slow and fixed; and on CUDA, each measured count equal to the documented one, with
the witnesses that should see it."""
from __future__ import annotations

import pytest
import torch

from dspark_lab import gallery
from dspark_lab.gallery import cases as C
from dspark_lab.gallery import decode_step as D
from dspark_lab.gallery import field_cases as F
from dspark_lab.gallery import report, targets
from dspark_lab.results.analyses import step_diff, sync_cost_groups as G, verdict
from helpers import inspect_record

FIELD = [d["name"] for d in F.FIELD_CASES]
GALLERY_RECORD = report.DATA_DIR / "h200-gallery-20261203.json"  # the gallery the groups' texts are checked on
SOURCES = ("TensorRT-LLM #16680", "tokenspeed #45", "Advanced_Optimizers #5", "SGLang #28491", "minimind #837", "sparkinfer #725")


def test_the_six_field_cases_are_gallery_cases_and_targets_with_their_sources():
    assert len(FIELD) == 6 and set(FIELD) <= set(gallery.names()) and len(gallery.names()) >= 13
    for name, src in zip(FIELD, SOURCES):
        c = gallery.get(name)
        assert src in c.pr and c.step.__module__ == F.__name__
        assert callable(getattr(targets, name)) and callable(getattr(targets, name + targets.FIX_SUFFIX))
    counter = [n for n in FIELD if gallery.get(n).shape.startswith("counter-example")]
    assert counter == ["moe_per_expert_masks", "redundant_stream_sync"]


def test_a_sync_line_in_a_loop_is_documented_once_and_counted_per_run():
    c = gallery.get("moe_per_expert_masks")
    assert len(c.sites()) == 3 and c.expected_syncs == 3 * F.MOE_EXPERTS == 3 * F.LINE_RUNS[c.name]
    assert c.fix_expected_syncs == 1  # the PR's fix keeps one read of the counts per layer


# --- grouping by measured cost ------------------------------------------------------------------
def _variant(step_ms, lo, hi, syncs=1.0, starved=0.3, readback=0.0, blocked=0.2):
    return {"status": "ok", "error": "", "step_ms": step_ms, "step_ms_lo": lo, "step_ms_hi": hi, "host_syncs_per_step": syncs,
            "readback_syncs_per_step": readback, "gpu_idle_sync_caused_ms": starved, "host_blocked_ms": blocked,
            "expected_syncs": int(syncs), "matches": True}


def _case(name, case, fix, change=None):
    c = {"name": name, "pr": f"SYNTH #{len(name)} (synthetic)", "variants": {"case": case, "fix": fix}}
    return {**c, "change": change} if change else c


def _gallery(device="cuda") -> dict:
    paired = lambda pct, lo, hi: {"pct": pct, "ci_low": lo, "ci_high": hi}  # noqa: E731
    return {"device": device, "cases": [
        _case("costly", _variant(4.0, 3.9, 4.1), _variant(3.0, 2.9, 3.1, syncs=0), paired(-25.0, -27.0, -23.0)),
        _case("busy", _variant(4.0, 3.9, 4.1, starved=0.01), _variant(4.0, 3.9, 4.1, syncs=0, starved=0), paired(0.1, -0.5, 0.6)),
        _case("kept", _variant(4.0, 3.9, 4.1, syncs=6), _variant(3.99, 3.9, 4.1, syncs=1), paired(-0.2, -0.9, 0.4)),
        _case("unpaired", _variant(4.0, 3.9, 4.1), _variant(3.0, 2.9, 3.05, syncs=0)),
    ]}


def test_cases_are_grouped_by_their_measured_change_and_the_reason_is_read_from_the_record():
    g = G.groups(_gallery()).set_index("case")
    assert g.loc["costly", "group"] == G.COSTS and "saves 25.0%" in g.loc["costly", "why"]
    assert g.loc["busy", "group"] == G.FREE and g.loc["busy", "why"].startswith("the GPU stayed busy")
    assert g.loc["kept", "group"] == G.FREE and "keeps 1 wait(s) per step of its own, charged 0.300 ms" in g.loc["kept", "why"]
    # without a paired change the two CIs decide: 2.9-3.05 against 3.9-4.1 is apart
    assert g.loc["unpaired", "group"] == G.COSTS and g.loc["unpaired", "compared"] == "from the two CIs"
    assert g.loc["costly", "compared"] == "paired per round"


def test_the_reasons_read_the_caused_idle_not_the_first_gap_after_a_sync():
    gallery = _gallery()
    for c in gallery["cases"]:
        c["variants"]["case"]["gpu_idle_after_sync_ms"] = 9.876  # the older metric: must not be what the text says
    assert not any("9.876" in why for why in G.groups(gallery)["why"])


def test_each_groups_text_agrees_with_the_recorded_gallery():
    rec = report.load(GALLERY_RECORD)
    g = G.groups(rec).set_index("case")
    for c in rec["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        row = g.loc[c["name"]]
        assert f"caused {a['gpu_idle_sync_caused_ms']:.3f} ms" in row["why"], row["why"]
        kept = b["host_syncs_per_step"] + b["readback_syncs_per_step"]
        assert (f"keeps {kept:g} wait(s)" in row["why"]) == bool(kept), row["why"]
        if kept:
            assert f"charged {b['gpu_idle_sync_caused_ms']:.3f} ms" in row["why"], row["why"]
        if row["group"] == G.COSTS:
            assert row["CI high %"] < 0 and f"saves {-row['change %']:.1f}%" in row["why"]
        elif row["why"].startswith("the GPU stayed busy"):
            assert a["gpu_idle_sync_caused_ms"] < G.GPU_BUSY_SHARE * a["step_ms"]


def test_a_recording_without_cuda_is_not_grouped_as_free():
    assert set(G.groups(_gallery(device="cpu"))["group"]) == {G.UNMEASURED}


# --- the verdict line ------------------------------------------------------------------------------
SITES = [("a.py:10 step", 1.0, True, 1.0, 0.9, "x = torch.tensor(v, device=d)"),
         ("a.py:20 helper", 1.0, True, 0.01, 0.01, "return torch.repeat_interleave(t, r)")]


def test_inspect_ends_with_the_costliest_site_or_says_none_costs():
    rec = inspect_record("slow", SITES, trials=(3.0, 3.0, 3.1))
    line = verdict.inspect_line(rec)
    assert line.startswith("verdict: a.py:10 step costs most: 0.900 ms of GPU idle per 3.000 ms step (30%)")
    assert "next: remove that sync" in line
    cheap = inspect_record("cheap", SITES[1:], trials=(3.0, 3.0, 3.1))
    assert verdict.inspect_line(cheap).startswith("verdict: 1 sync site(s), none costs measurably")
    assert verdict.inspect_line(inspect_record("none", ())).startswith("verdict: no host sync")
    assert verdict.inspect_line(inspect_record("cpu", (), device="cpu")).startswith("verdict: not measurable here")
    costs = verdict.site_costs(rec)
    assert costs["reading"].tolist() == ["costs most", "costs nothing here"]
    assert costs["the sync is"].tolist() == ["named in the line", "inside a library call"]


def test_diff_ends_with_the_paired_verdict_and_what_changed():
    pair = lambda role: {"id": "p", "role": role}  # noqa: E731
    before = inspect_record("slow", SITES, trials=(3.0, 3.1, 2.9, 3.0), pair=pair("before"))
    after = inspect_record("fixed", SITES[1:], trials=(2.0, 2.1, 1.9, 2.0), pair=pair("after"))
    line = verdict.diff_line(step_diff.diff(before, after))
    assert line.startswith("verdict: AFTER is 33.3% faster") and "removed a.py:10 step" in line and "next: guard" in line
    same = inspect_record("same", SITES, trials=(3.0, 3.1, 2.9, 3.0), pair=pair("after"))
    assert verdict.diff_line(step_diff.diff(before, same)).startswith("verdict: no measurable difference")


# --- notebook 06's decode step ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_the_decode_step_computes_the_same_slow_and_fixed(seed):
    s = C.make_state("cpu", "smoke", seed=seed)
    s.accept = torch.rand(s.accept.shape, generator=torch.Generator().manual_seed(100 + seed)) < seed / 5
    (pos_a, owner_a, lens_a, n_a), (pos_b, owner_b, lens_b, n_b) = D.decode_step_slow(s), D.decode_step_fixed(s)
    assert torch.equal(pos_a, pos_b) and torch.equal(lens_a, lens_b) and n_a == n_b
    # the fixed owner is padded to a static bound: the real rows equal the slow step's, the rest are padding
    assert torch.equal(owner_b[: owner_a.numel()], owner_a)
    assert bool((owner_b[owner_a.numel():] == D.PAD_OWNER).all()) and owner_b.numel() >= owner_a.numel()


def test_the_fixed_decode_step_reads_no_size_back_and_each_allowed_sync_says_why():
    from dspark_lab.lint import lint_paths

    fixed_side = {"decode_step_fixed", "_owner_of_rows_padded"}
    findings = [f for f in lint_paths([D.__file__]) if f.function in fixed_side]
    assert findings == [], [f.describe() for f in findings]
    allowed = [entry.split(":", 1) for entry in D.CI_ALLOW]
    assert all(len(e) == 2 and e[1].strip() for e in allowed), D.CI_ALLOW
    assert "_owner_of_rows" not in {e[0].strip() for e in allowed}  # the wait is removed, not allowed


# --- on a GPU --------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("name", FIELD)
def test_each_field_case_measures_its_documented_counts(name):
    case = gallery.get(name)
    s = C.make_state("cuda", "smoke")
    a = report.measure_variant(case, "case", s)
    b = report.measure_variant(case, "fix", s)
    assert a["matches"] and b["matches"], (a, b)
    runs = F.LINE_RUNS.get(name, 1)
    assert a["debug_sites"] == {site: float(runs) for site in case.sites()}
    if name == "tensor_as_alpha":  # the library call's hidden .item() is blamed on the line that calls it
        assert [s.split(" ")[1] for s in a["debug_sites"]] == ["orthogonal_grad_alpha_tensor"]
    if name == "redundant_stream_sync":
        assert b["readback_syncs_per_step"] == 1.0 and a["readback_syncs_per_step"] == 1.0


@pytest.mark.cuda
def test_the_decode_step_has_three_sync_lines_and_the_ci_guard_fails_only_the_slow_one():
    from dspark_lab.guard import no_host_syncs

    s = C.make_state("cuda", "smoke")
    for fn, bad in ((D.decode_step_slow, {"decode_step_slow", "_owner_of_rows"}), (D.decode_step_fixed, set())):
        fn(s)
        with no_host_syncs(count=True, allow=D.CI_ALLOW) as g:
            fn(s)
        assert {v.site.split(" ")[1] for v in g.violations} == bad, g.summary()
        assert {v.site.split(" ")[1] for v in g.syncs if not v.allowed} == bad


def test_the_recording_script_runs_on_cpu_and_prints_its_table_last(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-m", "studies.field.record_field", "--cpu-dry-run", "--cases", "max_item_mirror",
                        "--steps", "2", "--rounds", "2"], cwd=root, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(root)})
    assert p.returncode == 0, p.stderr[-2000:]
    out = tmp_path / "field-cpu-dry-run" / "data"
    gal = json.loads(next((out / "gallery").glob("*-gallery-*.json")).read_text())
    assert [c["name"] for c in gal["cases"]] == ["max_item_mirror"] and set(gal["cases"][0]["change"]) >= {"pct", "ci_low", "ci_high"}
    inv = next((out / "investigation").glob("*-decode-step-*.json"))
    from dspark_lab.results.record import investigation

    assert investigation.load(inv)["before"]["pair"]["role"] == "before"
    assert (tmp_path / "field-cpu-dry-run.tar.gz").is_file()
    assert p.stdout.strip().splitlines()[-1].startswith("guard:")  # the summary table is printed last


def test_notebook04_prints_each_group_of_the_recorded_gallery_and_says_when_one_is_empty(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from helpers import NOTEBOOKS_DIR, errors, execute_notebook, kernel_env, printed

    nb = nbformat.read(NOTEBOOKS_DIR / "04_sync_gallery.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if c.cell_type == "code" and ("backend()" in c.source or "sync_cost_groups" in c.source)]
    assert len(nb.cells) == 2
    nb = execute_notebook(nb, kernel_env(tmp_path / "data", tmp_path / "out", DSPARK_GALLERY_DATA=str(GALLERY_RECORD)))
    assert errors(nb.cells) == []
    text = printed(nb.cells)
    groups = G.groups(report.load(GALLERY_RECORD))
    for group in (G.COSTS, G.FREE):
        n = int((groups["group"] == group).sum())
        assert (f"{group}: none in this recording" in text) == (n == 0), text
    assert all(f"  {r['case']} (" in text and r["why"] in text for r in groups.to_dict("records"))
