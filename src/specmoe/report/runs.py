"""The tables of a configuration's runs, built from each run's overlap, IPF, cost-model and
acceptance results (rule tables): one row per run (model, drafter, K, dataset), or per run and
step distance, layer, slice or batch size. Each row of a run says, in its `control_of` column,
whether the run's model is an untrained control and of which trained target (empty: it is not
one), as the run's overlap results record it (rule overlap, which reads the control's target from
the configuration); the readers take control-ness from there, never from a model's name."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ..errors import InputError
from ..provenance import read_json
from ..runs import Run, dataset_parts
from . import registry, tables
from .bounds import bounded_te


# heldout_overlap's row of a held-out dataset's mean over its slices: "mean of <dataset>"
HELDOUT_MEAN = "mean of "
# the IPF's predictions, in the order of the tables: the study's input first
IPF_KEYS = ("uniform_sequence", "uniform_window", "skewed_window")


# acceptance_consecutive's columns after the run's: the delta and what decides it (clustered
# by request: the request is the independent unit; the p Holm-corrected across the run's positions
# and slices; Cohen's d's interval by request), then the token-level statistics the study
# reports (Cohen's d, Welch's and Mann-Whitney's p over tokens)
ACCEPTANCE_COLUMNS = (
    "draft_position", "accepted_overlap", "first_rejected_overlap", "delta",
    "delta_low_by_request", "delta_high_by_request", "p_by_request", "p_holm", "n_requests",
    "n_requests_accepted", "n_requests_rejected", "cohens_d_low", "cohens_d_high",
    "n_accepted", "n_first_rejected", "cohens_d", "size", "delta_low_tokens",
    "delta_high_tokens", "p_tokens_welch", "p_tokens_mannwhitney")
# the accepted vs first-rejected effect on anchor overlap beside each status row of its position
ANCHOR_EFFECT_COLUMNS = (
    "cohens_d", "cohens_d_low", "cohens_d_high", "size", "n_requests_accepted",
    "n_requests_rejected", "p_by_request", "p_holm", "p_tokens_welch")


def runs(paths) -> list[dict]:
    return [read_json(p) for p in paths]


def run_cols(run: dict, control_of: dict | None = None) -> dict:
    """A run's columns (specmoe.runs.Run: model, drafter, k, dataset); with `control_of` (the
    untrained controls' targets by run, controls_of) its `control_of` column too."""
    r = Run.of(run)
    return {**r.as_dict(), **({"control_of": control_of.get(r)} if control_of is not None
                              else {})}


def controls_of(ovs: list[dict]) -> dict[Run, str]:
    """The trained target of each untrained control's run, from the runs' overlap results (the
    control's statistics beside its target's: rule overlap)."""
    return {Run.of(ov["run"]): ov["control"]["target"] for ov in ovs if ov.get("control")}


def build_tables(overlap_jsons, ipf_jsons, cost_jsons, acc_jsons) -> dict[str, pd.DataFrame]:
    """All tables of the report, as DataFrames keyed by file stem."""
    ovs, ips, cms, accs = (runs(x) for x in (overlap_jsons, ipf_jsons, cost_jsons, acc_jsons))
    t: dict[str, list] = {k: [] for k in registry.written_by("tables")}
    ctl = controls_of(ovs)
    heldout_of = {Run.of(ac["run"]): ac.get("heldout", {}) for ac in accs}
    for ov in ovs:
        _add_overlap_rows(t, ov, heldout_of.get(Run.of(ov["run"]), {}), ctl)
        t["prompt_fit"] += prompt_fit_rows(run_cols(ov["run"], ctl), ov.get("prompting"))
    add_share_leads(t["matched_controls"], ovs)
    t["unique_experts"] += [unique_experts_row(ov, ip, ctl) for ov, ip in by_run(ovs, ips)]
    for cm in cms:
        _add_cost_rows(t, cm, ctl)
    for ac in accs:
        _add_acceptance_rows(t, ac, ctl)
    return {k: in_order(pd.DataFrame(v)) for k, v in t.items()}


