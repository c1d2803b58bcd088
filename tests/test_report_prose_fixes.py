"""The report's prose against tables that broke or misled it: three tiny targets of different
granularity, runs listed K descending, controls that do not decide their excess, and a TE that
the sweep does not identify."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from declared import tables_in
from specmoe.report import prose, tables

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"


def _share(kn: float, share: float, half: float = 0.02) -> tuple:
    """A model's entry of the shares _granularity_rows takes: k/N, the temporal share and its
    95% interval."""
    return kn, share, share - half, share + half


def test_three_tiny_targets_of_different_granularity_give_a_row_per_neighbouring_pair():
    """The loop of _granularity_rows reused the name of its `control` parameter (target ->
    control) for the control's status, so the second pair indexed a string: three tiny targets
    of different granularity made routing_targets raise TypeError."""
    shares = {"a": _share(0.125, 0.6), "b": _share(0.25, 0.4), "c": _share(0.5, 0.2),
              "ar": _share(0.125, 0.3), "br": _share(0.25, 0.3), "cr": _share(0.5, 0.3)}
    control = {"a": "ar", "b": "br", "c": "cr"}
    rows = prose._granularity_rows(["a", "b", "c"], shares, control, {})
    assert [(r["model"], r["status"], r["control_status"]) for r in rows] == [
        ("a", prose.SHOWN, prose.UNDECIDED), ("b", prose.SHOWN, prose.UNDECIDED)]
    # the first pair paired by prompt (matched_controls' share_* columns), the second not
    lead = {"share_coarser": "b", "share_paired": True, "comparable": True, "why": "",
            **{f"share_{k}": v for k, v in (
                ("lead", 0.2), ("lead_low", 0.1), ("lead_high", 0.3),
                ("control_lead", 0.0), ("control_lead_low", -0.1), ("control_lead_high", 0.1),
                ("excess", 0.2), ("excess_low", 0.05), ("excess_high", 0.35))}}
    rows = prose._granularity_rows(["a", "b", "c"], shares, control, {"a": lead})
    assert len(rows) == 2 and "paired by prompt" in rows[0]["value"]
    assert rows[1]["target"].startswith("temporal share of b ")


def _fixture_with(tmp_path, **frames: pd.DataFrame):
    """The fixture run's tables with some replaced (stem=frame), each with its own provenance."""
    for p in FIXTURE.glob("*.csv"):
        shutil.copy(p, tmp_path / p.name)
    for stem, df in frames.items():
        tables.write_table(df, tmp_path / stem, tables.read_provenance(FIXTURE / f"{stem}.csv"))
    return tables_in(tmp_path)


def _interval_text(r, col: str) -> str:
    return f"{r[col]:.2f} [{r[f'{col}_low']:.2f}, {r[f'{col}_high']:.2f}]"


def test_the_timing_findings_describe_the_run_the_opening_and_the_routing_rows_do(tmp_path):
    """The findings table's timing rows took the speedup table's first run and the first
    profile row in file order, while the routing rows and the opening take each model's
    smallest K: with the speedup table listed K descending (ks: [5, 3]), 'SD speedup highest at
    batch 1' gave K=5's numbers beside an opening that gave K=3's. The profile tables are given
    a K=5 run listed first as well: the MoE share must stay K=3's."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    ks = tables.read_csv(FIXTURE / "kernel_time_shares.csv")
    # a K=5 profile of tiny-fine, listed first, whose shares differ from K=3's
    ks5 = ks[ks["model"] == "tiny-fine"].assign(k=5, decode_share=lambda d: d["decode_share"] / 2)
    td = _fixture_with(tmp_path,
                       speedup_vs_batch=sp.sort_values("k", ascending=False, kind="stable"),
                       kernel_time_shares=pd.concat([ks5, ks]))
    k3 = sp[(sp["model"] == "tiny-fine") & (sp["k"] == sp["k"].min())]
    k3 = k3[k3["dataset"] == k3["dataset"].iloc[0]].sort_values("batch").iloc[0]
    words = f"{_interval_text(k3, 'speedup')} at batch {int(k3['batch'])}"
    t = prose.routing_targets(td)
    fine = t[t["model"] == "tiny-fine"].set_index("finding")
    routing_run = fine.loc["overlap decays with distance", "run"]
    assert fine.loc[prose.SPEEDUP_AT_1, "run"] == routing_run
    assert fine.loc[prose.SPEEDUP_AT_1, "value"].startswith(words)
    text = prose.opening(td)
    assert f"tiny-fine, K={int(k3['k'])}: " in text and f"speedup {words}" in text
    moe = ks[(ks["model"] == "tiny-fine") & (ks["batch"] == 1) & (ks["class"] == "moe")].iloc[0]
    assert fine.loc[prose.MOE_SHARE, "run"] == routing_run
    assert fine.loc[prose.MOE_SHARE, "value"].startswith(f"{moe['decode_share']:.2f} of time")
    assert f"its MoE kernels took {100 * moe['decode_share']:.0f}% of the profiled step" in text
