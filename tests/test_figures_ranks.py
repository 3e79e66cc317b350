"""Per-rank figures from rows with the rank dimension (synthetic rows: the numbers are inputs)."""
import pandas as pd
import pytest

from dspark_lab.views.figures import ranks as FR
from dspark_lab.results.record import schema


def _rows():
    rows = []
    cases = {"non_blocking,non_blocking": (6.0, 6.0), "device_direct,device_direct": (8.0, 8.0),
             "device_direct,non_blocking": (7.9, 7.9)}
    for case, steps in cases.items():
        for rank in (0, 1):
            for trial in range(3):
                r = {c: 0.0 for c in schema.HOST_PARTS + schema.GPU_PARTS}
                r.update(status="ok", ep_mode="real", dispatch="a2a_fixed", world_size=2, ep_size=2, rank=rank,
                         rank_case=case, strategy=case.split(",")[rank], step_ms=steps[rank], step_ms_max_rank=max(steps),
                         gpu_collective_ms=0.1 + rank, gpu_idle_after_sync_ms=0.0, device="cuda", batch_size=8,
                         gamma=4, workload="sglang_profile", model="small", trial=trial, gpu="NVIDIA H200",
                         driver="1", cuda="13", torch="2.11", recorded_at="2026-11-30", run_id="r",
                         blocked_from_others_ms=0.5 if case == "device_direct,non_blocking" and rank == 1 else 0.0,
                         collective_from_others_ms=0.0)
                rows.append(r)
    return pd.DataFrame(rows)


def test_breakdown_has_a_bar_pair_per_rank_and_collectives_as_a_gpu_part():
    fig = FR.per_rank_breakdown(_rows())
    coll = [t for t in fig.data if t.name == FR.COLLECTIVE_NAME]
    assert len(coll) == 1 and coll[0].offsetgroup == "gpu"
    assert list(coll[0].y) == pytest.approx([0.1, 1.1] * 3)
    assert list(coll[0].x[1][:2]) == ["r0", "r1"]  # the case label names each rank's strategy
    assert list(coll[0].x[0][:2]) == ["all non_blocking"] * 2
    assert "EP 2 (real ranks)" in fig.layout.title.subtitle.text


def test_one_rank_share():
    t = FR.one_rank_share(_rows())
    assert t.loc[0, "share_of_penalty"] == pytest.approx((7.9 - 6.0) / (8.0 - 6.0))


def test_who_waits_and_bad_input():
    fig = FR.who_waits(_rows())
    assert max(fig.data[0].y) == 0.5
    with pytest.raises(ValueError, match="RANK_COLUMNS"):
        FR.per_rank_breakdown(pd.DataFrame({"status": ["ok"]}))
    with pytest.raises(ValueError, match="no rows with ep_mode 'real' and dispatch 'x'"):
        FR.per_rank_breakdown(_rows(), dispatch="x")
