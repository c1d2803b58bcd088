"""The report's sentences, each computed from the tables: what the routing shows, the study's
findings in the tiny targets (shown, not shown, undecided, not measurable on a CPU), what the
measurements show, how the run compares with the study, and the caveats. A direction or a shape
is stated only where the intervals decide it (docs/method.md, Serving sweeps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import published
from ..names import control_name
from . import tables
from .runs import by_distance, first_run, load


# --- the report's text ------------------------------------------------------------------------


def report_caveats(table_dir) -> list[str]:
    """What a reader must know before trusting a number: IPF fits that did not converge and
    batch sizes too large for the trace's sample of windows."""
    out = []
    ue = Path(table_dir) / "unique_experts.csv"
    if ue.exists():
        df = tables.read_csv(ue)
        for _, r in df[df["ipf_unconverged_experts"] > 0].iterrows():
            out.append(f"{r['model']} {r['drafter']} K={r['k']} {r['dataset']}: the skewed IPF fit "
                       f"did not converge for {int(r['ipf_unconverged_experts'])} expert(s) (their "
                       "pair margins are jointly infeasible); its prediction is the closest fit")
    tb = Path(table_dir) / "te_vs_batch.csv"
    if tb.exists():
        df = tables.read_csv(tb)
        if "sample_ok" in df:
            bad = df[~df["sample_ok"].astype(bool)]
            for (m, d, k, ds), g in bad.groupby(["model", "drafter", "k", "dataset"]):
                out.append(f"{m} {d} K={k} {ds}: the trace has too few windows for the "
                           "measured-windows TE at batch "
                           f"{', '.join(str(b) for b in sorted(g['batch'].unique()))}")
    return out


def _trend(values: list[float], margin: float = 0.01) -> str:
    """Direction of overlap over step distance: decays, rises or flat (within `margin`)."""
    v = [x for x in values if np.isfinite(x)]
    if len(v) < 2:
        return "too few distances"
    change = f"{v[-1] - v[0]:+.3f} from d = 1 to {len(v)}"
    if v[-1] < v[0] - margin and all(b <= a + margin for a, b in zip(v, v[1:])):
        return f"decays with distance, {change}"
    if v[-1] > v[0] + margin:
        return f"rises with distance, {change}"
    if max(v) - min(v) <= 2 * margin:
        return f"flat, {change}"
    return f"not monotone, {change}"


def _fmt(xs) -> str:
    return " / ".join(f"{x:.3f}" for x in xs)


def report_findings(table_dir) -> list[str]:
    """What the routing shows, run by run: overlap by distance against its baselines, with and
    without windows of degenerate repetition (repeated tokens route alike)."""
    ob = Path(table_dir) / "overlap_by_distance.csv"
    if not ob.exists():
        return []
    df = tables.read_csv(ob)
    out = []
    for _, r in df.iterrows():
        steps = by_distance(r)
        clean = by_distance(r, "_no_repetition", len(steps))
        line = (f"{r['model']} {r['drafter']} K={r['k']} {r['dataset']}: overlap at d = 1..{len(steps)} "
                f"{_fmt(steps)} ({_trend(steps)}), independence {r['independent']:.3f}, "
                f"within-window shuffle {r.get('shuffle1', np.nan):.3f}")
        rep = float(r.get("repetitive_windows", 0) or 0)
        if rep > 0.01:
            line += (f"; {rep:.0%} of windows repeat a token, and without them {_fmt(clean)} "
                     f"({_trend(clean)})")
        out.append(line)
    return out


