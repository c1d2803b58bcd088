"""Figures from the tables, the comparison with the study, and the report.

Every figure is rendered from the CSV tables (so figures never disagree with tables), with one
colour per model across all figures. The report (`results/report/index.md` and `index.html`)
opens with what the run shows and how it compares with the study, then gives every figure and
every table with its caption, grouped as the study is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import captions, figures, published, tables
from .provenance import write_text

FIGURES = [f for sec in captions.SECTIONS.values() for f in sec["figures"]]


def by_distance(row, suffix: str = "", n: int | None = None, prefix: str = "step") -> list[float]:
    """A row of the overlap_by_distance table as a list over d = 1, 2, ... (columns
    <prefix><d><suffix>, up to the first missing one, or exactly n of them, NaN where missing;
    prefix "seq" reads the overlap along the committed sequence)."""
    out, d = [], 1
    while (n is None and pd.notna(row.get(f"{prefix}{d}{suffix}"))) or (n is not None and d <= n):
        out.append(float(row.get(f"{prefix}{d}{suffix}", np.nan)))
        d += 1
    return out


def _load(table_dir: Path, stem: str) -> pd.DataFrame:
    """A table with a `run` label column (empty when the configuration does not make it)."""
    path = table_dir / f"{stem}.csv"
    df = tables.read_csv(path) if path.exists() else pd.DataFrame()
    if not df.empty and {"model", "drafter", "k", "dataset"} <= set(df.columns):
        df["run"] = (df["model"] + " " + df["drafter"] + " K=" + df["k"].astype(str) + " "
                     + df["dataset"])
    return df


def _models(dfs) -> list[str]:
    names = []
    for df in dfs:
        if not df.empty and "model" in df:
            names += list(df["model"])
    return list(dict.fromkeys(names))


def _published_by_distance(ob: pd.DataFrame, study: dict) -> pd.DataFrame:
    pub = published.load("overlap_by_distance").set_index("model")
    rows = []
    for _, r in ob.iterrows():
        s = (study.get(r["model"]) or {}).get("study")
        if s not in pub.index:
            continue
        for d in range(1, 5):  # the study's steps 1-4, along the committed sequence
            rows.append({"run": r["run"], "study_model": s, "distance": d,
                         "value": pub.loc[s, f"step{d}"]})
    return pd.DataFrame(rows)


def _published_per_layer(pl: pd.DataFrame, study: dict) -> pd.DataFrame:
    """Published layers of the matched model that the run's model has too (the study publishes
    its first four layers and one deep layer: a shallower model shows the first ones)."""
    pub = published.load("per_layer_overlap")
    rows = []
    for run, g in pl.groupby("run", sort=False):
        s = (study.get(g["model"].iloc[0]) or {}).get("study")
        p = pub[(pub["model"] == s) & (pub["layer"] <= g["layer"].max())]
        if p.empty:
            continue
        rows += [{"run": run, "study_model": s, "layer": r["layer"], "value": r["step1_overlap"]}
                 for _, r in p.iterrows()]
    return pd.DataFrame(rows)


def _speedup_label(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["label"] = (df["model"] + " " + df["drafter"] + " K=" + df["k"].astype(str) + " ("
                   + df["shape"].astype(str) + ")")
    return df


def _first_run(sp: pd.DataFrame) -> pd.DataFrame:
    """Each model's curve at its smallest K, on its first drafter and dataset."""
    keep = []
    for _, g in sp.groupby("model", sort=False):
        g = g[g["k"] == g["k"].min()]
        g = g[(g["dataset"] == g["dataset"].iloc[0]) & (g["drafter"] == g["drafter"].iloc[0])]
        keep.append(g)
    return pd.concat(keep)


