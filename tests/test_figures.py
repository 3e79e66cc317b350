"""Figures from recorded data hold the recorded numbers (trace values checked against the rows).

Input is fixed: the synthetic set of tests/helpers.py (clearly not GPU data: two runs, failed rows). The
committed runs under data/runs/ are checked explicitly in test_committed_runs_load_cleanly.
"""
from __future__ import annotations

import pytest

from dspark_lab.views import figures
from dspark_lab.views.figures.timelines import drawn_part
from dspark_lab.results.viewmodels import frames
from dspark_lab.results.record import schema
from dspark_lab.results.query.runs import ok_rows
from dspark_lab.results.facts.strategy_table import strategy_order
from dspark_lab import strategies
from dspark_lab.results import Runs
from dspark_lab.results.rules.stats import median_ci
from helpers import RUNS_DIR, a_point, synthetic_runs


def test_committed_runs_load_cleanly():
    """The committed H200 runs (schema version 1) load with no warning and every run has a label."""
    import warnings

    from dspark_lab.results.loading.load import DataWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        runs = Runs.load(RUNS_DIR)
    assert len(runs.labels()) == len(list(RUNS_DIR.glob("*.jsonl")))
    assert len(set(runs.labels().values())) == len(runs.labels())
    assert runs.headline().entries, "the committed runs hold the reference point"


def _xs(trace):
    x = trace.x
    if x and isinstance(x[0], (list, tuple)):  # multicategory: [[run labels], [strategies]]
        return list(zip(*x))
    return list(x)


# -- tests ----------------------------------------------------------------------------------------

def test_sync_counts_hold_recorded_values(data):
    rows = a_point(data[0])
    fig = figures.sync_counts(rows)
    names = {t.name: t for t in fig.data}
    for col, name in figures.SYNC_KINDS:
        tr = names[name]
        for s, y in zip(_xs(tr), tr.y):
            want = rows.loc[rows.strategy == s, col].median()
            assert y == pytest.approx(want), (col, s)
    tot = [t for t in fig.data if t.type == "scatter"][0]
    for s, txt in zip(_xs(tot), tot.text):
        assert txt == f"{rows.loc[rows.strategy == s, 'syncs_per_step'].median():.2f}"
    assert set(_xs(tot)) == set(rows.strategy)


def test_every_figure_states_its_fingerprint(data):
    rows, tl, _, _ = data
    pt = a_point(rows)
    r0 = pt.iloc[0]
    figs = [figures.sync_counts(pt), figures.step_breakdown(pt), figures.strategy_comparison(pt),
            figures.sweep(rows[rows.run_id == r0.run_id]),
            figures.timeline(tl[(tl.point_id == r0.point_id) & (tl.get("run_id", r0.run_id) == r0.run_id)], pt)]
    for f in figs:
        sub = f.layout.title.subtitle.text
        for part in (str(r0.gpu), str(r0.driver), str(r0.torch), str(r0.recorded_at)[:10]):
            assert part in sub, (f.layout.title.text, sub)


def test_step_breakdown_stacks_recorded_parts(data):
    rows = a_point(data[0])
    fig = figures.step_breakdown(rows)
    by = {t.name: t for t in fig.data}
    for col in schema.HOST_PARTS + ("gpu_busy_ms",):
        tr = by[figures.PART_NAMES[col]]
        for s, y in zip(_xs(tr), tr.y):
            assert y == pytest.approx(rows.loc[rows.strategy == s, col].median())
    # Host bars stack from 0 to the sum of the host parts; GPU idle parts add up to gpu_idle_ms.
    last_host = by[figures.PART_NAMES[schema.HOST_PARTS[-1]]]
    for s, b, y in zip(_xs(last_host), last_host.base, last_host.y):
        want = sum(rows.loc[rows.strategy == s, c].median() for c in schema.HOST_PARTS)
        assert b + y == pytest.approx(want)
    a, o = by[figures.PART_NAMES["gpu_idle_after_sync_ms"]], by[figures.PART_NAMES["gpu_idle_other_ms"]]
    for s, ya, yo in zip(_xs(a), a.y, o.y):
        assert ya + yo == pytest.approx(rows.loc[rows.strategy == s, "gpu_idle_ms"].median())
    marks = {t.name: t for t in fig.data if t.type == "scatter"}
    wall = marks["step time without profiler (median of trials)"]
    for s, y in zip(_xs(wall), wall.y):
        assert y == pytest.approx(rows.loc[rows.strategy == s, "step_ms"].median())
    prof = marks["profiled step wall time"]
    for s, y in zip(_xs(prof), prof.y):
        assert y == pytest.approx(rows.loc[rows.strategy == s, "profiled_step_ms"].median())


