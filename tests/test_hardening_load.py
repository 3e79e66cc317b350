"""The loader, hardened: no field, file name, cache entry, cache setting or calibration value
breaks a load or is trusted. Each case asserts what is kept, what is warned (file:line) and that no
good row of another file is lost; then a hypothesis fuzz of real run files (settings below)."""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dspark_lab.model import calibration, workload
from dspark_lab.results import Runs
from dspark_lab.results.loading import cache as run_cache
from dspark_lab.results.loading.load import DataWarning, load
from dspark_lab.results.record import rows as rows_schema
from dspark_lab.results.record.paths import SettingError
from test_loading_reliability import base, lines, patch_row, put

PAST = 1_700_000_000  # file times long past: cacheable (results.loading.cache.racy)
ROWS_PER_FILE = 8  # base(): two points x two strategies x two trials


def _quiet_load(paths, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return load(paths, **kw)


def _settled(*paths: Path) -> None:
    for p in paths:
        os.utime(p, (PAST, PAST))


@pytest.fixture
def two(tmp_path):
    """A runs folder with a good file and a victim file (to damage), times settled; and a cache folder."""
    folder = tmp_path / "runs"
    good, victim = base(folder, "good"), base(folder, "victim")
    _settled(good, victim)
    return folder, good, victim, tmp_path / "cache"


# -- case 2: one bad field in one file ----------------------------------------------------------
BAD_FIELDS = [  # (field, value, the warning's reason)
    ("rank", [1], "rank must be an integer, got [1]"),
    ("dispatch", {"a": 1}, "dispatch must be a string, got dict"),
    ("rank_case", ["x"], "rank_case must be a string, got list"),
    ("ep_mode", ["real"], "ep_mode must be a string, got list"),
    ("step_ms", int("9" * 400), "step_ms must be finite, got <400 digits>"),
    ("trial", int("9" * 400), "trial must be an integer within int64, got one of 400 digits"),
    ("batch_size", 2**63, "batch_size must be an integer within int64, got one of 19 digits"),
]


@pytest.mark.parametrize("cache", [False, "dir"], ids=["cache-off", "cache-on"])
@pytest.mark.parametrize("field,value,reason", BAD_FIELDS, ids=[f[0] for f in BAD_FIELDS])
def test_case2_a_bad_field_skips_its_row_with_file_and_line_and_the_rest_loads(two, field, value, reason, cache):
    folder, good, victim, cache_dir = two
    patch_row(victim, 3, **{field: value})
    _settled(victim)
    for _ in range(2 if cache else 1):  # parsed, then (cache on) read back from the cache
        got = _quiet_load(folder, cache=cache_dir if cache else False)
        assert got.warnings == [f"{victim}:3: row skipped: {reason}", f"{victim}:8: point p1: 3 of its 4 "
                                "committed rows are readable; the readable ones are loaded"]
        assert len(got.rows) == 2 * ROWS_PER_FILE - 1


def test_case2_an_extra_column_named_like_the_caches_json_columns_is_kept_as_recorded(two):
    folder, good, victim, cache_dir = two
    for n in (2, 3):
        patch_row(victim, n, __json__odd="not json {", __json__=[1, 2])
    _settled(victim)
    plain = _quiet_load(folder, cache=False).rows
    for _ in range(2):
        rows = _quiet_load(folder, cache=cache_dir).rows
        assert rows["__json__odd"].dropna().tolist() == ["not json {", "not json {"]
        assert rows["__json__"].dropna().tolist() == [[1, 2], [1, 2]]
        assert rows["__json__odd"].tolist() == plain["__json__odd"].tolist()


def test_case2_a_headline_run_with_every_step_time_null_loads_and_the_headline_is_said(two):
    folder, good, victim, cache_dir = two
    for n in (2, 3, 4, 5, 9, 10, 11, 12):
        patch_row(victim, n, step_ms=None)
    _settled(victim)
    runs = Runs.load(folder, cache=cache_dir)
    assert len(runs.rows) == 2 * ROWS_PER_FILE and runs.warnings == []
    assert isinstance(runs.headline().text(), str)


@pytest.mark.parametrize("cache", [False, "dir"], ids=["cache-off", "cache-on"])
def test_case2_a_run_file_name_that_is_not_utf8_loads_like_any_other(two, cache):
    folder, good, victim, cache_dir = two
    odd = folder / os.fsdecode(b"run-\xff\xfe-latin\xe9.jsonl")
    victim.rename(odd)
    for _ in range(2 if cache else 1):
        runs = Runs.load(folder, cache=cache_dir if cache else False)
        assert len(runs.rows) == 2 * ROWS_PER_FILE and runs.warnings == []
        assert sorted(h["path"] for h in runs.headers) == sorted([str(good), str(odd)])


@pytest.mark.parametrize("cache", [False, "dir"], ids=["cache-off", "cache-on"])
def test_case2_a_lone_surrogate_escape_in_a_string_loads_as_the_replacement_character(two, cache):
    folder, good, victim, cache_dir = two
    patch_row(victim, 3, error="bad \udc80 text", odd_extra="\ud800")  # json.dumps writes "\udc80": valid JSON
    patch_row(victim, 1, name="run \udfff")
    _settled(victim)
    for _ in range(2 if cache else 1):
        runs = Runs.load(folder, cache=cache_dir if cache else False)
        assert len(runs.rows) == 2 * ROWS_PER_FILE and runs.warnings == []
        assert set(runs.rows["error"]) == {"", "bad \ufffd text"} and "\ufffd" in set(runs.rows["odd_extra"].dropna())
        assert {h.get("name") for h in runs.headers} == {None, "run \ufffd"}


# -- case 3: the cache is verified, not trusted ---------------------------------------------------
def _entry(cache_dir: Path, path: Path) -> Path:
    return Path(f"{run_cache._stem(cache_dir, run_cache.file_key(path))}.rows.parquet")


def test_case3_an_entry_rewritten_with_its_metadata_kept_is_rebuilt(two):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, good, victim, cache_dir = two
    truth = _quiet_load(victim, cache=False).rows
    _quiet_load(victim, cache=cache_dir)
    for p in run_cache.bundle_path(cache_dir, [victim]), _entry(cache_dir, victim):
        t = pq.read_table(p)
        i = t.schema.get_field_index("step_ms")
        pq.write_table(t.set_column(i, "step_ms", pa.compute.multiply(t["step_ms"], 10.0)), p)  # metadata kept
    got = _quiet_load(victim, cache=cache_dir).rows
    assert got["step_ms"].tolist() == truth["step_ms"].tolist()


def test_case3_a_bundle_cut_to_5_rows_is_rebuilt_and_every_row_loads(two):
    import pyarrow.parquet as pq

    folder, good, victim, cache_dir = two
    _quiet_load(folder, cache=cache_dir)
    bundle = run_cache.bundle_path(cache_dir, sorted([good, victim]))
    t = pq.read_table(bundle)
    pq.write_table(t.slice(0, 5), bundle)  # metadata kept, rows cut
    assert len(_quiet_load(folder, cache=cache_dir).rows) == 2 * ROWS_PER_FILE


def test_case3_an_edit_that_restores_size_and_mtime_is_seen(two):
    folder, good, victim, cache_dir = two
    _quiet_load(folder, cache=cache_dir)
    ls = lines(victim)
    before = victim.stat()
    edited = ls[2].replace(b'"step_ms":6.0', b'"step_ms":7.0').replace(b'"step_ms":8.0', b'"step_ms":9.0')
    assert edited != ls[2] and len(edited) == len(ls[2])
    ls[2] = edited
    put(victim, ls)
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert victim.stat().st_size == before.st_size
    rows = _quiet_load(folder, cache=cache_dir).rows
    assert rows["step_ms"].isin([7.0, 9.0]).sum() == 1  # the edited value, not the cached one


# -- case 4: DSPARK_CACHE checked once, with one clear message ----------------------------------
def _loop(tmp_path: Path) -> str:
    a, b = tmp_path / "loop-a", tmp_path / "loop-b"
    a.symlink_to(b)
    b.symlink_to(a)
    return str(a / "x")


def _a_file(tmp_path: Path) -> str:
    f = tmp_path / "a-file"
    f.write_text("")
    return str(f)


BAD_CACHE_SETTINGS = [  # (id, value from tmp_path, the message's reason)
    ("symlink-loop", _loop, "cannot be resolved"),
    ("blank", lambda t: "  ", "blank"),
    ("unknown-user", lambda t: "~nouser-dspark/x", "'~nouser-dspark' is not a known user's home"),
    ("a-file", _a_file, "exists and is not a folder"),
]


@pytest.mark.parametrize("value,reason", [c[1:] for c in BAD_CACHE_SETTINGS], ids=[c[0] for c in BAD_CACHE_SETTINGS])
def test_case4_an_unusable_cache_setting_is_one_error_naming_it(two, monkeypatch, value, reason, capsys):
    from dspark_lab.cli.main import EXIT_USAGE, main

    folder, good, victim, cache_dir = two
    monkeypatch.setenv("DSPARK_CACHE", value(folder.parent))
    with pytest.raises(SettingError, match=f"^DSPARK_CACHE=.*: {reason}.*; allowed: "):
        load(folder)
    assert main(["report", str(folder), "-o", str(folder.parent / "r.html")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("dspark-lab: DSPARK_CACHE=") and err.count("\n") == 1
    assert not (Path.cwd() / "  ").exists()


@pytest.mark.parametrize("where", ["runs-folder", "inside-runs-folder"])
def test_case4_a_cache_in_the_folder_of_one_loaded_file_is_refused_and_nothing_is_written_there(two, monkeypatch, where):
    folder, good, victim, cache_dir = two
    monkeypatch.setenv("DSPARK_CACHE", str(folder if where == "runs-folder" else folder / "c"))
    with pytest.raises(SettingError, match="lies inside"):
        load(good)
    assert sorted(p.name for p in folder.iterdir()) == ["good.jsonl", "victim.jsonl"]


def test_case4_off_turns_the_calibration_cache_off_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSPARK_CACHE", "off")
    assert calibration.cache_file() is None
    assert calibration.store("k", {"v": 1.0}) is False and calibration.load("k") is None
    assert list(tmp_path.iterdir()) == []  # no ./off/calibration.json


# -- case 5: the calibration cache's values bounded ---------------------------------------------
@pytest.mark.parametrize("stored", ["1e9", "Infinity", "NaN", "-1", "0", '"fast"', "true", "1" + "0" * 400])
def test_case5_a_calibration_value_out_of_bounds_is_a_miss_and_is_measured_again(tmp_path, monkeypatch, stored):
    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path))
    key = calibration.host_key(workload._cpu_name(), workload.platform.python_version())
    (tmp_path / calibration.FILE_NAME).write_text(f'{{"{key}": {{"spin_iters_per_us": {stored}}}}}')
    monkeypatch.setattr(workload, "_ITERS_PER_US", [])
    rate = workload._iters_per_us()
    lo, hi = workload.SPIN_ITERS_PER_US
    assert lo <= rate <= hi and rate != 1e9
    assert json.loads((tmp_path / calibration.FILE_NAME).read_text())[key]["spin_iters_per_us"] == rate


def test_case5_a_calibration_value_in_bounds_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path))
    key = calibration.host_key(workload._cpu_name(), workload.platform.python_version())
    (tmp_path / calibration.FILE_NAME).write_text(json.dumps({key: {"spin_iters_per_us": 42.5}}))
    monkeypatch.setattr(workload, "_ITERS_PER_US", [])
    assert workload._iters_per_us() == 42.5


