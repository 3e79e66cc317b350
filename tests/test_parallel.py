"""Real expert parallelism on CPU: gloo ranks as processes (world 2 and 4)."""
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dspark_lab.config import LabConfig
from dspark_lab.parallel import checks
from dspark_lab.model import dispatch
from dspark_lab.parallel import measure as M
from dspark_lab.parallel.workers import WorkerGroup

ROOT = Path(__file__).resolve().parents[1]
TOP_K = LabConfig(model="tiny").model_size.top_k


@pytest.fixture(scope="module")
def group2():
    with WorkerGroup(2, "gloo") as g:
        yield g


@pytest.mark.parametrize("world,batches", [(2, [3, 7]), (4, [1, 4, 2, 8])])
def test_ep_output_equals_single_process_reference(world, batches, group2):
    if world == 2:
        results = group2.call(checks.equivalence, batch_sizes=batches)
    else:
        with WorkerGroup(world, "gloo") as g:
            results = g.call(checks.equivalence, batch_sizes=batches)
    experts = LabConfig(model="tiny").model_size.experts
    for r, res in enumerate(results):
        # Different real-token counts per rank, padded to one common bucket.
        assert res["num_tokens"] == batches[r] * 2
        assert res["bucket_rows"] == LabConfig(batch_size=max(batches)).bucket_batch_size * 2
        for mode in dispatch.DISPATCH_MODES:
            m = res[mode]
            assert m["local_experts"] == experts // world
            assert m["moe_max_abs_diff"] < 1e-4, (r, mode, m)
            assert m["tokens_equal"], (r, mode)
            # Only real rows are dispatched: top_k pairs per real token, none from padded rows.
            assert m["pairs_sent"] == res["num_tokens"] * TOP_K, (r, mode, m)
            assert m["padded_pairs_sent"] == 0
        # The split sizes of a dynamic all-to-all are read on the host (send and receive counts);
        # the fixed-capacity and all-reduce modes never read anything back.
        assert res["a2a_dynamic"]["host_reads_per_layer"] == 2
        assert res["a2a_fixed"]["host_reads_per_layer"] == 0
        assert res["allreduce"]["host_reads_per_layer"] == 0


def test_bad_dispatch_mode_names_the_field():
    with pytest.raises(ValueError, match="dispatch must be one of allreduce, a2a_fixed, a2a_dynamic"):
        dispatch.check_mode("deepep")


def test_rank_case_validation():
    with pytest.raises(ValueError, match="host_delay_ms must give one value"):
        M.RankCase(("non_blocking", "non_blocking"), host_delay_ms=(1.0,))
    with pytest.raises(ValueError, match="strategy must be one of"):
        M.RankCase(("nope",))
    c = M.delay_rank0("device_direct", 2, 1.0)
    assert c.name == "device_direct,device_direct delay=1,0"
    assert c.baseline_for(1) == M.uniform("device_direct", 2)
    assert c.baseline_for(0) == M.uniform("device_direct", 2, delay_ms=1.0)


