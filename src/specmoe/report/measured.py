"""The measured side's tables: speedup from the serving sweeps, profiles, and the cost model joined.

Every join is keyed by the full run (model, drafter, K, dataset) and the batch size: a profile runs
on its model's first dataset and joins that dataset's sweep and cost model only.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ..cost import costmodel
from ..errors import InputError
from ..measured.profiling import ALL_CLASSES, eager
from ..measured.sweep import below_highest, tau_for_te
from ..provenance import measured_device
from ..runs import Run
from . import registry
from .bounds import bounded, bounded_te
from .runs import prompt_fit_rows, run_cols, runs

log = logging.getLogger("specmoe")



def build_measured_tables(speedup_jsons, profile_jsons, cost_jsons) -> dict[str, pd.DataFrame]:
    """Tables of the measured side: speedup vs batch, TE three ways, kernel time shares and the
    three-step correction with profiled values (batch 1) against the TE from the sweep."""
    sps, prs, cms = (runs(x) for x in (speedup_jsons, profile_jsons, cost_jsons))
    t: dict[str, list] = {k: [] for k in registry.written_by("measured_tables")}
    te_cost = _costmodel_te(cms)
    cost_by_run = {Run.of(c["run"]): c for c in cms}
    sweep_rows = {}
    for sp in sps:
        rc = run_cols(sp["run"])
        t["prompt_fit_sweeps"] += prompt_fit_rows(rc, sp.get("prompting"))
        # which batch sizes the highest speedup lies above, by the shape's pair test
        below = below_highest(sp["rows"], sp["margin"])
        for r, b in zip(sp["rows"], below):
            t["speedup_vs_batch"].append(speedup_row(rc, sp, r, b))
            # with how the sweep's engines ran (profiled_c_apart)
            sweep_rows[(Run.of(rc), r["batch"])] = {**r, "engine_mode": sp.get("engine_mode")}
    for pr in prs:
        _summarised_over_starts(pr)
        rc = run_cols(pr["run"])
        run = Run.of(rc)
        cm = cost_by_run.get(run)
        for b in pr["batches"]:
            key = (run, b["batch"])
            sw = sweep_rows.get(key)
            t["te_three_ways"].append(te_three_ways_row(rc, b, sw, cm, te_cost.get(key, np.nan)))
            t["kernel_time_shares"] += kernel_rows(rc, b, cm)
            if b["batch"] == 1 and cm is not None:
                t["three_step_correction"] += correction_rows(rc, b, sw, cm)
    return {k: pd.DataFrame(v) for k, v in t.items()}


def _summarised_over_starts(pr: dict) -> None:
    """Refuse a profile written before its values were summarised over the engine starts
    (profiling.compare_starts: each pair of starts on prompts of its own, shares on the logit
    scale, every value with its interval and per-start values, every kernel class), or one
    that misses what the tables read of it (a class's share of kernel time among them): its f
    and a class's share were other estimates of the same share, and its starts replayed one
    prompt set."""
    classes = set(ALL_CLASSES)
    complete = pr["batches"] and all(
        set(b["classes"]) == classes and all(
            "decode_share_low" in c and "decode_kernel_share_low" in c
            and "ratio_per_start" in c for c in b["classes"].values())
        and all(k in b for k in PROFILE_KEYS) for b in pr["batches"])
    if not complete:
        raise InputError(f"profile of {Run.of(run_cols(pr['run'])).label}: written before"
                         " its values were summarised over the engine starts (no per-start "
                         "values, share intervals, kernel classes or shares of kernel time): "
                         "rerun rule profile")


def _costmodel_te(cms: list[dict]) -> dict[tuple, float]:
    """The cost model's TE with the measured routing, by run and batch size."""
    te_cost = {}
    for cm in cms:
        rc = run_cols(cm["run"])
        for r in cm["te_vs_batch"]:
            if r["routing"] == costmodel.MEASURED_ROUTING:
                te_cost[(Run.of(rc), r["batch"])] = r["te"]
    return te_cost


def speedup_row(rc: dict, sp: dict, r: dict, below: bool) -> dict:
    """One sweep point's row of the speedup_vs_batch table (sp: the run's speedup results, r:
    its point at one batch size, below: whether the run's highest speedup lies above it:
    sweep.below_highest)."""
    return {
        **rc, "batch": r["batch"], "tpot_ar_ms": r["tpot_ar_ms"],
        "tpot_sd_ms": r["tpot_sd_ms"], "tpot_ar_p99_ms": r["tpot_ar_p99_ms"],
        "tpot_sd_p99_ms": r["tpot_sd_p99_ms"], "repeats": r.get("repeats", 1),
        "speedup": r["speedup"], "speedup_low": r.get("speedup_low", np.nan),
        "speedup_high": r.get("speedup_high", np.nan),
        "timing": sp.get("timing", "client"),
        "speedup_client": r.get("speedup_client", r["speedup"]),
        "speedup_engine": r.get("speedup_engine", r["speedup"]), "tau": r["tau"],
        "tau_low": r.get("tau_low", np.nan), "tau_high": r.get("tau_high", np.nan),
        "tau_spread": r.get("tau_spread", np.nan),
        "draft_cost": r["draft_cost"], "draft_cost_low": r.get("draft_cost_low", np.nan),
        "draft_cost_high": r.get("draft_cost_high", np.nan),
        **bounded_te("te_sweep", r.get("te_sweep_raw", r["te_sweep"]),
                     r.get("te_sweep_low", np.nan), r.get("te_sweep_high", np.nan),
                     r.get("te_sweep_status")),
        "shape": sp["shape"], "direction": sp.get("direction", ""), "below_highest": below,
        # how the no-SD side was measured: beside the SD points (interleaved) or apart
        "no_sd_series": sp.get("no_sd_series", "a separate series (rule sweep_ar), measured "
                                               "apart from the SD series"),
        # what the series was swept on (its sweep's provenance), not the report's machine
        "device": measured_device(sp.get("provenance") or {}),
        # the engine-to-engine spread the interval took: the configured one where it was
        # measured on this device, else 0 (not measured there; stages.analysis.speedup_stage)
        "engine_log_sd": sp.get("engine_log_sd", np.nan),
        **{f"accept_pos{j}": a for j, a in enumerate(r["position_acceptance"], 1)}}


def te_three_ways_row(rc: dict, b: dict, sw: dict | None, cm: dict | None,
                      te_cm: float) -> dict:
    """One profiled batch size's row of the te_three_ways table: TE from the sweep (sw, None where
    it has no point), from profiling (b) and from the cost model (te_cm)."""
    te_sw = sw["te_sweep"] if sw else np.nan
    return {
        **rc, "batch": b["batch"],
        # the study's Table 1 columns: unique experts per window (measured), observed TE
        # (from the sweep) and the gap to the weight model's prediction
        "unique_sd": (cm["unique_ratio"] * (cm.get("dims") or {}).get("top_k", np.nan)
                      if cm else np.nan),
        **(bounded_te("te_sweep", sw.get("te_sweep_raw", te_sw), sw.get("te_sweep_low", np.nan),
                      sw.get("te_sweep_high", np.nan), sw.get("te_sweep_status"))
           if sw else bounded_te("te_sweep", np.nan, np.nan, np.nan)),
        # the same sweep point with the drafter cost from profiling: serving the drafter
        # alone also times the engine's per-step work, which SD pays once, not K times
        # (its interval from tau's, the speedup's and the profiled c's: te_sweep_interval);
        # none where the profile timed another engine than the sweep's (profiled_c_apart)
        **(bounded("te_sweep_profiled_c", *te_sweep_interval(
            sw.get("tau", np.nan), *_tau_interval(sw),
            *(sw.get(k, np.nan) for k in ("speedup", "speedup_low", "speedup_high")),
            *(b[k] for k in ("draft_cost_profiled", "draft_cost_profiled_low",
                             "draft_cost_profiled_high"))), profiled_c_apart(b, sw))
           if sw else bounded_te("te_sweep_profiled_c", np.nan, np.nan, np.nan)),
        **bounded_te("te_profiled", b["te_profiled"], b["te_profiled_low"],
                     b["te_profiled_high"]),
        "profile_mode": profile_mode(b),
        "verify_steps": b["verify_steps"],
        **bounded_te("te_costmodel", te_cm),
        # the sweep's TE less the cost model's (a point: no interval), with the sweep TE's
        # interval shifted by it (none where the sweep's TE is not a value)
        "gap_sweep_minus_costmodel": te_sw - te_cm,
        **{f"gap_sweep_minus_costmodel{end}": (sw.get(f"te_sweep{end}", np.nan) - te_cm
                                               if sw and np.isfinite(te_sw) else np.nan)
           for end in ("_low", "_high")},
        # their 95% intervals over the engine starts; the MoE share within its physical range
        # [0, 1], flagged as the three-step correction flags its f (CORRECTION_INPUTS)
        **bounded("moe_time_share", b["moe_time_share"], b["moe_time_share_low"],
                  b["moe_time_share_high"], **CORRECTION_INPUTS["f"]),
        **{f"draft_cost_profiled{end}": b[f"draft_cost_profiled{end}"]
           for end in ("", "_low", "_high")},
        "device": b["device"]}


# why a TE from a sweep point with the profiled draft cost is no value (profiled_c_apart)
PROFILED_C_OTHER_ENGINE = ("not comparable: the draft cost was profiled in eager mode on CUDA, "
                           "the sweep ran with CUDA graphs or torch.compile")
PROFILED_C_MODE_UNKNOWN = ("not comparable: the sweep's engine mode is not recorded (a speedup "
                           "result from before it was: rerun rule speedup)")


def profiled_c_apart(b: dict, sw: dict) -> str | None:
    """Why a profiled batch's draft cost c (b) cannot join a sweep point (sw, with its sweep's
    engine_mode: {"sd", "no_sd"}, analysis.speedup_stage), or None where it can. A profile runs
    eager (profiling.EAGER); on CUDA that launches each kernel on its own, and the launch gaps
    are in its step and drafter times, while vLLM's default engine, the sweeps', replays CUDA
    graphs: c from the one beside tau and the speedup from the other mixes two engines. So on
    CUDA it joins only a sweep whose engines both ran eager too; a sweep that did not record
    how it ran is not taken as one. On a CPU, where no CUDA graphs take the launches out, it
    joins the sweep as before."""
    if b["device"] != "cuda":
        return None
    modes = [(sw.get("engine_mode") or {}).get(arm) for arm in ("sd", "no_sd")]
    if any(m is None for m in modes):
        return PROFILED_C_MODE_UNKNOWN
    return None if all(eager(m) for m in modes) else PROFILED_C_OTHER_ENGINE


# a verify/decode time ratio that holds idle time: the device's between kernels and the host's
# between ops (profiling.DEVICE_IDLE, UNTRACKED), which verify's longer kernels fill, so that it
# may fall from decode to verify though the work in it cannot: (0, inf). "other" holds the idle
# time outside MoE blocks, the MoE class the idle time between two of a block's kernels (or
# ops): profiling.device_events, steps_from_chrome_trace
IDLE_HOLDING = {"lower": 0.0, "upper": np.inf}
# a kernel class's verify/decode time ratio's physical range: verify runs K + 1 tokens per
# request where decode runs 1, so the time of a class of work alone (attention, dense GEMM,
# communication) cannot fall ([1, inf)); MoE and "other" hold idle time (IDLE_HOLDING)
RATIO_RANGE = {**{cls: {"lower": 1.0, "upper": np.inf} for cls in ALL_CLASSES},
               "moe": IDLE_HOLDING, "other": IDLE_HOLDING}


def kernel_rows(rc: dict, b: dict, cm: dict | None) -> list[dict]:
    """One profiled batch size's rows of the kernel_time_shares table, one per kernel class."""
    rows = []
    for cls, c in b["classes"].items():
        g = {ph: (b.get("grids") or {}).get(ph, {}).get(cls, {}) for ph in ("decode", "verify")}
        rows.append({
            **rc, "batch": b["batch"], "class": cls, "decode_us": c["decode_us"],
            "verify_us": c["verify_us"],
            # the shares with their 95% intervals over the engine starts
            **{f"{ph}_share{end}": c[f"{ph}_share{end}"]
               for ph in ("decode", "verify") for end in ("", "_low", "_high")},
            # its share of the decode step's kernel time, the device's idle time between
            # kernels left out (profiling.compare), as the study's MoE share of GPU time is:
            # the share set beside the study's (sources.published)
            **{f"decode_kernel_share{end}": c[f"decode_kernel_share{end}"]
               for end in ("", "_low", "_high")},
            # its ratio within its physical range (RATIO_RANGE), flagged as a TE past its
            # bound is (bounded), with its interval over the engine starts
            **bounded("ratio", c["ratio"], c["ratio_low"], c["ratio_high"],
                      **RATIO_RANGE[cls]),
            "median_ctas_decode": g["decode"].get("median_ctas", np.nan),
            "median_ctas_verify": g["verify"].get("median_ctas", np.nan),
            "below_sm_share_verify": g["verify"].get("below_sm_count", np.nan),
            "sm_count": b.get("sm_count") or np.nan,
            # the study's Tables 5/12 put the MoE share of weights beside that of time
            "moe_weight_share": cm["moe_weight_share"] if cm and cls == "moe" else np.nan})
    return rows


# the three-step correction's inputs in the order its steps measure them, each with its physical
# range: the MoE share of step time, [0, 1], and the MoE and non-MoE verify/decode time ratios,
# (0, inf): both hold idle time, which may fall from decode to verify (IDLE_HOLDING; the
# non-MoE time is the step's less the MoE class's, "other" included), so that below 1 is no
# sign of a broken measurement (the study's own S_dense is 0.94)
CORRECTION_INPUTS = {"f": {"lower": 0.0, "upper": 1.0},
                     "s_moe": RATIO_RANGE["moe"], "s_dense": IDLE_HOLDING}
# the profile's values per engine start the correction's steps take, in their order
# (profiling.compare_starts), and every value of a profiled batch the tables read
PER_START = ("moe_time_share", "moe_time_ratio", "dense_time_ratio")
PROFILE_KEYS = (*(f"{k}{end}" for k in PER_START for end in ("", "_low", "_high", "_per_start")),
                *(f"{k}{end}" for k in ("te_profiled", "draft_cost_profiled")
                  for end in ("", "_low", "_high")),
                "verify_steps", "engine_mode", "device")


def correction_rows(rc: dict, b: dict, sw: dict | None, cm: dict) -> list[dict]:
    """The three_step_correction table's rows of a run profiled at batch 1 (b), against the TE
    from its sweep (sw, None where it has no point).

    The steps are costmodel.three_step_correction_over_starts of the profile's values per
    engine start (<name>_per_start): each profiled step's te is the starts' geometric mean of
    each start's TE at that step, with its interval over them, so it is identified only where
    that interval stays inside the bound (bounded_te)."""
    measured = _finite_or_none(sw["te_sweep"] if sw else None)
    corr = costmodel.three_step_correction_over_starts(
        cm["moe_weight_share"], cm["unique_ratio"], *(b[f"{k}_per_start"] for k in PER_START),
        measured=measured, **({"measured_low": sw.get("te_sweep_low", np.nan),
                               "measured_high": sw.get("te_sweep_high", np.nan)}
                              if measured else {}))
    rows = []
    for i, s in enumerate(corr["steps"]):
        # the delta's 95% interval over the paired starts, the gap's share's with the sweep
        # TE's too (costmodel.three_step_correction_over_starts; none on the weight baseline):
        # a sign is decided only where the interval leaves 0 out
        step = {k: np.nan if s[k] is None and k.startswith("delta_") else s[k]
                for k in ("name", "f", "s_moe", "s_dense", "te", "delta", "delta_low",
                          "delta_high", "gap_closed", "gap_closed_low", "gap_closed_high")}
        interval = (s.get("te_low"), s.get("te_high"))  # the weight baseline: none
        row = {**rc, "batch": 1, **gap_as_pct(step), **bounded_te("te", s["te"], *interval),
               "te_sweep": corr["measured"], "profile_mode": profile_mode(b)}
        # each input within its physical range, flagged as kernel_rows flags a class's ratio
        # (f, a share: [0, 1]; s_moe and s_dense, time ratios holding idle time: (0, inf)), with
        # its own interval over the engine starts from the step that takes it on (none before
        # it, where it is the weight model's)
        for j, (col, key) in enumerate(zip(CORRECTION_INPUTS, PER_START), 1):
            own = (b[f"{key}_low"], b[f"{key}_high"]) if i >= j else ()
            row.update({f"{col}{end}": np.nan for end in ("_low", "_high", "_raw_low",
                                                           "_raw_high")})
            row.update(bounded(col, step[col], *own, **CORRECTION_INPUTS[col]))
        if rows and (row["te_status"] != "ok" or rows[-1]["te_status"] != "ok"):
            # a step to or from a TE that is not a value is no value either, nor its interval
            row.update({k: np.nan for k in GAP_COLUMNS})
        rows.append(row)
    return rows


def profile_mode(b: dict) -> str:
    """How the profiled passes ran, beside sweep TEs whose engines run vLLM's default (on a GPU:
    torch.compile and CUDA graphs): "eager" (profiling.EAGER, the only mode profile_summary
    takes), else the modes recorded."""
    modes = list(b["engine_mode"].values())
    if all(eager(m) for m in modes):
        return "eager"
    return "; ".join(f"compilation {m['compilation_mode']}, CUDA graphs {m['cudagraph_mode']}"
                     for m in modes)


# a correction step's change and share of the gap, with their intervals: none to or from a TE
# that is not a value
GAP_COLUMNS = ("delta", "delta_low", "delta_high", "gap_closed_pct", "gap_closed_pct_low",
               "gap_closed_pct_high")


def gap_as_pct(step: dict) -> dict:
    """A correction step with its share of the gap closed in percent (gap_closed_pct), as the
    study and the replay give it: one format for the quantity in every table; with its interval
    (gap_closed_pct_low, gap_closed_pct_high) where the step has one (gap_closed_low,
    gap_closed_high), none where the share itself is none."""
    ends = ("gap_closed_low", "gap_closed_high")
    out = {k: v for k, v in step.items() if k != "gap_closed" and k not in ends}
    g = step.get("gap_closed")
    ok = g is not None and np.isfinite(g)
    out["gap_closed_pct"] = 100 * g if ok else np.nan
    if any(e in step for e in ends):
        out.update({f"gap_closed_pct{e[10:]}": 100 * step[e] if ok and step[e] is not None
                    else np.nan for e in ends})
    return out


def _tau_interval(sw: dict) -> tuple[float, float]:
    """A sweep point's tau interval as its TE takes it (sweep.tau_for_te, the sweep's rule)."""
    return tau_for_te(sw.get("tau", np.nan), sw.get("tau_low"), sw.get("tau_high"),
                      sw.get("tau_spread"))


def te_sweep_interval(tau: float, tau_low: float, tau_high: float, speedup: float,
                      s_low: float, s_high: float, c: float, c_low: float,
                      c_high: float) -> tuple[float, float, float]:
    """TE from a sweep point with a profiled draft cost (costmodel.te_from_sweep: TE = 1 / D,
    D = tau / speedup - c), with its 95% interval from tau's, the speedup's and c's. tau is
    taken at its interval's ends as the sweep's TE takes it (sweep.te_interval: D's lower end
    at tau's lower end, its upper at tau's upper; tau and the speedup come from one series);
    the sweep and the profile are independent measurements and D, at each end of tau, is a sum
    of one term from each (tau / speedup and -c), so D's interval takes, on each side, the root
    sum of squares of the shift each term's 95% end gives with the other at its point; TE's
    ends are 1 / D's (inf where D's lower end reaches 0: no finite TE). c without spread (c_low
    = c = c_high: a profile from before it had an interval) gives TE at tau's and the
    speedup's ends; any interval missing (NaN: tau or the speedup measured once, a sweep from
    before tau kept its interval) gives none."""
    te = _te_sweep(tau, speedup, c)
    if not np.isfinite(speedup) or not (np.isfinite(tau_low) and np.isfinite(tau_high)):
        return te, np.nan, np.nan
    if c_low == c == c_high:
        return te, _te_sweep(tau_high, s_low, c), _te_sweep(tau_low, s_high, c)
    down = np.hypot(tau_low / speedup - tau_low / s_high, c_high - c)  # NaN: no interval
    up = np.hypot(tau_high / s_low - tau_high / speedup, c - c_low)
    d_lo, d_hi = tau_low / speedup - c - down, tau_high / speedup - c + up
    if not (np.isfinite(d_lo) and np.isfinite(d_hi)):
        return te, np.nan, np.nan
    return (te, 1 / d_hi if d_hi > 0 else np.inf, 1 / d_lo if d_lo > 0 else np.inf)


def _te_sweep(tau: float, speedup: float, draft_cost: float) -> float:
    """costmodel.te_from_sweep, unbounded (inf) where the speedup reaches tau / c (there its
    NaN means no finite TE, not a missing one)."""
    if not np.isfinite(speedup):
        return np.nan
    te = costmodel.te_from_sweep(tau, speedup, draft_cost)
    return te if np.isfinite(te) else np.inf


def _finite_or_none(x):
    return float(x) if x is not None and np.isfinite(x) else None