def by_run(ovs: list[dict], ips: list[dict]) -> list[tuple[dict, dict]]:
    """Each run's overlap results with its IPF fit, paired by the run each records (not by their
    places in the two lists), in the overlaps' order; results of different runs are an error."""
    runs_ov = [Run.of(ov["run"]) for ov in ovs]
    ip_of = {Run.of(ip["run"]): ip for ip in ips}
    a, b = Counter(runs_ov), Counter(Run.of(ip["run"]) for ip in ips)
    if a != b:
        raise InputError("the overlap and IPF results are not of the same runs (overlap alone: "
                         f"{', '.join(map(str, a - b)) or 'none'}; IPF alone: "
                         f"{', '.join(map(str, b - a)) or 'none'})")
    return [(ov, ip_of[r]) for ov, r in zip(ovs, runs_ov)]


def _add_overlap_rows(t: dict[str, list], ov: dict, heldout: dict,
                      control_of: dict | None = None) -> None:
    """One run's rows of the overlap tables (decomposition, by distance, by status, held-out
    slices, per layer); `heldout`: its acceptance results' held-out datasets. The
    matched_controls row names the control's target in its own `target` column."""
    s, rc = ov["summary"], run_cols(ov["run"], control_of or {})
    t["overlap_decomposition_step1"].append(decomposition_row(rc, s))
    t["overlap_by_distance"].append(overlap_row(rc, s, ov))
    # per draft position and status (the repetitive windows' share is overlap_by_distance's)
    t["overlap_by_status"] += [{**rc, **r} for r in ov.get("overlap_by_status") or []]
    t["heldout_overlap"] += heldout_overlap_rows(rc, ov.get("by_slice") or {}, heldout,
                                                 ov.get("by_slice_dataset"))
    if ov.get("control"):
        t["matched_controls"].append(matched_control_row(run_cols(ov["run"]), ov["control"]))
    t["per_layer_overlap"] += per_layer_rows(rc, ov["per_layer"])


def add_share_leads(rows: list[dict], ovs: list[dict]) -> None:
    """"Temporal share larger for finer experts", paired by prompt: on each matched_controls row
    of a target, its lead in temporal share over the target of the next coarser granularity
    (larger k/N) run at the same K on the same dataset, the same lead of their matched controls
    and the lead's excess over the controls', each with its paired 95% interval
    (controls.share_contrast; `share_*` columns, NaN for the coarsest target)."""
    from ..routing.controls import share_contrast

    by_run: dict[tuple, list] = {}
    for ov in ovs:
        c = ov.get("control")
        if not (c and c.get("share_boot")):
            continue
        rc, s = run_cols(ov["run"]), ov["summary"]
        by_run.setdefault((rc["k"], rc["dataset"]), []).append(
            (s["top_k"] / s["num_experts"], c["target"], c["share_boot"]))
    at = {(r["target"], r["k"], r["dataset"]): r for r in rows}
    for (k, ds), group in by_run.items():
        group.sort(key=lambda x: x[0])
        for (kn_f, fine, f), (kn_c, coarse, c) in zip(group, group[1:]):
            if kn_f == kn_c or (fine, k, ds) not in at:
                continue
            res = share_contrast(f, c)
            at[(fine, k, ds)].update(
                {"share_coarser": coarse, "share_paired": res["paired"],
                 "share_unpaired_because": res["why"],
                 **{f"share_{key}": res[key] for key in (
                     "lead", "lead_low", "lead_high", "control_lead", "control_lead_low",
                     "control_lead_high", "excess", "excess_low", "excess_high")}})