def test_strategy_comparison_medians_and_cis(data):
    rows = a_point(data[0])
    fig = figures.strategy_comparison(rows)
    (tr,) = fig.data
    for s, y, up, down in zip(tr.x, tr.y, tr.error_y.array, tr.error_y.arrayminus):
        med, lo, hi = median_ci(rows.loc[rows.strategy == s, "step_ms"].tolist())
        assert y == pytest.approx(med)
        assert y + up == pytest.approx(hi) and y - down == pytest.approx(lo)
    assert list(tr.x) == strategy_order(rows.strategy)


def test_two_runs_side_by_side():
    rows, tl, headers = synthetic_runs()
    runs = Runs(rows, tl, headers)
    pt = runs.nearest(ep_size=2, batch_size=8, gamma=4)
    assert pt.run_id.nunique() == 2
    fig = figures.strategy_comparison(pt)
    assert len(fig.data) == 2
    by_label = {v: k for k, v in runs.labels().items()}
    assert set(by_label) == {f"SYNTH-GPU-A · {runs.kind_name('run-a')} · 01-01 10:00",
                             f"SYNTH-GPU-B · {runs.kind_name('run-b')} · 01-02 10:00"}
    for tr in fig.data:
        rid = by_label[tr.name]
        for s, y in zip(tr.x, tr.y):
            assert y == pytest.approx(pt[(pt.run_id == rid) & (pt.strategy == s)].step_ms.median())
    bd = figures.step_breakdown(pt)
    assert isinstance(bd.data[0].x[0], (list, tuple))  # [run label, strategy] categories
    assert "SYNTH-GPU-A" in bd.layout.title.subtitle.text and "SYNTH-GPU-B" in bd.layout.title.subtitle.text


def test_sweep_lines_are_medians(data):
    rows = data[0]
    one = rows[rows.run_id == rows.run_id.iloc[0]]
    fig = figures.sweep(one)
    wl = one.workload.value_counts().index[0]
    ok = ok_rows(one)
    ok = ok[(ok.workload == wl) & (ok.model == ok.model.value_counts().index[0])]
    assert len(fig.data) > 0
    checked = 0
    g = 4 if 4 in set(ok.gamma) else int(ok.gamma.value_counts().index[0])  # the reference point's gamma
    ok = ok[ok.gamma == g]
    assert f"gamma {g}" in fig.layout.title.subtitle.text
    for tr in fig.data:
        s = tr.name  # one line per strategy at that gamma
        ep = int(tr.hovertemplate.split("EP ")[1].split(",")[0])
        for b, y in zip(tr.x, tr.y):
            want = ok[(ok.strategy == s) & (ok.ep_size == ep) & (ok.batch_size == b)].step_ms.median()
            assert y == pytest.approx(want)
            checked += 1
    assert checked == ok.groupby(["ep_size", "batch_size", "strategy"]).ngroups


def test_timeline_marks_each_sync_with_its_blocked_time(data):
    rows, tl, _, _ = data
    pt = a_point(rows)
    r0 = pt.iloc[0]
    t = tl[tl.point_id == r0.point_id]
    if "run_id" in t:
        t = t[t.run_id == r0.run_id]
    if t.empty:
        pytest.skip("no timeline recorded for this point")
    fig = figures.timeline(t, pt)
    marks = [tr for tr in fig.data if tr.name == "blocking sync (host blocked for)"][0]
    syncs = t[t.part.map(lambda p: drawn_part("host", p)) == "sync"].sort_values(["strategy", "start_ms"])
    assert len(marks.x) == len(syncs)
    want = sorted(f"sync {e - s:.2f} ms" for s, e in zip(syncs.start_ms, syncs.end_ms))
    assert sorted(marks.text) == want
    blocked = [tr for tr in fig.data if tr.name == figures.TIMELINE_NAMES["blocked"]][0]
    rec = t[t.part.map(lambda p: drawn_part("host", p)) == "blocked"]
    assert sum(blocked.x) == pytest.approx((rec.end_ms - rec.start_ms).sum())
    # GPU spans may be merged for drawing, but the busy time they cover is unchanged.
    kern = [tr for tr in fig.data if tr.name == figures.TIMELINE_NAMES["kernel"]][0]
    k = t[t.part.map(lambda p: drawn_part("gpu", p)) == "kernel"]
    assert sum(kern.x) <= (k.end_ms - k.start_ms).sum() + 1e-6
    assert min(kern.base) == pytest.approx(k.start_ms.min())


def test_failed_rows_are_left_out_and_named():
    rows, _, _ = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"),), eps=(2,), batches=(8,), gammas=(4,))
    bad = rows.strategy == "non_blocking"
    rows.loc[bad, "status"] = "failed"
    rows.loc[bad, "error"] = "CUDA error: out of memory"
    fig = figures.strategy_comparison(rows)
    assert "non_blocking" not in fig.data[0].x
    assert any("out of memory" in a.text for a in fig.layout.annotations)


