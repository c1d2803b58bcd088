"""The report's prose against tables that broke or misled it: three tiny targets of different
granularity, runs listed K descending, controls that do not decide their excess, and a TE that
the sweep does not identify."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from declared import tables_in
from specmoe.report import bounds, figures, prose, tables

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
    assert fine.loc[prose.SPEEDUP_SHAPE, "run"] == routing_run
    assert fine.loc[prose.SPEEDUP_SHAPE, "value"].startswith(words)
    text = prose.opening(td)
    assert f"tiny-fine, K={int(k3['k'])}: " in text and f"speedup {words}" in text
    moe = ks[(ks["model"] == "tiny-fine") & (ks["batch"] == 1) & (ks["class"] == "moe")].iloc[0]
    assert fine.loc[prose.MOE_SHARE, "run"] == routing_run
    assert fine.loc[prose.MOE_SHARE, "value"].startswith(f"{_share_words(moe)} of time")
    assert f"its MoE kernels took {_pct_words(moe)} of the profiled step" in text


def _share_words(moe) -> str:
    """A profile's MoE share of time with its interval over engine starts, "0.26 [0.22, 0.30]"."""
    return (f"{moe['decode_share']:.2f} [{moe['decode_share_low']:.2f}, "
            f"{moe['decode_share_high']:.2f}]")


def _pct_words(moe, scale: float = 1.0) -> str:
    """The same in percent, as the opening gives it, "26% [22%, 30%]"."""
    return (f"{100 * scale * moe['decode_share']:.0f}% "
            f"[{100 * scale * moe['decode_share_low']:.0f}%, "
            f"{100 * scale * moe['decode_share_high']:.0f}%]")


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
    ctl = ob["control_of"].notna()
    # the fixture's own controls: claimed only if each one's step 1 is decidedly below the
    # shuffle null (an interval across 0 decides nothing)
    below = (ob.loc[ctl, "above_shuffle_high"] < 0).all()
    assert ("Untrained controls clear independence without it" in _details(tables_in(FIXTURE))) \
        == bool(below and (ob.loc[ctl, "seq_excess_low"] > 0).all())
    # the controls made to decide both (step 1 below the null, as an untrained router's is):
    # claimed, with numbers
    ob = ob.assign(above_shuffle=np.where(ctl, -0.004, ob["above_shuffle"]),
                   above_shuffle_low=np.where(ctl, -0.005, ob["above_shuffle_low"]),
                   above_shuffle_high=np.where(ctl, -0.002, ob["above_shuffle_high"]))
    controls = ob[ctl]
    text = _details(_fixture_with(tmp_path / "decided", overlap_by_distance=ob))
    for _, c in controls.iterrows():  # both decided: claimed, with numbers
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


def _raw_te(r, col: str) -> str:
    """A TE that is not identified as the report must give it: its status by the tables' one
    rule (bounds.bounded_te: a status the numbers cannot show kept, any other decided again),
    its raw ratio with its interval (an unbounded end as ∞), named as not a TE."""
    lo, hi = r[f"{col}_raw_low"], r[f"{col}_raw_high"]
    status = bounds.bounded_te(col, r[f"{col}_raw"], lo, hi, r[f"{col}_status"])[f"{col}_status"]
    return (f"{status} (raw ratio {r[f'{col}_raw']:.2f} [{lo:.2f}, "
            f"{'∞' if hi == np.inf else f'{hi:.2f}'}], not a TE)")