def matched_control_row(rc: dict, c: dict) -> dict:
    """An untrained control's row of the matched_controls table: whether it read its target's
    windows (matched) and its inputs do not loop (comparable, else why not), and per statistic
    the target's value, the control's and their paired difference with its 95% interval, and
    whether an end of that interval was held at what the difference can be (difference_clipped;
    NaN from an overlap file that predates it)."""
    row = {**rc, "target": c["target"], "matched": c["matched"], "comparable": c["comparable"],
           "input_repeat_pct": c["input_repeat_pct"], "n_requests": c["n_requests"],
           "not_comparable_because": c.get("why", "")}
    for name, v in (c.get("statistics") or {}).items():
        row.update({f"{name}_{key}": v[key] for key in (
            "target", "control", "difference", "difference_low", "difference_high")})
        row[f"{name}_difference_clipped"] = v.get("difference_clipped", np.nan)
    return row


def prompt_fit_rows(rc: dict, prompting: dict | None) -> list[dict]:
    """A run's rows of the prompt-fit tables: per dataset of its prompts, whether they were sent
    in the chat template, how many there were, how many the engine left out for not fitting its
    context (specmoe.sources.promptfit), the longest and the context (none: not an engine's)."""
    return [{**rc, "slice_dataset": ds, "chat_template": d["chat_template"],
             "prompts": d["prompts"], "left_out": d["over_limit"],
             "longest_tokens": d["longest"], "reserved_tokens": d["reserved"],
             "max_model_len": d["max_model_len"]} for ds, d in sorted((prompting or {}).items())]


def decomposition_row(rc: dict, s: dict) -> dict:
    """One run's row of the overlap_decomposition_step1 table: step-1 overlap against its
    baselines inside windows and along the committed sequence."""
    return {
        **rc, "k_over_n": s["top_k"] / s["num_experts"], "uniform": s["uniform"],
        "independent": s["independent"], "empirical": s["step1"],
        "temporal": s["temporal"], "temporal_share": s["temporal_share"],
        # their 95% intervals over requests (basic: each resample against its own baseline), and
        # whether an end passed what the statistic can be (1 - k/N) and is shown at it
        **{f"{name}_{end}": s.get(f"{name}_{end}", np.nan) for name in ("temporal",
                                                                        "temporal_share")
           for end in ("low", "high", "clipped")},
        "shuffle_null": s.get("shuffle_step1", float("nan")),
        "sequence_step1": s.get("sequence_step1", np.nan),
        "sequence_temporal": s.get("sequence_temporal", np.nan),
        "sequence_temporal_share": s.get("sequence_temporal_share", np.nan),
        "sequence_temporal_share_low": s.get("sequence_temporal_share_low", np.nan),
        "sequence_temporal_share_high": s.get("sequence_temporal_share_high", np.nan),
        # True where an end of that interval passed the most a share can be (1 - k/N) and is
        # shown at it (overlap.within_range)
        "sequence_temporal_share_clipped": s.get("sequence_temporal_share_clipped", np.nan),
        "sequence_within_request": s.get("sequence_within_request", np.nan),
        **{f"sequence_temporal_share_within_request{end}": s.get(
            f"sequence_temporal_share_within_request{end}", np.nan) for end in ("", "_low",
                                                                              "_high")},
        "hottest_expert_pct": 100 * s.get("hottest_share", np.nan)}


def heldout_overlap_rows(rc: dict, by_slice: dict, heldout: dict,
                         by_dataset: dict | None = None) -> list[dict]:
    """One run's rows of the heldout_overlap table: each slice, with its intervals over its
    requests, then each held-out dataset's mean over its slices (heldout_range) with the
    intervals of that mean (by_dataset: the overlap stage's by_slice_dataset)."""
    rows = [{**rc, "slice": name, "slice_dataset": sl["dataset"], "n_windows": sl["n_windows"],
             "n_requests": sl.get("n_requests", np.nan),
             **slice_intervals(sl, len(sl["overlap_by_distance"])),
             "independent": sl["independent"]} for name, sl in by_slice.items()]
    for ds, h in heldout.items():
        names = [n for n in h["slices"] if n in by_slice]
        pooled = (by_dataset or {}).get(ds) or {}
        if pooled.get("slices") != names:  # not the mean of these slices: no interval
            pooled = {}
        rows.append({**rc, **heldout_range(ds, [by_slice[n] for n in names], pooled)})
    return rows


