"""Speedup curves from sweep points (pure): speedup, draft cost, TE from the sweep, shape label."""

import math

import numpy as np
import pytest
from scipy import stats

from specmoe.cost.costmodel import speedup
from specmoe.errors import InputError
from specmoe.measured.sweep import (CONCAVE, FLAT, PEAK_LOW, RISING, TE_NO_INTERVAL, TOO_FEW,
                                    UNDECIDED, Estimate, series_estimates, shape_label,
                                    speedup_curve)

MARGIN = 0.05  # the schema's default sweep.shape_margin
# a series' provenance as a sweep on a CPU writes it (its engine names the device)
CPU_SERIES = {"engine": "vllm 0.32.0 (cpu)"}


def point(batch, tpot, tau=None, per_pos=None):
    p = {"batch": batch, "tpot_ms": {"mean": tpot, "median": tpot * 0.98, "p99": tpot * 1.3},
         "output_throughput": batch * 1000.0 / tpot}
    if tau is not None:
        p["sd"] = {"acceptance_length": tau, "per_position_acceptance": per_pos or []}
    return p


def measured_once(batch, tpot_ms, std, sd=None, n=100):
    """A point measured once: its TPOT's spread over n requests, the client's (SD when `sd`, the
    acceptance length, is given)."""
    p = point(batch, tpot_ms, tau=sd)
    p["tpot_ms"]["std"], p["completed"] = std, n
    return p


def repeated(batch, tpots, tau=None):
    """A point measured len(tpots) times on one engine (its repeats)."""
    return [point(batch, t, tau=tau) | {"repeat": r} for r, t in enumerate(tpots)]


def exact(values):
    """Speedups known exactly (no error): the margin alone decides."""
    return [Estimate(v, 0.0, math.inf) for v in values]


@pytest.mark.parametrize("speedups,label", [
    ([2.0, 1.8, 1.5, 1.1], PEAK_LOW),            # monotone decreasing
    ([1.5, 1.9, 1.7, 1.2], CONCAVE),             # interior maximum well above both ends
    ([1.5, 1.52, 1.4, 1.2], PEAK_LOW),           # interior maximum inside the margin
    ([1.0, 1.2, 1.4, 1.6], RISING),              # rising with batch size is not a low-batch peak
    ([1.0, 1.3, 1.5, 1.48], RISING),             # ends within the margin of its maximum
    ([1.0, 1.03, 0.99, 1.02], FLAT),             # every pair within the margin
])
def test_shape_label_of_exact_curves(speedups, label):
    assert shape_label([1, 2, 4, 8], exact(speedups), margin=MARGIN) == label


def test_shape_label_ignores_order_and_nan():
    assert shape_label([8, 1, 4, 2], exact([1.2, 1.5, 1.7, 1.9]), MARGIN) == CONCAVE
    assert shape_label([1, 2], exact([1.0, 2.0]), MARGIN) == RISING
    assert shape_label([1, 2, 4], exact([1.0, float("nan"), 2.0]), MARGIN) == RISING
    assert shape_label([1, 2], exact([1.0, float("nan")]), MARGIN) == TOO_FEW


@pytest.mark.parametrize("speedups", [
    [1.02, 1.13, 0.95, 0.99],   # labelled "concave" from single measurements
    [0.83, 0.95, 0.86, 0.93],   # labelled "rising"
])
def test_zig_zags_within_their_noise_are_undecided(speedups):
    """Per-point errors of 5% (the size sweeps on a CPU show) do not decide these curves' shapes;
    the same points measured 10 times as precisely do."""
    noisy = [Estimate(v, 0.05, 8) for v in speedups]
    assert shape_label([1, 2, 4, 8], noisy, MARGIN) == UNDECIDED
    precise = [Estimate(v, 0.005, 8) for v in speedups]
    assert shape_label([1, 2, 4, 8], precise, MARGIN) not in (UNDECIDED, FLAT)


def _sim_series(rng, true_tpot, rel_sd, repeats, tau=None):
    return [point(b, t * math.exp(rng.normal(0, rel_sd)), tau=tau) | {"repeat": r}
            for b, t in true_tpot.items() for r in range(repeats)]


def _engine_series(rng, true_tpot, rel_sd, repeats, engine_sd, tau=None):
    """One engine's series: each batch size's repeats share the engine's own offset."""
    off = {b: math.exp(rng.normal(0, engine_sd)) for b in true_tpot}
    return _sim_series(rng, {b: t * off[b] for b, t in true_tpot.items()}, rel_sd, repeats, tau)


def test_the_engine_to_engine_spread_widens_the_interval_to_its_coverage():
    """Each series on its own engine, whose offset at each batch size (log sd 0.08) its repeats
    share and cannot see: intervals from the repeats alone cover the true speedup far less often
    than 95%; with engine_log_sd set to the spread, about 95% again."""
    rng = np.random.default_rng(1)
    ar_true = {1: 10.0, 2: 11.0, 4: 12.0, 8: 14.0}
    sd_true = {b: t / 1.3 for b, t in ar_true.items()}
    cover = {0.0: 0, 0.08: 0}
    total = 0
    for _ in range(300):
        ar = _engine_series(rng, ar_true, 0.04, 3, 0.08)
        sd = _engine_series(rng, sd_true, 0.04, 3, 0.08, tau=2.0)
        for e in cover:
            for r in speedup_curve(ar, sd, None, 3, MARGIN, "client", e)["rows"]:
                cover[e] += r["speedup_low"] <= 1.3 <= r["speedup_high"]
        total += len(ar_true)
    assert cover[0.0] / total < 0.8
    assert 0.92 <= cover[0.08] / total <= 0.98


