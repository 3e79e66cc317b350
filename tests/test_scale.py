"""Many recorded runs: the report, the recorded panel and the loader's cache at 1, 20 and 100 runs.

Run files are made here (small synthetic runs in the store's format, copied with their own run ids,
names, start times and one of three machines), never taken from data/runs.
"""
from __future__ import annotations

import html
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from dspark_lab.views import figures, report
from dspark_lab.results import Runs
from dspark_lab.results.loading import cache as run_cache
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.rules import noise
from dspark_lab.results.loading.load import DataWarning
from dspark_lab.results.viewmodels.backend import ALL_RUNS, MAX_RUN_OPTIONS, RecordedBackend
from dspark_lab.results.query.runs import MAX_COMPARED
from helpers import write_synthetic_runs

MACHINES = ("SYNTH-GPU-A", "SYNTH-GPU-B", "SYNTH-GPU-C")
PAST = time.time() - 3600  # file times an hour back: not "racy" (results.loading.cache.racy), so cacheable


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """One small run file (two runs of the synthetic set, the first kept)."""
    folder = write_synthetic_runs(tmp_path_factory.mktemp("template"))
    return sorted((folder / "runs").glob("*.jsonl"))[0]


def make_runs(template: Path, folder: Path, n: int) -> list[dict]:
    """n copies of the template, each its own run: name run-000.., one of MACHINES in turn, an hour apart."""
    head, _, rest = template.read_bytes().partition(b"\n")
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(n):
        h = json.loads(head)
        h.update(run_id=f"r{i:03d}", name=f"run-{i:03d}", created_at=f"2026-02-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00")
        h["fingerprint"] = {**h["fingerprint"], "gpu": MACHINES[i % len(MACHINES)]}
        p = folder / f"r{i:03d}.jsonl"
        p.write_bytes(json.dumps(h).encode() + b"\n" + rest)
        os.utime(p, (PAST, PAST))
        made.append({"run_id": h["run_id"], "name": h["name"], "gpu": h["fingerprint"]["gpu"], "at": h["created_at"]})
    return made


@pytest.fixture(scope="module")
def many(template, tmp_path_factory):
    """n -> (Runs, the runs made), for 1, 20 and 100 runs."""
    out = {}
    for n in (1, 20, 100):
        folder = tmp_path_factory.mktemp(f"runs{n}")
        made = make_runs(template, folder, n)
        out[n] = (Runs.load(folder), made)
    return out


def expected_default(made: list[dict], k: int = MAX_COMPARED) -> list[str]:
    """The latest run of each machine (newest first), then the newest others: at most k."""
    newest = sorted(made, key=lambda m: m["at"], reverse=True)
    latest = list({m["gpu"]: m["run_id"] for m in reversed(newest)}.values())[::-1]
    latest = sorted(latest, key=lambda r: next(m["at"] for m in made if m["run_id"] == r), reverse=True)
    return (latest + [m["run_id"] for m in newest if m["run_id"] not in latest])[:k]


def split_report(doc: str) -> tuple[str, str]:
    """(what the report draws and says about the compared runs, the all-runs table). The headline
    (over every run, a block a machine) and the machines table come before both."""
    a, b = doc.split("id='all-runs'", 1)
    return a.split("<h2>Runs compared</h2>", 1)[1], b


# -- the report ------------------------------------------------------------------------------------

def test_report_draws_the_chosen_runs_and_lists_the_rest(many):
    from plotly.offline import get_plotlyjs

    js_head = get_plotlyjs()[:300]
    plots = {}
    for n, (runs, made) in many.items():
        assert len(runs.run_ids()) == n
        chosen = report.chosen_runs(runs)
        assert chosen == expected_default(made)  # latest per machine first, then the newest
        doc = report.build_html(runs)
        assert doc.count(js_head) == 1  # plotly.js inline, exactly once
        drawn, table = split_report(doc)
        names = {m["run_id"]: m["name"] for m in made}
        for rid, name in names.items():
            assert name in table  # every run is in the all-runs table
            assert (name in drawn) == (rid in chosen), (n, name)  # only the chosen ones are drawn
        plots[n] = doc.count("Plotly.newPlot")
    # The figures do not grow with the runs in the folder: 20 and 100 runs draw the same count.
    assert plots[20] == plots[100] > plots[1]


