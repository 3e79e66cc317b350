"""The CPU stand-in of the target verify serves every batch the config allows (it
once had 16 rows, so every batch above 16 failed on CPU)."""
import pytest
import torch

from dspark_lab.config import CAPTURE_BUCKETS, LabConfig
from dspark_lab.model.workload import LabStep, TargetVerify

# Every capture bucket, plus sizes that pad up to a bucket (17 -> 24, 255 -> 256).
BATCHES = sorted(set(CAPTURE_BUCKETS) | {3, 17, 255})


def test_cpu_stand_in_gives_one_bonus_token_per_request_for_every_batch():
    for b in BATCHES:
        tv = TargetVerify(0.0, torch.device("cpu"), vocab=256, batch=b)
        bonus = tv.launch()
        assert bonus.shape == (b,), b
        assert tv.x.shape[0] >= b


@pytest.mark.parametrize("batch", BATCHES)
def test_lab_step_runs_on_cpu_at_every_batch(batch):
    cfg = LabConfig(model="tiny", workload="tiny", device="cpu", batch_size=batch, gamma=2)
    s = LabStep(cfg)
    s.step()
    s.step()
    # The bonus tokens the target verify produced went into column 0 of every real request's row.
    assert torch.equal(s.block_ids[:batch, 0], s.target.bonus[:batch])
    assert s.block_ids.shape[0] == cfg.bucket_batch_size
    assert s.last_output.shape[0] == cfg.num_tokens  # one draft token per real row (batch x gamma)