def _decided(low: float, high: float, above: float = 0.0) -> str:
    """shown / not shown / undecided for 'the quantity exceeds `above`', from its 95% interval."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "not measured"
    if low > above:
        return "shown"
    if high < above:
        return "not shown"
    return "undecided"


def routing_targets(table_dir) -> pd.DataFrame:
    """Does each captured tiny target (a model with an untrained `-random` control) route like the
    study's models? Its first run (lowest K, first dataset) against the study's findings, each
    decided by the run's 95% intervals where it has them (bootstrap over requests)."""
    td = Path(table_dir)
    ob, dec, ue = (load(td, s) for s in ("overlap_by_distance", "overlap_decomposition_step1",
                                           "unique_experts"))
    if ob.empty or "seq1" not in ob or dec.empty:
        return pd.DataFrame()
    models = set(ob["model"])
    tiny = [m for m in dict.fromkeys(ob["model"]) if control_name(m) in models]
    rows, shares = [], {}
    for m in tiny:
        o = ob[ob["model"] == m].sort_values("k", kind="stable").iloc[0]
        d = dec[dec["run"] == o["run"]].iloc[0]
        u = ue[ue["run"] == o["run"]].iloc[0] if not ue.empty else None
        kn = float(d["k_over_n"])
        ind = float(o["independent"])
        shares[m] = (kn, float(d["sequence_temporal_share"]),
                     float(d.get("sequence_temporal_share_low", np.nan)),
                     float(d.get("sequence_temporal_share_high", np.nan)))
        hot = float(d.get("hottest_share", np.nan))
        rows += [
            {"model": m, "run": o["run"], "finding": "expert loads near uniform",
             "target": f"independence <= 2 k/N = {2 * kn:.3f}",
             "value": f"independence {ind:.3f} (k/N {kn:.3f}; hottest expert {hot:.0%} of tokens)",
             "status": "shown" if ind <= 2 * kn else "not shown"},
            {"model": m, "run": o["run"], "finding": "step-1 overlap above independence",
             "target": f"overlap along the sequence at d = 1 >= independence + 0.10 = "
                       f"{ind + 0.10:.3f}",
             "value": f"{o['seq1']:.3f} [{_ci(o, 'seq1')}]",
             "status": _decided(*_interval(o, "seq1"), above=ind + 0.10)},
            {"model": m, "run": o["run"], "finding": "overlap decays with distance",
             "target": "overlap(1) - overlap(8) along the sequence > 0",
             "value": f"{o['seq_decay']:+.3f} [{o['seq_decay_low']:+.3f}, "
                      f"{o['seq_decay_high']:+.3f}], {int(o['seq_requests'])} requests",
             "status": _decided(float(o["seq_decay_low"]), float(o["seq_decay_high"]))},
        ]
        if u is not None:
            err = float(u["ipf_uniform_rel_err"])
            rows.append({"model": m, "run": o["run"], "finding": "uniform IPF predicts unique "
                         "experts", "target": "within 4% of measured",
                         "value": f"{100 * err:+.1f}% ({u['ipf_uniform']:.2f} vs "
                                  f"{u['empirical']:.2f})",
                         "status": "shown" if abs(err) <= 0.04 else "not shown"})
    rows += _cpu_rows(td, tiny)
    ranked = sorted(shares.items(), key=lambda kv: kv[1][0])
    for (fine, f), (coarse, c) in zip(ranked, ranked[1:]):
        if f[0] == c[0]:
            continue
        rows.append({"model": fine, "run": "", "finding": "temporal share larger for finer experts",
                     "target": f"temporal share of {fine} (k/N {f[0]:.3f}) > {coarse}'s "
                               f"({c[0]:.3f})",
                     "value": f"{f[1]:.3f} [{f[2]:.3f}, {f[3]:.3f}] vs {c[1]:.3f} "
                              f"[{c[2]:.3f}, {c[3]:.3f}]",
                     "status": ("shown" if f[2] > c[3] else "not shown" if f[3] < c[2]
                                else "undecided")})
    return pd.DataFrame(rows)


CPU = "not measurable on a CPU"
LOOPING = 0.10  # share of windows that repeat a token above which a target's output loops