def test_report_compares_the_runs_a_selection_chose(many):
    runs, made = many[100]
    sel = runs.select(gpu="synth-gpu-b", since="2026-02-02", until="2026-02-03")
    want = [m for m in made if m["gpu"] == "SYNTH-GPU-B" and "2026-02-02" <= m["at"][:10] <= "2026-02-03"]
    assert set(sel.run_ids()) == {m["run_id"] for m in want}
    doc = report.build_html(runs, compare=sel, max_compared=2)
    drawn, _ = split_report(doc)
    newest = [m["name"] for m in sorted(want, key=lambda m: m["at"], reverse=True)]
    assert all(name in drawn for name in newest[:2])
    assert not any(name in drawn for name in newest[2:])
    assert not any(m["name"] in drawn for m in made if m not in want)


def test_selection_filters_name_the_field_when_nothing_matches(many):
    runs, made = many[20]
    assert runs.select(name="run-007").run_ids() == ["r007"]
    assert runs.select(latest_per_machine=True).run_ids() == sorted(expected_default(made, 3))
    assert runs.select(gpu="SYNTH-GPU-A", limit=2).run_ids() == ["r015", "r018"]
    with pytest.raises(ValueError, match="gpu='H100' matches no recorded run; recorded gpu: SYNTH-GPU-A"):
        runs.select(gpu="H100")
    with pytest.raises(ValueError, match="since must be a date"):
        runs.select(since="last week")
    with pytest.raises(ValueError, match="no recorded run matches gpu='SYNTH-GPU-A', name='run-001' together"):
        runs.select(gpu="SYNTH-GPU-A", name="run-001")


def test_sweep_draws_at_most_four_runs_and_says_how_many_were_left_out(many):
    runs, _ = many[20]
    fig = figures.sweep(runs.ok)
    facets = {a.text.split(" · EP ")[0] for a in fig.layout.annotations if a.text and a.text.startswith("run-")}
    assert sorted(facets) == ["run-016", "run-017", "run-018", "run-019"]  # the most recent four
    note = [a.text for a in fig.layout.annotations if getattr(a, "name", None) == "dspark-note"]
    assert note and "16 more run(s) not drawn" in note[0]
    with pytest.raises(ValueError, match="max_runs must be a positive integer"):
        figures.sweep(runs.ok, max_runs=0)


def test_cli_report_takes_run_filters(many, tmp_path, capsys):
    from dspark_lab.cli import main as cli

    runs, made = many[20]
    folder = Path(runs.headers[0]["path"]).parent
    out = tmp_path / "r.html"
    assert cli.main(["report", str(folder), "-o", str(out), "--gpu", "SYNTH-GPU-C", "--compare", "2"]) == 0
    drawn, _ = split_report(out.read_text())
    c_runs = sorted((m for m in made if m["gpu"] == "SYNTH-GPU-C"), key=lambda m: m["at"], reverse=True)
    assert [m["name"] in drawn for m in c_runs] == [True, True] + [False] * (len(c_runs) - 2)
    with pytest.raises(SystemExit):
        cli.main(["report", str(folder), "-o", str(out), "--torch", "9.9"])
    assert "torch='9.9' matches no recorded run" in capsys.readouterr().err