def test_an_engine_spread_estimated_from_few_engines_carries_its_degrees_of_freedom():
    """Where the engine spread dominates a point's error and is itself estimated from 4 engines
    (3 degrees of freedom, drawn anew for each simulated run), an interval that takes it as
    known (normal quantile) covers the true speedup clearly less than 95% of the time; with its
    degrees of freedom carried (t quantile, Welch-Satterthwaite) about 95%."""
    rng = np.random.default_rng(7)
    ar_true = {1: 10.0, 2: 11.0, 4: 12.0, 8: 14.0}
    sd_true = {b: t / 1.3 for b, t in ar_true.items()}
    engine_sd, engine_df = 0.08, 3
    cover = {None: 0, engine_df: 0}
    total = 0
    for _ in range(400):
        ar = _engine_series(rng, ar_true, 0.01, 3, engine_sd)
        sd = _engine_series(rng, sd_true, 0.01, 3, engine_sd, tau=2.0)
        estimate = engine_sd * math.sqrt(rng.chisquare(engine_df) / engine_df)
        for df in cover:
            for r in speedup_curve(ar, sd, None, 3, MARGIN, "client", estimate, df)["rows"]:
                cover[df] += r["speedup_low"] <= 1.3 <= r["speedup_high"]
        total += len(ar_true)
    assert cover[None] / total < 0.91
    assert 0.93 <= cover[engine_df] / total <= 0.985


def test_speedup_interval_covers_the_true_speedup_about_95_percent_of_the_time():
    """Repeats drawn with 6% log-normal noise around known TPOTs: the 95% interval of each point's
    speedup covers the true one in close to 95% of simulated sweeps, and a truly flat curve is
    rarely given a shape."""
    rng = np.random.default_rng(0)
    ar_true = {1: 10.0, 2: 11.0, 4: 12.0, 8: 14.0}
    sd_true = {b: t / 1.3 for b, t in ar_true.items()}       # speedup 1.3 at every batch size
    covered = total = shaped = 0
    sims = 300
    for _ in range(sims):
        res = speedup_curve(_sim_series(rng, ar_true, 0.06, 3),
                            _sim_series(rng, sd_true, 0.06, 3, tau=2.0), None, 3, MARGIN,
                            "client", 0.0)
        for r in res["rows"]:
            assert r["repeats"] == 3 and r["speedup_low"] < r["speedup"] < r["speedup_high"]
            covered += r["speedup_low"] <= 1.3 <= r["speedup_high"]
            total += 1
        shaped += res["shape"] in (PEAK_LOW, CONCAVE, RISING)
    assert 0.92 <= covered / total <= 0.98
    assert shaped / sims <= 0.05


def test_speedup_interval_from_repeats_pools_the_series_spread():
    """Two batch sizes, two repeats each: the pooled log variance by hand."""
    ar = [point(1, 10.0) | {"repeat": 0}, point(1, 12.0) | {"repeat": 1},
          point(2, 20.0) | {"repeat": 0}, point(2, 20.0) | {"repeat": 1}]
    sd = [point(b, t, tau=2.0) | {"repeat": r} for b, t, r in
          ((1, 5.0, 0), (1, 5.0, 1), (2, 10.0, 0), (2, 10.0, 1))]
    rows = speedup_curve(ar, sd, None, 3, MARGIN, "client", 0.0)["rows"]
    d = math.log(12.0) - math.log(10.0)
    var_ar = (d * d / 2) / 2                       # pooled over 2 df; the SD series has none
    se = math.sqrt(var_ar / 2)                     # of a mean of 2 repeats
    r1 = rows[0]
    assert r1["speedup"] == pytest.approx(11.0 / 5.0)
    t = stats.t.ppf(0.975, 2)                      # df of the AR series alone (Welch)
    assert r1["speedup_high"] == pytest.approx(2.2 * math.exp(t * se))
    assert rows[1]["speedup_low"] == pytest.approx(2.0 * math.exp(-t * se))


def test_speedup_curve_recovers_the_te_it_was_built_from():
    """Build SD TPOTs from speedup = tau / (c + 1/TE) and check that the curve gives TE back."""
    k, tau = 3, 2.2
    te = {1: 0.9, 2: 0.8, 4: 0.6, 8: 0.45}
    ar = [point(b, 10.0 + b) for b in te]
    drafter = [point(b, 0.05 * (10.0 + b)) for b in te]  # c = K * 0.05 = 0.15
    sd = [point(b, (10.0 + b) / speedup(tau, te[b], 0.15), tau, [0.6, 0.4, 0.2]) for b in te]
    res = speedup_curve(ar, sd, drafter, k, MARGIN, "client", 0.0)
    for r in res["rows"]:
        assert r["draft_cost"] == pytest.approx(0.15)
        # measured once: the arithmetic recovers TE, but without an interval it is no value
        assert r["te_sweep_raw"] == pytest.approx(te[r["batch"]])
        assert r["te_sweep_status"] == TE_NO_INTERVAL and math.isnan(r["te_sweep"])
        assert r["speedup"] == pytest.approx(speedup(tau, te[r["batch"]], 0.15))
        assert r["position_acceptance"] == [0.6, 0.4, 0.2]
    # points measured once have no error: they decide no shape (they named one before)
    assert res["shape"] == UNDECIDED