def repetition_notes(td: Path, models: list[str]) -> list[str]:
    """A sentence per tiny target whose output loops: overlap along a looping sequence
    measures the loop (a repeated token routes like its copy), not routing locality."""
    ob = load(td, "overlap_by_distance")
    out = []
    for m in models:
        if ob.empty or "repetitive_windows" not in ob:
            return out
        g = ob[ob["model"] == m]
        if g.empty:
            continue
        r = g.sort_values("k", kind="stable").iloc[0]
        share = float(r.get("repetitive_windows", 0) or 0)
        if share > LOOPING:
            out.append(f"{m}'s output loops: {share:.0%} of its windows repeat a token, so "
                       "its overlap along the committed sequence partly measures the loop rather "
                       "than routing locality.")
    return out


def _cpu_rows(td: Path, models: list[str]) -> list[dict]:
    """The study's GPU findings, with this run's numbers, marked as what a CPU cannot show: a tiny
    model's step time on a CPU is host overhead rather than weight reads."""
    sp, ks = load(td, "speedup_vs_batch"), load(td, "kernel_time_shares")
    rows = []
    for m in models:
        g = sp[sp["model"] == m] if not sp.empty else sp
        if not g.empty:
            g = g[g["run"] == g["run"].iloc[0]].sort_values("batch")
            best = g.loc[g["speedup"].idxmax()]
            rows.append({"model": m, "run": g["run"].iloc[0],
                         "finding": "SD speedup highest at batch 1",
                         "target": "shape 'peak at low batch', decided by the intervals",
                         "value": f"{_speedup_text(g.iloc[0])} at batch 1, highest "
                                  f"{best['speedup']:.2f} at batch {int(best['batch'])}; "
                                  f"shape: {g['shape'].iloc[0]}",
                         "status": CPU})
        k = ks[(ks["model"] == m) & (ks["class"] == "moe") & (ks["batch"] == 1)] \
            if not ks.empty else ks
        if not k.empty:
            r = k.iloc[0]
            rows.append({"model": m, "run": r["run"],
                         "finding": "MoE share of time below its share of weights",
                         "target": "MoE share of decode time < MoE share of weights",
                         "value": f"{r['decode_share']:.2f} of time, {r['moe_weight_share']:.2f} "
                                  "of weights",
                         "status": CPU})
    return rows


def _speedup_text(row) -> str:
    """A speedup with its 95% interval, as the report words it."""
    return f"{row['speedup']:.2f}" + (_bracket(row, "speedup") or " (no interval)")


def _interval(row, col: str) -> tuple[float, float]:
    return float(row.get(f"{col}_low", np.nan)), float(row.get(f"{col}_high", np.nan))


def _ci(row, col: str) -> str:
    lo, hi = _interval(row, col)
    return f"{lo:.3f}, {hi:.3f}" if np.isfinite(lo) else "no interval"


def measured_findings(table_dir) -> list[str]:
    """The measured side in one line per model: speedup curve and its shape, IPF error, TE three
    ways at batch 1."""
    td = Path(table_dir)
    out = []
    sp = load(td, "speedup_vs_batch")
    for run, g in (sp.groupby("run", sort=False) if not sp.empty else []):
        g = g.sort_values("batch")
        pts = ", ".join(f"B={int(r['batch'])}: {_speedup_text(r)}" for _, r in g.iterrows())
        out.append(f"{run}: speedup {pts} ({g['shape'].iloc[0]}); acceptance length "
                   f"{g['tau'].iloc[0]:.2f}")
    ue = load(td, "unique_experts")
    if not {"empirical", "uniform", "ipf_uniform", "ipf_skewed"} <= set(ue.columns):
        ue = pd.DataFrame()
    for _, r in (ue.iterrows() if not ue.empty else []):
        out.append(f"{r['run']}: unique experts per window {r['empirical']:.2f} measured, "
                   f"{r['uniform']:.2f} uniform i.i.d., IPF {r['ipf_uniform']:.2f} uniform "
                   f"({100 * r['ipf_uniform_rel_err']:+.1f}%) and {r['ipf_skewed']:.2f} skewed "
                   f"({100 * r['ipf_skewed_rel_err']:+.1f}%)")
    te = load(td, "te_three_ways")
    te1 = te[te["batch"] == 1] if not te.empty else te
    for _, r in (te1.iterrows() if not te1.empty else []):
        sweep = (f"{r['te_sweep']:.2f}" + _bracket(r, "te_sweep") if np.isfinite(r["te_sweep"])
                 else "not identifiable here")
        out.append(f"{r['run']}: TE at batch 1 from the sweep {sweep}, from profiled passes "
                   f"{_te_text(r, 'te_profiled')}, from the cost model "
                   f"{_te_text(r, 'te_costmodel')}")
    return out