# -- the recorded panel ----------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 20, 100])
def test_recorded_panel_offers_a_bounded_dropdown_and_draws_the_selected_runs(many, n):
    pytest.importorskip("ipywidgets")
    from dspark_lab.views import panel

    runs, made = many[n]
    p = panel.Panel(RecordedBackend(runs), debounce_s=0)
    opts = p.controls["run"].options
    assert len(opts) == 1 + min(n, MAX_RUN_OPTIONS) and opts[0][1] == ALL_RUNS
    labels = runs.labels()
    p.set(run=ALL_RUNS)
    side = expected_default(made)
    drawn = [tr.name for tr in p.figs["comparison"].data if tr.type == "bar"]
    assert sorted(drawn) == sorted(labels[r] for r in side)  # the first four of the selection, side by side
    if n >= 20:
        p.filter_runs("gpu=SYNTH-GPU-B run-01")  # a key and a bare word: B runs named run-01x
        want = [m for m in made if m["gpu"] == "SYNTH-GPU-B" and m["name"].startswith("run-01")]
        listed = [rid for _, rid in p.controls["run"].options[1:]]
        assert set(listed) == {m["run_id"] for m in want}
        assert p.controls["run"].value == ALL_RUNS and p.error.value == ""
        drawn = [tr.name for tr in p.figs["comparison"].data if tr.type == "bar"]
        assert set(drawn) <= {m["name"] for m in want} and 0 < len(drawn) <= MAX_COMPARED
        p.filter_runs("flavour=mint")
        assert "run filter key 'flavour' is not known; allowed: gpu" in html.unescape(p.error.value)
        assert [rid for _, rid in p.controls["run"].options[1:]] == listed  # the selection stays
        p.filter_runs("")
        assert len(p.controls["run"].options) == 1 + MAX_RUN_OPTIONS


def test_recorded_backend_reads_timelines_only_for_the_runs_it_draws(many):
    from dspark_lab.views import panel

    runs, _ = many[100]
    fresh = Runs.load(Path(runs.headers[0]["path"]).parent)
    b = RecordedBackend(fresh)
    assert fresh._source.read_runs() == []
    d = b.get({**b.defaults(), "run": ALL_RUNS})
    assert set(fresh._source.read_runs()) == set(d.rows["run_id"]) == set(b.side_by_side_runs())
    assert not d.timelines.empty and set(d.timelines["run_id"]) == set(b.side_by_side_runs())


# -- the cache -------------------------------------------------------------------------------------

