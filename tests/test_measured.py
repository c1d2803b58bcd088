"""The measured tables join sweeps, profiles and cost models by the full run, dataset included."""

import json

import numpy as np
import pandas as pd
import pytest

from specmoe.report.measured import build_measured_tables


def dump(tmp_path, name, obj):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(obj))
    return str(p)


def run(ds):
    return {"model": "m", "drafter": "d", "k": 3, "dataset": ds}


def speedup(ds, te, tau, s):
    return {"run": run(ds), "shape": "peak at low batch", "timing": "client", "margin": 0.05,
            "rows": [
        {"batch": 1, "tpot_ar_ms": 10.0, "tpot_sd_ms": 10.0 / s, "tpot_ar_p99_ms": 11.0,
         "tpot_sd_p99_ms": 11.0, "speedup": s, "tau": tau, "tau_low": tau - 0.05,
         "tau_high": tau + 0.05, "draft_cost": 0.1, "te_sweep": te,
         "te_sweep_low": te - 0.1, "te_sweep_high": min(te + 0.1, 1.0), "te_sweep_status": "ok",
         "speedup_low": s * 0.97, "speedup_high": s * 1.03,
         "position_acceptance": [0.7, 0.5, 0.3]}]}


def summarised(prof: dict) -> dict:
    """A hand-made profile as compare_starts writes it: every value of its batches per engine
    start (two starts, each the value given) with its interval, each class's shares and ratio
    too (report.measured refuses a profile without them)."""
    from specmoe.report.measured import PER_START

    from specmoe.measured.profiling import ALL_CLASSES, EAGER

    none = {"decode_us": 0.0, "verify_us": 0.0, "decode_share": 0.0, "verify_share": 0.0,
            "ratio": 1.0}  # a kernel class the hand-made profile gives no time

    def batch(b):
        # a class's share of kernel time: its share of time where not given (a CPU profile's)
        given = {c: {"decode_kernel_share": d["decode_share"], **d}
                 for c, d in ((c, b["classes"].get(c, none)) for c in ALL_CLASSES)}
        out = {**b, "classes": {c: {**d, **{f"{k}{e}": d[k] for k in (
                                    "decode_share", "verify_share", "decode_kernel_share", "ratio")
                                            for e in ("_low", "_high")},
                                    "ratio_per_start": [d["ratio"]] * 2}
                                for c, d in given.items()}}
        out.setdefault("engine_mode", {"decode": EAGER, "verify": EAGER})
        out.setdefault("verify_steps", 12)
        for k in ("te_profiled", "draft_cost_profiled"):
            out.setdefault(f"{k}_low", b[k])
            out.setdefault(f"{k}_high", b[k])
        for k in PER_START:
            out.setdefault(f"{k}_low", b[k])
            out.setdefault(f"{k}_high", b[k])
            out[f"{k}_per_start"] = [b[k]] * 2
        return out

    return {**prof, "batches": [batch(b) for b in prof["batches"]]}


def cost(ds, te, share):
    return {"run": run(ds), "moe_weight_share": share, "unique_ratio": 2.4, "dims": {"top_k": 8},
            "te_vs_batch": [{"routing": "measured windows (temporal)", "batch": 1, "te": te}]}


