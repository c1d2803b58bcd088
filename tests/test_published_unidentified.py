"""A quantity the run measured but did not identify (a TE whose raw ratio left [0, 1]) keeps its
row in the comparison, with an empty value and why beside it, and the comparison figure names it
in its panel's note; a quantity never measured (NaN without a status) is still left out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specmoe.measured import sweep
from specmoe.report import figures, prose
from specmoe.sources import published

# a model matched to Qwen3-30B in the variant the study publishes a batch-1 TE for (fp8, TP 2,
# EAGLE-3) and, on H100 at TP 1, in the variant of its three-step correction
RUN = {"model": "q", "drafter": "d", "k": 3, "dataset": "mt-bench", "batch": 1}
UNPHYSICAL = sweep.bound_status(1.3, 1.2, 1.4)  # above 1, its interval wholly above too


def _study(tp: int) -> dict:
    return {"q": published.study_entry(
        {"name": "q", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "tp": tp, "hardware": "H100",
         "datasets": ["mt-bench"]}, methods={"d": "eagle3"})}


def _te_sweep(te: float, raw: float, status: str) -> pd.DataFrame:
    return pd.DataFrame([{**RUN, "te_sweep": te, "te_sweep_raw": raw,
                          "te_sweep_status": status, "te_sweep_low": np.nan,
                          "te_sweep_high": np.nan, "te_sweep_raw_low": raw - 0.1,
                          "te_sweep_raw_high": raw + 0.1}])


def test_a_te_the_run_did_not_identify_keeps_its_row_and_the_figure_names_it():
    assert UNPHYSICAL == "above 1: not physical"
    study = _study(2)
    identified = published.comparison(
        {"te_three_ways": _te_sweep(0.8, 0.8, sweep.bound_status(0.8, 0.7, 0.9))}, study)
    assert len(identified) == 1 and identified["reproduced"].iloc[0] == 0.8

    # a TE the run has no sweep point for (no raw value: "not measured") is left out
    never = _te_sweep(np.nan, np.nan, sweep.bound_status(np.nan))
    assert published.comparison({"te_three_ways": never}, study).empty

    df = published.comparison({"te_three_ways": _te_sweep(np.nan, 1.3, UNPHYSICAL)}, study)
    assert len(df) == 1, df
    r = df.iloc[0]
    assert r["quantity"] == "te_sweep" and np.isnan(r["reproduced"])
    assert r["published"] == float(published.load("te_batch1_k3").query(
        "model == 'Qwen3-30B' and tp == 2")["target_efficiency"].iloc[0])
    assert r["reproduced_raw"] == 1.3 and r["reproduced_status"] == UNPHYSICAL
    assert (r["reproduced_raw_low"], r["reproduced_raw_high"]) == (1.3 - 0.1, 1.3 + 0.1)

    fig = figures.comparison(df, {"q": "C0"})
    drawn = [ax for ax in fig.axes if ax.get_visible()]
    assert len(drawn) == 1
    note = " ".join(" ".join(t.get_text().split()) for t in drawn[0].texts)
    assert "not identified" in note and "te_sweep" in note, note
    assert not any(len(c.get_offsets()) for c in drawn[0].collections)
    figures.plt.close(fig)

    # the report's words of it: why it is not a value, not a bare dash
    words = prose._reproduced_text(r)
    assert words.startswith(UNPHYSICAL) and "1.30" in words and "–" not in words


def test_a_three_step_te_the_run_did_not_identify_keeps_its_row():
    study = _study(1)
    steps = [(0.5, "ok"), (np.nan, UNPHYSICAL), (0.7, "ok"), (np.nan, np.nan)]
    df = pd.DataFrame([{**RUN, "te": te, "te_raw": 1.3 if status == UNPHYSICAL else te,
                        "te_status": status} for te, status in steps])
    out = published.comparison({"three_step_correction": df}, study)
    # step 3 was never measured (no value, no status): left out
    assert list(out["key"]) == ["step 0", "step 1", "step 2"], out
    assert list(out["reproduced"].isna()) == [False, True, False]
    assert out["reproduced_status"].iloc[1] == UNPHYSICAL and out["reproduced_raw"].iloc[1] == 1.3
    fig = figures.comparison(out, {"q": "C0"})
    ax = next(ax for ax in fig.axes if ax.get_visible())
    note = " ".join(" ".join(t.get_text().split()) for t in ax.texts)
    assert "not identified" in note and "step 1" in note and "step 0" not in note, note
    figures.plt.close(fig)
