"""The EP N prediction (torch-free): expected maximum over ranks of per-step host-ready times."""
import numpy as np
import pytest

from dspark_lab.results.analyses import ep_predict as P


def test_no_noise_no_jitter_predicts_the_slowest_rank():
    fast, slow = P.OneRank((5.0,) * 10), P.OneRank((7.0,) * 10)
    assert P.predict_step_ms([fast, fast]) == pytest.approx(5.0)
    # One slow rank sets every rank's step: the mixed case costs the whole penalty.
    assert P.predict_step_ms([slow, fast]) == pytest.approx(7.0)


def test_delay_is_absorbed_by_slack_then_adds():
    r = P.OneRank((6.0,) * 4, slack_ms=0.6)
    assert P.predict_step_ms([r, r], host_delay_ms=(0.5, 0.0)) == pytest.approx(6.0)
    assert P.predict_step_ms([r, r], host_delay_ms=(1.0, 0.0)) == pytest.approx(6.4)


def test_expected_max_of_uniform_jitter_grows_with_ranks():
    r = P.OneRank((5.0,) * 4)
    preds = [P.predict_step_ms([r] * n, host_jitter_ms=(1.0,) * n) for n in (1, 2, 4, 8)]
    # E[max of n uniform(0, 1)] = n / (n + 1)
    for n, p in zip((1, 2, 4, 8), preds):
        assert p == pytest.approx(5.0 + n / (n + 1), abs=0.02)


def test_noise_max_is_resampled():
    rng = np.random.default_rng(0)
    r = P.OneRank(tuple(6.0 + rng.normal(0, 0.2, 500)))
    assert P.predict_step_ms([r, r]) > P.predict_step_ms([r])


def test_validate_compares_with_real_rows():
    one = {"non_blocking": P.OneRank((6.0,) * 3), "device_direct": P.OneRank((8.0,) * 3)}
    rows = [dict(rank_case="device_direct,non_blocking", world_size=2, rank=k, rank_strategies="device_direct,non_blocking",
                 host_delay_ms=0.0, host_jitter_ms=0.0, step_ms_max_rank=8.0, dispatch="a2a_fixed") for k in (0, 1)]
    (v,) = P.validate(one, rows)
    assert v["predicted_ms"] == pytest.approx(8.0) and v["error_pct"] == pytest.approx(0.0)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="host_delay_ms and host_jitter_ms must give one value per rank"):
        P.predict_step_ms([P.OneRank((1.0,))] * 2, host_delay_ms=(1.0,))
    with pytest.raises(ValueError, match="no one-rank timings for strategy 'x'"):
        P.predict_case({}, ["x"])


def test_noise_can_be_left_out():
    r = P.OneRank((5.0, 7.0) * 50)  # an alternating pattern: mean 6
    assert P.predict_step_ms([r, r], noise=False) == pytest.approx(6.0)
    assert P.predict_step_ms([r, r]) > 6.2