def test_a_profile_joins_its_own_datasets_sweep_and_cost_model(tmp_path):
    # two datasets of one model: the profile ran on d1, which must not take d2's numbers
    sps = [dump(tmp_path, "s1", speedup("d1", 0.8, 2.5, 1.6)),
           dump(tmp_path, "s2", speedup("d2", 0.5, 2.0, 1.1))]
    cms = [dump(tmp_path, "c1", cost("d1", 0.61, 0.667)), dump(tmp_path, "c2", cost("d2", 0.42, 0.5))]
    prof = {"run": run("d1"), "batches": [{
        "batch": 1, "te_profiled": 0.7, "moe_time_share": 0.33, "moe_time_ratio": 1.6,
        "dense_time_ratio": 0.95, "draft_cost_profiled": 0.05, "device": "cpu", "sm_count": 132,
        "classes": {"moe": {"decode_us": 3.0, "verify_us": 5.0, "decode_share": 0.33,
                            "verify_share": 0.4, "ratio": 1.6}}, "grids": {}}]}
    t = build_measured_tables(sps, [dump(tmp_path, "p", summarised(prof))], cms)
    row = t["te_three_ways"].iloc[0]
    assert row["dataset"] == "d1" and row["te_sweep"] == 0.8 and row["te_costmodel"] == 0.61
    # the study's Table 1 columns: unique experts per window and the observed-minus-predicted gap
    assert row["unique_sd"] == pytest.approx(2.4 * 8)
    assert row["gap_sweep_minus_costmodel"] == pytest.approx(0.8 - 0.61)
    # and its Tables 5/12: the MoE share of weights beside that of time
    ks = t["kernel_time_shares"]
    moe = ks[ks["class"] == "moe"].iloc[0]
    assert moe["class"] == "moe" and moe["moe_weight_share"] == 0.667
    assert row["te_sweep_profiled_c"] == pytest.approx(1 / (2.5 / 1.6 - 0.05))
    corr = t["three_step_correction"]
    assert (corr["te_sweep"] == 0.8).all() and corr.iloc[0]["f"] == 0.667
    assert len(t["speedup_vs_batch"]) == 2


def test_te_outside_zero_one_is_flagged_not_a_value(tmp_path):
    """14 profiled verify steps can give TE 1.17 (a verify pass timed faster than a decode
    pass): the table keeps it as the raw value with a status, never as a TE; the same for a
    three-step correction step above 1."""
    sps = [dump(tmp_path, "s", speedup("d1", 0.8, 2.5, 1.6))]
    cms = [dump(tmp_path, "c", cost("d1", 0.61, 0.2))]
    prof = {"run": run("d1"), "batches": [{
        "batch": 1, "te_profiled": 1.171, "moe_time_share": 0.3, "moe_time_ratio": 0.8,
        "dense_time_ratio": 0.9, "draft_cost_profiled": 0.05, "device": "cpu", "sm_count": 0,
        "classes": {}, "grids": {}}]}
    t = build_measured_tables(sps, [dump(tmp_path, "p", summarised(prof))], cms)
    row = t["te_three_ways"].iloc[0]
    assert pd.isna(row["te_profiled"]) and row["te_profiled_raw"] == 1.171
    assert row["te_profiled_status"] == "above 1: not physical"
    assert row["te_costmodel_status"] == "ok" and row["te_costmodel"] == 0.61
    corr = t["three_step_correction"]
    above = corr[corr["te_raw"] > 1]
    assert len(above) and above["te"].isna().all()
    assert (above["te_status"] == "above 1: not physical").all()


def test_a_te_whose_interval_reaches_past_1_is_marked_and_never_a_value(tmp_path):
    """Profiled TE 0.94 with the 95% interval [0.83, 1.06] (the default run's tiny-fine at batch
    1, marked "ok" before): its interval reaches past the physical bound, so it is marked not
    identified, and neither the TE nor its interval columns hold a number past 1; the raw
    values stay beside, named raw."""
    sps = [dump(tmp_path, "s", speedup("d1", 0.8, 2.5, 1.6))]
    cms = [dump(tmp_path, "c", cost("d1", 0.61, 0.2))]
    prof = {"run": run("d1"), "batches": [{
        "batch": 1, "te_profiled": 0.941, "te_profiled_low": 0.832, "te_profiled_high": 1.065,
        "moe_time_share": 0.3, "moe_time_ratio": 0.8, "dense_time_ratio": 0.9,
        "draft_cost_profiled": 0.05, "device": "cpu", "sm_count": 0, "classes": {},
        "grids": {}}]}
    row = build_measured_tables(sps, [dump(tmp_path, "p", summarised(prof))],
                                cms)["te_three_ways"].iloc[0]
    assert row["te_profiled_status"].startswith("not identified")
    assert all(pd.isna(row[c]) for c in ("te_profiled", "te_profiled_low", "te_profiled_high"))
    assert (row["te_profiled_raw"], row["te_profiled_raw_high"]) == (0.941, 1.065)
    te_cols = [c for c in row.index if c.startswith("te_") and "_raw" not in c
               and not c.endswith("_status")]
    assert not any(float(row[c]) > 1 for c in te_cols if pd.notna(row[c]))