def slice_intervals(sl: dict, n_d: int) -> dict:
    """step<d> with step<d>_low/step<d>_high and the decay with its ends of a slice (or of a
    dataset's mean of slices: overlap.slices_mean); NaN ends where it has none (fewer requests
    than the bootstrap's floor, or an overlap file written before they were kept)."""
    nan = [np.nan] * n_d
    out = {}
    for d in range(1, n_d + 1):
        out[f"step{d}"] = sl["overlap_by_distance"][d - 1] if "overlap_by_distance" in sl \
            else sl["overlap"][d - 1]
        out[f"step{d}_low"] = (sl.get("overlap_low") or nan)[d - 1]
        out[f"step{d}_high"] = (sl.get("overlap_high") or nan)[d - 1]
    out.update({key: sl.get(key, np.nan) for key in ("decay", "decay_low", "decay_high")})
    return out


def per_layer_rows(rc: dict, pl: dict) -> list[dict]:
    """One run's rows of the per_layer_overlap table: step-1 overlap layer by layer, inside
    windows and along the committed sequence (sequence_step1: the study's kind, its Table 19)."""
    return [{**rc, "layer": layer, "step1_overlap": o[0],
             "sequence_step1": pl["sequence"][layer][0] if pl.get("sequence") else float("nan"),
             "independent": ind,
             "shuffle": pl["shuffle"][layer][0] if pl.get("shuffle") else float("nan")}
            for layer, (o, ind) in enumerate(zip(pl["overlap"], pl["independent"]))]


def unique_experts_row(ov: dict, ip: dict, control_of: dict | None = None) -> dict:
    """One run's row of the unique_experts table: measured unique experts per window beside the
    IPF's predictions and their errors."""
    u = ov["unique"]
    pred, err = ip["prediction"], ip["relative_error"]
    return {
        **run_cols(ov["run"], control_of or {}), "empirical": u["empirical"],
        # its 95% interval over requests, the resamples of the errors' (ipf_error_intervals)
        **dict(zip(("empirical_low", "empirical_high"),
                   ip.get("empirical_interval") or (np.nan, np.nan))),
        "empirical_over_k": u["empirical_over_k"], "uniform": u["uniform"],
        "independent": u["independent"],
        # the study's input (its Table 17 -> Table 20), then this project's two estimators
        **{f"ipf_{key}": pred[key] for key in IPF_KEYS},
        **{f"ipf_{key}_error_pct": 100 * err[key] for key in IPF_KEYS},
        # each error's 95% interval over requests (stages.analysis.ipf_error_intervals)
        **{f"ipf_{key}_error_pct_{end}": 100 * v for key in IPF_KEYS for end, v in zip(
            ("low", "high"), (ip.get("relative_error_interval") or {}).get(
                key, (np.nan, np.nan)))},
        "ipf_converged": bool(all(ip["converged"].values())),
        "ipf_clipped": int(sum(ip["n_clipped"].values())),
        # each fit's experts left short of their margins, and of those the ones no distribution
        # has (a uniform fit's experts are alike: none or all N); NaN for a fit not made
        **{f"ipf_{key}_{what}_experts": ip[f"n_{what}_experts"].get(key, np.nan)
           for key in IPF_KEYS for what in ("unconverged", "infeasible")}}


