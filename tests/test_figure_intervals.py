"""The report's figures draw the intervals their tables carry, and the comparison keeps them.

Each test builds its figure from the fixture tables of a real run (tests/fixtures/report_tables)
and reads the expected interval from the same table, so they hold after the fixtures are
regenerated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import ErrorbarContainer

from declared import in_folder
from specmoe.report import figures
from specmoe.report.runs import load
from specmoe.report.tables import Tables
from specmoe.sources import published
from test_report import FIXTURE_STUDY

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"


def _fixture_comparison() -> pd.DataFrame:
    td = Tables.of(in_folder(FIXTURE))
    names = {s.table for s in published.SPECS} | {"three_step_correction"}
    return published.comparison({n: load(td, n) for n in names}, FIXTURE_STUDY)


def test_a_delta_beside_the_published_one_keeps_its_by_request_interval():
    """acceptance_consecutive names the delta's interval delta_low_by_request/high_by_request;
    the comparison read delta_low/delta_high, so every delta row lost its interval."""
    cmp_ = _fixture_comparison()
    ac = load(Tables.of(in_folder(FIXTURE)), "acceptance_consecutive")
    r = ac[(ac["model"] == "synth-fine") & (ac["draft_position"] == 1)].iloc[0]
    row = cmp_[(cmp_["table"] == "acceptance_consecutive") & (cmp_["quantity"] == "delta")
               & (cmp_["model"] == "synth-fine") & (cmp_["key"] == "draft_position 1")].iloc[0]
    assert np.isfinite(r["delta_low_by_request"]) and np.isfinite(r["delta_high_by_request"])
    assert (row["reproduced_low"], row["reproduced_high"]) == pytest.approx(
        (r["delta_low_by_request"], r["delta_high_by_request"]))
    assert row["reproduced_low"] <= row["reproduced"] <= row["reproduced_high"]


def test_the_comparison_figure_draws_each_reproduced_interval_its_table_gives():
    """The comparison figure drew bare points though the table carries reproduced_low/high: the
    overlap-decomposition panel's temporal shares have error bars spanning their intervals, the
    quantities without one are open markers named in the legend."""
    cmp_ = _fixture_comparison()
    colors = figures.palette(list(dict.fromkeys(cmp_["model"])))
    fig = figures.comparison(cmp_, colors)
    try:
        ax = next(a for a in fig.axes if a.get_title() == "overlap decomposition step1")
        rows = cmp_[cmp_["table"] == "overlap_decomposition_step1"]
        has = np.isfinite(rows["reproduced_low"]) & np.isfinite(rows["reproduced_high"])
        assert has.any() and (~has).any()
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        segments = [seg for c in bars for seg in c.lines[2][0].get_segments()]
        spans = {(round(s[0][0], 9), round(s[0][1], 9), round(s[1][1], 9)) for s in segments}
        for _, r in rows[has].iterrows():
            assert (round(r["published"], 9), round(r["reproduced_low"], 9),
                    round(r["reproduced_high"], 9)) in spans
        assert len(segments) == has.sum()
        open_points = sum(len(c.get_offsets()) for c in ax.collections
                          if isinstance(c, PathCollection) and not c.get_facecolors().any())
        assert open_points == (~has).sum()
        assert figures.NO_INTERVAL in ax.get_legend_handles_labels()[1]
    finally:
        figures.plt.close(fig)


def _bars(ax, label: str) -> list:
    """The error bar segments of the series named `label` in a panel's legend, of nonzero
    length, as (x, low, high)."""
    out = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer) and c.get_label() == label:
            out += [(s[0][0], s[0][1], s[1][1]) for s in c.lines[2][0].get_segments()
                    if len(s) == 2 and s[1][1] > s[0][1]]
    return out


def test_overlap_by_distance_draws_the_tables_intervals_and_joins_no_points():
    """The figure drew the overlaps and independence as bare lines though the table gives their
    intervals (step1_low/high, seq1_low/high, independent_low/high), and joined the points into
    a decay the table may not decide (window_decay, seq_decay): each run's panel has error bars
    at d = 1 spanning the table's intervals, independence a band spanning its own, and no line
    joins the overlaps."""
    frames = figures.figure_frames(in_folder(FIXTURE), FIXTURE_STUDY)
    fn, df, colors, pub = frames["overlap_by_distance"]
    ob = load(Tables.of(in_folder(FIXTURE)), "overlap_by_distance").set_index("run")
    fig = fn(df, colors, pub)
    try:
        axes = [a for a in fig.axes if a.get_visible() and a.get_xlabel() == "step distance d"]
        assert len(axes) == len(ob)
        for ax, run in zip(axes, dict.fromkeys(df["run"])):
            r = ob.loc[run]
            assert _bars(ax, "inside windows") == [
                pytest.approx((1, r["step1_low"], r["step1_high"]))]
            if np.isfinite(r["seq1_low"]):
                assert _bars(ax, "along the committed sequence") == [
                    pytest.approx((1, r["seq1_low"], r["seq1_high"]))]
            band = [c for c in ax.collections if c.get_label() == "independence, 95% interval"]
            assert len(band) == 1
            ys = band[0].get_paths()[0].vertices[:, 1]
            assert (ys.min(), ys.max()) == pytest.approx((r["independent_low"],
                                                          r["independent_high"]))
            for line in ax.get_lines():
                if line.get_label() in ("inside windows", "along the committed sequence",
                                        "within-window shuffle"):
                    assert line.get_linestyle() in ("None", "none", ""), line.get_label()
    finally:
        figures.plt.close(fig)


def _with_draft_cost_interval(sp: pd.DataFrame) -> pd.DataFrame:
    """The fixture's sweep rows with a draft-cost interval: the table's own where it has one
    (a fixture regenerated since the column was added), else one around each value."""
    if "draft_cost_low" in sp:
        return sp
    return sp.assign(draft_cost_low=sp["draft_cost"] * 0.9, draft_cost_high=sp["draft_cost"] * 1.2)


def test_the_measured_draft_cost_figure_draws_the_tables_interval():
    """The measured draft-cost figure joined bare points: each point its table gives an interval
    for has an error bar spanning it."""
    frames = figures.figure_frames(in_folder(FIXTURE), FIXTURE_STUDY)
    fn, sp, colors = frames["draft_cost_vs_batch"]
    sp = _with_draft_cost_interval(sp)
    fig = fn(sp, colors)
    try:
        ax = fig.axes[0]
        drawn = sp[np.isfinite(sp["draft_cost"]) & np.isfinite(sp["draft_cost_low"])
                   & (sp["draft_cost_high"] > sp["draft_cost_low"])]
        assert not drawn.empty
        bars = {(round(x, 9), round(lo, 9), round(hi, 9)) for c in ax.containers
                if isinstance(c, ErrorbarContainer)
                for (x, lo), (_, hi) in (s for s in c.lines[2][0].get_segments() if len(s) == 2)}
        want = {(round(float(b), 9), round(lo, 9), round(hi, 9)) for b, lo, hi in
                zip(drawn["batch"], drawn["draft_cost_low"], drawn["draft_cost_high"])}
        assert want <= bars
    finally:
        figures.plt.close(fig)


def test_the_sweep_table_and_its_words_carry_the_draft_cost_interval(tmp_path):
    """speedup_vs_batch carries speedup_curve's draft_cost_low/high, and the findings give each
    measured ratio with its interval where the table has one."""
    from specmoe.measured.sweep import speedup_curve
    from specmoe.report import prose
    from specmoe.report.measured import speedup_row
    from specmoe.report.tables import write_table

    def series(base, spread=0.05, tau=None):
        return [{"batch": b, "repeat": i, "tpot_ms": {"mean": t, "p99": t},
                 "output_throughput": 1.0,
                 **({"sd": {"acceptance_length": tau, "per_position_acceptance": [0.5]}}
                    if tau else {})}
                for b in (1, 4) for i, t in enumerate(base * b ** 0.1 * (1 + spread * e)
                                                      for e in (-1, 0, 1))]

    res = speedup_curve(series(10.0), series(7.0, tau=2.0), series(0.5), 3, 0.05, "client", 0.0)
    rc = {"model": "m", "drafter": "d", "k": 3, "dataset": "x", "control_of": None}
    rows = pd.DataFrame([speedup_row(rc, res, r, False) for r in res["rows"]])
    for r, row in zip(res["rows"], rows.itertuples()):
        assert np.isfinite(r["draft_cost_low"])
        assert (row.draft_cost_low, row.draft_cost_high) == (r["draft_cost_low"],
                                                             r["draft_cost_high"])
    write_table(rows, tmp_path / "speedup_vs_batch", {}, "")
    words = " ".join(prose.draft_cost_findings(Tables.of(in_folder(tmp_path))))
    r = res["rows"][0]
    assert (f"{r['draft_cost']:.2f} [{r['draft_cost_low']:.2f}, {r['draft_cost_high']:.2f}] "
            "at batch 1") in words
    assert "no interval" not in words


def test_a_drafter_that_outweighs_its_target_is_named_in_its_panel_not_drawn():
    """draft_ratio_model gives a left-out ratio's reason in `status`, but the figure looked for
    draft_cost_status: the fixture's N = 896 drafter of tiny-fine (heavier than its target) had
    no panel note and kept a legend entry. The panel's note gives the table's reason, and the
    curve has no line."""
    frames = figures.figure_frames(in_folder(FIXTURE), FIXTURE_STUDY)
    fn, df, *args = frames["draft_ratio_model"]
    fig = fn(df, *args)
    try:
        ax = next(a for a in fig.axes if a.get_title() == "tiny-fine, K=3")
        d = df[(df["model"] == "tiny-fine") & (df["k"] == 3)]
        heavy = d[d["status"] != "ok"]
        assert not heavy.empty and heavy["draft_cost_raw"].notna().all()
        note = " ".join(" ".join(t.get_text().split()) for t in ax.texts)
        assert "outweighs" in note
        assert set(heavy["status"]).pop() in note
        labels = ax.get_legend_handles_labels()[1]
        assert not set(heavy["synthetic_drafter"]) & set(labels)
        assert set(d.loc[d["status"] == "ok", "synthetic_drafter"]) <= set(labels)
    finally:
        figures.plt.close(fig)


def test_the_draft_ratio_captions_state_no_configurable_value_as_fixed():
    """The draft-ratio captions said 'to 4,096 sequences' and 'Figure 12: 896' (the alt text 'to
    4096'), though draft_cost.batch_sizes and draft_cost.moe_drafter_experts are configurable:
    they name the settings, and the schema's defaults appear nowhere but in the study's own
    Figure 12 (896 experts, a fact of the study)."""
    import yaml

    from specmoe.report import registry
    from wf import REPO

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    draft = schema["properties"]["draft_cost"]["properties"]
    largest, experts = max(draft["batch_sizes"]["default"]), draft["moe_drafter_experts"]["default"]
    study = "the study's Figure 12 extrapolates one Qwen3-30B layer to 896 experts"
    texts = {"table": registry.text("draft_ratio_model"),
             "figure": registry.text("draft_ratio_model", figure=True),
             "alt": registry.ALT["draft_ratio_model"]}
    for where, text in texts.items():
        bare = text.replace(study, "")
        for value in (largest, experts):
            assert f"{value:,}" not in bare and str(value) not in bare, (where, value)
    assert all("draft_cost.batch_sizes" in texts[w] for w in ("table", "figure"))
    assert "draft_cost.moe_drafter_experts" in texts["table"]