def test_a_te_above_1_whose_interval_reaches_back_inside_is_not_identified_not_unphysical():
    """The default run's tiny-fine profiled TE 1.13 [0.54, 2.39] was called 'above 1: not
    physical' beside tiny-coarse's 0.94 [0.28, 3.13] 'not identified': the point's side of 1
    decided a word its interval does not. Not physical only where the interval lies wholly
    past the bound."""
    from specmoe.report.bounds import TE_PAST_BOUND, bounded_te

    assert bounded_te("te", 1.130792, 0.536049, 2.385399)["te_status"] == TE_PAST_BOUND
    assert bounded_te("te", -0.2, -0.5, 0.3)["te_status"] == TE_PAST_BOUND
    assert bounded_te("te", 1.3, 1.1, 1.5)["te_status"] == "above 1: not physical"
    assert bounded_te("te", 1.3)["te_status"] == "above 1: not physical"  # no interval given
    row = bounded_te("te", 1.130792, 0.536049, 2.385399)
    assert np.isnan(row["te"]) and np.isnan(row["te_low"]) and row["te_raw_high"] == 2.385399


def test_each_speedup_row_says_whether_the_runs_highest_lies_above_it(tmp_path):
    """The report called the highest point estimate the largest speedup where the intervals did
    not separate it: the table carries the sweep's pair test (sweep.below_highest) per row."""
    import math

    sp = speedup("d1", 0.8, 2.5, 1.6)
    sp["rows"] = [{**sp["rows"][0], "batch": b, "speedup": s, "speedup_log_se": se,
                   "speedup_df": math.inf} for b, s, se in ((1, 1.6, 0.0), (2, 1.2, 0.0),
                                                            (4, 1.58, 0.0), (8, 1.2, 0.3))]
    t = build_measured_tables([dump(tmp_path, "s", sp)], [], [])["speedup_vs_batch"]
    # batch 4 within the margin of batch 1's 1.6, batch 8 too uncertain to be below it
    assert list(t["below_highest"]) == [False, True, False, False]


def test_profiled_te_beside_the_sweeps_says_its_passes_ran_eagerly(tmp_path):
    """The profile runs eagerly (no torch.compile, no CUDA graphs) while a GPU sweep runs
    vLLM's default: the profiled TE and shares sat beside the sweep's TE with nothing saying
    they time another engine. Each row says how its profile ran (engine_mode, as the worker
    saw it; a profile without it is refused: report.measured._summarised_over_starts)."""
    sps = [dump(tmp_path, "s", speedup("d1", 0.8, 2.5, 1.6))]
    cms = [dump(tmp_path, "c", cost("d1", 0.61, 0.2))]
    eager = {"compilation_mode": "NONE", "cudagraph_mode": "NONE", "async_scheduling": True}
    batch = {"batch": 1, "te_profiled": 0.7, "moe_time_share": 0.3, "moe_time_ratio": 1.2,
             "dense_time_ratio": 1.0, "draft_cost_profiled": 0.05, "device": "cuda",
             "sm_count": 132, "classes": {}, "grids": {},
             "engine_mode": {"decode": eager, "verify": eager}}
    t = build_measured_tables(sps, [dump(tmp_path, "p", summarised({"run": run("d1"),
                                                                   "batches": [batch]}))],
                              cms)
    assert t["te_three_ways"].iloc[0]["profile_mode"] == "eager"
    assert set(t["three_step_correction"]["profile_mode"]) == {"eager"}


def test_each_speedup_row_says_what_its_sweep_ran_on(tmp_path):
    """The report called every speedup a CPU pipeline test: the table says what each sweep ran
    on, from the sweep's record kept in the speedup's provenance (`measured`), not from the
    machine the speedup job (a login node) ran on."""
    sp = speedup("d1", 0.8, 2.5, 1.6)
    login = {"cpu": "Intel Xeon", "cpu_count": 8}
    h100 = {"gpus": ["NVIDIA H100 80GB HBM3"]}
    for measured, device in (({"hardware": h100, "engine": "vllm 0.32.0 (cuda)"}, "cuda"),
                             ({"hardware": {"cpu": "AMD EPYC", "cpu_count": 2},
                               "engine": "vllm 0.32.0 (cpu)"}, "cpu")):
        sp["provenance"] = {"hardware": login, "measured": measured}
        t = build_measured_tables([dump(tmp_path, "s", sp)], [], [])["speedup_vs_batch"]
        assert list(t["device"]) == [device]
    del sp["provenance"]  # no record of where it ran: not guessed
    t = build_measured_tables([dump(tmp_path, "s", sp)], [], [])["speedup_vs_batch"]
    assert t["device"].isna().all()