def test_nearest_point_and_errors():
    rows, tl, headers = synthetic_runs()
    runs = Runs(rows, tl, headers)
    pt = runs.nearest(ep_size=2, batch_size=10, gamma=4, run_id="run-a")
    assert set(pt.batch_size) == {8} and set(pt.ep_size) == {2} and set(pt.run_id) == {"run-a"}
    both = runs.nearest(ep_size=2, batch_size=10, gamma=4)
    assert set(both.run_id) == {"run-a", "run-b"} and set(both.batch_size) == {8}
    with pytest.raises(ValueError, match="workload 'nope'"):
        runs.nearest(workload="nope")
    with pytest.raises(ValueError, match="nearest"):
        figures.sync_counts(rows[rows.run_id == "run-a"])


def test_static_export_renders(tmp_path, data):
    pytest.importorskip("kaleido")
    import plotly.io as pio

    fig = figures.step_breakdown(a_point(data[0]))
    try:
        figures.save_image(fig, tmp_path / "b.png", width=900, height=500)
    except Exception as e:  # kaleido needs a Chromium; say so rather than fail the figure tests
        pytest.skip(f"kaleido could not render here: {e}")
    assert pio.defaults.mathjax is None
    assert (tmp_path / "b.png").stat().st_size > 10_000


def test_report_is_standalone_and_states_its_data(data):
    from dspark_lab.views import report

    rows, tl, headers, _ = data
    runs = Runs(rows, tl, headers)
    doc = report.build_html(runs)
    assert doc.count("Plotly.newPlot") >= 4
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    assert js[:300] in doc and len(js) < len(doc) < 2 * len(js)  # plotly.js inline, exactly once
    assert "<script src=\"http" not in doc and "cdn.plot.ly" not in doc.split("</head>")[0]
    for fp in frames.fingerprints(rows).itertuples():
        assert fp.gpu in doc and fp.driver in doc and fp.torch in doc
    # The key comparison sentences carry compare()'s numbers for the featured point.
    pid = report.featured_points(runs)[0]
    pt = ok_rows(rows)[lambda d: d.point_id == pid]
    g = pt[pt.run_id == pt.run_id.iloc[0]]
    others = [s for s in strategy_order(g.strategy) if s != "device_direct"]
    c = Runs.compare(g, others[0], "device_direct")
    import html as _html
    assert _html.escape(c["verdict"]) in doc
    with pytest.raises(TypeError, match="results.Runs"):
        report.build_html(rows)


def test_sync_site_resolves_to_the_line_in_this_checkout():
    from dspark_lab.views import source_lines

    import inspect
    from dspark_lab import strategies as st

    src, start = inspect.getsourcelines(st.device_direct)
    line = start + next(i for i, l in enumerate(src) if "torch.tensor(" in l and "device=device" in l)
    for site in (f"dspark_lab/strategies.py({line}): device_direct", f"dspark_lab/strategies.py:{line} device_direct"):
        got = source_lines.sync_site_line(site)
        assert got["function"] == "device_direct" and got["line"] == line and "torch.tensor(" in got["code"], site
        assert got["note"] == ""
    assert source_lines.sync_site_line("") is None
    # a recorded line outside the function now: the function's return statement, which makes the tensor
    moved = source_lines.sync_site_line(f"dspark_lab/strategies.py({start - 3}): device_direct")
    assert moved["line"] == line and "device=device" in moved["code"] and f"recorded at line {start - 3}" in moved["note"]
    gone = source_lines.sync_site_line("dspark_lab/strategies.py:25 no_such_strategy")
    assert gone["code"] is None and "no_such_strategy is no longer in" in gone["note"]


def test_committed_sync_sites_show_the_line_that_makes_the_tensor():
    """The committed runs recorded `dspark_lab/strategies.py:25 device_direct`: the report shows
    device_direct's torch.tensor(..., device=device) line, wherever that line is now."""
    from dspark_lab.views import report

    runs = Runs.load(RUNS_DIR)
    sites = set(runs.ok["sync_site"].dropna())
    # Runs recorded before and after strategies.py's imports moved name line 25 and line 26.
    assert {s for s in sites if "strategies.py" in s} == {"dspark_lab/strategies.py:25 device_direct",
                                                          "dspark_lab/strategies.py:26 device_direct"}
    table = report.sync_sites(runs.reference())
    code = set(table.loc[table.strategy == "device_direct", "code"])
    want = "return torch.tensor(num_tokens, dtype=torch.int32, device=device)"
    assert code == {want}


