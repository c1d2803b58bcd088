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


def _fixture_with(folder: Path, **frames: pd.DataFrame):
    """The fixture run's tables in `folder` with some replaced (stem=frame), each with its own
    provenance."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in FIXTURE.glob("*.csv"):
        shutil.copy(p, folder / p.name)
    for stem, df in frames.items():
        tables.write_table(df, folder / stem, tables.read_provenance(FIXTURE / f"{stem}.csv"))
    return tables_in(folder)


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


def _details(td) -> str:
    from specmoe.stages import report

    return "\n".join(report._details(td))


def test_the_controls_are_said_to_clear_independence_only_where_their_intervals_decide_it(
        tmp_path):
    """'Untrained controls clear independence without it' was a fixed sentence, printed
    wherever the routing had findings: with no control in the tables, and with a control whose
    step-1 excess over independence has an interval across 0. It is now built from the
    controls' rows: their excess along the sequence above 0 and step 1 not above the
    within-window shuffle null, each with its numbers."""
    ob = tables.read_csv(FIXTURE / "overlap_by_distance.csv")
    controls = ob[ob["control_of"].notna()]
    text = _details(tables_in(FIXTURE))
    for _, c in controls.iterrows():  # the fixture's controls decide both: claimed, with numbers
        assert (f"{c['model']}, K={int(c['k'])}, tinybench+2: step 1 along the sequence above "
                f"independence by {c['seq_excess']:+.3f} [{c['seq_excess_low']:+.3f}, "
                f"{c['seq_excess_high']:+.3f}]") in text
    assert "Untrained controls clear independence without it" in text
    # synthetic models only: no control, no sentence about controls
    synth = ob[ob["model"].str.startswith("synth")]
    text = _details(_fixture_with(tmp_path / "synth", overlap_by_distance=synth))
    assert "What the routing shows" in text and "Untrained controls" not in text
    assert "untrained control" not in text.split("### What the measurements show")[0].lower()
    # one control's excess interval across 0: not said to clear independence, its numbers given
    fine = ob["model"] == "tiny-fine-random"
    across = ob.assign(seq_excess_low=np.where(fine, -0.01, ob["seq_excess_low"]))
    text = _details(_fixture_with(tmp_path / "one", overlap_by_distance=across))
    said = text.split("Other untrained controls")[0]
    assert "tiny-fine-random" not in said and "tiny-coarse-random" in said
    assert ("tiny-fine-random, K=3, tinybench+2: step 1 along the sequence not decidedly above "
            "independence (") in text
    # both across 0: no claim at all
    across = ob.assign(seq_excess_low=np.where(ob["control_of"].notna(), -0.01,
                                               ob["seq_excess_low"]))
    text = _details(_fixture_with(tmp_path / "both", overlap_by_distance=across))
    assert "clear independence" not in text and "clears independence" not in text
    assert "The untrained controls, along the sequence and inside windows: " in text
