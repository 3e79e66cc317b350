"""`dspark-lab ep --launcher torchrun` on CPU: real torchrun agents on 127.0.0.1 (c10d rendezvous,
gloo ranks) acting as nodes, a node killed mid-run, mismatched options, an unreachable rendezvous,
and the single-host worker group recording the same rows as torchrun.

Every process a test starts carries a token in its environment; after the test none may be left
(they are killed and the test fails if one is)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dspark_lab.model.dispatch import DISPATCH_MODES
from dspark_lab.parallel import torchrun
from dspark_lab.parallel.ranks import RankContext
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record import schema
from dspark_lab.results.record import store

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV = "DSPARK_TORCHRUN_TEST"
# Small on purpose (CI has 2 cores): one strategy on every rank, every dispatch mode, one trial.
TINY = ["--model", "tiny", "--workload", "tiny", "--steps", "2", "--warmup", "0", "--trials", "1", "--batch-size", "2",
        "--gamma", "2", "--strategies", "non_blocking", "--rank0-only", "non_blocking", "--profile-steps", "2",
        "--backend", "gloo", "--timeout-s", "30"]
# Columns that are measured (timings, traces, diagnostics, cross-rank comparisons): set aside in comparisons.
FIXED_RANK_COLUMNS = ("rank", "world_size", "node", "node_rank", "local_rank", "ep_mode", "dispatch", "rank_case",
                      "rank_strategies", "host_delay_ms", "host_jitter_ms")
FIXED_COLUMNS = schema.CONFIG_COLUMNS + schema.STATUS_COLUMNS + ("trial", "steps") + FIXED_RANK_COLUMNS
KILL_DEADLINE_S = 60.0  # the surviving node must exit within this after the other is killed
RUN_DEADLINE_S = 240.0  # a whole small run (torch imports on a loaded 2-core machine dominate)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pids_with_token(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if f"{TOKEN_ENV}={token}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def token():
    """A token the test's processes inherit; none may outlive the test."""
    tok = uuid.uuid4().hex
    yield tok
    left = _pids_with_token(tok)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes outlived the test: {left}"


class Agent:
    """One torchrun agent (a node) in its own session, its output in a file."""

    def __init__(self, tmp: Path, name: str, token: str, *, nnodes: int, nproc: int, port: int, ep_args: list):
        self.log = tmp / f"{name}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TOKEN_ENV: token, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={token[:8]}",
               "--max-restarts=0", "-m", "dspark_lab.cli", "ep", "--launcher", "torchrun", *ep_args]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"torchrun agent still running after {timeout_s:.0f} s; its log:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        """The node dies: SIGKILL to the agent's session (its ranks die with it: PR_SET_PDEATHSIG)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _nodes(tmp, token, n_nodes, nproc, args_per_node):
    port = _free_port()
    return [Agent(tmp, f"node{i}", token, nnodes=n_nodes, nproc=nproc, port=port, ep_args=args_per_node[i])
            for i in range(n_nodes)]


def _wait_all(agents, timeout_s=RUN_DEADLINE_S) -> list[int]:
    deadline = time.monotonic() + timeout_s
    return [a.wait(max(1.0, deadline - time.monotonic())) for a in agents]


def _fixed(rows) -> list[tuple]:
    return sorted(tuple(str(v) for v in rec) for rec in rows[list(FIXED_COLUMNS)].itertuples(index=False))


def test_two_nodes_of_two_ranks_write_one_run_file(tmp_path, token):
    out = tmp_path / "run.jsonl"
    args = TINY + ["--check-reference", "--out", str(out)]
    agents = _nodes(tmp_path, token, 2, 2, [args, args])
    codes = _wait_all(agents)
    assert codes == [0, 0], "\n".join(a.output()[-3000:] for a in agents)
    header = store.read_header(out)
    assert header["launcher"] == "torchrun" and header["world_size"] == 4 and header["nodes"] == 2
    assert header["backend"] == "gloo" and header["dispatch"] == list(DISPATCH_MODES)
    # Outputs equal to the one-process reference on every rank, for every dispatch mode.
    for mode in DISPATCH_MODES:
        ref = header["reference_check"][mode]
        assert ref["ranks"] == 4 and ref["tokens_equal"] and ref["padded_pairs_sent"] == 0, (mode, ref)
        assert ref["moe_max_abs_diff"] < 1e-4, (mode, ref)
    rows = run_load.load(out).rows
    assert sorted(set(rows["rank"])) == [0, 1, 2, 3] and set(rows["status"]) == {"ok"}
    assert set(rows["dispatch"]) == set(DISPATCH_MODES) and set(rows["world_size"]) == {4}
    assert set(rows["node"]) == {socket.gethostname()}
    # Global rank = node rank x processes per node + local rank, as torchrun numbers them.
    for r in rows.itertuples():
        assert (r.node_rank, r.local_rank) == divmod(r.rank, 2), r
    assert {(r["rank"], r["node_rank"]) for r in header["ranks"]} == {(0, 0), (1, 0), (2, 1), (3, 1)}
    # Who waits for whom spans nodes: the cross-rank maximum is taken over all four ranks.
    for _, trial in rows.groupby(["dispatch", "rank_case", "trial"]):
        assert len(trial) == 4 and (trial.step_ms_max_rank == trial.step_ms.max()).all()