def test_speedup_curve_without_drafter_series_leaves_te_nan():
    res = speedup_curve([point(1, 10.0)], [point(1, 5.0, 2.0)], None, 3, MARGIN, "client", 0.0)
    r = res["rows"][0]
    assert r["speedup"] == pytest.approx(2.0) and math.isnan(r["te_sweep"])


def test_te_is_nan_when_the_draft_cost_exceeds_what_the_speedup_allows():
    # tau / speedup = 1.0 < c = 1.5: no positive TE explains this point
    res = speedup_curve([point(1, 10.0)], [point(1, 5.0, 2.0)], [point(1, 5.0)], 3, MARGIN,
                        "client", 0.0)
    assert math.isnan(res["rows"][0]["te_sweep"])


@pytest.mark.parametrize("ar,sd,msg", [
    ([point(1, 10.0)], [point(2, 5.0, 2.0)], "share no batch size"),
    ([point(1, 10.0)], [point(1, 5.0)], "no speculative-decoding metrics"),
    ([point(1, 10.0), point(1, 11.0)], [point(1, 5.0, 2.0)], "appears twice"),
])
def test_bad_series(ar, sd, msg):
    with pytest.raises(InputError, match=msg):
        speedup_curve(ar, sd, None, 3, MARGIN, "client", 0.0)


def test_engine_timing_is_used_when_asked_and_both_speedups_are_kept():
    ar, sd = point(1, 10.0), point(1, 5.0, 2.0)
    ar["engine"] = {"request_time_per_output_token_ms": 4.0}
    sd["engine"] = {"request_time_per_output_token_ms": 8.0}
    eng = speedup_curve([ar], [sd], None, 3, MARGIN, "engine", 0.0)["rows"][0]
    assert eng["speedup"] == pytest.approx(0.5) and eng["speedup_client"] == pytest.approx(2.0)
    cli = speedup_curve([ar], [sd], None, 3, MARGIN, "client", 0.0)["rows"][0]
    assert cli["speedup"] == pytest.approx(2.0) and cli["speedup_engine"] == pytest.approx(0.5)
    with pytest.raises(InputError, match="no engine-side timing"):
        speedup_curve([point(1, 10.0)], [sd], None, 3, MARGIN, "engine", 0.0)
    with pytest.raises(InputError, match="timing must be one of"):
        speedup_curve([ar], [sd], None, 3, MARGIN, "wall", 0.0)


def test_engine_means_are_per_request_deltas_between_scrapes():
    from specmoe.runtime.serving import engine_means

    m = "vllm:request_time_per_output_token_seconds"
    before = {m + "_sum": 1.0, m + "_count": 10.0}
    after = {m + "_sum": 1.5, m + "_count": 60.0}
    assert engine_means(before, after) == {"request_time_per_output_token_ms": pytest.approx(10.0)}
    assert engine_means(after, after) == {}


def test_te_from_the_sweep_has_an_interval_and_is_not_a_number_when_ill_conditioned():
    from specmoe.measured.sweep import te_interval

    k, tau = 3, 2.2
    # well conditioned: tau TPOT_SD far above K TPOT_drafter; three repeats of each series
    ar, dr = repeated(1, [10.0, 10.1, 9.9]), repeated(1, [0.5, 0.505, 0.495])
    sd = repeated(1, [6.0, 6.06, 5.94], tau)
    row = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.0)["rows"][0]
    te = 10.0 / (tau * 6.0 - 3 * 0.5)
    assert row["te_sweep"] == pytest.approx(te) and row["te_sweep_status"] == "ok"
    assert row["te_sweep_low"] < te < row["te_sweep_high"] < 1
    # the box of the three series' intervals (each from its repeats)
    est = [series_estimates(x, "client", "s", 0.0)[1] for x in (ar, sd, dr)]
    lo, hi = te_interval((tau, tau), k, *(e.interval() for e in est))
    assert (lo, hi) == (pytest.approx(row["te_sweep_low"]), pytest.approx(row["te_sweep_high"]))
    # ill conditioned: tau TPOT_SD barely above K TPOT_drafter gives TE > 1: not a number
    sd = repeated(1, [4.0, 4.04, 3.96], tau)
    dr = repeated(1, [2.5, 2.52, 2.48])
    row = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.0)["rows"][0]
    assert row["te_sweep_raw"] > 1 and math.isnan(row["te_sweep"])
    assert row["te_sweep_status"] == "above 1: not physical"
    assert row["te_sweep_high"] > row["te_sweep_raw"] > row["te_sweep_low"] > 1


