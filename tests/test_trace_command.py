"""`dspark-lab trace`: a trace the kit did not make read with the kit's one rule (measure.foreign_*),
on synthetic traces of known shape, on the kit's own recorded H200 traces (the same numbers as the
kit's own path) and on public sample traces (HolisticTraceAnalysis' tests/data, trimmed copies in
tests/fixtures/foreign_traces/)."""
from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from dspark_lab.cli import main
from dspark_lab.measure import breakdown, foreign_read, foreign_record, foreign_steps, syncs, trace
import foreign_trace_maker as mk

FIX = Path(__file__).parent / "fixtures"
FOREIGN = FIX / "foreign_traces"


def _read(tmp_path, tr, name="t.json"):
    return foreign_read.read(mk.write(tmp_path / name, tr))


# --- synthetic traces of known shape ---------------------------------------------------------
def test_profiler_steps_charge_the_sync_the_idle_it_caused(tmp_path):
    found, rec = foreign_record.record(_read(tmp_path, mk.trace()))
    assert found["step_source"] == foreign_steps.SOURCES["profiler"]
    assert found["steps_accounted"] == [f"ProfilerStep#{i}" for i in range(4)]
    # each step: the GPU idles from the big kernel's end (t0+1016) to the small one (t0+1107) while
    # the host runs the work after the sync, then from the small one's end (t0+1112) to the next
    # step's big kernel (t0+1316; the host never got ahead): both charged to the sync, up to
    # aten::item's 1000 µs; the last step's second gap ends with its step (t0+1200)
    w = [r["charged_ms"] for r in found["waits"] if r["calls"] == "cudaStreamSynchronize"]
    assert w == pytest.approx([0.091 + 0.204] * 3 + [0.091 + 0.088], abs=1e-6)
    assert rec["parts"]["gpu_idle_sync_caused_ms"] > 0 and found["gpu_share"] == pytest.approx(1.0)


def test_named_range_is_a_step_and_a_missing_name_abstains(tmp_path):
    t = _read(tmp_path, mk.trace(marker="decode#{}"))
    assert foreign_record.record(t)[1] is None  # no ProfilerStep#: nothing accounted
    found, rec = foreign_record.record(t, "decode")
    assert len(found["steps_accounted"]) == 4 and rec is not None
    found, rec = foreign_record.record(t, "prefill")
    assert rec is None and "no range named 'prefill'" in found["abstained"][0]["reason"]


def test_graph_replays_are_steps_and_say_when_their_kernels_are_missing(tmp_path):
    found, rec = foreign_record.record(_read(tmp_path, mk.trace(marker="noise#{}", graph=True)))
    assert found["step_source"] == foreign_steps.SOURCES["graph"] and rec is not None
    assert found["replays_without_kernels"] == 0
    found, rec = foreign_record.record(_read(tmp_path, mk.trace(marker="noise#{}", graph=True, kernels=False), "g.json"))
    assert rec is None and found["replays_without_kernels"] == 4
    assert all("no per-kernel records" in a["reason"] for a in found["abstained"])


def test_clocks_that_disagree_leave_the_step_out(tmp_path):
    tr = mk.trace()
    for e in tr["traceEvents"]:  # step 2's GPU ops 50 µs before their launches
        if e["cat"] == "kernel" and 12_600 <= e["ts"] < 13_900:
            e["ts"] -= 50
    found, rec = foreign_record.record(_read(tmp_path, tr))
    assert [a["step"] for a in found["abstained"]] == ["ProfilerStep#2"]
    assert "clocks disagree" in found["abstained"][0]["reason"]
    assert "ProfilerStep#2" not in found["steps_accounted"]
    assert any(w["step"] == "ProfilerStep#2" and "left out" in w["reason"] for w in found["abstained_waits"])
    assert found["gpu_share"] < 1.0


def test_a_wait_on_a_thread_with_no_launches_is_listed_not_charged(tmp_path):
    tr = mk.trace()
    tr["traceEvents"].append(mk._x("cudaDeviceSynchronize", "cuda_runtime", 10_500, 300, tid=99, correlation=999))
    found, rec = foreign_record.record(_read(tmp_path, tr))
    left = [w for w in found["abstained_waits"] if w["thread"] == "1/99"]
    assert len(left) == 1 and "launches no GPU work" in left[0]["reason"]
    assert all(w["thread"] == "1/1" for w in found["waits"])


def test_truncated_events_are_counted_and_left_out(tmp_path):
    tr = mk.trace()
    del tr["traceEvents"][-1]["dur"]  # the last small kernel: an 'X' without its duration
    found, rec = foreign_record.record(_read(tmp_path, tr))
    assert sum(found["dropped"].values()) == 1
    assert [a["step"] for a in found["abstained"]] == ["ProfilerStep#3"]
    assert "no GPU record" in found["abstained"][0]["reason"]