def _add_cost_rows(t: dict[str, list], cm: dict, control_of: dict | None = None) -> None:
    """One run's rows of the cost model's tables (target_efficiency, te_vs_batch,
    draft_ratio_model)."""
    rc = run_cols(cm["run"], control_of or {})
    t["target_efficiency"].append({
        **rc, "hardware": cm["hardware"], "c_expert_mib": cm["c_expert_mib"],
        "c_dense_mib": cm["c_dense_mib"], "moe_weight_share": cm["moe_weight_share"],
        **{f"te_{k}": v for k, v in cm["te_weight_batch1"].items()},
        "ipf_skewed_fit": cm.get("ipf_skewed_fit", np.nan)})
    # a TE outside [0, 1] is NaN beside its raw value and why (bounded_te), as in every TE table
    t["te_vs_batch"] += [{**rc, "routing": r["routing"], "batch": r["batch"],
                          **bounded_te("te", r["te"]), "compute_bound": r["compute_bound"],
                          "sample_ok": r.get("sample_ok", True),
                          # the skewed IPF's rows: whether its fit held its margins (else no TE)
                          "ipf_fit": r.get("ipf_fit")} for r in cm["te_vs_batch"]]
    t["draft_ratio_model"] += [{**rc, **r} for r in cm.get("draft_ratio_vs_batch", [])]


def _add_acceptance_rows(t: dict[str, list], ac: dict, control_of: dict | None = None) -> None:
    """One run's rows of the acceptance tables (acceptance_consecutive, anchor_overlap,
    heldout_acceptance)."""
    rc = run_cols(ac["run"], control_of or {})
    t["acceptance_consecutive"] += [{**rc, **{c: r.get(c, np.nan) for c in ACCEPTANCE_COLUMNS}}
                                    for r in ac["by_position"]]
    t["anchor_overlap"] += anchor_rows(rc, ac)
    t["heldout_acceptance"] += heldout_acceptance_rows(rc, ac)


def anchor_rows(rc: dict, ac: dict) -> list[dict]:
    """One run's rows of the anchor_overlap table, each with the effect of acceptance on anchor
    overlap at its position (accepted vs first-rejected): Cohen's d with its interval and size
    verdict, the requests in each arm and the p-values (p_holm in the run's family), the label of
    the anchor-overlap figure."""
    eff = {e["draft_position"]: e for e in ac.get("anchor_effects", [])}
    rows = []
    for r in ac["anchor"]:
        e = eff.get(r["draft_position"], {})
        rows.append({**rc, **r, **{c: e.get(c, np.nan) for c in ANCHOR_EFFECT_COLUMNS}})
    return rows


def heldout_acceptance_rows(rc: dict, ac: dict) -> list[dict]:
    """One run's rows of the heldout_acceptance table: each slice, then the median across each
    held-out dataset's slices. Per draft position j a slice row has the delta (delta_pos<j>), its
    95% interval by request, the row's size label ("too few" where either arm has fewer than
    bootstrap.MIN_REQUESTS requests), its first-rejected requests and tokens; the anchor drop
    with its interval by request and anchor_drop_status ("too few" below MIN_REQUESTS requests,
    else "ok") and the slice's requests. A median row has each median with its interval, the
    slices it is taken over (n_slices_pos<j>, n_slices_anchor_drop) and, where none is left,
    NaN and why (in size_pos<j>, anchor_drop_status; routing.acceptance.heldout_medians)."""
    from ..routing.bootstrap import MIN_REQUESTS
    from ..routing.acceptance import TOO_FEW

    if ac.get("slices") and "slice_requests" not in ac:
        raise InputError(f"the acceptance results of {Run.of(ac['run'])}: no intervals of the "
                         "slices' anchor drops nor of the held-out medians (written by an older "
                         "acceptance job): rerun rule acceptance")
    heldout = ac.get("heldout", {})
    slice_set = {n: ds for ds, h in heldout.items() for n in h["slices"]}
    drops, drop_ci = ac.get("slice_anchor_drop", {}), ac.get("slice_anchor_drop_interval", {})
    n_req = ac.get("slice_requests", {})
    rows = []
    for name, slice_rows in ac.get("slices", {}).items():
        row = {**rc, "slice": name, "heldout_dataset": slice_set.get(name, "")}
        for r in slice_rows:
            j = r["draft_position"]
            row.update({f"delta_pos{j}": r["delta"],
                        f"delta_pos{j}_low": r.get("delta_low_by_request", np.nan),
                        f"delta_pos{j}_high": r.get("delta_high_by_request", np.nan),
                        f"size_pos{j}": r["size"],
                        f"n_requests_rejected_pos{j}": r.get("n_requests_rejected", np.nan),
                        f"n_first_rejected_pos{j}": r["n_first_rejected"]})
        lo, hi = drop_ci[name]
        req = n_req[name]
        row.update({"anchor_drop": drops[name], "anchor_drop_low": lo,
                    "anchor_drop_high": hi,
                    "anchor_drop_status": "ok" if req >= MIN_REQUESTS else TOO_FEW,
                    "n_requests": req})
        rows.append(row)
    for ds, h in heldout.items():
        row = {**rc, "slice": f"median of {ds}", "heldout_dataset": ds}
        for j, v in enumerate(h["median_delta_by_position"], 1):
            row.update({f"delta_pos{j}": v,
                        f"delta_pos{j}_low": h["median_delta_low_by_position"][j - 1],
                        f"delta_pos{j}_high": h["median_delta_high_by_position"][j - 1],
                        f"size_pos{j}": h["median_delta_why_by_position"][j - 1],
                        f"n_slices_pos{j}": h["median_delta_slices_by_position"][j - 1]})
        row.update({"anchor_drop": h["median_anchor_drop"],
                    "anchor_drop_low": h["median_anchor_drop_low"],
                    "anchor_drop_high": h["median_anchor_drop_high"],
                    "anchor_drop_status": h["median_anchor_drop_why"] or "ok",
                    "n_requests": h["median_requests"],
                    "n_slices_anchor_drop": h["median_anchor_drop_slices"]})
        rows.append(row)
    return rows