def test_each_speedup_row_says_which_engine_spread_its_interval_took(tmp_path):
    """The engine spread a speedup's interval took (0 where none was measured for the device
    its series was swept on: stages.analysis.speedup_stage) is a column of its rows; a speedup
    from before it was recorded leaves it empty, not guessed."""
    sp = speedup("d1", 0.8, 2.5, 1.6)
    for spread in (0.043, 0.0):
        sp["engine_log_sd"] = spread
        t = build_measured_tables([dump(tmp_path, "s", sp)], [], [])["speedup_vs_batch"]
        assert list(t["engine_log_sd"]) == [spread]
    del sp["engine_log_sd"]
    t = build_measured_tables([dump(tmp_path, "s", sp)], [], [])["speedup_vs_batch"]
    assert t["engine_log_sd"].isna().all()


def test_a_cpu_sweep_on_a_node_with_a_gpu_is_a_cpu_sweep(tmp_path):
    """The device is the one the sweep's engine ran on (engine_label's suffix), not whether its
    machine had a GPU: vLLM's CPU build on a GPU node was labelled cuda. An engine that names no
    device is refused (every sweep's record names one)."""
    from specmoe.errors import InputError

    sp = speedup("d1", 0.8, 2.5, 1.6)
    sp["provenance"] = {"measured": {"hardware": {"gpus": ["NVIDIA H100 80GB HBM3"]},
                                     "engine": "vllm 0.32.0 (cpu)"}}
    t = build_measured_tables([dump(tmp_path, "s", sp)], [], [])["speedup_vs_batch"]
    assert list(t["device"]) == ["cpu"]
    sp["provenance"]["measured"]["engine"] = "vllm 0.32.0"
    with pytest.raises(InputError, match="names no device"):
        build_measured_tables([dump(tmp_path, "s", sp)], [], [])


def sweep_points(tpots, taus=None):
    """A series' points at batch 1, one per repeat: each repeat's TPOT (ms) and, for an SD
    series, its acceptance length."""
    out = []
    for r, t in enumerate(tpots):
        p = {"batch": 1, "repeat": r, "output_throughput": 1000.0 / t,
             "tpot_ms": {"mean": t, "median": t, "p99": t * 1.3}}
        if taus:
            p["sd"] = {"acceptance_length": taus[r], "per_position_acceptance": [0.5]}
        out.append(p)
    return out


def test_tau_keeps_its_interval_and_the_te_with_the_profiled_c_takes_it():
    """The sweep's TE took the acceptance length's interval but kept none of it: the speedup table
    showed tau without one, and the TE with the profiled c (te_sweep_profiled_c) took tau as
    exact. Repeats of tau 2.0, 2.5 and 3.0 (interval [1.26, 3.74]), a speedup of 1.5 [1.45, 1.55]
    and a profiled c of 0.1 [0.09, 0.11] gave 0.638 [0.615, 0.661], "ok", where tau's interval
    alone moves TE over [0.42, 1.35]: not identified."""
    from specmoe.measured.sweep import TE_PAST_BOUND, mean_interval, speedup_curve
    from specmoe.report.measured import speedup_row, te_three_ways_row
    from specmoe.report.runs import run_cols

    taus = [2.0, 2.5, 3.0]
    sp = speedup_curve(sweep_points([10.0, 10.2, 9.8]), sweep_points([6.0, 6.1, 5.9], taus),
                       sweep_points([0.5, 0.51, 0.49]), 3, 0.05, "client", 0.0)
    row = sp["rows"][0]
    assert (row["tau_low"], row["tau_high"]) == pytest.approx(mean_interval(taus))
    assert row["tau_low"] == pytest.approx(1.258, abs=1e-3)
    rc = run_cols(run("d1"))
    shown = speedup_row(rc, {**sp, "run": run("d1")}, row, False)
    assert (shown["tau"], shown["tau_low"], shown["tau_high"]) == (
        row["tau"], row["tau_low"], row["tau_high"])

    b = summarised({"run": run("d1"), "batches": [{
        "batch": 1, "te_profiled": 0.7, "moe_time_share": 0.33, "moe_time_ratio": 1.6,
        "dense_time_ratio": 1.05, "draft_cost_profiled": 0.1, "device": "cpu",
        "draft_cost_profiled_low": 0.09, "draft_cost_profiled_high": 0.11,
        "classes": {}}]})["batches"][0]
    sw = {**row, "tau": 2.5, "speedup": 1.5, "speedup_low": 1.45, "speedup_high": 1.55}
    te = te_three_ways_row(rc, b, sw, None, np.nan)
    assert te["te_sweep_profiled_c_raw"] == pytest.approx(1 / (2.5 / 1.5 - 0.1))
    assert te["te_sweep_profiled_c_status"] == TE_PAST_BOUND
    assert te["te_sweep_profiled_c_raw_low"] < 0.45 and te["te_sweep_profiled_c_raw_high"] > 1
    # the same point with tau known exactly: the speedup's and c's intervals alone decide
    exact = te_three_ways_row(rc, b, {**sw, "tau_low": 2.5, "tau_high": 2.5}, None, np.nan)
    assert exact["te_sweep_profiled_c_status"] == "ok"
    assert (exact["te_sweep_profiled_c_low"], exact["te_sweep_profiled_c_high"]) == \
        pytest.approx((0.615, 0.661), abs=1e-3)