def figure_frames(table_dir, study: dict | None = None,
                  variant_of: dict | None = None) -> dict[str, tuple]:
    """Each figure's renderer and arguments, from the tables in table_dir."""
    td, study = Path(table_dir), study or {}
    ob, pl, tb = (_load(td, s) for s in ("overlap_by_distance", "per_layer_overlap", "te_vs_batch"))
    anchor, sp, cmp_ = (_load(td, s) for s in ("anchor_overlap", "speedup_vs_batch", "comparison"))
    colors = figures.palette(_models([ob, sp, tb, cmp_]))
    none = "This configuration has no {} (see the configuration's models)."
    out = {}
    if ob.empty:
        out["overlap_by_distance"] = (figures.empty, none.format("routing trace"))
    else:
        long = []
        dec = _load(td, "overlap_decomposition_step1").set_index("run")["uniform"]
        for _, r in ob.iterrows():
            within = by_distance(r)
            seq = by_distance(r, n=8, prefix="seq")
            for d in range(1, max(len(within), len(seq)) + 1):
                long.append({"run": r["run"], "model": r["model"], "distance": d,
                             "empirical": within[d - 1] if d <= len(within) else np.nan,
                             "sequence": seq[d - 1] if d <= len(seq) else np.nan,
                             "shuffle": r.get(f"shuffle{d}", np.nan),
                             "independent": r["independent"], "uniform": dec.get(r["run"])})
        out["overlap_by_distance"] = (figures.overlap_by_distance, pd.DataFrame(long), colors,
                                      _published_by_distance(ob, study))
    out["per_layer_overlap"] = ((figures.per_layer_overlap, pl, colors,
                                 _published_per_layer(pl, study)) if not pl.empty
                                else (figures.empty, none.format("routing trace")))
    out["te_vs_batch"] = ((figures.te_vs_batch, tb, colors) if not tb.empty
                          else (figures.empty, none.format("cost model")))
    measured = tb[tb["routing"] == "measured windows (temporal)"] if not tb.empty else tb
    out["te_by_dataset"] = (
        (figures.curves_by, measured, colors, ["model", "drafter", "k"], "dataset", "te",
         "target efficiency", "Each model has one dataset in this configuration: no "
         "dataset comparison to draw.") if not measured.empty
        else (figures.empty, none.format("cost model")))
    dr = _load(td, "draft_ratio_model")
    if dr.empty:
        out["draft_ratio_model"] = (figures.empty, none.format("cost model"))
    else:  # each model's first run (the ratio hardly depends on K or the dataset)
        out["draft_ratio_model"] = (figures.curves_by, _first_run(dr), colors, ["model", "k"],
                                    "synthetic_drafter",
                                    "draft_cost", "draft cost c = K T_drafter / T_target",
                                    "No cost model in this configuration.")
    if sp.empty:
        for f in ("speedup_vs_batch", "speedup_by_k", "speedup_by_dataset", "speedup_variants",
                  "draft_cost_vs_batch"):
            out[f] = (figures.empty, none.format("serving sweep"))
    else:
        sp = _speedup_label(sp)
        out["speedup_vs_batch"] = (figures.speedup_vs_batch, _first_run(sp), colors)
        sp["K"] = sp["k"]
        out["speedup_by_k"] = (figures.curves_by, sp, colors, ["model", "drafter", "dataset"],
                               "K", "speedup", "speedup (TPOT without / with SD)",
                               "Each model is swept at one K in this configuration.", 1.0)
        out["speedup_by_dataset"] = (figures.curves_by, sp, colors, ["model", "drafter", "k"],
                                     "dataset", "speedup", "speedup (TPOT without / with SD)",
                                     "Each model is swept on one dataset in this configuration.",
                                     1.0)
        # one panel per model family: a tiny target with its variants, a study model's variants
        variant_of = variant_of or {}
        targets = set(variant_of.values())
        sp["family"] = sp["model"].map(
            lambda m: variant_of.get(m) or (m if m in targets else None)
            or (study.get(m) or {}).get("study") or m)
        out["speedup_variants"] = (figures.curves_by, sp[sp["k"] == sp["k"].min()], colors,
                                   ["family", "drafter", "dataset"], "model", "speedup",
                                   "speedup (TPOT without / with SD)",
                                   "No study model is run in more than one variant (TP, "
                                   "precision, hardware) in this configuration.", 1.0)
        out["draft_cost_vs_batch"] = (figures.draft_cost_vs_batch, sp, colors)
    if anchor.empty:
        out["anchor_overlap"] = (figures.empty, none.format("routing trace"))
    else:
        effects = anchor.drop_duplicates(["run", "draft_position"])[
            ["run", "draft_position", "cohens_d"]]
        out["anchor_overlap"] = (figures.anchor_overlap, anchor, effects)
    out["comparison"] = (figures.comparison, cmp_ if not cmp_.empty else
                         pd.DataFrame(columns=published.COLUMNS), colors)
    return out


def write_figures(table_dir, outdir, prov: dict, study: dict | None = None,
                  variant_of: dict | None = None) -> list[Path]:
    """Render every figure of the report (PNG and PDF) from the tables in table_dir."""
    paths = []
    for stem, (fn, *args) in figure_frames(table_dir, study, variant_of).items():
        paths += figures.save(fn(*args), Path(outdir) / stem, prov)
    return paths