def test_the_opening_says_the_cpu_run_does_not_identify_the_te_with_its_raw_numbers(tmp_path):
    """'What a CPU run cannot show' named only the speedup curves and the MoE shares: the TE at
    batch 1, the study's headline quantity, is not identified by the fixture's sweep for any
    tiny target, and the opening did not say so. It now gives each CPU target's TE from the
    sweep (and from profiled passes and the cost model) as its table has it: a ratio that is
    not a TE by its status and raw numbers, never as a TE."""
    td = tables_in(FIXTURE)
    text = prose.opening(td)
    cpu = text[text.index("What a CPU run cannot show"):]
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    first = sp[(sp["batch"] == 1) & (sp["k"] == 3)].drop_duplicates("model")
    assert first["te_sweep"].isna().all() and len(first) == 3
    for _, r in first.iterrows():
        assert f"its TE at batch 1 from the sweep {_raw_te(r, 'te_sweep')}" in cpu
        assert f"{r['te_sweep_raw']:.2f} of" not in cpu  # never given as a TE value
    t3 = tables.read_csv(FIXTURE / "te_three_ways.csv")
    fine = t3[(t3["model"] == "tiny-fine") & (t3["batch"] == 1)].iloc[0]
    # the profiled TE as its table has it: a value with its interval where identified (the
    # fixture's tiny-fine), else its status and raw numbers
    profiled = (f"{fine['te_profiled']:.2f} [{fine['te_profiled_low']:.2f}, "
                f"{fine['te_profiled_high']:.2f}]" if fine["te_profiled_status"] == "ok"
                else _raw_te(fine, "te_profiled"))
    assert (f"from profiled passes {profiled}, from the cost model "
            f"{fine['te_costmodel']:.2f}") in cpu
    assert ("the TE at batch 1 that the study's argument rests on is identified by the sweep "
            "for none of them") in cpu
    # a sweep that identifies one: said for that one, with its value and interval
    coarse = (sp["model"] == "tiny-coarse") & (sp["batch"] == 1)
    low = sp.loc[coarse, "te_sweep_raw_low"].to_numpy()
    sp.loc[coarse, "te_sweep"], sp.loc[coarse, "te_sweep_low"] = low, low / 2
    sp.loc[coarse, "te_sweep_high"] = (1 + low) / 2
    r = sp[coarse].iloc[0]
    cpu = prose.opening(_fixture_with(tmp_path, speedup_vs_batch=sp))
    assert (f"tiny-coarse: a decode step" in cpu and "its TE at batch 1 from the sweep "
            f"{r['te_sweep']:.2f} [{r['te_sweep_low']:.2f}, {r['te_sweep_high']:.2f}]") in cpu
    assert "the sweep identifies the TE at batch 1 for tiny-coarse of 3, on a CPU's" in cpu


def test_a_headline_the_study_publishes_and_the_run_cannot_give_is_said_not_compared(tmp_path):
    """tiny-fine compared with Qwen2-57B had no TE line: its TE at batch 1 from the sweep is not
    identified (and its entry names no precision or TP), so the comparison had no row and the
    sentence said nothing of the study's TE. Each headline quantity the study publishes for the
    matched model that the comparison does not set beside it is now 'not compared', with why
    and this run's own numbers, beside the study's value."""
    from declared import in_folder
    from specmoe.contracts import Named
    from specmoe.contracts.report import ComparisonParams
    from specmoe.sources import published
    from specmoe.stages import report

    for p in FIXTURE.glob("*.csv"):
        shutil.copy(p, tmp_path / p.name)
    study = {"tiny-fine": {"study": "Qwen2-57B", "precision": None, "tp": None, "gpu": "CPU"}}
    report.comparison_stage(Named({"tables": list(in_folder(tmp_path).values())}),
                            Named({"tables": [str(tmp_path / f"comparison.{e}")
                                              for e in ("csv", "md")]}),
                            ComparisonParams(study=study, config_hash="x"))
    [fine] = [s for s in prose.comparison_findings(tables_in(tmp_path))
              if s.startswith("tiny-fine ")]
    t3 = tables.read_csv(FIXTURE / "te_three_ways.csv")
    ours = t3[(t3["model"] == "tiny-fine") & (t3["batch"] == 1) & (t3["k"] == 3)].iloc[0]
    te = published.load("te_batch1_k3")
    theirs = te[te["model"] == "Qwen2-57B"].iloc[0]
    assert (f"TE at batch 1 not compared: this run's is not a value (ours: "
            f"{_raw_te(ours, 'te_sweep')}); the study's {theirs['target_efficiency']:.3f} "
            f"({theirs['precision']}, TP {theirs['tp']}, {theirs['sd_method']})") in fine
    # the study publishes no MoE share of Qwen2-57B: nothing is said of one
    prof = published.load("profiling_batch1")
    assert prof[prof["model"] == "Qwen2-57B"].empty and "MoE share" not in fine


def test_a_te_an_older_table_kept_as_a_value_is_worded_by_the_tables_one_rule():
    """A table of an older run may hold a TE as a value beside an interval that does not identify
    it; the report worded that by a copy of the rule of its own ('reaches past the physical
    bound' even for a point wholly above 1), not by measured.sweep.bound_status."""
    from specmoe.measured.sweep import TE_PAST_BOUND
    from specmoe.report.prose import _te_text

    past = _te_text({"te": 0.8, "te_low": 0.5, "te_high": 1.2}, "te")
    assert past.startswith(TE_PAST_BOUND) and "raw ratio 0.80 [0.50, 1.20], not a TE" in past
    above = _te_text({"te": 1.3, "te_low": 1.1, "te_high": 1.5}, "te")
    assert above.startswith("above 1: not physical") and "not a TE" in above
    assert _te_text({"te": 0.8, "te_low": 0.6, "te_high": 0.9}, "te").startswith("0.80")