def test_every_rank_measured_with_rank_columns(group2):
    cfg = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, batch_size=2, gamma=2, device="cpu")
    cases = [M.uniform("non_blocking", 2), M.only_rank0("device_direct", "non_blocking", 2),
             M.delay_rank0("non_blocking", 2, 2.0)]
    res = group2.call(M.measure_ranks, cfg=cfg, dispatch="a2a_fixed", cases=cases, batch_sizes=[1, 2],
                      profile_steps=2)
    assert res[1] is None
    out = res[0]
    rows = out.rows
    assert len(rows) == 2 * len(cases) * cfg.trials
    assert {r["rank"] for r in rows} == {0, 1}
    assert {r["ep_mode"] for r in rows} == {"real"} and {r["world_size"] for r in rows} == {2}
    assert {r["dispatch"] for r in rows} == {"a2a_fixed"} and {r["ep_size"] for r in rows} == {2}
    mixed = [r for r in rows if r["rank_case"] == "device_direct,non_blocking"]
    assert {(r["rank"], r["strategy"]) for r in mixed} == {(0, "device_direct"), (1, "non_blocking")}
    assert {r["num_tokens"] for r in rows if r["rank"] == 0} == {2} and {r["num_tokens"] for r in rows if r["rank"] == 1} == {4}
    for r in rows:
        peers = [p["step_ms"] for p in rows if p["rank_case"] == r["rank_case"] and p["trial"] == r["trial"]]
        assert r["step_ms_max_rank"] == max(peers)
        assert r["gpu_collective_ms"] > 0  # gloo: the collectives' host wall time
    delayed = [r for r in rows if r["rank_case"].endswith("delay=2,0")]
    assert {r["host_delay_ms"] for r in delayed if r["rank"] == 0} == {2.0}
    assert {r["host_delay_ms"] for r in delayed if r["rank"] == 1} == {0.0}
    # Rank 0's baseline (both ranks delayed) was not run; rank 1's (both undelayed) was.
    assert all(r["blocked_from_others_ms"] is None for r in delayed if r["rank"] == 0)
    assert all(r["collective_from_others_ms"] is not None for r in delayed if r["rank"] == 1)
    assert set(out.samples) == {c.name for c in cases} and set(out.samples[cases[0].name]) == {0, 1}
    assert len(out.samples[cases[0].name][0]) == cfg.trials * cfg.steps


def test_worker_errors_name_the_rank(group2):
    with pytest.raises(Exception, match="rank 0"):
        group2.call(M.measure_ranks, cfg=LabConfig(model="tiny", device="cpu"), dispatch="bogus", cases=[])
    assert group2.alive()  # a failed request leaves the ranks up


