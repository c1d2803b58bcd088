import numpy as np
import pytest
from scipy import stats

from specmoe.acceptance import acceptance_stats, cohens_d, compare, size_label
from specmoe.overlap import row_overlaps

X = np.array([0.41, 0.45, 0.39, 0.50, 0.47, 0.44, 0.43, 0.52, 0.40, 0.46])
Y = np.array([0.38, 0.36, 0.42, 0.35, 0.40, 0.37, 0.39])


def test_cohens_d_by_hand():
    sp = np.sqrt(((10 - 1) * X.var(ddof=1) + (7 - 1) * Y.var(ddof=1)) / 15)
    assert abs(cohens_d(X, Y) - (X.mean() - Y.mean()) / sp) < 1e-12


def test_pvalues_match_scipy():
    out = compare(X, Y)
    assert out["p_value"] == pytest.approx(stats.ttest_ind(X, Y, equal_var=False).pvalue)
    assert out["p_mannwhitney"] == pytest.approx(stats.mannwhitneyu(X, Y).pvalue)
    assert out["n_accepted"] == 10 and out["n_first_rejected"] == 7
    assert out["delta"] == pytest.approx(X.mean() - Y.mean())
    assert out["size"] == "large"


@pytest.mark.parametrize("d,label", [(0.1, "negligible"), (-0.3, "small"), (0.6, "medium"),
                                     (-1.2, "large"), (float("nan"), "n/a")])
def test_size_labels(d, label):
    assert size_label(d) == label


def test_too_few_samples_give_nan():
    out = compare(np.array([0.3]), Y)
    assert np.isnan(out["cohens_d"]) and np.isnan(out["p_value"])


def test_tied_acceptance_shows_positive_delta(small_trace):
    consec, anchor = row_overlaps(small_trace)
    res = acceptance_stats(small_trace, consec, anchor)
    assert [r["draft_position"] for r in res["by_position"]] == [1, 2, 3]
    assert res["by_position"][0]["delta"] > 0 and res["by_position"][0]["cohens_d"] > 0.2
    assert set(res["slices"]) == {"a", "b"}
    assert len(res["median_delta_by_position"]) == 3
    statuses = {r["status"] for r in res["anchor"]}
    assert statuses == {"accepted", "first_rejected", "after_rejection"}
    assert 1 <= res["acceptance_length"]["tau"] <= 4