def test_a_control_whose_shuffle_interval_crosses_0_is_not_said_to_clear_independence(
        tmp_path):
    """A control whose step 1 is not decidedly below the within-window shuffle null (its
    above_shuffle interval across 0) was listed under 'Untrained controls clear independence
    without it where their intervals decide both': an undecided interval decides nothing. It is
    now among the other controls, with its numbers."""
    ob = tables.read_csv(FIXTURE / "overlap_by_distance.csv")
    fine = ob["model"] == "tiny-fine-random"
    ctl = ob["control_of"].notna()
    # both controls' step 1 decidedly below the null (as an untrained router's is), then
    # tiny-fine-random's interval made to cross 0
    across = ob.assign(above_shuffle=np.where(ctl, -0.004, ob["above_shuffle"]),
                       above_shuffle_low=np.where(ctl, -0.005, ob["above_shuffle_low"]),
                       above_shuffle_high=np.where(fine, 0.004, np.where(
                           ctl, -0.002, ob["above_shuffle_high"])))
    text = _details(_fixture_with(tmp_path, overlap_by_distance=across))
    said = text.split("Other untrained controls")[0]
    assert "Untrained controls clear independence without it" in said
    assert "tiny-fine-random" not in said and "tiny-coarse-random" in said
    assert "tiny-fine-random, K=3, tinybench+2: step 1 along the sequence above independence" \
           " by " in text
    assert "not decidedly above the within-window shuffle null" in text


def test_the_cpu_rows_and_the_opening_take_the_profile_of_the_speedup_rows_drafter(tmp_path):
    """_first matched a profile row to the speedup run by K and dataset alone, while the speedup
    run (runs.first_run) is of one drafter and a profile is per drafter: with the speedup table
    listing drafter d1 first and the kernel shares drafter d2 first, the findings table and the
    opening gave d1's speedup beside d2's MoE share. A profile row is now of the speedup row's
    own run."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    ks = tables.read_csv(FIXTURE / "kernel_time_shares.csv")
    other = "tiny-drafter-b"
    sp2 = sp[sp["model"] == "tiny-fine"].assign(drafter=other)
    # the other drafter's profile, listed first, with shares that differ from the first's
    ks2 = ks[ks["model"] == "tiny-fine"].assign(drafter=other,
                                                decode_share=lambda d: d["decode_share"] / 2)
    td = _fixture_with(tmp_path, speedup_vs_batch=pd.concat([sp, sp2]),
                       kernel_time_shares=pd.concat([ks2, ks]))
    rows = {r["finding"]: r for r in prose._cpu_rows(td, ["tiny-fine"])}
    assert rows[prose.MOE_SHARE]["run"] == rows[prose.SPEEDUP_SHAPE]["run"]
    moe = ks[(ks["model"] == "tiny-fine") & (ks["batch"] == 1) & (ks["class"] == "moe")].iloc[0]
    assert rows[prose.MOE_SHARE]["value"].startswith(f"{_share_words(moe)} of time")
    assert rows[prose.MOE_SHARE]["status"] == prose.CPU  # the CPU flag decides the status only
    text = prose.opening(td)
    assert f"its MoE kernels took {_pct_words(moe)} of the profiled step" in text
    assert f"its MoE kernels took {50 * moe['decode_share']:.0f}% " not in text


def test_a_raw_ratio_is_worded_by_the_one_rule_keeping_only_what_its_numbers_cannot_show():
    """_te_text re-decided a TE's status by the one rule (sweep.bound_status) only where the
    value was a number: a NaN row of an older table kept the status it was written with, so
    1.86 [0.79, ∞] read 'its point lies outside (0, 1]' though its interval reaches back inside.
    The raw ratio is now decided by the rule too; a reason its numbers cannot show (no drafter
    series, no finite TE: bounds.SWEEP_REASONS) is kept as written."""
    old = pd.Series({"te_sweep": np.nan, "te_sweep_raw": 1.859, "te_sweep_raw_low": 0.787,
                     "te_sweep_raw_high": np.inf,
                     "te_sweep_status": "not identifiable: its point lies outside (0, 1]"})
    assert prose._te_text(old, "te_sweep").startswith(f"{bounds.TE_PAST_BOUND} (raw ratio 1.86")
    for reason in bounds.SWEEP_REASONS:
        kept = pd.Series({**old.to_dict(), "te_sweep_status": reason})
        assert prose._te_text(kept, "te_sweep").startswith(f"{reason} (raw ratio 1.86")
    # wholly outside, without an interval in the table: the point alone decides
    bare = pd.Series({"te": np.nan, "te_raw": 1.5, "te_status": "an older wording"})
    assert prose._te_text(bare, "te") == (f"{bounds.bound_status(1.5)} (raw ratio 1.50, "
                                          "not a TE)")


def test_a_te_the_sweep_measured_but_could_not_identify_is_not_called_unmeasured():
    """_te_text returned "not measured" wherever the TE and its raw ratio were both NaN, before
    reading the row's status: run2's tiny-fine K5 tinybench+2 batch 1, whose sweep measured it
    and found tau / speedup not above the draft cost (TE_UNDEFINED, no raw ratio), read "not
    measured". A reason the numbers cannot show is now given first."""
    for reason in bounds.SWEEP_REASONS:
        row = pd.Series({"te_sweep": np.nan, "te_sweep_raw": np.nan, "te_sweep_status": reason})
        assert prose._te_text(row, "te_sweep").startswith(reason)
        assert prose.NOT_MEASURED not in prose._te_text(row, "te_sweep")
    # with a raw interval but no raw point: the interval beside the reason
    row = pd.Series({"te_sweep": np.nan, "te_sweep_raw": np.nan, "te_sweep_raw_low": 1.2,
                     "te_sweep_raw_high": 3.4, "te_sweep_status": bounds.TE_UNDEFINED})
    assert prose._te_text(row, "te_sweep") == f"{bounds.TE_UNDEFINED} (raw ratio [1.20, 3.40])"
    # no status, no numbers: not measured
    assert prose._te_text(pd.Series({"te_sweep": np.nan, "te_sweep_raw": np.nan}),
                          "te_sweep") == prose.NOT_MEASURED


