"""The minimum detectable effect against its definition: at the MDE, the test rejects 80% of the time."""

import numpy as np
import pytest
from scipy import stats as sps

from populora.evaluation import power


def test_normal_mde_is_z_alpha_plus_z_power_standard_errors():
    assert power.detectable(0.01, None) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)


def test_t_mde_has_80_percent_power_by_simulation():
    # a one-sample t test with 3 observations (2 df) at the MDE rejects 80% of the time
    rng = np.random.default_rng(0)
    sd, n = 1.0, 3
    effect = power.detectable(sd / np.sqrt(n), n - 1)
    x = rng.normal(effect, sd, (20000, n))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / np.sqrt(n))
    rate = np.mean(np.abs(t) > sps.t.isf(0.025, n - 1))
    assert rate == pytest.approx(0.8, abs=0.01)


def test_more_seeds_and_samples_shrink_the_mde_and_one_seed_is_the_adapters():
    p = power.beta_p({"gsm8k": 0.8, "aime24": 0.1}, {"gsm8k": 1319, "aime24": 30})
    one = power.mde(power.Design(p, seeds=1))
    three = power.mde(power.Design(p, seeds=3))
    ten = power.mde(power.Design(p, seeds=10))
    sampled = power.mde(power.Design(p, seeds=3, samples=8))
    assert one["level"] == "adapters" and three["level"] == "method"
    assert ten["overall"] < three["overall"] and sampled["overall"] < three["overall"]
    assert three["per_benchmark"]["aime24"] > three["per_benchmark"]["gsm8k"]  # 30 problems vs 1319
    need = power.seeds_needed(power.Design(p, seeds=1), three["overall"])
    assert need == 3
    assert "needs >= 2 seeds per arm" in power.words(one) and "3 seeds per arm detect >= " in power.words(three)