def prediction_findings(table_dir) -> list[str]:
    """The step model's prediction beside the measurement, one line per model with both: the
    speedup at each measured batch size, inside or outside the predicted 95% interval, and the
    predicted and measured shapes."""
    td = Path(table_dir)
    out = []
    sm = load(td, "step_model")
    studied = set(published.load("hardware")["gpu"])
    both = sm[np.isfinite(sm["speedup_measured"])] if not sm.empty else sm
    for model, g in (both.groupby("model", sort=False) if not both.empty else []):
        inside = [(r["speedup_low"] <= r["speedup_measured"] <= r["speedup_high"])
                  for _, r in g.iterrows()]
        pts = ", ".join(f"B={int(r['batch'])}: {r['speedup_measured']:.2f} measured, "
                        f"{r['speedup_predicted']:.2f} [{r['speedup_low']:.2f}, "
                        f"{r['speedup_high']:.2f}] predicted" for _, r in g.iterrows())
        hw = g["hardware"].iloc[0]
        where = (f"on {hw}" if hw in studied else
                 f"on {hw}, where it is an uncalibrated roofline (calibrated on the study's GPUs)")
        out.append(f"{model} (step model {where}): {pts}; {sum(inside)} of {len(inside)} "
                   f"measurements inside the predicted interval; shape predicted "
                   f"{g['shape_predicted'].iloc[0]}, measured {g['shape_measured'].iloc[0]}")
    return out


def calibration_findings(table_dir) -> list[str]:
    """The step model's leave-one-model-out error on the study's Table 10 beside the weight
    model's, and its shapes beside the study's."""
    out = []
    cal = load(Path(table_dir), "step_model_calibration")
    goal = cal[cal["in_table_10"].astype(bool)] if not cal.empty else cal
    if not goal.empty:
        out.append(f"step model on the study's {len(goal)} Table 10 configurations, each "
                   "predicted without its own model's rows: mean absolute TE error "
                   f"{goal['error'].abs().mean():.3f} (largest {goal['error'].abs().max():.3f}, "
                   f"{goal.loc[goal['error'].abs().idxmax(), 'model']}); the weight model's "
                   f"{goal['weight_model_error'].abs().mean():.3f}")
    shp = load(Path(table_dir), "step_model_shapes")
    if not shp.empty:
        agree = shp["agrees"].astype(str) == "True"
        miss = "; ".join(f"{r['model']}: published {r['published_shape']}, predicted "
                         f"{r['step_model_shape']}" for _, r in shp[~agree].iterrows())
        out.append(f"step model on the {len(shp)} speedup curves whose shape the study shows, "
                   f"each predicted without its own model's rows and shape: {int(agree.sum())} "
                   f"of {len(shp)} shapes right" + (f" ({miss})" if miss else ""))
    return out


def course(batches, values, margin: float = 0.05) -> str:
    """How an exact (model-derived) curve goes with batch size, in words: "stays flat (within
    5%)", "rises" or "falls" from its first to its last point, or, where a point between them
    lies beyond both ends by the margin, down and up again (or up and down) through it."""
    v, b = np.asarray(values, float), list(batches)

    def at(i: int) -> str:
        return f"{v[i]:.3f} at batch {int(b[i])}"

    lo, hi, end = int(np.argmin(v)), int(np.argmax(v)), len(v) - 1
    if v[hi] <= v[lo] * (1 + margin):
        return f"stays flat (within {margin:.0%}) with batch size, from {at(0)} to {at(end)}"
    if 0 < lo < end and v[lo] * (1 + margin) < min(v[0], v[end]):
        return f"falls from {at(0)} to {at(lo)}, then rises to {at(end)}"
    if 0 < hi < end and v[hi] > max(v[0], v[end]) * (1 + margin):
        return f"rises from {at(0)} to {at(hi)}, then falls to {at(end)}"
    return f"{'rises' if v[end] > v[0] else 'falls'} with batch size, from {at(0)} to {at(end)}"