def test_the_correction_table_gives_each_delta_and_share_of_the_gap_its_interval(tmp_path):
    """The three-step correction's delta and share of the gap closed, and te_three_ways' gap
    from the sweep to the cost model, were printed bare beside intervals: three starts (f
    0.45/0.55/0.5, S_moe 1.3/1.6/1.45, S_dense 1.08/1.04/1.06) now give every profiled step
    delta_low/delta_high and gap_closed_pct_low/gap_closed_pct_high (costmodel's
    three_step_correction_over_starts, with the sweep's TE interval), step 3's delta interval
    holding 0, and the gap to the cost model the sweep TE's interval less the cost model's TE."""
    from specmoe.measured.profiling import over_starts, share_over_starts
    from specmoe.report.measured import correction_rows, te_three_ways_row

    per = {"moe_time_share": [0.45, 0.55, 0.5], "moe_time_ratio": [1.3, 1.6, 1.45],
           "dense_time_ratio": [1.08, 1.04, 1.06]}
    b = summarised({"run": run("d1"), "batches": [{
        "batch": 1, "te_profiled": 0.78, "draft_cost_profiled": 0.05, "device": "cuda",
        "classes": {}, **{k: v[0] for k, v in per.items()}}]})["batches"][0]
    for k, v in per.items():
        point, lo, hi = (share_over_starts if k == "moe_time_share" else over_starts)(v)
        b.update({k: point, f"{k}_low": lo, f"{k}_high": hi, f"{k}_per_start": v})
    sw = speedup("d1", 0.85, 2.5, 1.6)["rows"][0]  # te_sweep 0.85 [0.75, 0.95]
    cm = {"moe_weight_share": 0.8, "unique_ratio": 2.0}
    rows = correction_rows({"model": "m"}, b, sw, cm)
    assert [r["te_status"] for r in rows] == ["ok"] * 4
    assert np.isnan(rows[0]["delta_low"]) and np.isnan(rows[0]["gap_closed_pct_low"])
    for r in rows[1:]:
        assert r["delta_low"] <= r["delta"] <= r["delta_high"]
        assert r["gap_closed_pct_low"] <= r["gap_closed_pct"] <= r["gap_closed_pct_high"]
    assert rows[2]["delta_low"] > 0                         # decided by the paired starts
    assert rows[3]["delta"] < 0 < rows[3]["delta_high"]     # undecided
    assert rows[3]["gap_closed_pct_low"] < 0 < rows[3]["gap_closed_pct_high"]
    te = te_three_ways_row({"model": "m"}, b, sw, None, 0.61)
    assert te["gap_sweep_minus_costmodel"] == pytest.approx(0.85 - 0.61)
    assert (te["gap_sweep_minus_costmodel_low"], te["gap_sweep_minus_costmodel_high"]) == \
        pytest.approx((0.75 - 0.61, 0.95 - 0.61))