SHARE_OUTSIDE = "not a share: its 95% interval leaves [0, 1]"


def share_status(row: dict) -> str:
    """Whether the share of the temporal overlap that step 1 above the shuffle null certifies is
    one: its point and interval inside [0, 1] (a null below independence gave 133% [132%,
    134%]; step 1 near independence an interval across 0 and 100%). "none" where it has none."""
    v = row.get("above_shuffle_share", np.nan)
    lo, hi = row.get("above_shuffle_share_low", np.nan), row.get("above_shuffle_share_high", np.nan)
    if not np.isfinite(v):
        return "none"
    inside = np.isfinite(lo) and np.isfinite(hi) and 0 <= lo <= v <= hi <= 1
    return "ok" if inside else SHARE_OUTSIDE


def overlap_row(rc: dict, s: dict, ov: dict) -> dict:
    """One run's row of the overlap_by_distance table: inside windows (step<d>, the shuffle null
    shuffle<d>, intervals by request), along the committed sequence (seq<d>), and without the
    windows that repeat a token (step<d>_no_repetition, and the two decays inside windows; NaN
    where n_windows_no_repetition, the windows left, are too few for them)."""
    row = {**rc}
    row.update({f"step{d}": v for d, v in enumerate(s["overlap_by_distance"], 1)})
    row.update({f"shuffle{d}": v for d, v in enumerate(s.get("shuffle_by_distance", []), 1)})
    row["independent"] = s["independent"]
    # its 95% interval over requests: "expert loads near uniform" is decided by it
    row["independent_low"] = s.get("independent_low", np.nan)
    row["independent_high"] = s.get("independent_high", np.nan)
    # True where an end passed what the statistic can be and is shown at that bound
    # (overlap.within_range): the baseline's low end at k/N, an excess's high end at 1 - k/N
    row["independent_clipped"] = s.get("independent_clipped", np.nan)
    if s.get("window_low"):
        row["step1_low"], row["step1_high"] = s["window_low"][0], s["window_high"][0]
    for key in ("window_decay", "window_decay_low", "window_decay_high", "above_shuffle",
                "above_shuffle_low", "above_shuffle_high", "above_shuffle_share",
                "above_shuffle_share_low", "above_shuffle_share_high",
                "window_decay_within_status", "window_decay_within_status_low",
                "window_decay_within_status_high", "window_requests"):
        row[key] = s.get(key, np.nan)
    row["above_shuffle_share_status"] = share_status(row)
    if row["above_shuffle_share_status"] != "ok":  # not a share: never shown as one
        for key in ("above_shuffle_share", "above_shuffle_share_low", "above_shuffle_share_high"):
            row[key] = np.nan
    row.update({f"seq{d}": v for d, v in enumerate(s.get("sequence_by_distance", []), 1)})
    if s.get("sequence_low"):
        row["seq1_low"], row["seq1_high"] = s["sequence_low"][0], s["sequence_high"][0]
    for key in ("decay", "decay_low", "decay_high", "requests", "excess", "excess_low",
                "excess_high", "excess_clipped", "within_request", "excess_within",
                "excess_within_low", "excess_within_high"):
        row[f"seq_{key}"] = s.get(f"sequence_{key}", np.nan)
    row["verify_ratio"] = s.get("verify_ratio", np.nan)
    # sensitivity: without the requests whose committed output loops (overlap.looping_requests)
    for key in ("dropped_requests", "decay", "decay_low", "decay_high", "excess", "excess_low",
                "excess_high", "excess_clipped"):
        row[f"seq_loop_free_{key}"] = s.get(f"sequence_loop_free_{key}", np.nan)
    # where too few windows repeat no token it holds no numbers, only how many there are
    # (stages.analysis.without_repetition): NaN beside that count
    nr = ov.get("summary_without_repetition") or {}
    row.update({f"step{d}_no_repetition": nr["overlap_by_distance"][d - 1]
                if "overlap_by_distance" in nr else np.nan
                for d in range(1, len(s["overlap_by_distance"]) + 1)})
    for name in ("window_decay", "window_decay_within_status"):
        for end in ("", "_low", "_high"):
            row[f"{name}_no_repetition{end}"] = nr.get(f"{name}{end}", np.nan)
    row["n_windows_no_repetition"] = nr.get("n_windows", np.nan)
    row["repetitive_windows_pct"] = 100 * ov.get("repetitive_windows", np.nan)
    return row