def draft_cost_findings(table_dir) -> list[str]:
    """The draft-cost curves in words computed from their tables: the step model's two synthetic
    drafters (exact, so their direction is stated) and the measured ratio of drafters served
    alone (numbers only: it has no interval, so no direction is claimed)."""
    td = Path(table_dir)
    out = []
    dr = load(td, "draft_ratio_model")
    if not dr.empty:
        dr = first_run(dr)
        for (run, drafter), g in dr.groupby(["run", "synthetic_drafter"], sort=False):
            g = g.sort_values("batch")
            out.append(f"{run}, {drafter}: the step model's draft cost ratio "
                       f"{course(g['batch'], g['draft_cost'])}.")
    sp = load(td, "speedup_vs_batch")
    if not sp.empty and "draft_cost" in sp:
        for run, g in sp[np.isfinite(sp["draft_cost"])].groupby("run", sort=False):
            g = g.sort_values("batch")
            out.append(f"{run}: measured draft cost ratio " + ", ".join(
                f"{r['draft_cost']:.2f} at batch {int(r['batch'])}" for _, r in g.iterrows())
                + " (no interval: no direction is claimed).")
    return out


def _bracket(row, col: str) -> str:
    """ " [low, high]" of a column with an interval in the row, else nothing."""
    lo, hi = _interval(row, col)
    return f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else ""


def _te_text(row, col: str) -> str:
    """A TE of a table row as the report words it: the value (with its interval), or why there
    is none."""
    v = row.get(col, np.nan)
    if pd.notna(v):
        return f"{v:.2f}" + _bracket(row, col)
    raw = row.get(f"{col}_raw", np.nan)
    return (f"{raw:.2f}, {row.get(f'{col}_status')}" if pd.notna(raw) else "not measured")


def comparison_findings(table_dir) -> list[str]:
    """Per matched model: the headline quantities beside the study's; and the replay's agreement."""
    td = Path(table_dir)
    out = []
    cmp_ = load(td, "comparison")
    heads = [("overlap_by_distance", "seq1", "step-1 overlap along the committed sequence"),
             ("overlap_by_distance", "independent", "independence"),
             ("overlap_decomposition_step1", "sequence_temporal_share",
              "temporal share of step-1 overlap"),
             ("unique_experts", "empirical", "unique experts per 4-token window"),
             ("te_three_ways", "te_sweep", "TE at batch 1"),
             ("kernel_time_shares", "decode_share", "MoE share of decode time at batch 1")]
    for (model, study_model), g in (cmp_.groupby(["model", "study_model"], sort=False)
                                   if not cmp_.empty else []):
        parts = []
        for table, q, name in heads:
            h = g[(g["table"] == table) & (g["quantity"] == q)]
            if not h.empty:
                parts.append(f"{name} {h['reproduced'].iloc[0]:.3f} vs {h['published'].iloc[0]:.3f}")
        if parts:
            out.append(f"{model} (compared with {study_model}): " + "; ".join(parts))
    for stem, col in (("replay_unique_experts", "uniform_ipf_diff"),
                      ("replay_weight_model", "te_predicted_diff"), ("replay_three_step", "te_diff")):
        df = load(td, stem)
        if not df.empty and col in df:
            out.append(f"{stem}: replayed from the published inputs, largest difference from the "
                       f"published {col.removesuffix('_diff')} {np.nanmax(np.abs(df[col])):.4f}")
    return out