# -- case 9 (DSPARK_DATA) -----------------------------------------------------------------------
@pytest.mark.parametrize("value,reason", [("/dev/null", "exists and is not a folder"), ("  ", "blank")])
def test_case9_an_unusable_data_dir_is_one_error_naming_dspark_data(monkeypatch, capsys, value, reason):
    from dspark_lab.cli.main import EXIT_USAGE, main

    monkeypatch.setenv("DSPARK_DATA", value)
    assert main(["report"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"dspark-lab: DSPARK_DATA={value!r}: {reason}; allowed: a folder holding runs/ (default: data/ of the repository)\n"


# -- case 12: an unreadable subfolder is said ---------------------------------------------------
def test_case12_an_unreadable_subfolder_is_warned_and_the_rest_loads(two, monkeypatch):
    folder, good, victim, cache_dir = two
    sub = folder / "locked"
    sub.mkdir()
    base(sub, "hidden")
    real = os.scandir

    def scandir(path="."):  # as a folder without read permission answers (the tests may run as root)
        if Path(os.fsdecode(path)) == sub:
            raise PermissionError(13, "Permission denied", str(sub))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    got = _quiet_load(folder, cache=False)
    assert got.warnings == [f"{sub}: folder cannot be read (Permission denied); run files under it are not loaded"]
    assert len(got.rows) == 2 * ROWS_PER_FILE


# -- the fuzz test: random damage to real run files -----------------------------------------------
REAL = Path(__file__).resolve().parents[1] / "data" / "runs"
GOOD_REAL = REAL / "h200x2-ep-predicted-20261130-165513-87405c.jsonl"  # the smallest committed runs
VICTIM_REAL = REAL / "h200x2-ep-predicted-20261130-174843-0fab00.jsonl"
# The values that broke loads before drawn as often as arbitrary JSON, so 15 examples meet them.
NASTY = [10**400, -(10**400), 2**63, [1], {"a": 1}, [[[]]], float("inf"), float("nan"), None, "", "\x1b]0;x\x07",
         "\udcff", True, 0, -1, -5.79, 7, "a\nb\u202ec", {"gpu": "G\nFAKE\u202e", "driver": "1"}]
JSON_VALUES = st.sampled_from(NASTY) | st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
FIELDS = ["kind", "point_id", "strategy", "status", "attempt", "trial", "step_ms", "rank", "dispatch", "rank_case",
          "ep_mode", "run_id", "fingerprint", "schema_version", "segments", "n_rows", "__json__x", "sweep", "error",
          # ranges (rows.POSITIVE, rows.NONNEGATIVE) and the header fields labels and recordings read
          "batch_size", "ep_size", "gamma", "steps", "local_rank", "node_rank", "world_size", "syncs_per_step",
          "gpu_idle_sync_caused_ms", "host_work_ms", "step_ms_max_rank", "name", "launcher", "recording_id",
          "run_kind", "created_at"]
NAMES = st.binary(min_size=1, max_size=20).map(lambda b: os.fsdecode(b.replace(b"/", b"_").replace(b"\0", b"_")))


def _damage(data: bytes, how: tuple) -> bytes:
    kind, line, arg = how
    ls = data.split(b"\n")
    i = line % max(1, len(ls) - 1)
    if kind == "field":
        field, value = arg
        try:
            rec = json.loads(ls[i])
            rec[field] = value
            ls[i] = json.dumps(rec).encode()
        except (ValueError, TypeError, RecursionError):  # a line already nested past the parser's depth
            pass
    elif kind == "cut":
        return data[: arg % (len(data) + 1)]
    elif kind == "bytes":
        ls[i] = ls[i][: len(arg)] + arg
    elif kind == "nest":
        ls[i] = b"[" * arg + b"]" * arg
    elif kind == "utf16":
        ls[i] = ls[i].decode("utf-8", "replace").encode("utf-16")
    return b"\n".join(ls)


FIELD_DAMAGE = st.tuples(st.just("field"), st.integers(0, 400), st.tuples(st.sampled_from(FIELDS), JSON_VALUES))
DAMAGE = st.one_of(  # a field changed is drawn four times as often as each other damage: it is the richest
    FIELD_DAMAGE, FIELD_DAMAGE, FIELD_DAMAGE, FIELD_DAMAGE,
    st.tuples(st.just("cut"), st.integers(0, 400), st.integers(0, 10**6)),
    st.tuples(st.just("bytes"), st.integers(0, 400), st.binary(max_size=40)),
    st.tuples(st.just("nest"), st.integers(0, 400), st.integers(1, 100_000)),
    st.tuples(st.just("utf16"), st.integers(0, 400), st.none()),
)


# Sized for the 2-core CI: 15 examples of one small real file damaged up to 8 ways beside a good
# one (about 0.1-0.3 s each, cache on, so entries and bundles are written and read); no deadline,
# since a loaded CI machine would fail a time limit that says nothing about the loader.
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(damage=st.lists(DAMAGE, min_size=1, max_size=8), name=NAMES)
def test_fuzz_random_damage_never_raises_out_of_load_and_never_loses_a_good_files_rows(damage, name):
    want = _good_rows()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "runs"
        folder.mkdir()
        shutil.copy(GOOD_REAL, folder / GOOD_REAL.name)
        data = VICTIM_REAL.read_bytes()
        for how in damage:
            data = _damage(data, how)
        victim = folder / (name + ".jsonl")
        if victim.name == GOOD_REAL.name:
            victim = folder / ("x" + victim.name)
        victim.write_bytes(data)
        for _ in range(2):  # parsed and cached, then read back from the cache
            got = _quiet_load(folder, cache=Path(tmp) / "cache")
            good = got.rows[got.rows["run_id"] == want["run_id"].iloc[0]].reset_index(drop=True)
            pd.testing.assert_frame_equal(good[list(want.columns)], want, check_dtype=False)
            _assert_in_range(got.rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            runs = Runs.load(folder, cache=Path(tmp) / "cache")
        info = runs.run_info()  # labels, kinds and recordings built from whatever header loaded
        assert not any(_UNSAFE.search(str(v)) for v in [*info["label"], *info["name"], *info["file"]])


_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202e]")


def _assert_in_range(rows: pd.DataFrame) -> None:
    """No loaded row holds a value outside its column's range."""
    for col in rows_schema.POSITIVE + rows_schema.NONNEGATIVE:
        if col in rows.columns:
            v = pd.to_numeric(rows[col], errors="coerce").dropna()
            bad = v[v <= 0] if col in rows_schema.POSITIVE else v[v < 0]
            assert bad.empty, f"{col}: {list(bad)[:3]} loaded"


_GOOD: list = []


def _good_rows() -> pd.DataFrame:
    if not _GOOD:
        _GOOD.append(_quiet_load(GOOD_REAL, cache=False).rows)
    return _GOOD[0]