def test_te_interval_widens_with_the_acceptance_length_spread():
    """The acceptance length's error is part of TE's interval: repeats whose acceptance lengths
    differ give a wider interval than repeats that agree, around the same TE."""
    k = 3

    def series(tpots, taus=None):
        return [point(1, t, tau=None if taus is None else taus[r]) | {"repeat": r}
                for r, t in enumerate(tpots)]

    ar, dr = series([10.0, 10.2, 9.8]), series([0.5, 0.51, 0.49])
    same = speedup_curve(ar, series([6.0, 6.1, 5.9], [2.2, 2.2, 2.2]), dr, k, MARGIN,
                         "client", 0.0)["rows"][0]
    spread = speedup_curve(ar, series([6.0, 6.1, 5.9], [2.1, 2.2, 2.3]), dr, k, MARGIN,
                           "client", 0.0)["rows"][0]
    assert same["te_sweep_raw"] == pytest.approx(spread["te_sweep_raw"])
    assert spread["te_sweep_low"] < same["te_sweep_low"] < same["te_sweep_high"] \
        < spread["te_sweep_high"]
    assert spread["tau_spread"] == pytest.approx(0.2) and same["tau_spread"] == 0


def test_a_te_whose_interval_crosses_1_is_marked_not_identified():
    """A point inside (0, 1] whose 95% interval reaches past 1 (the sweep's 0.87 [0.50, 2.57]):
    the sweep cannot tell it from an impossible TE, so it is not a number; the raw value and its
    interval stay beside the status."""
    from specmoe.measured.sweep import TE_PAST_BOUND, te_status

    k, tau = 3, 2.2
    ar, sd = repeated(1, [10.0, 12.0, 8.0]), repeated(1, [5.6, 6.6, 4.6], tau)
    dr = repeated(1, [0.5, 0.6, 0.4])
    row = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.0)["rows"][0]
    assert 0 < row["te_sweep_raw"] <= 1 < row["te_sweep_high"]
    assert math.isnan(row["te_sweep"]) and row["te_sweep_status"] == TE_PAST_BOUND
    assert te_status(0.8, 0.6, 0.95, True) == "ok"
    assert te_status(0.8, 0.6, 1.2, True) == TE_PAST_BOUND
    # no interval (a drafter measured once gave 0.952 [nan, nan] 'ok'): nothing shows it inside
    assert te_status(0.8, float("nan"), float("nan"), True) == TE_NO_INTERVAL
    assert te_status(1.3, 1.1, 1.5, True) == "above 1: not physical"


def test_a_sweep_te_without_a_finite_value_says_why_not_that_its_point_lies_outside():
    """tau / speedup at or below the draft cost: TE = 1 / (tau / speedup - c) has no finite
    positive value (te_from_sweep's NaN); the status said its point 'lies outside (0, 1]' beside
    a raw value of NaN."""
    from specmoe.measured.sweep import TE_UNDEFINED

    k, tau = 3, 1.2
    ar, sd = repeated(1, [10.0, 12.0, 8.0]), repeated(1, [5.0, 6.0, 4.0], tau)
    dr = repeated(1, [3.0, 3.3, 2.7])  # c = 3 x 3 / 10 = 0.9 > tau / speedup = 1.2 / 2 = 0.6
    row = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.0)["rows"][0]
    assert math.isnan(row["te_sweep_raw"]) and math.isnan(row["te_sweep"])
    assert row["te_sweep_status"] == TE_UNDEFINED


def test_a_low_batch_peak_needs_an_equivalence_test_not_an_undecided_interval():
    """The study's noise (2% per point): a concave curve peaking at batch 2 by 8%, whose batch 2
    is not significantly above batch 1, while batch 1 is significantly above batch 8. The
    absence of a significant rise is not evidence of its absence: batch 2's upper bound reaches
    past batch 1 by more than the margin, so the curve is undecided, not a peak at batch 1."""
    speedups = [Estimate(v, 0.02, 16) for v in (1.0, 1.08, 0.95, 0.85)]
    assert shape_label([1, 2, 4, 8], speedups, MARGIN) == UNDECIDED
    # the same with batch 2 measured tightly at batch 1's value: equivalent within the margin
    tight = [Estimate(v, 0.005, 16) for v in (1.0, 1.0, 0.95, 0.85)]
    assert shape_label([1, 2, 4, 8], tight, MARGIN) == PEAK_LOW


def test_a_rise_needs_its_equivalence_test_too():
    """Mirrored: a curve rising to batch 4 and 8% lower at batch 8, batch 4 not significantly
    above batch 8: undecided, not "rising"."""
    speedups = [Estimate(v, 0.02, 16) for v in (0.85, 0.95, 1.08, 1.0)]
    assert shape_label([1, 2, 4, 8], speedups, MARGIN) == UNDECIDED


def test_the_simulated_sweeps_are_what_speedup_curve_estimates():
    """The simulation of the rules' error rates (specmoe.measured.rules) estimates a sweep as
    speedup_curve does: the same simulated repeats through both give the same speedups, errors
    and degrees of freedom."""
    from specmoe.measured.rules import DEFAULT, curve_estimates, draw_repeats

    rng = np.random.default_rng(3)
    true = np.log([1.2, 1.1, 1.0, 0.9])
    ar, sd = (draw_repeats(rng, x, DEFAULT, 3) for x in (np.zeros(4), -true))
    lm, se, df = curve_estimates(ar, sd, DEFAULT.engine_log_sd, DEFAULT.engine_log_sd_df)
    for t in range(3):
        series = [[point(b, math.exp(x[t, i, r]), tau=tau) | {"repeat": r}
                   for i, b in enumerate(DEFAULT.batches) for r in range(DEFAULT.repeats)]
                  for x, tau in ((ar, None), (sd, 2.0))]
        rows = speedup_curve(*series, None, 3, MARGIN, "client", DEFAULT.engine_log_sd,
                             DEFAULT.engine_log_sd_df)["rows"]
        assert [r["speedup"] for r in rows] == pytest.approx(np.exp(lm[t]))
        assert [r["speedup_log_se"] for r in rows] == pytest.approx(se[t])
        assert [r["speedup_df"] for r in rows] == pytest.approx(df[t])


