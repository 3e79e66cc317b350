"""The streaming reader of foreign traces (measure.foreign_read): the same events as a whole-file
parse, chunk edges anywhere, and one TraceFileError line (never a traceback) for every truncation,
mutation and hostile shape of a trace file."""
from __future__ import annotations

import gzip
import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import foreign_trace_maker as mk
from dspark_lab.cli import main
from dspark_lab.measure import foreign_read, foreign_record


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(foreign_read, "CHUNK_BYTES", 7)  # every token split across chunk edges


def _kept(tr: dict) -> int:
    return sum(1 for e in tr["traceEvents"] if e.get("ph") in ("X", "i") and e.get("cat") in foreign_read.KEPT_CATS)


@pytest.mark.parametrize("gz", [False, True])
def test_streamed_events_equal_the_whole_parse(tmp_path, small_chunks, gz):
    tr = mk.trace()
    tr["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "MainThread"}})
    tr["baseTimeNanoseconds"] = 1234567890123456789  # a number cut by a chunk edge, then a large integer
    p = mk.write(tmp_path / ("t.json.gz" if gz else "t.json"), tr)
    t = foreign_read.read(p)
    assert len(t.events) == _kept(tr) and t.total_events == len(tr["traceEvents"])
    assert t.meta["baseTimeNanoseconds"] == 1234567890123456789
    assert t.thread_names[("1", "1")] == "MainThread"
    assert t.events.ts.is_monotonic_increasing and (t.events.end >= t.events.ts).all()


def test_json_array_format_and_a_gzip_file_of_any_name(tmp_path):
    tr = mk.trace()
    p = tmp_path / "plain_name.json"
    with gzip.open(p, "wt") as f:  # gzip found by its first bytes, not its name
        json.dump(tr["traceEvents"], f)
    assert len(foreign_read.read(p).events) == _kept(tr)


@pytest.mark.parametrize("text,why", [
    ("", "neither"), ("null", "neither"), ('{"a": 1}', "no traceEvents"), ('{"traceEvents": 3}', "'['"),
    ('{"traceEvents": [1, 2', "cut short"), ('{"traceEvents": []} x', "more text"),
    ('{"traceEvents": [' + "[" * 100000 + "]" * 100000 + "]}", "nested too deep"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1' + "1" * 100 + ', "dur": "x"}]}', None),
])
def test_hostile_shapes_are_one_line(tmp_path, text, why):
    p = tmp_path / "h.json"
    p.write_text(text)
    if why is None:  # valid JSON, an unreadable event: left out and counted
        assert sum(foreign_read.read(p).dropped.values()) == 1
        return
    with pytest.raises(foreign_read.TraceFileError) as e:
        foreign_read.read(p)
    assert why in str(e.value) and "\n" not in str(e.value) and str(p) in str(e.value)


def test_not_regular_not_utf8_not_gzip(tmp_path):
    (tmp_path / "b.json").write_bytes(b'{"traceEvents": ["\xff\xfe"]}')
    (tmp_path / "z.json.gz").write_bytes(b"\x1f\x8b" + os.urandom(64))
    os.mkfifo(tmp_path / "fifo.json")
    for name, why in (("b.json", "UTF-8"), ("z.json.gz", "cannot be read"), ("fifo.json", "not a regular file"),
                      ("missing.json", "cannot be read")):
        with pytest.raises(foreign_read.TraceFileError, match=why):
            foreign_read.read(tmp_path / name)


def test_an_event_over_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(foreign_read, "MAX_EVENT_CHARS", 1000)
    monkeypatch.setattr(foreign_read, "CHUNK_BYTES", 256)
    p = tmp_path / "big.json"
    p.write_text('{"traceEvents": [{"name": "' + "a" * 5000)  # an event that never ends
    with pytest.raises(foreign_read.TraceFileError, match="within 1000 characters|cut short"):
        foreign_read.read(p)


def _mutations(data: bytes, rng: random.Random, n: int):
    """Truncations at every kind of place, and bytes replaced, deleted or duplicated."""
    for _ in range(n):
        k = rng.randrange(len(data))
        yield rng.choice([
            data[:k],
            data[:k] + bytes([rng.randrange(256)]) + data[k + 1:],
            data[:k] + data[k + rng.randrange(1, 40):],
            data[:k] + data[k:k + rng.randrange(1, 40)] * 2 + data[k:],
            data[:k] + rng.choice([b"NaN", b"-Infinity", b"1e999", b"\x00", b'"\\ud800"', b"{}", b"[]"]) + data[k:],
        ])


@pytest.mark.parametrize("gz", [False, True])
def test_mutated_traces_never_raise_anything_but_trace_file_error(tmp_path, gz):
    """A deterministic mutation loop: each mutated file either reads (and its record builds) or is
    one TraceFileError line; no other exception escapes."""
    tr = mk.trace(steps=3)
    raw = json.dumps(tr).encode()
    data = gzip.compress(raw, mtime=0) if gz else raw
    rng = random.Random(20261204 + gz)
    p = tmp_path / ("m.json.gz" if gz else "m.json")
    outcomes = {"read": 0, "refused": 0}
    for mutated in _mutations(data, rng, 250):
        p.write_bytes(mutated)
        try:
            foreign_record.record(foreign_read.read(p))
            outcomes["read"] += 1
        except foreign_read.TraceFileError as e:
            assert "\n" not in str(e)
            outcomes["refused"] += 1
    assert outcomes["read"] and outcomes["refused"]  # the loop reached both ends


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
                        st.sampled_from(["ph", "ts", "dur", "name", "cat", "args", "pid", "tid", "correlation"]),
                        kids, max_size=6), max_leaves=30))
def test_any_json_events_read_or_refuse(tmp_path, events):
    """Any JSON value as the events (hypothesis): read, or refused in one line."""
    p = tmp_path / "h.json"
    p.write_text(json.dumps({"traceEvents": events if isinstance(events, list) else [events]}))
    try:
        foreign_record.record(foreign_read.read(p))
    except foreign_read.TraceFileError as e:
        assert "\n" not in str(e)


def test_command_on_garbage_is_one_line_and_status_2(tmp_path, capsys):
    p = tmp_path / "g.json.gz"
    p.write_bytes(gzip.compress(json.dumps(mk.trace()).encode())[:-30])  # a gzip stream cut short
    assert main.main(["trace", str(p), "--out", str(tmp_path / "o")]) == main.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dspark-lab: ") and "g.json.gz" in err
