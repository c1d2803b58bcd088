"""The physical bounds of what the report's tables hold, and their captions naming every column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specmoe.report import tables
from specmoe.report.measured import correction_rows

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"
STEP_INPUTS = {"f": "moe_time_share", "s_moe": "moe_time_ratio", "s_dense": "dense_time_ratio"}


def _raw(r: pd.Series, col: str, end: str = "") -> float:
    """A fixture row's raw value (<col>_raw<end> where the table has it, else <col><end>)."""
    return r[f"{col}_raw{end}"] if f"{col}_raw{end}" in r else r[f"{col}{end}"]


def _three_starts(point: float, high: float, share: bool) -> list[float]:
    """Three engine starts whose summary (profiling.over_starts, or share_over_starts for a
    share) is `point` with the upper end `high`: symmetric about the point on the summary's
    scale (log, or logit for a share), their spread giving that end."""
    from scipy import stats

    to = (lambda x: np.log(x) - np.log1p(-x)) if share else np.log
    back = (lambda z: 1 / (1 + np.exp(-z))) if share else np.exp
    a = (to(high) - to(point)) * np.sqrt(3) / stats.t.ppf(0.975, 2)
    return [float(back(to(point) + d)) for d in (-a, 0.0, a)]


def _fixture_corrections() -> dict[str, list[dict]]:
    """Each fixture model's three_step_correction rows, rebuilt by correction_rows from the
    fixture table's own inputs: the cost model's (the weight baseline's f and s_moe) and the
    profile's, each from three engine starts with the fixture's value and upper end (the last
    step's, where every input is the profile's)."""
    from specmoe.measured.profiling import EAGER, over_starts, share_over_starts

    d = tables.read_csv(FIXTURE / "three_step_correction.csv")
    out = {}
    for model, g in d.groupby("model", sort=False):
        base, last = g.iloc[0], g.iloc[-1]
        cm = {"moe_weight_share": _raw(base, "f"), "unique_ratio": _raw(base, "s_moe")}
        b = {"engine_mode": {"decode": EAGER, "verify": EAGER}}
        for col, key in STEP_INPUTS.items():
            share = col == "f"
            starts = _three_starts(_raw(last, col), _raw(last, col, "_high"), share)
            point, lo, hi = (share_over_starts if share else over_starts)(starts)
            b.update({key: point, f"{key}_low": lo, f"{key}_high": hi,
                      f"{key}_per_start": starts})
        rc = {k: base[k] for k in ("model", "drafter", "k", "dataset")}
        out[model] = correction_rows(rc, b, None, cm)
    return out


def test_the_three_step_corrections_time_ratios_are_never_below_their_floor():
    """kernel_time_shares flags a ratio past its physical range (or one whose interval reaches
    there) as not identified, but the three-step correction wrote the same numbers as plain
    values (the fixture's tiny-fine step 2: s_moe 0.425 [0.028, 6.551], when s_moe was held to
    [1, inf)). Now no input column holds a number past its bound (CORRECTION_INPUTS: f in [0,
    1], s_moe and s_dense, time ratios holding idle time, in (0, inf)), the raw value stays
    beside it, and a measured s_moe's status is the one kernel_time_shares' rule gives the MoE
    class's ratio from the same numbers."""
    from specmoe.report.bounds import bounded
    from specmoe.report.measured import CORRECTION_INPUTS, RATIO_RANGE

    ks = tables.read_csv(FIXTURE / "kernel_time_shares.csv")
    rebuilt = _fixture_corrections()
    assert rebuilt
    assert CORRECTION_INPUTS["s_moe"] == RATIO_RANGE["moe"]
    bounds = {col: (r["lower"], r["upper"]) for col, r in CORRECTION_INPUTS.items()}
    past = [(model, r["name"], c, r[c]) for model, rows in rebuilt.items() for r in rows
            for col, (lo, hi) in bounds.items() for c in (col, f"{col}_low", f"{col}_high")
            if not (np.isnan(r[c]) or lo <= r[c] <= hi)]
    assert past == []
    for model, rows in rebuilt.items():
        for r in rows:
            for col in bounds:
                assert r[f"{col}_status"] == "ok" or np.isnan(r[col])
                assert not np.isnan(r[f"{col}_raw"])
        moe = ks[(ks["model"] == model) & (ks["batch"] == 1) & (ks["class"] == "moe")].iloc[0]
        status = bounded("ratio", moe["ratio_raw"], moe["ratio_raw_low"],
                         moe["ratio_raw_high"], **RATIO_RANGE["moe"])["ratio_status"]
        assert [r["s_moe_status"] for r in rows[2:]] == [status] * 2
        assert [r["s_moe_raw"] for r in rows[2:]] == pytest.approx([moe["ratio_raw"]] * 2,
                                                                   rel=1e-12)
    fine = rebuilt["tiny-fine"]
    # the weight model's inputs have no interval and are flagged by their point alone
    assert fine[0]["s_moe_status"] == fine[0]["s_dense_status"] == fine[0]["f_status"] == "ok"