@pytest.mark.parametrize("noise", ["default (CPU)", "study (GPU)"])
def test_every_shape_label_is_false_at_most_5_percent_of_the_time_under_its_noise(noise):
    """Each shape label, given to simulated sweeps (4,000 per curve, fixed seed) of true curves
    for which it is false, in the configuration's own noise (the default's CPU sweeps, the
    study's 2% per point): at most 5% of the time, for every curve of rules.scenarios (clear
    shapes and the near misses: concave curves peaking at batch 2 or 4 by 8-10%, a rise that
    tops out a batch before the end)."""
    from specmoe.measured.rules import NOISES, scenarios, shape_rates, wrong_shapes

    cfg = next(n for n in NOISES if n.name == noise)
    for name, curve in scenarios(cfg.batches).items():
        rates = shape_rates(curve, cfg, MARGIN, trials=4000, seed=1)
        for label in wrong_shapes(curve, MARGIN):
            assert rates[label] <= 0.05, (name, label, rates[label])
    if cfg.name.startswith("study"):  # and the rule still finds the study's shapes in its noise
        rates = shape_rates(scenarios(cfg.batches)["peak at batch 1 (falls 10% per size)"], cfg,
                            MARGIN, trials=4000, seed=1)
        assert rates[PEAK_LOW] >= 0.9


def test_a_curve_is_faster_or_slower_only_where_its_adjusted_intervals_say_so():
    """The curve's direction: one interval above 1 at the curve's adjusted level says "faster";
    95% intervals of four points at speedup 1 are not a claim (unadjusted, one of four lies
    above 1 about 10% of the time)."""
    from specmoe.measured.sweep import FASTER, MIXED, NEITHER, SLOWER, direction_labels

    def label(values, se=0.05):
        return direction_labels(np.log([values]), np.full((1, len(values)), se),
                                np.full((1, len(values)), 16.0))[0]

    assert label([1.0, 1.3, 1.0, 1.0]) == FASTER
    assert label([0.7, 1.0, 1.0, 1.0]) == SLOWER
    assert label([0.7, 1.3, 1.0, 1.0]) == MIXED
    # a 95% interval alone would say faster: 1.1 / e^(2.12 * 0.05) > 1
    assert label([1.0, 1.1, 1.0, 1.0]) == NEITHER


@pytest.mark.parametrize("noise", ["default (CPU)", "study (GPU)"])
def test_the_faster_or_slower_word_is_false_at_most_5_percent_of_the_time(noise):
    """Simulated sweeps (4,000, fixed seed) of a curve at speedup 1 everywhere, and of curves
    truly faster at every batch size: "faster" or "slower" is said of the first at most 5% of the
    time, and "slower" of the second never more."""
    from specmoe.measured.rules import NOISES, direction_rates

    cfg = next(n for n in NOISES if n.name == noise)
    n = len(cfg.batches)
    rates = direction_rates([1.0] * n, cfg, trials=4000, seed=2)
    assert rates["faster"] + rates["slower"] + rates["mixed"] <= 0.05
    assert direction_rates([1.2] * n, cfg, trials=4000, seed=2)["slower"] <= 0.05


def test_the_speedup_takes_the_no_sd_points_measured_beside_the_sd_ones(tmp_path):
    """An SD series measures its target without SD beside it (interleaved, rule sweep_sd): those
    points are the speedup's no-SD side. A series from before them (no such points) is refused
    in one line, not divided by points measured elsewhere."""
    from types import SimpleNamespace

    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.errors import InputError
    from specmoe.provenance import read_json, write_json
    from specmoe.stages.analysis import speedup_stage
    from specmoe.stages.measure import PAIR_ORDER

    ds = "tinybench"
    reps = lambda tpots, tau=None: [point(b, t, tau=tau, per_pos=[0.5]) | {"repeat": r}
                                    for b, t in tpots for r, t in enumerate((t, t * 1.01))]
    sd = {"datasets": {ds: {"points": reps([(1, 8.0), (2, 10.0)], tau=2.0)}},
          "paired_no_sd": {"engine": {}, "arm_order": "interleaved"}}
    run = {"model": "m", "dataset": ds, "k": 3}
    params = SpeedupParams(run=run, margin=MARGIN, timing="client", engine_log_sd=0.043,
                           engine_log_sd_df=6, engine_log_sd_device="cpu")
    job = (SimpleNamespace(sd=tmp_path / "sd.json", drafter=[]),
           SimpleNamespace(json=tmp_path / "out.json"), params)
    write_json(tmp_path / "sd.json", sd, CPU_SERIES)
    with pytest.raises(InputError, match="no no-SD points beside its SD points"):
        speedup_stage(*job)
    assert not (tmp_path / "out.json").exists()
    sd["datasets"][ds]["paired_no_sd"] = {"points": reps([(1, 10.0), (2, 11.0)])}
    write_json(tmp_path / "sd.json", sd, CPU_SERIES)
    speedup_stage(*job)
    out = read_json(tmp_path / "out.json")
    assert out["rows"][0]["speedup"] == pytest.approx(10.0 / 8.0, rel=0.01)
    assert out["no_sd_series"] == PAIR_ORDER["interleaved"] and out["engine_log_sd_df"] == 6