def _report_page(folder: Path) -> str:
    """The report's index.md from the tables in `folder`, with a speedup figure beside them (a
    real PNG: the report links it and captions it)."""
    from PIL import Image

    from declared import report_job
    from specmoe.contracts.report import ReportIndexParams
    from specmoe.stages import report

    Image.new("RGB", (8, 8)).save(folder / "speedup_vs_batch.png")
    out = folder / "report" / "index.md"
    report.report_index_stage(*report_job(folder, folder, out), ReportIndexParams("x"),
                              run_root=None)
    return out.read_text()


def test_fixed_texts_do_not_claim_a_spread_or_a_cpu_the_run_does_not_have(tmp_path):
    """Three fixed texts contradicted the run's tables: the speedup figure's caption said its
    intervals come 'from the repeats and the engine-to-engine spread' where engine_log_sd is 0
    (config/paper.yaml, any GPU sweep: the opening says 'from this run's repeats alone'); the
    findings heading always said 'The timing findings ... cannot be shown on a CPU', also for a
    sweep on cuda; and 'every position of a window feeds the routers nearly the same vector' was
    stated as fact beside the controls, computed from nothing. Each is now built from the tables
    (or dropped)."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    gpu = sp.assign(device="cuda", engine_log_sd=0.0)
    td = _fixture_with(tmp_path / "gpu", speedup_vs_batch=gpu)
    caption = figures.caption("speedup_vs_batch", td)
    assert "from this run's repeats alone" in caption and "engine-to-engine spread (" not in \
        caption and "{" not in caption
    text = _report_page(tmp_path / "gpu")
    findings = text.split("## Findings")[1].split("|")[0]
    assert "CPU" not in findings and "repeats and the engine-to-engine spread" not in text
    assert "from this run's repeats alone" in text.split("Figure: ")[1]
    assert "nearly the same vector" not in text
    # the fixture as measured: swept on a CPU with a measured spread; its timing rows named
    td = _fixture_with(tmp_path / "cpu")
    assert "the engine-to-engine spread measured for the device they ran on, a CPU" in \
        figures.caption("speedup_vs_batch", td)
    text = _report_page(tmp_path / "cpu")
    findings = text.split("## Findings")[1].split("|")[0]
    assert "cannot be shown on a CPU" in findings and "tiny-fine" in findings
    # no timing rows at all: nothing said about timing
    td = _fixture_with(tmp_path / "none", speedup_vs_batch=sp.iloc[:0],
                       kernel_time_shares=tables.read_csv(
                           FIXTURE / "kernel_time_shares.csv").iloc[:0])
    assert prose.timing_note(prose.routing_targets(td)) == ""


def test_a_run_s_speedup_line_names_its_shape_and_the_direction_its_sweep_decided(tmp_path):
    """measured_findings printed the shape label unnamed and dropped the decided direction:
    'tiny-fine/tiny-drafter/K5/heldout-code: speedup B=1: 0.73 [0.61, 0.88], ... (undecided
    within the noise)' where speedup_vs_batch.csv has direction 'slower' for that run. The line
    now says 'shape: ...; <direction>' from the table's columns."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    td = _fixture_with(tmp_path, speedup_vs_batch=sp.assign(direction="slower"))
    lines = [ln for ln in prose.measured_findings(td) if ": speedup B=" in ln]
    assert lines and all("; shape: " in ln and "; slower" in ln for ln in lines), lines
    shape = sp["shape"].iloc[0]
    assert any(f"shape: {shape}; slower" in ln for ln in lines)
    # a table without the direction decides none, and says so
    td = _fixture_with(tmp_path / "old", speedup_vs_batch=sp.drop(columns="direction"))
    lines = [ln for ln in prose.measured_findings(td) if ": speedup B=" in ln]
    assert lines and all("; direction not decided" in ln for ln in lines), lines


