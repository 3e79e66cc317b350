"""A sync can't be missed silently: sync debug mode's count beside the trace's,
a flag where they disagree, and NaN + a note (never 0) where no CUDA device can be measured."""
import inspect
import json
import math
import traceback
import warnings

import pandas as pd
import pytest
import torch

from dspark_lab import strategies
from dspark_lab.views import figures
from dspark_lab.results.record import schema
from dspark_lab.results.viewmodels.point_view import point_view
from dspark_lab.config import LabConfig
from dspark_lab.measure import syncs
from dspark_lab.run.point import measure_point
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record.store import RunWriter

NEW = ("debug_syncs_per_step", "sync_count_mismatch", "sync_note")


# -- the two counts, compared ---------------------------------------------------------------------
def test_new_columns_are_trace_columns_of_every_row():
    assert set(NEW) <= set(schema.TRACE_COLUMNS) and set(NEW) <= set(schema.ROW_COLUMNS)
    assert set(syncs.SYNC_KIND_COLUMNS.values()) <= set(syncs.SYNC_COUNT_COLUMNS)


def test_cross_check_agreeing_counts_are_not_flagged():
    out = syncs.cross_check({"syncs_per_step": 1.0}, {"dspark_lab/strategies.py:25 device_direct": 1.0})
    assert out == {"debug_syncs_per_step": 1.0, "sync_count_mismatch": False, "sync_note": ""}
    assert syncs.cross_check({"syncs_per_step": 0.0}, {}) == {
        "debug_syncs_per_step": 0.0, "sync_count_mismatch": False, "sync_note": ""}