def test_time_ratios_that_hold_device_idle_time_may_fall_below_1():
    """S_moe, S_dense and the MoE class's ratio were held to [1, inf) though their class times
    hold the device's idle time between kernels (profiling.device_events: idle between two MoE
    kernels is MoE time, the rest is 'other', and dense = total - MoE holds 'other'), which
    verify's longer kernels fill: starts built from the study's Qwen3-30B values (f 0.33, S_moe
    1.57, S_dense 0.94) gave step 3 a TE of 0.871 'ok' beside an s_dense blanked as 'below 1:
    not physical' on the same row. They are bounded by (0, inf) now, as 'other' is; a class of
    kernel work alone (attention) still cannot fall."""
    from specmoe.measured.profiling import (
        DEVICE_IDLE, EAGER, Event, compare_starts, over_starts, share_over_starts,
    )
    from specmoe.report.measured import correction_rows, kernel_rows

    def start(j):
        dec = [Event("fused_moe_kernel", 33, in_moe=True), Event("nvjet_tst_x", 40),
               Event(DEVICE_IDLE, 27)]
        ver = [Event("fused_moe_kernel", 51.8 + j, in_moe=True), Event("nvjet_tst_x", 48),
               Event(DEVICE_IDLE, 15 - j)]
        return dec, ver

    b = {**compare_starts([start(j) for j in (-0.5, 0, 0.5)]), "batch": 1,
         "engine_mode": {"decode": EAGER, "verify": EAGER}}
    assert b["dense_time_ratio_high"] < 1
    rows = correction_rows({"model": "m"}, b, None, {"moe_weight_share": 0.667,
                                                     "unique_ratio": 2.44})
    assert rows[3]["te_status"] == "ok" and rows[3]["s_dense_status"] == "ok"
    assert rows[3]["s_dense"] == pytest.approx(b["dense_time_ratio"])
    assert (rows[3]["s_dense_low"], rows[3]["s_dense_high"]) == (b["dense_time_ratio_low"],
                                                                 b["dense_time_ratio_high"])
    # per-start S_dense of 0.93, 0.94 and 0.95: a value, with its interval
    per = {"moe_time_share": [0.33] * 3, "moe_time_ratio": [1.55, 1.57, 1.59],
           "dense_time_ratio": [0.93, 0.94, 0.95]}
    b2 = summarised({"batches": [{"batch": 1, "te_profiled": 0.87, "draft_cost_profiled": 0.05,
                                  "device": "cuda", "classes": {},
                                  **{k: v[0] for k, v in per.items()}}]})["batches"][0]
    for k, v in per.items():
        point, lo, hi = (share_over_starts if k == "moe_time_share" else over_starts)(v)
        b2.update({k: point, f"{k}_low": lo, f"{k}_high": hi, f"{k}_per_start": v})
    rows = correction_rows({"model": "m"}, b2, None, {"moe_weight_share": 0.667,
                                                      "unique_ratio": 2.44})
    assert rows[3]["s_dense_status"] == "ok" and rows[3]["s_dense"] == pytest.approx(0.94,
                                                                                    rel=1e-3)
    # the MoE class's ratio below 1 (idle between MoE kernels that verify fills) is a value;
    # attention's, kernel work alone, is not
    b["classes"]["moe"] = {**b["classes"]["moe"], "ratio": 0.9, "ratio_low": 0.85,
                           "ratio_high": 0.95}
    b["classes"]["attention"] = {**b["classes"]["moe"]}
    ks = {r["class"]: r for r in kernel_rows({"model": "m"}, b, None)}
    assert ks["moe"]["ratio_status"] == "ok" and ks["moe"]["ratio"] == 0.9
    assert ks["attention"]["ratio_status"] == "below 1: not physical"