def in_order(df: pd.DataFrame) -> pd.DataFrame:
    """Columns that a run of a larger K adds (step4, delta_pos5, ...) put beside their kind
    instead of at the end: each column keeps the place of the first column of its family (its
    name with the digits taken out), families in order of first appearance, digits ascending."""
    import re

    family = {c: re.sub(r"\d+", "#", str(c)) for c in df.columns}
    first = {f: i for i, f in reversed(list(enumerate(family.values())))}

    def key(c):
        num = [int(x) for x in re.findall(r"\d+", str(c))]
        return (first[family[c]], num)

    return df[sorted(df.columns, key=key)]


def heldout_range(dataset: str, slices: list[dict], pooled: dict | None = None) -> dict:
    """A held-out dataset's overlap by distance as the study's Table 18 gives it: the mean over its
    slices, with the smallest and largest slice beside it, and the mean's intervals over the
    slices' requests and its decay where pooled (overlap.slices_mean of these slices) has them;
    NaN where it has none."""
    out = {"slice": f"{HELDOUT_MEAN}{dataset}", "slice_dataset": dataset,
           "n_windows": sum(s["n_windows"] for s in slices),
           "n_requests": sum(s.get("n_requests", np.nan) for s in slices)}
    if not slices:
        return out
    n_d = min(len(s["overlap_by_distance"]) for s in slices)
    cols = {f"step{d}": [s["overlap_by_distance"][d - 1] for s in slices]
            for d in range(1, n_d + 1)}
    cols["independent"] = [s["independent"] for s in slices]
    for c, v in cols.items():
        out[c], out[f"{c}_min"], out[f"{c}_max"] = float(np.mean(v)), min(v), max(v)
    pooled = pooled or {}
    ends = slice_intervals({"overlap": [out[f"step{d}"] for d in range(1, n_d + 1)],
                            **{k: pooled[k] for k in ("overlap_low", "overlap_high",
                                                      "decay_low", "decay_high") if k in pooled}},
                           n_d)
    out.update({k: v for k, v in ends.items() if k.endswith(("_low", "_high"))})
    out["decay"] = out["step1"] - out[f"step{n_d}"]
    return out