def _line_of(fn, text: str) -> int:
    """The file line of the first line of `fn` holding `text` (computed, never a literal)."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_a_sync_site_names_the_strategys_own_line(monkeypatch):
    """Live attribution (sync debug mode's stack): the site of device_direct's copy is its
    `torch.tensor(..., device=...)` line in dspark_lab/strategies.py, wherever that line sits."""
    seen = []

    def tensor(*a, **kw):  # stands in for torch's synchronizing call: the stack it is called from
        seen.append(syncs.site_of(traceback.extract_stack()[:-1]))
        return torch.zeros((), dtype=torch.int32)

    monkeypatch.setattr(strategies.torch, "tensor", tensor)
    strategies.device_direct(7, "cpu", None)
    line = _line_of(strategies.device_direct, "return torch.tensor(")
    assert seen == [f"dspark_lab/strategies.py:{line} device_direct"]
    assert syncs.site_of(traceback.StackSummary.from_list([("/x/torch/cuda/__init__.py", 1, "sync", "")])) == \
        syncs.UNATTRIBUTED_SITE


@pytest.mark.parametrize("traced, sites, debug", [
    (0.0, {"a.py:1 f": 1.0}, 1.0),  # a sync the trace missed
    (2.0, {"a.py:1 f": 1.0}, 1.0),  # one debug mode missed
    (1.0, {"a.py:1 f": 1.0, "b.py:2 g": 1 / 3}, 4 / 3),  # sites add up; a sync in some steps counts
])
def test_cross_check_flags_any_disagreement_with_both_counts(traced, sites, debug):
    out = syncs.cross_check({"syncs_per_step": traced}, sites)
    assert out["debug_syncs_per_step"] == pytest.approx(debug) and out["sync_count_mismatch"] is True
    assert out["sync_note"] == f"trace counts {traced:.2f} syncs per step, sync debug mode {debug:.2f}"


def test_without_cuda_makes_every_sync_count_nan_with_the_note():
    counts = {c: 0.0 for c in syncs.SYNC_COUNT_COLUMNS} | {"h2d_pageable_per_step": 0.0, "sync_site": ""}
    out = syncs.without_cuda(counts)
    assert all(math.isnan(out[c]) for c in syncs.SYNC_COUNT_COLUMNS)
    assert out["sync_note"] == syncs.NO_CUDA_NOTE == "not measurable without CUDA"
    assert out["sync_count_mismatch"] is None and out["h2d_pageable_per_step"] == 0.0
    assert counts["syncs_per_step"] == 0.0  # the input is not changed


def test_debug_mode_counts_every_synchronizing_warning(monkeypatch):
    """The counting path of sync_debug_sites, driven on CPU by the warning torch would raise."""
    mode = {"now": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["now"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda m: mode.update(now=m))

    def synchronizing_op():
        warnings.warn("called a synchronizing CUDA operation", UserWarning)

    # A frame whose file looks like torch's: skipped for the site, as torch's own frames are.
    torch_like = {}
    exec(compile("def inner(op):\n    op()\n", "/x/torch/fake.py", "exec"), torch_like)

    with syncs.sync_debug_sites() as sites:
        assert mode["now"] == "warn"
        synchronizing_op()
        torch_like["inner"](synchronizing_op)
        with pytest.warns(UserWarning, match="unrelated"):
            warnings.warn("an unrelated warning", UserWarning)  # not a sync: not counted
    assert mode["now"] == 0  # restored
    assert sum(sites.values()) == 2
    assert all(k.startswith("tests/test_sync_crosscheck.py:") for k in sites), sites


def test_a_sync_with_no_frame_outside_torch_is_still_counted(monkeypatch):
    import traceback

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda m: None)
    only_torch = [traceback.FrameSummary("/x/torch/a.py", 1, "f"), traceback.FrameSummary("/x/torch/b.py", 2, "g"),
                  traceback.FrameSummary("/x/dspark_lab/measure/syncs.py", 3, "show")]
    monkeypatch.setattr(syncs.traceback, "extract_stack", lambda: only_torch)
    with syncs.sync_debug_sites() as sites:
        warnings.warn("called a synchronizing CUDA operation", UserWarning)
    assert dict(sites) == {syncs.UNATTRIBUTED_SITE: 1}


def test_debug_sites_per_step_is_zero_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    calls = []
    assert syncs.debug_sites_per_step(lambda: calls.append(1), steps=3) == {} and len(calls) == 3


# -- rows on CPU: NaN + note, through the store and into the figure ------------------------------
@pytest.fixture(scope="module")
def cpu_rows():
    if torch.cuda.is_available():
        pytest.skip("the CPU path")
    cfg = LabConfig(model="tiny", workload="tiny", device="cpu", steps=2, warmup=1, trials=2, batch_size=4)
    return pd.DataFrame(measure_point(cfg, ["device_direct", "non_blocking"], profile_steps=3).rows)


def test_cpu_rows_hold_nan_and_the_note(cpu_rows):
    for c in syncs.SYNC_COUNT_COLUMNS:
        assert cpu_rows[c].isna().all(), c
    assert (cpu_rows["sync_note"] == "not measurable without CUDA").all()
    assert cpu_rows["sync_count_mismatch"].isna().all()


def _write(tmp_path, rows: pd.DataFrame):
    fp = {"gpu": "none", "driver": "", "cuda": "", "torch": torch.__version__, "python": "3", "platform": "x"}
    w = RunWriter.create(tmp_path / "runs", fingerprint=fp, sweep={}, run_kind="single_point")
    pid = rows["point_id"].iloc[0]
    w.write_point(pid, rows.to_dict("records"))
    w.close()
    return w.path


def test_cpu_rows_survive_the_store_as_nan_never_zero(tmp_path, cpu_rows):
    path = _write(tmp_path, cpu_rows)
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["syncs_per_step"] is None for r in stored if r["kind"] == "row")  # strict JSON: null
    back = run_load.load(path).rows
    agg = point_view(back).per_strategy(list(syncs.SYNC_COUNT_COLUMNS))
    assert agg[list(syncs.SYNC_COUNT_COLUMNS)].isna().all().all()
    assert (back["sync_note"] == "not measurable without CUDA").all()


def _text(fig) -> str:
    return " ".join(a.text for a in fig.layout.annotations)


def _marker(fig):
    return next(t for t in fig.data if t.name == "sync counts disagree")


def test_sync_counts_figure_on_cpu_rows_draws_no_count_and_shows_the_note(cpu_rows):
    fig = figures.sync_counts(cpu_rows)
    for t in fig.data:
        if t.type == "bar":
            assert all(y is None or math.isnan(y) for y in t.y), t.name
    total = next(t for t in fig.data if t.name == "total (syncs_per_step)")
    assert list(total.text) == ["", ""]
    assert "syncs of device_direct, non_blocking: not measurable without CUDA" in _text(fig)
    assert len(_marker(fig).x) == 0


def test_sync_counts_figure_marks_only_the_strategy_whose_counts_disagree(cpu_rows):
    rows = cpu_rows.copy()
    for s, traced, sites in (("device_direct", 1.0, {"s.py:1 f": 1.0}), ("non_blocking", 0.0, {"s.py:2 g": 1.0})):
        m = rows.strategy == s
        counts = {c: 0.0 for c in syncs.SYNC_COUNT_COLUMNS} | {"syncs_per_step": traced, "stream_syncs_per_step": traced}
        for k, v in (counts | syncs.cross_check(counts, sites)).items():
            rows[k] = rows[k].astype(object)
            rows.loc[m, k] = v
    fig = figures.sync_counts(rows)
    mark = _marker(fig)
    assert list(mark.x) == ["non_blocking"] and list(mark.customdata[0]) == [0.0, 1.0]
    note = _text(fig)
    assert "syncs of non_blocking: trace counts 0.00 syncs per step, sync debug mode 1.00" in note
    assert "device_direct" not in note and "without CUDA" not in note


def test_an_old_run_file_without_the_new_columns_loads_as_nan_and_unflagged(tmp_path, cpu_rows):
    """A run recorded before these columns: its rows lack the keys entirely."""
    rows = cpu_rows.drop(columns=list(NEW)).copy()
    rows["syncs_per_step"] = rows["stream_syncs_per_step"] = 1.0
    for c in ("device_syncs_per_step", "event_syncs_per_step", "sync_memcpy_per_step", "readback_syncs_per_step"):
        rows[c] = 0.0
    path = _write(tmp_path, rows)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for r in lines:  # write_point fills every schema column: strip the new ones as an old writer would
        for c in NEW:
            r.pop(c, None)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    back = run_load.load(path).rows
    assert back["debug_syncs_per_step"].isna().all() and back["sync_count_mismatch"].isna().all()
    fig = figures.sync_counts(back)
    assert len(_marker(fig).x) == 0 and "syncs of" not in _text(fig)
    total = next(t for t in fig.data if t.name == "total (syncs_per_step)")
    assert list(total.text) == ["1.00", "1.00"]


def test_cli_summary_shows_an_unmeasured_count_as_n_a():
    from dspark_lab.cli.summary import _fmt_num

    assert (_fmt_num(float("nan")), _fmt_num(1.0), _fmt_num(None)) == ("n/a", "1.0", "?")