def test_killing_one_node_stops_the_other_and_leaves_no_ok_row_unfinished(tmp_path, token):
    out = tmp_path / "run.jsonl"
    # Longer points, so the kill lands while a later point is being measured.
    args = TINY + ["--out", str(out), "--steps", "40", "--trials", "2"]  # later options win
    agents = _nodes(tmp_path, token, 2, 2, [args, args])
    deadline = time.monotonic() + RUN_DEADLINE_S
    while not (out.exists() and '"kind":"point"' in out.read_text()):  # the first point committed
        if time.monotonic() > deadline or any(a.proc.poll() is not None for a in agents):
            pytest.fail("the run did not commit a first point:\n" + "\n".join(a.output()[-3000:] for a in agents))
        time.sleep(0.05)
    agents[1].kill()
    t0 = time.monotonic()
    code = agents[0].wait(KILL_DEADLINE_S)
    assert code != 0 and time.monotonic() - t0 < KILL_DEADLINE_S, agents[0].output()[-3000:]
    rows = run_load.load(out).rows
    ok = set(rows.loc[rows.status == "ok", "dispatch"])
    assert DISPATCH_MODES[0] in ok  # the point committed before the kill stays
    unfinished = [d for d in DISPATCH_MODES if d not in ok]
    assert unfinished, "every point finished before the kill: nothing was tested"
    for d in unfinished:
        assert not ((rows.dispatch == d) & (rows.status == "ok")).any(), d
    failed = rows[rows.status == "failed"]
    assert failed.error.str.contains("Error").all()  # a failed point says why (when rank 0 survived)


def test_ranks_started_with_different_options_are_refused_naming_them(tmp_path, token):
    out = tmp_path / "run.jsonl"
    base = TINY + ["--out", str(out)]
    agents = _nodes(tmp_path, token, 2, 1, [base + ["--steps", "2"], base + ["--steps", "3"]])
    codes = _wait_all(agents)
    assert all(c != 0 for c in codes), codes
    for a in agents:
        text = a.output()
        assert "exitcode  : 2" in text, text[-3000:]  # each rank's usage error, as its agent reports it
        # Which node gets rank 0 is the rendezvous' choice.
        assert "different options" in text, text[-3000:]
        assert "--steps: rank 0 2, rank 1 3" in text or "--steps: rank 0 3, rank 1 2" in text, text[-3000:]
    assert not out.exists()  # refused before anything is written


def test_single_host_launcher_and_torchrun_record_the_same_rows(tmp_path, token, monkeypatch):
    from dspark_lab.cli import main as cli

    monkeypatch.setenv(TOKEN_ENV, token)  # the worker group's ranks are checked too
    single, under_torchrun = tmp_path / "workers.jsonl", tmp_path / "torchrun.jsonl"
    assert cli.main(["ep", "--world", "2", *TINY, "--out", str(single)]) == 0
    agents = _nodes(tmp_path, token, 1, 2, [TINY + ["--out", str(under_torchrun)]])
    assert _wait_all(agents) == [0], agents[0].output()[-3000:]
    a, b = store.read_header(single), store.read_header(under_torchrun)
    assert (a["launcher"], b["launcher"]) == ("workers", "torchrun")
    assert a["sweep"] == b["sweep"] and a["world_size"] == b["world_size"] == 2
    rows_a, rows_b = run_load.load(single).rows, run_load.load(under_torchrun).rows
    assert len(rows_a) == len(rows_b) == 2 * len(DISPATCH_MODES)
    assert _fixed(rows_a) == _fixed(rows_b)


def test_a_rank_that_cannot_reach_the_rendezvous_names_the_endpoint(tmp_path, token):
    port = _free_port()  # nothing listens there
    env = {**os.environ, "PYTHONPATH": str(ROOT), TOKEN_ENV: token, "RANK": "1", "WORLD_SIZE": "2",
           "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    p = subprocess.run([sys.executable, "-m", "dspark_lab.cli", "ep", "--launcher", "torchrun", *TINY, "--timeout-s", "2",
                        "--out", str(tmp_path / "r.jsonl")], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-3000:]
    assert f"could not join the process group at 127.0.0.1:{port}" in p.stderr and "within 2 s" in p.stderr


def test_torchrun_launcher_outside_torchrun_names_the_missing_variables(monkeypatch, capsys):
    from dspark_lab.cli import main as cli

    for k in torchrun.REQUIRED_ENV:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(SystemExit) as e:
        cli.main(["ep", "--launcher", "torchrun", *TINY])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--launcher torchrun needs RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT" in err
    assert "missing: RANK" in err


def test_option_check_names_every_differing_option():
    ctx = RankContext.single("cpu")
    mine = {"steps": 2, "dispatch": ["allreduce"], "out": "a.jsonl"}
    other = {"steps": 3, "dispatch": ["allreduce"], "out": "b.jsonl"}
    ctx.all_gather_object = lambda obj: [obj, (torchrun.options_digest(other), other, obj[2])]
    with pytest.raises(torchrun.OptionsMismatch) as e:
        torchrun.check_same_options(ctx, mine)
    msg = str(e.value)
    assert "--out: rank 0 'a.jsonl', rank 1 'b.jsonl'" in msg and "--steps: rank 0 2, rank 1 3" in msg
    assert "--dispatch" not in msg
    ctx.all_gather_object = lambda obj: [obj, obj]
    assert torchrun.check_same_options(ctx, mine)[0]["rank"] == 0  # equal options pass


@pytest.mark.cuda
def test_one_gpu_under_torchrun_uses_nccl(tmp_path, token):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    out = tmp_path / "run.jsonl"
    args = [a if a != "gloo" else "nccl" for a in TINY] + ["--dispatch", "allreduce", "--out", str(out)]
    agents = _nodes(tmp_path, token, 1, 1, [args])
    assert _wait_all(agents) == [0], agents[0].output()[-3000:]
    header = store.read_header(out)
    assert header["backend"] == "nccl" and header["nccl_version"] and header["launcher"] == "torchrun"
    rows = run_load.load(out).rows
    assert set(rows.device) == {"cuda"} and set(rows.local_rank) == {0} and set(rows.status) == {"ok"}