def _resolved(study: bool):
    """config.yaml, with config/paper.yaml merged over it as `--configfile` merges it (study)."""
    import yaml
    from snakemake.utils import update_config

    from specmoe.config import Config
    from wf import REPO

    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    if study:
        update_config(raw, yaml.safe_load((REPO / "config/paper.yaml").read_text()))
    return Config.load(raw, REPO / "workflow/schemas/config.schema.yaml")


def _speedup_on(tmp_path, cfg, device: str | None, drafter_device: str | None = None) -> dict:
    """The speedup stage's output under `cfg` for an SD series swept on `device` (its
    provenance's engine; None: it names none) and, where drafter_device is given, the drafter's
    own series swept there."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.provenance import read_json, write_json
    from specmoe.stages.analysis import speedup_stage

    ds = "tinybench"
    # timed by the client and by the engine alike (config.yaml times by the engine, the study by
    # the client)
    reps = lambda tpots, tau=None: [
        point(b, t * f, tau=tau, per_pos=[0.5])
        | {"repeat": r, "engine": {"request_time_per_output_token_ms": t * f}}
        for b, t in tpots for r, f in enumerate((1.0, 1.01, 0.995))]
    prov = lambda dev: {"engine": f"vllm 0.32.0 ({dev})"} if dev else {}
    sd = {"engine": {"dtype": "float32"},
          "datasets": {ds: {"points": reps([(1, 8.0), (2, 9.0), (4, 10.0)], tau=2.0),
                            "paired_no_sd": {"points": reps([(1, 10.0), (2, 11.0), (4, 12.0)])}}},
          "paired_no_sd": {"engine": {}, "arm_order": "interleaved"}}
    write_json(tmp_path / "sd.json", sd, prov(device))
    drafter = []
    if drafter_device:
        drafter = [tmp_path / "dr.json"]
        write_json(drafter[0], {"engine": {"dtype": "float32"},
                                "datasets": {ds: {"points": reps([(1, 1.0), (2, 1.1), (4, 1.2)])}}},
                   prov(drafter_device))
    run = Named({"model": "tiny-fine", "drafter": "tiny-drafter", "k": "3", "dataset": ds})
    speedup_stage(Named({"sd": tmp_path / "sd.json", "drafter": drafter}),
                  Named({"json": tmp_path / "out.json"}), SpeedupParams.from_config(cfg, run))
    return read_json(tmp_path / "out.json")


def _intervals(out: dict) -> list[tuple]:
    return [(r["speedup_low"], r["speedup_high"], r["te_sweep_low"], r["te_sweep_high"])
            for r in out["rows"]]


def test_the_engine_spread_reaches_only_series_swept_on_the_device_it_was_measured_on(tmp_path):
    """config.yaml's engine spread (0.043, 6 degrees of freedom) was measured on a 2-core CPU:
    config/paper.yaml, merged over it as --configfile merges it, carried it into the study's GPU
    sweeps, whose intervals, shapes and directions then borrowed a CPU's noise. The spread now
    names its device (sweep.engine_log_sd_device): a series swept on another takes none, and
    paper.yaml sets its own (not measured for cuda)."""
    default, study = _resolved(False), _resolved(True)
    gpu = _speedup_on(tmp_path, study, "cuda")
    assert (gpu["engine_log_sd"], gpu["engine_log_sd_df"]) == (0, None)
    cpu = _speedup_on(tmp_path, default, "cpu")
    assert (cpu["engine_log_sd"], cpu["engine_log_sd_df"]) == (0.043, 6)
    # each records where the configured spread was measured: set by paper.yaml, not inherited
    assert (gpu["engine_log_sd_device"], cpu["engine_log_sd_device"]) == ("cuda", "cpu")
    # the intervals are the repeats' alone: those of a curve computed without a spread
    sd = read_series(tmp_path / "sd.json")
    bare = speedup_curve(sd["paired_no_sd"]["points"], sd["points"], None, 3, MARGIN,
                         study.sweep["timing"], 0.0, None)
    assert [(r["speedup_low"], r["speedup_high"]) for r in gpu["rows"]] == [
        (r["speedup_low"], r["speedup_high"]) for r in bare["rows"]]
    assert all(g[1] - g[0] < c[1] - c[0] for g, c in zip(_intervals(gpu), _intervals(cpu)))
    # the default's spread is a CPU's: a series it swept on a GPU takes none either, and the
    # study's (not measured) reaches none of its CPU series
    assert _speedup_on(tmp_path, default, "cuda")["engine_log_sd"] == 0
    assert _speedup_on(tmp_path, study, "cpu")["engine_log_sd"] == 0
    # a series that names no device cannot be matched to a spread: refused in one line
    with pytest.raises(InputError, match=r"sd\.json names no device it was swept on .* engine "
                                         r"spread measured on cpu"):
        _speedup_on(tmp_path, default, None)
    assert _speedup_on(tmp_path, study, None)["engine_log_sd"] == 0  # nothing to match


def test_a_drafter_series_takes_the_engine_spread_of_its_own_device(tmp_path):
    """The draft cost's series (the drafter served alone) is a measurement of its own: its TE
    interval takes the spread of the device it was swept on, not the SD series'."""
    default = _resolved(False)
    same = _speedup_on(tmp_path, default, "cpu", drafter_device="cpu")
    apart = _speedup_on(tmp_path, default, "cpu", drafter_device="cuda")
    # the speedup's intervals are the SD series' (both on a CPU): unchanged
    assert [r["speedup_high"] for r in apart["rows"]] == [r["speedup_high"] for r in same["rows"]]
    sd = read_series(tmp_path / "sd.json")
    dr = read_series(tmp_path / "dr.json")
    want = speedup_curve(sd["paired_no_sd"]["points"], sd["points"], dr["points"], 3, MARGIN,
                         "engine", 0.043, 6, drafter_engine=(0.0, None))
    assert _intervals(apart) == _intervals(want) != _intervals(same)


