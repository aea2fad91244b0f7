"""rliable's aggregates: the point estimates are rliable's functions; the batched formulas the stratified bootstrap
uses agree with them resample by resample; the bootstrap resamples runs within each benchmark only."""

import numpy as np
import pytest
from rliable import metrics

from populora.evaluation.statistics import aggregates as A


def test_batched_formulas_equal_rliables_functions_on_every_resample():
    rng = np.random.default_rng(0)
    x = np.round(rng.random((20, 3, 5)), 1)  # rounded: ties happen, as with pass@1 on small benchmarks
    y = np.round(rng.random((20, 4, 5)), 1)
    assert A.iqm_batch(x) == pytest.approx([metrics.aggregate_iqm(m) for m in x])
    assert A.poi_batch(x, y) == pytest.approx([metrics.probability_of_improvement(a, b) for a, b in zip(x, y)])
    # the profile: share of runs above tau, averaged over benchmarks (rliable's run-score distribution)
    taus = (0.0, 0.3, 0.7)
    assert A.profile_batch(x, taus) == pytest.approx(np.array([[np.mean([(m[:, t] > tau).mean() for t in range(5)])
                                                                for tau in taus] for m in x]))


def test_stratified_bootstrap_resamples_runs_within_each_benchmark():
    # every run of benchmark 0 scores 0.2 and of benchmark 1 scores 0.8: resampling within benchmarks can never
    # mix them, so every resample's IQM is 0.5 exactly (a pooled bootstrap would wander)
    m = np.array([[0.2, 0.8]] * 4)
    assert A.stratified_bootstrap([m], A.iqm_batch, 500) == (0.5, 0.5)
    assert A.stratified_bootstrap([m[:1]], A.iqm_batch) is None  # one run: nothing to resample, no interval


def test_summary_of_a_clear_gain():
    rng = np.random.default_rng(1)
    base = rng.normal(0.4, 0.02, (5, 10))
    pop = base + 0.1
    s = A.summary({"pop": pop, "baseline": base}, "baseline", n_resamples=500)
    assert s["iqm"]["pop"]["value"] == pytest.approx(metrics.aggregate_iqm(pop))
    lo, hi = s["iqm"]["pop"]["ci95"]
    assert lo <= s["iqm"]["pop"]["value"] <= hi
    poi = s["probability_of_improvement"]["pop"]
    assert poi["value"] > 0.95 and poi["ci95"][0] > 0.8
    assert "baseline" not in s["probability_of_improvement"]
    assert "P(pop > baseline) = " in A.words(s, "baseline")[0]
