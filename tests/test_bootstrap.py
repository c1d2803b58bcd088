"""The small-sample widening of every request-resampled interval (bootstrap.widen) and its
coverage near the floor of requests (routing.bootstrap.MIN_REQUESTS): bench/interval_coverage.py,
the pipeline's intervals beside the plain bootstrap's."""

import sys
from pathlib import Path

import numpy as np
import pytest

from specmoe.routing import bootstrap, overlap

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


@pytest.mark.parametrize("n", [10, 12, 40])
def test_the_factor_is_the_small_sample_correction_of_the_resamples_spread(n):
    """sqrt(n / (n - 1)) t_{n-1} / z: 1.216 at 10 requests, 1.045 at 40."""
    from scipy import stats

    c = np.sqrt(n / (n - 1)) * stats.t.ppf(0.975, n - 1) / stats.norm.ppf(0.975)
    assert bootstrap.small_sample_factor(n) == pytest.approx(c, rel=1e-12)
    assert bootstrap.small_sample_factor(10_000) == pytest.approx(1.0, abs=1e-3)


def test_each_interval_widens_about_its_point_and_a_bounded_one_keeps_its_bounds():
    """The percentile, basic and BCa builders widen each half-width about the point by the
    factor of the requests resampled (the jackknife's units for BCa); a bounded basic interval
    is clipped (and flagged) after widening."""
    rng = np.random.default_rng(1)
    boot = rng.gamma(2.0, 1.0, 4000)
    est, n = 1.7, 10
    f = bootstrap.small_sample_factor(n)
    q_lo, q_hi = np.percentile(boot, bootstrap.tails())
    lo, hi = overlap._percentiles(boot, est, n)
    assert (est - lo, hi - est) == pytest.approx((f * (est - q_lo), f * (q_hi - est)))
    blo, bhi = overlap.basic_interval(est, boot, n)
    assert (est - blo, bhi - est) == pytest.approx((f * (q_hi - est), f * (est - q_lo)))
    clo, chi, clipped = overlap.bounded_basic_interval(est, boot, est - 0.5 * (est - blo),
                                                       np.inf, n=n)
    assert clipped and clo == pytest.approx(est - 0.5 * (est - blo)) and chi == pytest.approx(bhi)
    jack = rng.normal(est, 0.1, n)
    old = bootstrap.small_sample_factor
    try:
        bootstrap.small_sample_factor = lambda n, level=None: 1.0
        plain = overlap.bca_interval(boot, est, jack)
    finally:
        bootstrap.small_sample_factor = old
    wide = overlap.bca_interval(boot, est, jack)
    assert (est - wide[0], wide[1] - est) == pytest.approx((f * (est - plain[0]),
                                                            f * (plain[1] - est)))


def test_near_the_floor_of_requests_the_pipeline_covers_where_the_plain_bootstrap_does_not():
    """On routing without locality (the bench's design), the plain bootstrap's sequence excess
    (basic) and sequence decay (BCa) intervals at 10 requests leave the truth out of more than
    7% of 400 seeded traces (8.5% and 8.0%), the pipeline's widened ones out of at most 7%."""
    import interval_coverage

    stats = ["sequence excess", "sequence decay"]
    pipeline = interval_coverage.miss_rates(10, 400, "pipeline", stats)
    plain = interval_coverage.miss_rates(10, 400, "plain", stats)
    assert (pipeline <= 0.07).all() and (plain > 0.07).all(), (pipeline, plain)