def test_64_bit_correlation_ids_stay_apart(tmp_path):
    tr = mk.trace(steps=2)
    for e in tr["traceEvents"]:
        if "correlation" in e["args"]:
            e["args"]["correlation"] = 2**63 - 64 + e["args"]["correlation"]  # adjacent ids a float would merge
    found, _ = foreign_record.record(_read(tmp_path, tr))
    ref, _ = foreign_record.record(_read(tmp_path, mk.trace(steps=2), "ref.json"))
    assert found["steps_accounted"] == ref["steps_accounted"] and found["waits"] == ref["waits"]


# --- the kit's own traces: the same path, the same numbers -----------------------------------
KIT_TRACES = sorted(glob.glob(str(FIX / "known_idle_h200" / "*.json.gz")))[:4]


@pytest.mark.parametrize("path", KIT_TRACES, ids=lambda p: Path(p).name)
def test_kit_trace_reads_back_with_the_kits_numbers(path):
    found, rec = foreign_record.record(foreign_read.read(path))
    ev = trace.events(path)
    ref = breakdown.summary(ev, calls=syncs.sync_calls(ev))
    assert found["step_source"] == foreign_steps.SOURCES["kit"] and not found["abstained"]
    for k in ("host_blocked_ms", "gpu_idle_sync_caused_ms", "gpu_idle_ms", "gpu_busy_ms"):
        assert rec["parts"][k] == pytest.approx(ref[k], abs=1e-9), k


@pytest.mark.parametrize("path", KIT_TRACES[:2], ids=lambda p: Path(p).name)
def test_kit_trace_relabelled_as_profiler_steps_gives_the_same_per_step_charges(path, tmp_path):
    tr = trace.load_json(path)
    for e in tr["traceEvents"]:
        if e.get("name") == "dspark:step":
            e["name"] = f"ProfilerStep#{int(e['ts'])}"
    found, rec = foreign_record.record(_read(tmp_path, tr))
    ev = trace.events(path)
    gaps = breakdown.sync_caused_gaps(ev, syncs.sync_calls(ev))
    ref = ((gaps.end - gaps.start).groupby(gaps.sync_step).sum() / 1e3).tolist()
    assert found["step_source"] == foreign_steps.SOURCES["profiler"]
    charged = {}
    for w in found["waits"]:
        charged[w["step"]] = charged.get(w["step"], 0.0) + w["charged_ms"]
    assert [c for c in charged.values() if c > 0] == pytest.approx(ref, abs=1e-6)


# --- public sample traces (HolisticTraceAnalysis tests/data; README.md beside them) ----------
def _foreign(name, step=None):
    return foreign_record.record(foreign_read.read(FOREIGN / name), step)


def test_event_sync_trace_finds_its_three_kinds_of_wait():
    found, rec = _foreign("cuda_event_sync.json.gz")
    kinds = {w["wait"] for w in found["waits"]}
    assert {"an event wait", "a device sync", "a value read back"} <= kinds
    assert found["gpu_share"] == pytest.approx(1.0) and not found["abstained"]
    charged = [w for w in found["waits"] if w["charged_ms"] > 0]
    assert all(w["charged_ms"] <= w["cap_ms"] + 1e-9 for w in charged)


def test_unmarked_traces_abstain_whole():
    for name in ("cuda_event_sync_multi_stream.json.gz", "simple_add.json.gz"):
        found, rec = _foreign(name)
        assert rec is None and found["abstained"][0]["reason"] == foreign_steps.NO_STEP
        assert found["gpu_share"] == 0.0


def test_simple_add_with_its_measure_range_named():
    found, rec = _foreign("simple_add.json.gz", "[param|pytorch.model.alex_net|0|0|0|measure|forward]")
    assert rec is not None and found["steps_accounted"]
    assert 0 < found["gpu_share"] < 1  # the warm-up's GPU work is outside the named steps


def test_cupti_profiler_trace_has_no_gpu_records_and_says_so():
    found, rec = _foreign("cupti_profiler.json.gz")
    assert rec is None and found["gpu_records"] is False and found["gpu_share"] is None


def test_amd_trace_reads_hip_as_cuda_and_leaves_out_the_empty_step():
    found, rec = _foreign("amd_mi250_minitoy_train.json.gz")
    assert found["renamed"]["cudaLaunchKernel"] == "hipLaunchKernel"
    assert rec is not None and "cudaMemcpy" in {w["calls"] for w in found["waits"]}
    empty = [a for a in found["abstained"] if a["what"] == "step"]
    assert empty and all("no GPU launch" in a["reason"] for a in empty)
    assert 0 < found["gpu_share"] < 1