def test_the_moe_share_of_kernel_time_leaves_the_device_idle_time_out():
    """On a GPU the profiled class times hold the device's idle time between kernels (the eager
    passes' launch gaps), so f, the MoE share of the step's time, is not the study's MoE share
    of GPU time, a sum of kernel times, with which the comparison set it: 9 non-MoE and 8 MoE
    kernels per layer, each launched 15 us after the one before, gave f 0.427 where the MoE
    kernels take 0.352 of the kernel time. The share of kernel time is carried with its interval
    over the starts beside f, per class in kernel_time_shares, and it is what the comparison
    sets beside the study's; on a CPU (no device idle time) it is f."""
    from specmoe.measured.profiling import Event, compare, compare_starts, device_events
    from specmoe.report.measured import kernel_rows
    from specmoe.sources import published

    def step(moe_k, dense_k, gap=15.0, layers=4):
        timed, t = [], 0.0
        for _ in range(layers):
            for in_moe, ks in ((False, dense_k), (True, moe_k)):
                for d in ks:
                    timed.append((t, t + d, Event("fused_moe_kernel" if in_moe else "nvjet_tst",
                                                  0.0, in_moe=in_moe)))
                    t += max(d, gap)
        return device_events(timed)

    dense, moe = [2.0] * 8 + [4.0], [1.0] * 6 + [2.425] * 2
    dec, ver = step(moe, dense), step([2 * d for d in moe], [2 * d for d in dense])
    one = compare(dec, ver)
    kernel = 4 * sum(moe) / (4 * sum(moe) + 4 * sum(dense))
    assert round(one["moe_kernel_share"], 3) == round(kernel, 3) == 0.352
    assert round(one["moe_time_share"], 3) == 0.427                  # f: the step's time
    assert one["classes"]["moe"]["decode_kernel_share"] == one["moe_kernel_share"]
    # on a CPU, no device idle time: the two are one
    cpu = compare([Event("_C::cpu_fused_moe", 30, in_moe=True), Event("aten::mm", 70)],
                  [Event("_C::cpu_fused_moe", 40, in_moe=True), Event("aten::mm", 80)])
    assert cpu["moe_kernel_share"] == cpu["moe_time_share"] == 0.3

    # three starts: the share of kernel time with its interval over them, as f has
    starts = [(step(moe, [x * d for d in dense]), ver) for x in (0.95, 1.0, 1.05)]
    b = {**compare_starts(starts), "batch": 1}
    assert b["moe_kernel_share_low"] < b["moe_kernel_share"] < b["moe_kernel_share_high"]
    assert b["moe_kernel_share_high"] < b["moe_time_share_low"]
    assert len(b["moe_kernel_share_per_start"]) == 3
    ks = {r["class"]: r for r in kernel_rows(run_cols_of("d1"), b, None)}
    assert (ks["moe"]["decode_kernel_share"], ks["moe"]["decode_kernel_share_low"],
            ks["moe"]["decode_kernel_share_high"]) == (b["moe_kernel_share"],
                                                       b["moe_kernel_share_low"],
                                                       b["moe_kernel_share_high"])
    assert ks["moe"]["decode_share"] == b["moe_time_share"]

    # the comparison with the study's MoE share of GPU time reads the share of kernel time
    study = {"m": published.study_entry(
        {"name": "m", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "tp": 1, "hardware": "H100",
         "datasets": ["d1"]})}
    cmp_ = published.comparison({"kernel_time_shares": pd.DataFrame(list(ks.values()))}, study)
    (row,) = cmp_.to_dict("records")
    assert row["quantity"] == "decode_kernel_share" and row["published"] == 0.33
    assert (row["reproduced"], row["reproduced_low"], row["reproduced_high"]) == (
        b["moe_kernel_share"], b["moe_kernel_share_low"], b["moe_kernel_share_high"])


def run_cols_of(ds):
    from specmoe.report.runs import run_cols

    return run_cols(run(ds))