@pytest.mark.parametrize("shift", [-1, 2, 4])
def test_the_committed_site_survives_an_import_moved_in_strategies_py(tmp_path, shift):
    """This checkout's strategies.py with its lines moved (an import moved to the top adds 2): the
    committed site still shows device_direct's torch.tensor(..., device=device) line."""
    from dspark_lab.results.record.paths import PACKAGE_DIR
    from dspark_lab.views import source_lines

    src = (PACKAGE_DIR / "strategies.py").read_text().splitlines(keepends=True)
    first_import = next(i for i, t in enumerate(src) if t.startswith("from __future__"))
    moved = src[:first_import + 1] + ["\n"] * shift + src[first_import + 1:] if shift > 0 else \
        src[:first_import + 1] + src[first_import + 1 - shift:]  # shift < 0: blank lines after it taken out
    assert shift > 0 or all(not t.strip() for t in src[first_import + 1:first_import + 1 - shift])
    (tmp_path / "dspark_lab").mkdir()
    (tmp_path / "dspark_lab" / "strategies.py").write_text("".join(moved))
    want = "return torch.tensor(num_tokens, dtype=torch.int32, device=device)"
    base = next(i + 1 for i, t in enumerate(src) if t.strip() == want)  # device_direct's line in this checkout
    got = source_lines.sync_site_line("dspark_lab/strategies.py:25 device_direct", tmp_path / "dspark_lab")
    assert got["code"] == want and got["line"] == base + shift
    assert ("recorded at line 25" in got["note"]) == (base + shift != 25)  # a moved line is said to have moved


STRATEGIES_MOVED = '''"""Strategies, with an import block added above them: every line moved down by {shift}."""
{pad}
import torch


def device_direct(num_tokens, device, parallel, *, buffer=None):
    """`torch.tensor(n, device=...)`: a pageable host tensor copied with a stream sync.

    The form PR #34782 found costing 21 syncs.
    """
    return torch.tensor(num_tokens, dtype=torch.int32, device=device)


def on_demand(num_tokens, device, parallel, *, buffer=None):
    """None unless a consumer reads it."""
    if not parallel:
        return None
    return torch.tensor(num_tokens, dtype=torch.int32).to(device, non_blocking=True)
'''


@pytest.mark.parametrize("shift", [0, 1, 2, 5])
def test_a_recorded_site_follows_its_function_when_the_source_moves(tmp_path, shift):
    """Sites recorded before the source moved resolve by function: to the recorded line while it is
    still in the function's code, else to the function's return statement (never its docstring)."""
    from dspark_lab.views import source_lines

    pkg = tmp_path / "dspark_lab"
    pkg.mkdir()
    (pkg / "strategies.py").write_text(STRATEGIES_MOVED.format(shift=shift, pad="\n" * shift))
    lines = (pkg / "strategies.py").read_text().splitlines()
    ret = next(i for i, t in enumerate(lines, 1) if "device=device)" in t)
    unmoved = STRATEGIES_MOVED.format(shift=0, pad="").splitlines()
    recorded = next(i for i, t in enumerate(unmoved, 1) if "device=device)" in t)  # where the run saw it
    assert ret == recorded + shift
    got = source_lines.sync_site_line(f"/elsewhere/dspark_lab/strategies.py:{recorded} device_direct", pkg)
    assert got["line"] == ret and got["code"] == "return torch.tensor(num_tokens, dtype=torch.int32, device=device)"
    assert (got["note"] == "") == (shift == 0), got["note"]
    # a line still inside the function's code is taken as recorded (here on_demand's `if`)
    if_line = next(i for i, t in enumerate(lines, 1) if "if not parallel" in t)
    got = source_lines.sync_site_line(f"dspark_lab/strategies.py({if_line}): on_demand", pkg)
    assert got["line"] == if_line and got["code"] == "if not parallel:" and got["note"] == ""
    # the def line or the docstring is not code that synced: the return statement that makes a tensor
    doc_line = next(i for i, t in enumerate(lines, 1) if "None unless" in t)
    got = source_lines.sync_site_line(f"dspark_lab/strategies.py({doc_line}): on_demand", pkg)
    assert "non_blocking=True" in got["code"] and got["line"] == len(lines)


def test_disturbed_trials_are_left_out_of_the_figures_as_in_the_summaries():
    rows, tl, headers = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"),), eps=(2,), batches=(8,), gammas=(4,))
    rows["disturbed"] = None
    first_dd = (rows.strategy == "device_direct") & (rows.trial == 0)
    rows.loc[first_dd, "disturbed"] = True
    rows.loc[first_dd, "step_ms"] = 100.0  # a disturbed trial far off: it must not move the median
    fig = figures.strategy_comparison(rows)
    summ = Runs(rows, tl, headers).summary(rows).set_index("strategy")
    for s, y in zip(fig.data[0].x, fig.data[0].y):
        assert y == pytest.approx(summ.loc[s, "median_ms"])
    assert summ.loc["device_direct", "disturbed_left_out"] == 1 and summ.loc["device_direct", "trials"] == 2
    assert any("1 disturbed trials left out" in a.text for a in fig.layout.annotations)