def write_comparison(table_dir, out_stem, study: dict, prov: dict) -> list[Path]:
    """The comparison table from whatever tables table_dir holds."""
    td = Path(table_dir)
    dfs = {spec: tables.read_csv(td / f"{spec}.csv")
           for spec in [s.table for s in published.SPECS] + ["three_step_correction"]
           if (td / f"{spec}.csv").exists()}
    df = published.comparison(dfs, study)
    return tables.write_table(df, Path(out_stem), {**prov, "published_source": published.SOURCE},
                              captions.text("comparison"))


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
    ob, dec, ue = (_load(td, s) for s in ("overlap_by_distance", "overlap_decomposition_step1",
                                           "unique_experts"))
    if ob.empty or "seq1" not in ob or dec.empty:
        return pd.DataFrame()
    models = set(ob["model"])
    tiny = [m for m in dict.fromkeys(ob["model"]) if f"{m}-random" in models]
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
    ob = _load(td, "overlap_by_distance")
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
    sp, ks = _load(td, "speedup_vs_batch"), _load(td, "kernel_time_shares")
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
    sp = _load(td, "speedup_vs_batch")
    for run, g in (sp.groupby("run", sort=False) if not sp.empty else []):
        g = g.sort_values("batch")
        pts = ", ".join(f"B={int(r['batch'])}: {_speedup_text(r)}" for _, r in g.iterrows())
        out.append(f"{run}: speedup {pts} ({g['shape'].iloc[0]}); acceptance length "
                   f"{g['tau'].iloc[0]:.2f}")
    ue = _load(td, "unique_experts")
    if not {"empirical", "uniform", "ipf_uniform", "ipf_skewed"} <= set(ue.columns):
        ue = pd.DataFrame()
    for _, r in (ue.iterrows() if not ue.empty else []):
        out.append(f"{r['run']}: unique experts per window {r['empirical']:.2f} measured, "
                   f"{r['uniform']:.2f} uniform i.i.d., IPF {r['ipf_uniform']:.2f} uniform "
                   f"({100 * r['ipf_uniform_rel_err']:+.1f}%) and {r['ipf_skewed']:.2f} skewed "
                   f"({100 * r['ipf_skewed_rel_err']:+.1f}%)")
    te = _load(td, "te_three_ways")
    te1 = te[te["batch"] == 1] if not te.empty else te
    for _, r in (te1.iterrows() if not te1.empty else []):
        sweep = (f"{r['te_sweep']:.2f}" + _bracket(r, "te_sweep") if np.isfinite(r["te_sweep"])
                 else "not identifiable here")
        out.append(f"{r['run']}: TE at batch 1 from the sweep {sweep}, from profiled passes "
                   f"{_te_text(r, 'te_profiled')}, from the cost model "
                   f"{_te_text(r, 'te_costmodel')}")
    return out


def direction(first: float, last: float, margin: float = 0.05) -> str:
    """The direction of an exact (model-derived) curve from its ends: "rises", "falls" or "stays
    flat (within 5%)"."""
    if last > first * (1 + margin):
        return "rises"
    if last < first / (1 + margin):
        return "falls"
    return f"stays flat (within {margin:.0%})"


def draft_cost_findings(table_dir) -> list[str]:
    """The draft-cost curves in words computed from their tables: the step model's two synthetic
    drafters (exact, so their direction is stated) and the measured ratio of drafters served
    alone (numbers only: it has no interval, so no direction is claimed)."""
    td = Path(table_dir)
    out = []
    dr = _load(td, "draft_ratio_model")
    if not dr.empty:
        dr = _first_run(dr)
        for (run, drafter), g in dr.groupby(["run", "synthetic_drafter"], sort=False):
            g = g.sort_values("batch")
            a, b = g.iloc[0], g.iloc[-1]
            out.append(f"{run}, {drafter}: the step model's draft cost ratio "
                       f"{direction(a['draft_cost'], b['draft_cost'])} with batch size, from "
                       f"{a['draft_cost']:.3f} at batch {int(a['batch'])} to {b['draft_cost']:.3f} "
                       f"at batch {int(b['batch'])}.")
    sp = _load(td, "speedup_vs_batch")
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
    cmp_ = _load(td, "comparison")
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
        df = _load(td, stem)
        if not df.empty and col in df:
            out.append(f"{stem}: replayed from the published inputs, largest difference from the "
                       f"published {col.removesuffix('_diff')} {np.nanmax(np.abs(df[col])):.4f}")
    return out


MAX_INLINE_ROWS = 40


def _table_block(md: Path, rel) -> list[str]:
    """A table in the report: inline when short, else linked (CSV, Markdown, LaTeX, HTML)."""
    links = ", ".join(f"[{ext}](../{rel(md.with_suffix('.' + ext))})"
                      for ext in ("csv", "md", "tex", "html") if md.with_suffix('.' + ext).exists())
    body = md.read_text().split("\n<!-- provenance")[0].strip().split("\n")
    rows = [ln for ln in body if ln.startswith("|")]
    lines = [f"#### {md.stem.replace('_', ' ')}", "", captions.text(md.stem), "", f"({links})", ""]
    if len(rows) - 2 <= MAX_INLINE_ROWS:
        lines += [*rows, ""]
    else:
        lines += [f"{len(rows) - 2} rows: see the files above.", ""]
    return lines