def test_a_draft_cost_profiled_eagerly_on_cuda_joins_only_a_sweep_that_ran_eagerly(tmp_path):
    """te_sweep_profiled_c set the profile's draft cost c (eager passes: each kernel launched on
    its own, the launch gaps in the drafter's and the step's times) beside tau and the speedup
    of sweeps whose engines replay CUDA graphs (vLLM's default on a GPU): two engines mixed in
    one number. On a CUDA profile beside graph-mode sweeps it is now no value, with the raw
    number kept and a status saying why; beside eager sweeps, and on a CPU, it is as before.
    The speedup stage records how the SD engine and the no-SD one beside it ran."""
    from types import SimpleNamespace

    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.measured.profiling import EAGER
    from specmoe.provenance import read_json, write_json
    from specmoe.report.measured import (
        PROFILED_C_MODE_UNKNOWN, PROFILED_C_OTHER_ENGINE, te_three_ways_row,
    )
    from specmoe.stages.analysis import speedup_stage
    from test_sweep import CPU_SERIES, point

    graphs = {"compilation_mode": "VLLM_COMPILE", "cudagraph_mode": "FULL_AND_PIECEWISE",
              "async_scheduling": True}
    # the speedup stage passes the series' engine modes on
    pts = lambda tpots, tau=None: [point(b, t * (1 + 0.01 * r), tau=tau, per_pos=[0.5])  # noqa
                                   | {"repeat": r} for b, t in tpots for r in range(2)]
    sd = {"datasets": {"ds": {"points": pts([(1, 8.0), (2, 10.0)], 2.0),
                              "paired_no_sd": {"points": pts([(1, 10.0), (2, 11.0)])}}},
          "engine_mode": graphs, "model_runner": "v1",
          "paired_no_sd": {"engine": {}, "arm_order": "interleaved", "engine_mode": EAGER}}
    write_json(tmp_path / "sd.json", sd, CPU_SERIES)
    speedup_stage(SimpleNamespace(sd=tmp_path / "sd.json", drafter=[]),
                  SimpleNamespace(json=tmp_path / "out.json"),
                  SpeedupParams(run={"model": "m", "dataset": "ds", "k": 3}, margin=0.05,
                                timing="client", engine_log_sd=0.043, engine_log_sd_df=6,
                                engine_log_sd_device="cpu"))
    assert read_json(tmp_path / "out.json")["engine_mode"] == {"sd": graphs, "no_sd": EAGER}

    def row(device, modes):
        b = summarised({"run": run("d1"), "batches": [{
            "batch": 1, "te_profiled": 0.7, "moe_time_share": 0.33, "moe_time_ratio": 1.6,
            "dense_time_ratio": 1.05, "draft_cost_profiled": 0.05, "device": device,
            "classes": {}}]})["batches"][0]
        sw = {**speedup("d1", 0.8, 2.5, 1.6)["rows"][0], "engine_mode": modes}
        return te_three_ways_row({"model": "m"}, b, sw, None, np.nan)

    te = 1 / (2.5 / 1.6 - 0.05)
    eager_sweep = row("cuda", {"sd": EAGER, "no_sd": EAGER})
    assert eager_sweep["te_sweep_profiled_c"] == pytest.approx(te)
    assert eager_sweep["te_sweep_profiled_c_status"] == "ok"
    for modes, why in (({"sd": graphs, "no_sd": graphs}, PROFILED_C_OTHER_ENGINE),
                       ({"sd": graphs, "no_sd": EAGER}, PROFILED_C_OTHER_ENGINE),
                       (None, PROFILED_C_MODE_UNKNOWN), ({"sd": EAGER}, PROFILED_C_MODE_UNKNOWN)):
        got = row("cuda", modes)
        assert np.isnan(got["te_sweep_profiled_c"]) and got["te_sweep_profiled_c_status"] == why
        assert np.isnan(got["te_sweep_profiled_c_low"])
        assert got["te_sweep_profiled_c_raw"] == pytest.approx(te)  # kept, with why
    for modes in ({"sd": graphs, "no_sd": graphs}, None):  # a CPU profile: as before
        got = row("cpu", modes)
        assert got["te_sweep_profiled_c"] == pytest.approx(te)
        assert got["te_sweep_profiled_c_status"] == "ok"

    # through the tables: the speedup result's engine modes reach the row
    sp = {**speedup("d1", 0.8, 2.5, 1.6), "engine_mode": {"sd": graphs, "no_sd": graphs}}
    prof = summarised({"run": run("d1"), "batches": [{
        "batch": 1, "te_profiled": 0.7, "moe_time_share": 0.33, "moe_time_ratio": 1.6,
        "dense_time_ratio": 1.05, "draft_cost_profiled": 0.05, "device": "cuda",
        "classes": {}}]})
    t = build_measured_tables([dump(tmp_path, "s", sp)], [dump(tmp_path, "p", prof)],
                              [dump(tmp_path, "c", cost("d1", 0.61, 0.667))])
    r = t["te_three_ways"].iloc[0]
    assert np.isnan(r["te_sweep_profiled_c"])
    assert r["te_sweep_profiled_c_status"] == PROFILED_C_OTHER_ENGINE