_PARENT = """
import sys, time
from dspark_lab.parallel.workers import WorkerGroup
g = WorkerGroup(2, "gloo").start()
print(" ".join(map(str, g.pids)), flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].startswith("Z")  # a zombie has exited
    except FileNotFoundError:
        return True


def _still_running(pids: list, hang_s: float = 120.0) -> list:
    """Wait for each pid to exit, woken by the exit itself (a pidfd turns readable then: no polling,
    no sleep); `hang_s` only bounds a hang. Returns the pids that had not exited."""
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # exited and reaped already
            continue
        try:
            if not select.select([fd], [], [], hang_s)[0]:
                left.append(pid)
        finally:
            os.close(fd)
    return left


def test_killing_the_parent_leaves_no_worker():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert _still_running(pids) == []


def test_close_ends_the_workers_and_coalesces():
    g = WorkerGroup(2, "gloo").start()
    pids = g.pids
    try:
        futs = [g.submit(checks.equivalence, batch_sizes=[1, b], modes=("a2a_fixed",)) for b in (1, 2, 3)]
        last = futs[-1].result(timeout=60)
        assert last[1]["num_tokens"] == 3 * 2
        # One request is in flight at a time, so of three quick submits an earlier one was superseded.
        assert futs[0].cancelled() or futs[1].cancelled()
    finally:
        g.close()
    assert all(_gone(p) for p in pids) and not g.spawner.is_alive()
    # A closed group starts again: its new workers' parent thread (PR_SET_PDEATHSIG kills them when
    # it ends) lives on until close, rather than ending with the old one's exit signal.
    with g:
        assert g.call(checks.equivalence, batch_sizes=[1, 1], modes=("allreduce",))[1]["rank"] == 1
        assert g.spawner.is_alive() and g.alive()
    assert not g.spawner.is_alive()


def test_single_process_rows_say_how_ep_was_run():
    from dspark_lab.run import point as runner

    assert runner.failed_rows(LabConfig(ep_size=2), ["non_blocking"], RuntimeError("x"))[0]["ep_mode"] == "predicate_only"
    assert runner.failed_rows(LabConfig(ep_size=1), ["non_blocking"], RuntimeError("x"))[0]["ep_mode"] == "single"


def test_world_one_is_the_same_code_in_one_process():
    cfg = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=1, batch_size=2, gamma=2, device="cpu",
                    ep_size=2)
    res = M.measure_single(cfg, "allreduce", ["non_blocking", "device_direct"], profile_steps=2)
    assert {r["ep_mode"] for r in res.rows} == {"predicate_only"} and {r["world_size"] for r in res.rows} == {1}
    assert {r["gpu_collective_ms"] for r in res.rows} == {0.0}  # no peers, no collective
    assert set(res.samples) == {"non_blocking", "device_direct"}


def test_live_panel_runs_real_ranks_where_they_fit(monkeypatch, group2):
    from dspark_lab.run import live
    from dspark_lab import strategies
    from dspark_lab.parallel import workers
    from dspark_lab.parallel.run import EPLive

    monkeypatch.setattr(workers, "device_count", lambda: 2)  # as on two GPUs; the ranks run gloo here
    b = live.LiveBackend(base=LabConfig(model="tiny", workload="tiny", steps=1, warmup=0, trials=1, device="cpu"),
                          fingerprint={"gpu": "none", "driver": "none", "cuda": "none", "torch": "x"})
    assert b.runs_real_ep(2) and not b.runs_real_ep(4) and not b.runs_real_ep(1)
    b._ep_live = EPLive(profile_steps=2)
    b._ep_live.group = group2  # the module's running group: a group of the right size is reused
    d = b.get({"ep_size": 2, "batch_size": 2, "gamma": 2})
    assert b._ep_live.group is group2
    assert set(d.rows.ep_mode) == {"real"} and set(d.rows.world_size) == {2} and set(d.rows["rank"]) == {0}
    assert set(d.rows.strategy) == set(strategies.names()) and set(d.timelines.strategy) == set(strategies.names())
    assert "EP 2 (real ranks)" in d.note


def test_cli_ep_rejects_bad_dispatch(capsys):
    from dspark_lab.cli import main as cli

    with pytest.raises(SystemExit) as e:
        cli.main(["ep", "--dispatch", "allreduce,deepep"])
    assert e.value.code == 2
    assert "--dispatch must be a comma list of allreduce, a2a_fixed, a2a_dynamic" in capsys.readouterr().err


def test_run_ep_writes_a_run_file_with_the_group_in_its_header(group2, tmp_path):
    from dspark_lab.results.loading import load as run_load
    from dspark_lab.results.record import store
    from dspark_lab.parallel.run import run_ep

    cfg = LabConfig(model="tiny", workload="tiny", steps=1, warmup=0, trials=1, batch_size=2, gamma=2)
    res = run_ep(cfg, 2, ["a2a_dynamic"], [M.uniform("non_blocking", 2)], out=tmp_path, group=group2, profile_steps=2,
                 fingerprint={"gpu": "none"})
    header = store.read_header(res["path"])
    assert header["world_size"] == 2 and header["dispatch"] == ["a2a_dynamic"] and header["backend"] == "gloo"
    assert "nccl_version" in header
    rows = run_load.load(res["path"]).rows
    assert set(rows["rank"]) == {0, 1} and set(rows["ep_mode"]) == {"real"} and set(rows["dispatch"]) == {"a2a_dynamic"}
    assert group2.alive()  # a group passed in is left running


@pytest.mark.cuda
def test_nccl_ranks_match_the_reference_on_two_gpus():
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    with WorkerGroup(2, "nccl") as g:
        assert g.info[0]["nccl_version"]
        for res in g.call(checks.equivalence, batch_sizes=[8, 5], model="small"):
            for mode in dispatch.DISPATCH_MODES:
                assert res[mode]["tokens_equal"] and res[mode]["padded_pairs_sent"] == 0, (res["rank"], mode)