def write_report(table_dir, figure_dir, out, prov: dict) -> None:
    """results/report/index.md (and index.html beside it): first page, then every figure and
    table with its caption, grouped by the study's sections."""
    out = Path(out)
    td, fd = Path(table_dir), Path(figure_dir)
    rel = lambda p: Path(p).resolve().relative_to(out.parent.resolve().parent)  # noqa: E731
    lines = ["# specmoe report", "",
             f"Configuration hash `{prov.get('config_hash')}`, created {prov.get('created')}. "
             "Every quantity is defined in the project's method (docs/method.md).", ""]
    findings = report_findings(td)
    if findings:
        lines += ["## What the routing shows", "",
                  "Temporal overlap is what the study's argument rests on: overlap that decays with "
                  "step distance, above both the independence baseline and the within-window "
                  "shuffle null. Untrained controls can clear independence without it (every "
                  "position of a window feeds the routers nearly the same vector); weak models "
                  "decoding greedily repeat tokens, which route alike, so overlap is also given "
                  "without such windows.", "", *[f"- {f}" for f in findings], ""]
    targets = routing_targets(td)
    if not targets.empty:
        missed = targets[targets["status"].isin(["not shown", "undecided"])]
        lines += ["## The study's findings in this run's tiny targets", "",
                  "Each finding of the study, at each tiny target's first run, decided by 95% "
                  "intervals (bootstrap over requests) where the quantity has one; the timing "
                  "findings are given with their numbers but cannot be shown on a CPU.", "",
                  "| model | finding | target | this run | status |", "|---|---|---|---|---|",
                  *[f"| {r['model']} | {r['finding']} | {r['target']} | {r['value']} | "
                    f"{r['status']} |" for _, r in targets.iterrows()], ""]
        lines += ([f"Not shown here: {', '.join(f'{r.model}: {r.finding} ({r.value})' for r in missed.itertuples())}.", ""]
                  if not missed.empty else
                  ["Every finding that a CPU run can measure is shown by this run's tiny "
                   "targets.", ""])
        loops = repetition_notes(td, list(dict.fromkeys(targets["model"])))
        if loops:
            lines += [" ".join(loops), ""]
    measured = measured_findings(td) + draft_cost_findings(td)
    if measured:
        lines += ["## What the measurements show", "", *[f"- {f}" for f in measured], "",
                  "What a CPU run cannot show: on a CPU, timings of tiny models are dominated by "
                  "per-step host overhead rather than by reading weights, so their speedup and TE "
                  "curves test the pipeline, not the study's GPU claims.", ""]
    compared = comparison_findings(td)
    if compared:
        lines += ["## How it compares with the study", "",
                  f"Published numbers: {published.SOURCE}. Tiny and synthetic models are compared "
                  "with the study model of the same shape (k of N experts): analogues, not "
                  "reproductions.", "", *[f"- {f}" for f in compared], ""]
    caveats = report_caveats(td)
    if caveats:
        lines += ["## Caveats", "", *[f"- {c}" for c in caveats], ""]
    for section, items in captions.SECTIONS.items():
        block = []
        for stem in items["figures"]:
            png = fd / f"{stem}.png"
            if png.exists():
                block += [f"#### Figure: {stem.replace('_', ' ')}", "",
                          f"![{stem}](../{rel(png)})", "", captions.text(stem, figure=True),
                          f"([PDF](../{rel(png.with_suffix('.pdf'))}))", ""]
        for stem in items["tables"]:
            md = td / f"{stem}.md"
            if md.exists():
                block += _table_block(md, rel)
        if block:
            lines += [f"## {section}", "", *block]
    text = "\n".join(lines)
    write_text(out, text + f"\n\n<!-- provenance: {prov} -->\n")
    write_text(out.with_suffix(".html"), to_html(text, out.parent))


def to_html(markdown: str, base: Path | None = None) -> str:
    """The report as one HTML page. With `base` (the Markdown file's folder) every image is
    embedded as a data URI, so the page stands alone (Snakemake's report shows it as it is)."""
    import base64
    import re

    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
    if base is not None:
        def embed(m):
            f = (base / m.group(1)).resolve()
            if not f.is_file():
                return m.group(0)
            return f'src="data:image/png;base64,{base64.b64encode(f.read_bytes()).decode()}"'
        body = re.sub(r'src="([^":]+\.png)"', embed, body)
    # wide tables scroll inside the page's column instead of running off its right edge
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto;font-size:14px} "
             "img{max-width:100%} table{border-collapse:collapse;font-size:12px;display:block;"
             "max-width:100%;overflow-x:auto} "
             "td,th{padding:2px 6px;border-bottom:1px solid #ddd}")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>specmoe report</title>"
            f"<style>{style}</style></head><body>{body}</body></html>\n")