def test_a_run_s_acceptance_length_is_given_with_its_interval(tmp_path):
    """measured_findings printed the acceptance length bare ('acceptance length 2.04') although
    the speedup table carries its 95% interval over the repeats (tau_low, tau_high). It is now
    given with its interval, at the batch size it is from, and 'no interval over requests' where
    there is none (repeats that agree exactly, one repeat, or a table written before tau kept its
    interval)."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    b1 = int(sp["batch"].min())
    sp = sp.assign(tau=2.5, tau_low=np.where(sp["batch"] == b1, 2.25, np.nan),
                   tau_high=np.where(sp["batch"] == b1, 2.75, np.nan))
    td = _fixture_with(tmp_path, speedup_vs_batch=sp)
    lines = [ln for ln in prose.measured_findings(td) if ": speedup B=" in ln]
    assert lines and any(f"acceptance length at B={b1} 2.50 [2.25, 2.75] (over repeats, not "
                         "requests)" in ln for ln in lines), lines
    # a run whose tau has no interval, or a table without the columns, says so
    td = _fixture_with(tmp_path / "none", speedup_vs_batch=sp.assign(tau_low=np.nan))
    lines = [ln for ln in prose.measured_findings(td) if ": speedup B=" in ln]
    assert lines and all("acceptance length at B=" in ln and "2.50 (no interval over requests"
                         in ln for ln in lines), lines
    td = _fixture_with(tmp_path / "old", speedup_vs_batch=sp.drop(columns=["tau_low", "tau_high"]))
    lines = [ln for ln in prose.measured_findings(td) if ": speedup B=" in ln]
    assert lines and all("2.50 (no interval over requests" in ln for ln in lines), lines


def test_the_moe_share_finding_reads_the_share_of_kernel_time():
    """The study's claim is that MoE kernels take a smaller share of GPU time than of weights;
    on a GPU the eager profile's step time also holds launch gaps (0.427 of a step against 0.352
    of its kernel time in test_measured's example). The finding took te_three_ways' share of
    step time; it reads the profile's share of kernel time where the table has it, the step
    share only for tables written before it."""
    te = pd.DataFrame([{"model": "m", "run": "m K=3", "k": 3, "batch": 1,
                        "moe_time_share": 0.43, "moe_time_share_low": 0.40,
                        "moe_time_share_high": 0.46}])
    profile = pd.Series({"model": "m", "decode_share": 0.43, "decode_share_low": 0.40,
                         "decode_share_high": 0.46, "decode_kernel_share": 0.35,
                         "decode_kernel_share_low": 0.32, "decode_kernel_share_high": 0.38})
    assert prose._moe_share(te, "m", None, profile) == (0.35, 0.32, 0.38)
    older = profile.drop(["decode_kernel_share", "decode_kernel_share_low",
                          "decode_kernel_share_high"])
    assert prose._moe_share(te, "m", None, older) == (0.43, 0.40, 0.46)
