"""docs/lint.md is what scripts/lint_docs.py writes from the code; `dspark-lab lint` over the gallery
finds every `.item()` / `.tolist()` / `nonzero` / `torch.tensor(device=)` line the gallery documents as a
runtime sync, and at most one line in each fix, each with its reason; the join of static findings
with runtime sites marks who found each line and why the other could not; torch._dynamo.explain
as a second witness on CPU."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from dspark_lab.gallery import cases as C
from dspark_lab.gallery import registry
from dspark_lab.lint import lint_paths
from dspark_lab.lint.explain import why_not_found
from dspark_lab.results.analyses import lint_join
from scripts import lint_docs

TARGET_SHAPES = re.compile(r"\.item\(\)|\.tolist\(\)|nonzero|torch\.tensor\(.*device=")


def test_docs_lint_md_is_current():
    assert lint_docs.DOC.read_text() == lint_docs.render(), "run: python -m scripts.lint_docs"


def test_every_documented_item_tolist_nonzero_and_tensor_device_line_is_found():
    rows = lint_docs.pitfall_rows()
    assert len(rows) == sum(len(c.sites()) for c in registry.CASES.values())
    targeted = [r for r in rows if TARGET_SHAPES.search(r[2])]
    assert targeted and all(r[3].startswith("yes") for r in targeted), targeted
    # A line lint misses carries the reason it could not know.
    assert all(r[4] for r in rows if r[3] == "no")


def test_each_fix_has_at_most_one_finding_and_each_says_why():
    per_fix: dict = {}
    for case, fix, finding, why in lint_docs.fix_rows():
        if finding != "none":
            per_fix.setdefault(case, []).append(why)
    assert all(len(v) <= 1 for v in per_fix.values()), per_fix
    assert all(w.startswith("by design") for v in per_fix.values() for w in v), per_fix


def test_a_fix_has_at_most_one_finding_and_each_is_one_its_case_allows_by_design():
    rows = [r for r in lint_docs.fix_rows() if r[2] != "none"]
    assert rows and len({r[0] for r in rows}) == len(rows)  # at most one per fix
    for row in rows:
        assert any(a in row[2] for a in registry.get(row[0]).allow), row


# --- the join ---------------------------------------------------------------------------------------
def gallery_findings():
    return [f.to_dict() for f in lint_paths([inspect.getsourcefile(C)])]


def explain(short_path, line):
    return why_not_found(open(inspect.getsourcefile(C)).read(), line) if short_path == "gallery/cases.py" else None


def test_a_line_both_witnesses_saw_carries_the_runtime_cost_and_the_fix():
    site = {"site": registry.get("scalar_item").sites()[0], "exact": True, "per_step": 1.0,
            "host_blocked_ms": 0.8, "gpu_idle_ms": 0.6, "code": None}
    [row] = [r for r in lint_join.join(gallery_findings(), [site], explain=explain) if r["found_by"] != "static"]
    assert (row["found_by"], row["rule"], row["gpu_idle_ms"]) == ("both", "item", 0.6) and row["fix"]


def test_a_runtime_site_lint_missed_says_what_the_source_does_not_show():
    kept = registry.get("boolean_mask").sites()[0]
    rows = lint_join.join(gallery_findings(), [{"site": kept, "exact": True, "per_step": 1.0,
                                                "host_blocked_ms": 0.1, "gpu_idle_ms": 0.1}], explain=explain)
    [row] = [r for r in rows if r["site"] == kept]
    assert row["found_by"] == "runtime" and "dtype is not in the source" in row["why_only_one"]


def test_a_function_level_site_joins_the_finding_in_that_function():
    from dspark_lab.gallery import cases

    # the trace names the def line of a blocking copy
    site = f"gallery/cases.py({cases.seq_lens_to_pageable.__code__.co_firstlineno}): seq_lens_to_pageable"
    rows = lint_join.join(gallery_findings(), [{"site": site, "exact": False, "per_step": 1.0,
                                                "host_blocked_ms": 0.5, "gpu_idle_ms": 0.4}])
    assert [r["rule"] for r in rows if r["found_by"] == "both"] == ["unpinned_non_blocking"]


def test_static_only_lines_say_why_the_runtime_did_not_see_them():
    rows = lint_join.join(gallery_findings(), [])
    assert rows and all(r["found_by"] == "static" and lint_join.NOT_RUN in r["why_only_one"] for r in rows)
    text = "\n".join(lint_join.text_lines(rows))
    from dspark_lab.gallery import cases

    src = Path(cases.__file__).read_text().splitlines()
    line = next(i + 1 for i, ln in enumerate(src) if "torch.sum(s.seq_lens).item()" in ln)
    assert f"static  gallery/cases.py:{line} seq_lens_sum_item [item]" in text


def test_a_runtime_site_in_a_file_not_linted_says_so():
    [row] = lint_join.join([], [{"site": "lib/other.py:9 f", "exact": True, "per_step": 1.0,
                                 "host_blocked_ms": 0.1, "gpu_idle_ms": 0.0}])
    assert row["found_by"] == "runtime" and "not linted" in row["why_only_one"]


# --- torch._dynamo.explain, the second witness on CPU ----------------------------------------------
def test_dynamo_sees_the_item_line_on_cpu_and_no_break_for_a_pageable_copy():
    graph_breaks = pytest.importorskip("dspark_lab.measure.graph_breaks").graph_breaks
    state = C.make_state("cpu")
    try:
        item = graph_breaks(C.seq_lens_sum_item, state)
        copy = graph_breaks(C.seq_lens_to_pageable, state)
    except RuntimeError as e:
        pytest.skip(f"dynamo cannot trace here: {e}")
    line = int(registry.get("scalar_item").sites()[0].split(" ")[0].rsplit(":", 1)[1])
    assert [(r["file"].endswith("gallery/cases.py"), r["line"]) for r in item] == [(True, line)]
    assert copy == []
