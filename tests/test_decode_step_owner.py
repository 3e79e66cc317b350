"""Notebook 06's fix, on CPU: the device-side owner (`_owner_of_rows_padded`) gives `repeat_interleave`'s
rows over inputs of several shapes (zero repeats, one token, a bound equal to the total or above it), the
fixed decode step gives the slow step's values at several batch and draft sizes, and the fixed step
reads no size back where the slow step does: the read stub (measure.read_stub.ReadStub, CPU tensors
standing in for device ones) records each call that reads a device value on the host, by kind and site.
"""
from __future__ import annotations

import pytest
import torch

from dspark_lab.gallery import cases as C
from dspark_lab.gallery import decode_step as D
from dspark_lab.measure.read_stub import ReadStub

SIZE_READS = {"repeat_interleave", "nonzero", "mask"}  # the read stub's kinds of call that read a size back


@pytest.mark.parametrize("n,max_repeat,slack,seed", [
    (1, 1, 0, 0), (1, 5, 3, 1), (7, 0, 4, 2), (7, 3, 0, 3), (33, 5, 17, 4), (64, 5, 0, 5), (257, 9, 100, 6)])
def test_the_device_owner_gives_repeat_interleaves_rows_then_padding(n, max_repeat, slack, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 50_000, (n,), generator=g)
    repeats = torch.randint(0, max_repeat + 1, (n,), generator=g)
    total = int(repeats.sum())
    owner = D._owner_of_rows_padded(tokens, repeats, total + slack)
    assert owner.shape == (total + slack,) and owner.dtype == tokens.dtype
    assert torch.equal(owner[:total], torch.repeat_interleave(tokens, repeats))
    assert bool((owner[total:] == D.PAD_OWNER).all())


def _state(batch: int, draft: int, seed: int) -> C.State:
    """The smoke-scale state cut to `batch` requests of `draft` draft tokens, with random acceptances."""
    s = C.make_state("cpu", "smoke", seed=seed)
    g = torch.Generator().manual_seed(1000 + seed)
    s.seq_lens_cpu = torch.randint(16, 4096, (batch,), generator=g)
    s.seq_lens = s.seq_lens_cpu.clone()
    s.accept = torch.rand(batch, draft, generator=g) < torch.rand(1, generator=g)
    s.d2h_pinned = torch.empty(batch, dtype=torch.int64)
    return s


@pytest.mark.parametrize("batch,draft,seed", [(1, 1, 0), (1, 4, 1), (3, 0, 2), (5, 3, 3), (8, 4, 4), (8, 7, 5)])
def test_the_fixed_decode_step_gives_the_slow_steps_values_at_several_shapes(batch, draft, seed):
    s = _state(batch, draft, seed)
    (pos_a, owner_a, lens_a, n_a), (pos_b, owner_b, lens_b, n_b) = D.decode_step_slow(s), D.decode_step_fixed(s)
    assert torch.equal(pos_a, pos_b) and torch.equal(lens_a, lens_b) and n_a == n_b
    assert owner_b.numel() == batch * (draft + 1)  # the static bound: every draft token accepted, plus the bonus
    assert torch.equal(owner_b[: owner_a.numel()], owner_a)
    assert bool((owner_b[owner_a.numel():] == D.PAD_OWNER).all())


def _reads(step, s: C.State) -> dict:
    """{site's function: set of kinds} of every device read `step(s)` makes, over two steps."""
    with ReadStub(devices=("cpu",)) as stub:
        reads = stub.record(lambda: step(s), steps=2)
    out: dict = {}
    for site, r in reads.items():
        out.setdefault(site.split(" ")[-1], set()).add(r.kind)
    return out


def test_the_fixed_step_reads_no_size_back_where_the_slow_step_does():
    slow, fixed = _reads(D.decode_step_slow, _state(8, 4, 0)), _reads(D.decode_step_fixed, _state(8, 4, 0))
    assert slow.get("_owner_of_rows") == {"repeat_interleave"}  # the read the stub must see, or the check is blind
    assert not any(kinds & SIZE_READS for kinds in fixed.values()), fixed
    assert "_owner_of_rows" not in fixed and "_owner_of_rows_padded" not in fixed
    assert fixed.get("_count_accepted") == {"item"}  # the read the fix keeps, by its allow-list


def test_the_investigation_study_runs_on_cpu_writes_its_record_and_prints_its_table_last(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from dspark_lab.results.record import investigation

    if torch.cuda.is_available():
        pytest.skip("the dry run is the path without CUDA (on a GPU the study records for real)")
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "studies.field.record_investigation", "--cpu-dry-run", "--steps", "2", "--rounds", "2",
           "--calls", "3"]
    p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(root)})
    assert p.returncode == 0, p.stderr[-2000:]
    [path] = (tmp_path / "investigation-cpu-dry-run" / "data" / "investigation").glob("*-decode-step-*.json")
    rec = investigation.load(path)
    assert rec["after"]["target"].endswith("fixed_step()") and rec["before"]["pair"]["id"] == rec["after"]["pair"]["id"]
    assert rec["owner_forms"]["equal"] and rec["owner_forms"]["calls"] == 3 and rec["races"]["checked"] is False
    out = p.stdout.strip().splitlines()
    assert "where every wait went (ms per step):" in out and out[-1].startswith("owner forms, 3 calls")
    without = subprocess.run(cmd[:3], cwd=root, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "OUT": str(tmp_path / "none"), "PYTHONPATH": str(root)})
    assert without.returncode == 2 and "no CUDA device" in without.stdout and not (tmp_path / "none").exists()


@pytest.mark.cuda
@pytest.mark.parametrize("n,max_repeat,slack", [(1, 1, 0), (7, 0, 4), (64, 5, 0), (257, 9, 100)])
def test_on_cuda_the_device_owner_gives_repeat_interleaves_rows_with_no_sync(n, max_repeat, slack):
    g = torch.Generator().manual_seed(n)
    tokens = torch.randint(0, 50_000, (n,), generator=g).cuda()
    repeats = torch.randint(0, max_repeat + 1, (n,), generator=g).cuda()
    want = torch.repeat_interleave(tokens, repeats)
    bound = want.numel() + slack
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any sync inside the device form raises
    try:
        owner = D._owner_of_rows_padded(tokens, repeats, bound)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(owner[: want.numel()], want) and bool((owner[want.numel():] == D.PAD_OWNER).all())