def read_series(path) -> dict:
    from specmoe.provenance import read_json

    return read_json(path)["datasets"]["tinybench"]


def test_a_series_settings_are_typed_once_and_a_broken_one_is_one_line():
    """The sweep section the schema filled, as the series stage reads it (stages.measure)."""
    from specmoe.stages.measure import SweepSettings

    section = {"schedule": [{"batch": 1, "prompts": 8}, {"batch": 4, "prompts": 16}],
               "output_len": 48, "warmups": 2, "repeats": 3, "startup_timeout_s": 600,
               "dtype": "auto"}
    s = SweepSettings.of(section)
    assert (s.schedule, s.output_len, s.warmups, s.repeats, s.startup_timeout_s) == (
        ((1, 8), (4, 16)), 48, 2, 3, 600.0)
    with pytest.raises(InputError) as err:
        SweepSettings.of({k: v for k, v in section.items() if k != "repeats"})
    assert str(err.value) == ("sweep settings: no repeats (they have dtype, output_len, "
                              "schedule, startup_timeout_s, warmups)")
    with pytest.raises(InputError, match=r"^sweep settings: not a number: .*'many'"):
        SweepSettings.of({**section, "warmups": "many"})


def test_a_tpot_that_is_not_a_positive_number_is_refused():
    """One NaN repeat made the pooled error NaN at every batch size: every interval vanished and
    the curve was still named 'peak at low batch' (it was 'undecided' with the repeat)."""
    from specmoe.errors import InputError

    ar = repeated(1, [10.0, 10.2, 9.8]) + repeated(8, [12.0, float("nan"), 12.1])
    sd = repeated(1, [6.0, 6.1, 5.9], 2.0) + repeated(8, [8.0, 8.1, 7.9], 2.0)
    with pytest.raises(InputError, match=r"no-SD series: batch 8: client TPOT nan ms is not a "
                                         r"positive number"):
        speedup_curve(ar, sd, None, 3, MARGIN, "client", 0.0)


def test_points_measured_once_decide_no_shape_and_no_direction():
    """Measured once, a point has no error: the client's per-request spread stood in for it
    (another timing than the engine's, over requests that share engine steps), and points without
    an error decided shapes and directions by their values."""
    from specmoe.measured.sweep import NEITHER, direction_labels, shape_labels

    ar = [measured_once(b, 10.0 + b, 6.0) for b in (1, 2, 4, 8)]
    sd = [measured_once(b, (10.0 + b) / s, 6.0, sd=2.0) for b, s in
          ((1, 1.6), (2, 1.4), (4, 1.2), (8, 1.0))]
    res = speedup_curve(ar, sd, None, 3, MARGIN, "client", 0.0)
    assert all(math.isnan(r["speedup_low"]) for r in res["rows"])
    assert res["shape"] == UNDECIDED and res["direction"] == NEITHER
    nan = np.full((1, 4), np.nan)
    logs = np.log([[1.6, 1.4, 1.2, 1.0]])
    assert shape_labels(logs, nan, np.zeros((1, 4)), MARGIN)[0] == UNDECIDED
    assert direction_labels(logs, nan, np.zeros((1, 4)))[0] == NEITHER
    # known exactly (error 0, infinite degrees of freedom): the values decide
    assert shape_labels(logs, np.zeros((1, 4)), np.full((1, 4), np.inf), MARGIN)[0] == PEAK_LOW


def test_a_pair_of_points_counts_the_shared_estimates_degrees_of_freedom_once():
    """Each point's error comes from the same pooled repeat variances and engine spread, so the
    difference of two points has a point's degrees of freedom (21.4), not the Welch sum of both
    (42.7), which named this curve 'peak at low batch'."""
    est = [Estimate(v, 0.138, 21.4) for v in (1.754, 1.02, 1.0, 1.0)]
    assert shape_label([1, 2, 4, 8], est, MARGIN) == UNDECIDED
    assert shape_label([1, 2, 4, 8], [Estimate(e.mean, 0.08, 21.4) for e in est],
                       MARGIN) == PEAK_LOW