def test_the_sweep_and_the_tables_flag_a_te_by_one_rule():
    """Two rules decided whether a TE is identified: the sweep's te_status called 1.229
    [0.447, 96.7] 'its point lies outside (0, 1]' and bounded_te kept that, where the tables' own
    rule (bounded) gives 'not identified: its 95% interval reaches past the physical bound'; and
    the sweep said 'crosses 1' where te_profiled said 'reaches past the physical bound' for the
    same condition. Now the same (te, low, high) gives the same status from either, the sweep's
    own reasons (no drafter series, no finite TE) kept."""
    import math

    from specmoe.measured.sweep import TE_NO_DRAFTER, TE_UNDEFINED, speedup_curve, te_status
    from specmoe.report.bounds import TE_PAST_BOUND, bounded_te
    from specmoe.report.measured import speedup_row
    from test_sweep import MARGIN, repeated

    nan, inf = float("nan"), float("inf")
    cases = [(1.229, 0.447, 96.7), (0.87, 0.50, 2.57), (0.8, 0.6, 0.95), (0.8, nan, nan),
             (1.3, 1.1, 1.5), (1.229, 0.447, inf), (0.9, 0.7, inf), (-0.2, -0.5, 0.3), (1.3, nan, nan)]
    for te, lo, hi in cases:
        sweep = te_status(te, lo, hi, True)
        assert sweep == bounded_te("te", te, lo, hi)["te_status"], (te, lo, hi)
        assert bounded_te("te", te, lo, hi, sweep)["te_status"] == sweep
    assert te_status(1.229, 0.447, 96.7, True) == TE_PAST_BOUND
    assert te_status(0.87, 0.50, 2.57, True) == TE_PAST_BOUND
    for reason in (TE_NO_DRAFTER, TE_UNDEFINED):
        assert bounded_te("te", nan, nan, nan, reason)["te_status"] == reason
    assert te_status(nan, nan, nan, True) == TE_UNDEFINED
    assert te_status(0.8, 0.6, 0.95, False) == TE_NO_DRAFTER
    # a real sweep point whose interval passes 1, through speedup_vs_batch's row
    ar, sd = repeated(1, [10.0, 12.0, 8.0]), repeated(1, [5.6, 6.6, 4.6], 2.2)
    sp = speedup_curve(ar, sd, repeated(1, [0.5, 0.6, 0.4]), 3, MARGIN, "client", 0.0)
    r = sp["rows"][0]
    row = speedup_row({"model": "m"}, {**sp, "shape": "x"}, r, False)
    assert r["te_sweep_status"] == row["te_sweep_status"] == TE_PAST_BOUND == bounded_te(
        "te", r["te_sweep_raw"], r["te_sweep_low"], r["te_sweep_high"])["te_status"]
    assert math.isnan(row["te_sweep"])


def test_a_controls_row_says_where_a_differences_interval_was_held_at_its_bound():
    """controls.control_contrast flags a difference's interval held at what the difference can
    be (difference_clipped); the matched_controls row dropped the flag, so a clipped end read as
    a measured one."""
    from specmoe.report.runs import matched_control_row

    stat = {"target": 0.30, "control": 0.10, "difference": 0.20, "difference_low": 0.05,
            "difference_high": 0.875, "difference_clipped": True}
    c = {"target": "t", "matched": True, "comparable": True, "input_repeat_pct": 1.0,
         "n_requests": 12, "statistics": {"seq_excess": stat,
                                          "seq_decay": {**stat, "difference_clipped": False}}}
    row = matched_control_row({"model": "t-random"}, c)
    assert row["seq_excess_difference_clipped"] is True
    assert row["seq_decay_difference_clipped"] is False


def test_every_caption_file_reads_as_snakemakes_report_renders_it_with_no_placeholder_left():
    """Snakemake's report renders each caption file that report(caption=...) names through
    Jinja2 (snakemake.report: Environment(trim_blocks, lstrip_blocks), then
    env.from_string(text).render(snakemake=..., categories=..., files=...)), which leaves a
    str.format placeholder such as `{intervals}` as it is: the speedup figure's caption showed
    "Error bars: {intervals}." in report.html, only index.md filling it. Every caption file,
    rendered that way, holds no `{name}` left to fill, and the figure's built caption still
    says what this run's intervals hold."""
    import re
    from importlib import resources

    from jinja2 import Environment

    env = Environment(trim_blocks=True, lstrip_blocks=True)
    files = sorted((resources.files("specmoe") / "data" / "captions").iterdir())
    assert any(f.name == "fig_speedup_vs_batch.rst" for f in files)
    for f in files:
        rendered = env.from_string(f.read_text()).render(snakemake=None, categories={},
                                                         files={})
        assert not re.search(r"\{\s*\w+\s*\}", rendered), f"{f.name}: {rendered}"
    from specmoe.report import figures

    built = figures.caption("speedup_vs_batch", tables.Tables.of(
        {p.stem: str(p) for p in FIXTURE.glob("*.csv")}))
    assert "the engine-to-engine spread measured for the device they ran on" in built


def test_overlap_by_status_caption_states_no_direction_of_overlap():
    """The caption said "acceptance falls with position, and so does overlap" as a fact, but a
    run's own table contradicts it (run8: synth-fine at K = 7, accepted drafts' overlap 0.442
    [0.439, 0.445] at position 1 and 0.459 [0.446, 0.472] at 7, rising with disjoint intervals;
    tiny-fine at K = 5 falling). Acceptance falls with position by construction; overlap may
    change either way, so the caption (and the method it cites) names no direction of it."""
    import re

    from specmoe.report import registry

    method = (Path(__file__).parents[1] / "docs/method.md").read_text()
    section = method.split("## Deconfounded acceptance")[1].split("\n## ")[0]
    for text in (registry.text("overlap_by_status"), section):
        flat = " ".join(text.split())
        assert "so does overlap" not in flat
        assert not re.search(r"overlap[^.;()]{0,40}\b(falls|rises|drops|grows|declines|"
                             r"decreases|increases)\b", flat), flat[:300]
        assert "within a position" in flat or "same position" in flat
