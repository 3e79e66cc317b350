"""The card's wait/launch cells measured on this GPU (CUDA; the settings check runs on CPU): every cell
measures without an error, a stream sync waits for the queued work, a launch and a cross-stream wait do
not, and a blocking event burns less of the host's CPU over its wait than a spinning one
(CUDA documents cudaEventBlockingSync as blocking the waiting thread until the event completes). About 3 s on an H200."""
import pytest
import torch

from dspark_lab.results.analyses import card_primitives as P


def test_bad_settings_name_the_field_and_without_cuda_the_cells_say_why():
    from dspark_lab.measure import card_primitives as M

    with pytest.raises(ValueError, match="reps must be an integer >= 3"):
        M.measure_primitives(reps=2)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="need a CUDA device"):
            M.measure_primitives()


@pytest.mark.cuda
def test_the_wait_launch_cells_measure_and_verdict_on_this_gpu():
    from dspark_lab.measure import card_primitives as M

    cells = M.measure_primitives(queued_ms=(0.0, 5.0), reps=3)
    f = P.frame({"primitives": cells})
    assert not f["error"].astype(bool).any(), f.loc[f["error"] != "", ["name", "param", "error"]].to_string()
    assert set(f["name"]) == set(P.PRIMITIVES)
    q = f[f["queue"] == "queued"].drop_duplicates("name").set_index("name")
    for name in ("stream_sync", "device_sync", "event_sync_spin", "event_sync_blocking"):
        assert q.loc[name, "verdict"] == P.WAITS, name
    for name in ("kernel_launch", "wait_event", "wait_stream", "event_record", "current_stream"):
        assert q.loc[name, "verdict"] != P.WAITS, name
    assert q.loc["event_sync_blocking", "cpu_share"] < q.loc["event_sync_spin", "cpu_share"]
    assert len(P.graph_fits(f)) == 4  # two shapes x two queues
    assert P.cross_stream_wait_cost({"primitives": cells, "fingerprint": {}})["gpu_us"] >= 0