@pytest.fixture
def one_run(template, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("DSPARK_CACHE", str(cache_dir))
    folder = tmp_path / "data" / "runs"
    make_runs(template, folder, 1)
    return folder, cache_dir


def count_parses(monkeypatch) -> list:
    calls = []
    real = run_load.parse_file
    monkeypatch.setattr(run_load, "parse_file", lambda path: calls.append(path) or real(path))
    return calls


def test_cache_is_used_when_the_file_is_unchanged_and_gives_the_same_runs(one_run, monkeypatch):
    folder, cache_dir = one_run
    calls = count_parses(monkeypatch)
    first = Runs.load(folder)
    assert len(calls) == 1 and len(list(cache_dir.glob("*.rows.parquet"))) == 1
    assert len(list(cache_dir.glob("*.timelines.parquet"))) == len(list(cache_dir.glob("bundle-*.parquet"))) == 1
    second = Runs.load(folder)
    assert len(calls) == 1  # read from the cache (the bundle)
    next(cache_dir.glob("bundle-*.parquet")).unlink()
    third = Runs.load(folder)
    assert len(calls) == 1  # read from the file's own entry
    pd.testing.assert_frame_equal(second.rows, third.rows)
    plain = Runs.load(folder, cache=False)
    pd.testing.assert_frame_equal(second.rows, plain.rows)
    pd.testing.assert_frame_equal(second.timelines, plain.timelines)
    pd.testing.assert_frame_equal(first.rows, plain.rows)


def test_a_changed_file_is_parsed_again(one_run, monkeypatch):
    folder, _ = one_run
    path = next(folder.glob("*.jsonl"))
    calls = count_parses(monkeypatch)
    before = Runs.load(folder)
    # Drop the last point's records (rows, timelines, commit): a different file, same name.
    lines = path.read_bytes().splitlines(keepends=True)
    last_pid = json.loads(lines[-1])["point_id"]
    path.write_bytes(b"".join(l for l in lines if json.loads(l).get("point_id") != last_pid))
    os.utime(path, (PAST + 60, PAST + 60))
    after = Runs.load(folder)
    assert len(calls) == 2
    assert set(before.rows["point_id"]) - set(after.rows["point_id"]) == {last_pid}


def test_a_file_written_just_now_is_not_cached(one_run, monkeypatch):
    folder, cache_dir = one_run
    written = next(folder.glob("*.jsonl")).stat().st_mtime
    # a fake clock (results.loading.cache reads it): "now" is just after the write, then long after it
    monkeypatch.setattr(run_cache, "_clock", lambda: written + run_cache.RACY_S / 2)
    calls = count_parses(monkeypatch)
    Runs.load(folder)
    Runs.load(folder)
    assert len(calls) == 2 and not list(cache_dir.glob("*.parquet"))  # its timestamp may not show a change to come
    monkeypatch.setattr(run_cache, "_clock", lambda: written + run_cache.RACY_S * 2)
    Runs.load(folder)
    Runs.load(folder)
    assert len(calls) == 3 and list(cache_dir.glob("*.rows.parquet"))  # settled: parsed once more, then cached


def count_verdicts(monkeypatch) -> list:
    """Every time the disturbed-trial rule judges rows (results.rules.noise.mark_disturbed): their count."""
    calls = []
    real = noise.mark_disturbed
    monkeypatch.setattr(noise, "mark_disturbed", lambda rows: calls.append(len(rows)) or real(rows))
    return calls


def test_the_verdict_is_formed_once_per_run_file_and_read_by_every_view(template, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "data" / "runs"
    make_runs(template, folder, 3)
    calls = count_verdicts(monkeypatch)
    runs = Runs.load(folder)
    assert len(calls) == 3 and sum(calls) == len(runs.rows)  # each file once, when parsed
    runs.headline()
    runs.table()
    runs.run_disturbance()
    chosen = runs.select(gpu=MACHINES[0])
    chosen.headline()
    ref = runs.reference(run_id=runs.run_ids()[0])
    noise.headline(ref)
    noise.disturbed_counts(runs.rows)
    RecordedBackend(runs).get(RecordedBackend(runs).defaults())
    assert len(calls) == 3  # every view read the verdict the load set
    Runs.load(folder).headline()
    assert len(calls) == 3  # a warm load reads the verdicts from the cache
    noise.headline(ref.drop(columns="disturbed"))  # rows without a verdict are judged when asked
    assert len(calls) == 4


def test_a_new_rule_version_rebuilds_the_cache_entries(one_run, monkeypatch):
    folder, cache_dir = one_run
    calls = count_parses(monkeypatch)
    Runs.load(folder)
    Runs.load(folder)
    assert len(calls) == 1
    monkeypatch.setattr(noise, "RULE_VERSION", noise.RULE_VERSION + 1)  # the rule changed
    verdicts = count_verdicts(monkeypatch)
    runs = Runs.load(folder)
    assert len(calls) == 2 and len(verdicts) == 1  # parsed and judged again: neither entry nor bundle used
    assert runs.rows.attrs[noise.JUDGED_BY] == noise.RULE_VERSION
    Runs.load(folder)
    assert len(calls) == 2  # the rebuilt entry serves the next load


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other-key"])
def test_a_damaged_or_stale_cache_entry_is_ignored_and_rebuilt(one_run, monkeypatch, damage):
    folder, cache_dir = one_run
    plain = Runs.load(folder, cache=False)
    Runs.load(folder)
    entries = sorted(cache_dir.glob("*.parquet"))
    for e in entries:
        if damage == "garbage":
            e.write_bytes(b"not parquet at all")
        elif damage == "truncated":
            e.write_bytes(e.read_bytes()[: e.stat().st_size // 2])
    if damage == "other-key":  # entries of another version of the file: same names, another key
        import pyarrow.parquet as pq

        for e in entries:
            t = pq.read_table(e)
            meta = json.loads(t.schema.metadata[b"dspark_cache"])
            for m in meta.get("entries", [meta]):
                m["key"]["size"] += 1
            pq.write_table(t.replace_schema_metadata({b"dspark_cache": json.dumps(meta)}), e)
    calls = count_parses(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # a bad cache entry is no problem of the data
        got = Runs.load(folder)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(got.rows, plain.rows)
    pd.testing.assert_frame_equal(got.timelines, plain.timelines)
    Runs.load(folder)
    assert len(calls) == 1  # rebuilt: the next load reads it


def test_a_damaged_timelines_entry_falls_back_to_the_run_file(one_run):
    folder, cache_dir = one_run
    plain = Runs.load(folder, cache=False)
    runs = Runs.load(folder)
    next(cache_dir.glob("*.timelines.parquet")).write_bytes(b"junk")
    rid, pid = plain.rows[["run_id", "point_id"]].iloc[0]
    pd.testing.assert_frame_equal(runs.timeline(rid, pid), plain.timeline(rid, pid).reset_index(drop=True))


def test_warnings_of_a_file_are_reported_again_when_loaded_from_the_cache(one_run):
    folder, _ = one_run
    path = next(folder.glob("*.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"kind": "row", "oops\n'
    path.write_bytes(b"".join(lines))
    os.utime(path, (PAST, PAST))
    got = []
    for _ in range(2):  # parsed, then from the cache
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DataWarning)
            runs = Runs.load(folder)
        got.append((runs.warnings, [str(w.message) for w in caught if w.category is DataWarning]))
    assert got[0] == got[1]
    assert any(w.startswith(f"{path}:4: corrupted record") for w in got[1][0]) and got[1][0] == got[1][1]


def test_mixed_type_extra_columns_survive_the_cache(one_run):
    folder, _ = one_run
    path = next(folder.glob("*.jsonl"))
    out, odd = [], iter([1, "x", [1, 2], {"a": None}, True, 2.5])
    for line in path.read_bytes().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "row":
            rec["odd"] = next(odd, None)
        out.append(json.dumps(rec).encode())
    path.write_bytes(b"\n".join(out) + b"\n")
    os.utime(path, (PAST, PAST))
    Runs.load(folder)
    cached, plain = Runs.load(folder), Runs.load(folder, cache=False)
    assert cached.rows["odd"].tolist()[:6] == [1, "x", [1, 2], {"a": None}, True, 2.5]
    assert cached.rows["odd"].tolist() == plain.rows["odd"].tolist()


def test_the_cache_never_lives_inside_the_runs_being_loaded(one_run, monkeypatch, tmp_path):
    folder, _ = one_run
    monkeypatch.setenv("DSPARK_CACHE", str(folder / ".cache"))
    with pytest.raises(ValueError, match="DSPARK_CACHE=.* lies inside .*runs"):
        Runs.load(folder)
    with pytest.raises(ValueError, match="DSPARK_CACHE"):
        Runs.load(folder.parent)  # the data dir holding runs/
    monkeypatch.delenv("DSPARK_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert run_cache.default_dir() == tmp_path / "home" / ".cache" / "dspark-lab" / "runs"
    Runs.load(folder)
    assert sorted(p.suffix for p in folder.iterdir()) == [".jsonl"]  # nothing derived among the runs
    assert len(list(run_cache.default_dir().glob("*.parquet"))) == 3  # rows, timelines, the bundle
    monkeypatch.setenv("DSPARK_CACHE", "off")
    shutil.rmtree(tmp_path / "home")
    Runs.load(folder)
    assert not (tmp_path / "home").exists()


def test_cli_summary_lists_the_newest_runs_and_counts_the_rest(many):
    from dspark_lab.cli import summary as cli

    runs, made = many[100]
    text = cli.summary_table(runs)
    listed = [m["name"] for m in made if f"  {m['name']}:" in text]
    assert listed == [f"run-{i:03d}" for i in range(100 - cli.SUMMARY_RUNS, 100)]
    assert f"({100 - cli.SUMMARY_RUNS} older run(s) not listed" in text