def test_a_dip_before_a_rise_is_not_rising():
    """1.0, 0.625, 0.625, 1.25: batches 2 and 4 decidedly below batch 1, and the curve was
    'rising' (the last above the first, nothing above the last)."""
    from specmoe.cost.stepmodel import curve_shape
    from specmoe.measured.rules import wrong_shapes

    values = [1.0, 0.625, 0.625, 1.25]
    est = [Estimate(v, 0.015, 16) for v in values]
    assert shape_label([1, 2, 4, 8], est, MARGIN) == UNDECIDED
    assert shape_label([1, 2, 4, 8], [Estimate(v, 0.015, 16) for v in (1.0, 1.05, 1.1, 1.25)],
                       MARGIN) == RISING
    assert curve_shape(values, MARGIN) == "undecided"
    assert RISING in wrong_shapes(values, MARGIN)


def test_the_highest_speedup_is_the_largest_only_where_the_pair_test_puts_the_others_below():
    """The report read 'largest 1.10 [0.86, 1.41] at batch 8' beside 1.04 [0.81, 1.33] at batch
    1: intervals that overlap rank nothing. below_highest applies the shape's pair test to the
    highest point and each other point of speedup_curve's rows."""
    from specmoe.measured.sweep import below_highest

    def curve(speedups, spread):
        ar = [p for b in (1, 2, 4, 8) for p in repeated(b, [10.0 * (1 + spread * e)
                                                          for e in (-1, 0, 1)])]
        sd = [p for b, s in zip((1, 2, 4, 8), speedups)
              for p in repeated(b, [10.0 / s * (1 + spread * e) for e in (1, 0, -1)], tau=2.0)]
        return speedup_curve(ar, sd, None, 3, MARGIN, "client", 0.0)

    noisy = curve([1.04, 1.09, 1.04, 1.10], 0.15)
    assert max(noisy["rows"], key=lambda r: r["speedup"])["batch"] == 8
    assert not any(below_highest(noisy["rows"], MARGIN))
    tight = curve([1.0, 1.3, 1.28, 1.0], 0.002)
    # batch 4 lies within the margin of batch 2's 1.3: not below it
    assert below_highest(tight["rows"], MARGIN) == [True, False, False, True]
    # known exactly: the values and the margin decide
    rows = [{"speedup": s, "speedup_log_se": 0.0, "speedup_df": math.inf} for s in (1.2, 1.0)]
    assert below_highest(rows, MARGIN) == [False, True]


def test_a_speedup_curve_names_no_best_batch_size():
    """speedup_curve wrote best_batch/best_speedup, the highest point estimate whether or not the
    intervals separate it from the others (and nothing read them): the curve names none, the
    rows' below_highest says where the highest lies above another."""
    ar = [p for b in (1, 2, 4) for p in repeated(b, [10.0, 10.5, 9.5])]
    sd = [p for b, s in zip((1, 2, 4), (1.05, 1.1, 1.0))
          for p in repeated(b, [10.0 / s, 10.4 / s, 9.6 / s], tau=2.0)]
    res = speedup_curve(ar, sd, None, 3, MARGIN, "client", 0.0)
    assert len(res["rows"]) == 3
    assert not {"best_batch", "best_speedup"} & set(res)


def test_the_measured_draft_cost_has_the_interval_of_its_two_series():
    """The draft cost c = K TPOT(drafter) / TPOT(no SD) had no interval, so its figure and
    findings could give it none: it is K times the ratio's 95% interval, from both series'
    repeats (Welch: 2 + 2 degrees of freedom here) and, where configured, their engine
    spreads; a drafter measured once gives none."""
    k, spread = 3, 0.1
    ar = repeated(1, [10.0 * (1 + spread * e) for e in (-1, 0, 1)])
    dr = repeated(1, [0.5 * (1 + spread * e) for e in (1, 0, -1)])
    sd = repeated(1, [6.0, 6.1, 5.9], tau=2.0)
    r = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.0)["rows"][0]
    logs = np.log([1 - spread, 1.0, 1 + spread])
    se = math.sqrt(2 * logs.var(ddof=1) / 3)
    half = stats.t.ppf(0.975, 4) * se
    c = k * np.mean([0.5 * (1 + spread * e) for e in (1, 0, -1)]) / np.mean(
        [10.0 * (1 + spread * e) for e in (-1, 0, 1)])
    assert r["draft_cost"] == pytest.approx(c)
    assert (r["draft_cost_low"], r["draft_cost_high"]) == pytest.approx(
        (c * math.exp(-half), c * math.exp(half)))
    # an engine spread widens it; the drafter's own device's (none: swept elsewhere) less so
    both = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.05, 6)["rows"][0]
    apart = speedup_curve(ar, sd, dr, k, MARGIN, "client", 0.05, 6,
                          drafter_engine=(0.0, None))["rows"][0]
    width = {n: x["draft_cost_high"] - x["draft_cost_low"] for n, x in
             (("none", r), ("both", both), ("apart", apart))}
    assert width["none"] < width["apart"] < width["both"]
    once = speedup_curve(ar, sd, [point(1, 0.5)], k, MARGIN, "client", 0.0)["rows"][0]
    assert math.isfinite(once["draft_cost"])
    assert math.isnan(once["draft_cost_low"]) and math.isnan(once["draft_cost_high"])
    none = speedup_curve(ar, sd, None, k, MARGIN, "client", 0.0)["rows"][0]
    assert math.isnan(none["draft_cost_low"]) and math.isnan(none["draft_cost_high"])