# --- reading the tables back (figures, the report's text) ------------------------------


def heldout_share(rows: pd.DataFrame, dataset: str) -> float:
    """The share of a run's windows from its held-out sets (of its dataset "a+b+c": b and c),
    from its rows of the heldout_overlap table (its slices, not the held-out datasets' means);
    NaN where it has no slices."""
    if rows.empty:
        return float("nan")
    slices = rows[~rows["slice"].astype(str).str.startswith(HELDOUT_MEAN)]
    total = slices["n_windows"].sum()
    held = slices[slices["slice_dataset"].isin(dataset_parts(dataset)[1:])]["n_windows"].sum()
    return float(held / total) if total else float("nan")


def by_distance(row, suffix: str = "", n: int | None = None, prefix: str = "step") -> list[float]:
    """A row of the overlap_by_distance table as a list over d = 1, 2, ... (columns
    <prefix><d><suffix>, up to the first missing one, or exactly n of them, NaN where missing;
    prefix "seq" reads the overlap along the committed sequence)."""
    out, d = [], 1
    while (n is None and pd.notna(row.get(f"{prefix}{d}{suffix}"))) or (n is not None and d <= n):
        out.append(float(row.get(f"{prefix}{d}{suffix}", np.nan)))
        d += 1
    return out


def load(declared: tables.Tables, stem: str) -> pd.DataFrame:
    """A table of the job's declared tables with a `run` column (the run's path form,
    specmoe.runs.Run) and a `label` (its label form), empty when the configuration does not make
    it. A row of a model without runs (a cost-only study model's, in the comparison) is named by
    its model alone."""
    df = declared.read(stem)
    if not df.empty and {"model", "drafter", "k", "dataset"} <= set(df.columns):
        whole = df[["drafter", "k", "dataset"]].notna().all(axis=1)
        ids = [Run.of(r) if ok else None
               for r, ok in zip(df[["model", "drafter", "k", "dataset"]].to_dict("records"),
                                whole)]
        df["run"] = [r.path if r else str(m) for r, m in zip(ids, df["model"])]
        df["label"] = [r.label if r else str(m) for r, m in zip(ids, df["model"])]
    return df


def is_control(df: pd.DataFrame) -> pd.Series:
    """The rows of untrained controls in a table of runs written by rule tables (its
    `control_of` column); a table without that column cannot say, and is an error."""
    if df.empty:
        return pd.Series(False, index=df.index)
    if "control_of" not in df:
        raise ValueError(f"a table of runs (columns {', '.join(map(str, df.columns[:4]))}, ...) "
                         "has no control_of column, so it cannot say which runs are untrained "
                         "controls: it was written before the tables carried it, or not by rule "
                         "tables (rerun it: snakemake --forcerun tables)")
    return df["control_of"].notna()


def control_models(df: pd.DataFrame) -> dict[str, str]:
    """{trained target: its untrained control} of a table of runs (is_control)."""
    rows = df[is_control(df)]
    return dict(zip(rows["control_of"], rows["model"]))


def models(dfs) -> list[str]:
    names = []
    for df in dfs:
        if not df.empty and "model" in df:
            names += list(df["model"])
    return list(dict.fromkeys(names))


def first_run(sp: pd.DataFrame) -> pd.DataFrame:
    """Each model's curve at its smallest K, on its first drafter and dataset."""
    keep = []
    for _, g in sp.groupby("model", sort=False):
        g = g[g["k"] == g["k"].min()]
        g = g[(g["dataset"] == g["dataset"].iloc[0]) & (g["drafter"] == g["drafter"].iloc[0])]
        keep.append(g)
    return pd.concat(keep)