def test_ns_resolution_trace_is_charged_on_the_thread_that_launches():
    found, rec = _foreign("ns_resolution_rank0.json.gz")
    ev = foreign_read.read(FOREIGN / "ns_resolution_rank0.json.gz").events
    lau = foreign_steps.launches(ev)
    busiest = lau.groupby(["pid", "tid"]).size().idxmax()
    assert (found["thread"]["pid"], found["thread"]["tid"]) == busiest
    assert len(found["steps_accounted"]) == 2 and rec is not None


def test_timeline_and_triton_traces_account_every_step():
    for name in ("timeline_sampled_rank0.json.gz", "triton_example.json.gz"):
        found, rec = _foreign(name)
        assert found["steps_accounted"] == found["steps_found"] and rec is not None
        kept = found["steps_accounted"][found["skip_first"]:]  # the first of several is left out of the means
        total = sum(w["charged_ms"] for w in found["waits"] if w["step"] in kept) / len(kept)
        assert rec["parts"]["gpu_idle_sync_caused_ms"] <= total + 1e-6


# --- the command -----------------------------------------------------------------------------
def test_command_writes_a_record_diff_reads(tmp_path, capsys):
    a = mk.write(tmp_path / "a.json", mk.trace())
    b = mk.write(tmp_path / "b.json.gz", mk.trace(steps=3))
    assert main.main(["trace", str(a), str(b), "--out", str(tmp_path / "o")]) == main.EXIT_OK
    out = capsys.readouterr().out
    assert "GPU time the totals hold: 100.0%" in out
    recs = sorted((tmp_path / "o").glob("*.json"))
    assert len(recs) == 2 and json.loads(recs[0].read_text())["kind"] == "dspark_inspect"
    assert main.main(["diff", str(recs[0]), str(recs[1]), "--out", str(tmp_path / "d")]) == main.EXIT_OK


def test_command_exit_statuses(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    unmarked = mk.write(tmp_path / "u.json", mk.trace(marker="x#{}"))
    assert main.main(["trace", str(bad), "--out", str(tmp_path)]) == main.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err and "cut short" in err
    assert main.main(["trace", str(unmarked), "--out", str(tmp_path)]) == main.EXIT_FAILED
    assert "no step marker" in capsys.readouterr().out
    assert not list(tmp_path.glob("*-*.json"))


def test_command_json_and_html(tmp_path, capsys):
    a = mk.write(tmp_path / "a.json", mk.trace())
    assert main.main(["trace", str(a), "--out", str(tmp_path / "o"), "--json", "--html", "--name", "run1"]) == main.EXIT_OK
    rec = json.loads(capsys.readouterr().out)
    assert rec["trace"]["step_source"] == foreign_steps.SOURCES["profiler"] and rec["guard"]["checked"] == []
    page = (tmp_path / "o" / "run1.html").read_text()
    assert "Left out of the totals" in page and "cudaStreamSynchronize" in page


def test_name_with_several_files_is_a_usage_error(tmp_path, capsys):
    a = mk.write(tmp_path / "a.json", mk.trace())
    with pytest.raises(SystemExit) as e:
        main.main(["trace", str(a), str(a), "--name", "x", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--name" in capsys.readouterr().err


def test_trace_runs_without_torch(tmp_path):
    """Reading a trace needs no torch (a laptop without it reads a server's profile)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ImportError('torch blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from dspark_lab.cli import main\n"
            f"rc = main.main(['trace', {str(FOREIGN / 'cuda_event_sync.json.gz')!r}, '--out', {str(tmp_path)!r}])\n"
            "sys.exit(rc if 'torch' not in sys.modules else 99)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).parents[1])
    assert r.returncode == 0, r.stderr[-500:]


def test_the_first_of_several_steps_is_left_out_of_a_users_trace_too():
    """A torch.profiler trace's first step opens with GPU idle caused by a wait made before the trace
    began, which the rule cannot charge: its charge is short, and the means leave it out, as inspect's do."""
    path = Path(__file__).resolve().parents[1] / "data" / "trace" / "traces-20261204-040146" / "wait_item.profiler.json.gz"
    found, rec = foreign_record.record(foreign_read.read(str(path)))
    assert found["step_source"].startswith("torch.profiler") and found["skip_first"] == 1
    ev = foreign_steps.normalized(foreign_read.read(str(path)).events, foreign_steps.find(foreign_read.read(str(path)).events))
    per = breakdown.per_step(ev, syncs.sync_calls(ev)).gpu_idle_sync_caused_ms.tolist()
    assert per[0] < min(per[1:]) - 0.5  # the short first step
    doc = " ".join((Path(__file__).resolve().parents[1] / "docs" / "trace.md").read_text().split())
    assert f"the first step is charged {per[0]:.2f} ms and each later one about {sum(per[1:]) / len(per[1:]):.1f} ms" in doc
    assert rec["parts"]["gpu_idle_sync_caused_ms"] == pytest.approx(sum(per[1:]) / len(per[1:]), abs=1e-9)
