"""Pipeline stages: each reads files, calls the library and writes its outputs atomically.

The Snakemake scripts under workflow/scripts/ are one-screen wrappers around these functions; the
functions take plain paths and dicts, so every stage can be run and tested without Snakemake.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from . import acceptance, costmodel, figures, ipf, overlap, synth, tables, trace
from .errors import InputError
from .provenance import provenance, read_json, write_json, write_text
from .unique import independent_unique, uniform_unique, window_unique_table

log = logging.getLogger("specmoe")

ROUTINGS = {  # routing assumption -> (verify column, decode column) of the unique-experts table
    "uniform i.i.d. (prior model)": ("verify_uniform", "decode_uniform"),
    "independent, skewed loads": ("verify_independent", "decode_independent"),
    "max-entropy IPF, skewed": ("verify_ipf_skewed", "decode_independent"),
    "measured windows (temporal)": ("verify_empirical", "decode_independent"),
}


def model_ref(model_cfg: dict) -> dict:
    """{name, source, revision} for provenance."""
    rev = model_cfg.get("revision")
    if rev is None and model_cfg.get("source") == "synthetic":
        from .provenance import config_hash

        rev = "synthetic:" + config_hash(model_cfg.get("synthetic", {}))
    return {"name": model_cfg["name"], "source": model_cfg.get("source"), "revision": rev}


# --- per-run stages -------------------------------------------------------------------------------

def synth_trace(model_cfg: dict, run: dict, out: str | Path) -> None:
    params = dict(model_cfg["synthetic"])
    params["k_draft"] = int(run["k"])
    p = synth.SynthParams.from_dict(params)
    log.info("generating %d windows x %d layers", p.requests * p.steps, p.num_layers)
    tr = synth.generate(p)
    n = len(tr)
    tr.columns.update(model=np.full(n, run["model"]), drafter=np.full(n, run["drafter"]),
                      dataset=np.full(n, run["dataset"]))
    tr.meta["run"] = run
    trace.write_trace(out, tr, provenance(model_cfg, model=model_ref(model_cfg), stage="trace",
                                          engine="specmoe.synth"))


def use_threads(threads: int | None) -> None:
    """Run the numba-parallel passes on the job's threads (not every core of the machine)."""
    if threads:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))


def overlap_stage(trace_path, out, batch_sizes, shuffle_seed: int | None = 0,
                  threads: int | None = None) -> None:
    use_threads(threads)
    tr = trace.read_trace(trace_path)
    ws = overlap.window_stats(tr, shuffle_seed=shuffle_seed)
    summary = ws.summary()
    uniq = window_unique_table(ws.used, ws.q, ws.num_experts, ws.top_k, ws.k_draft, batch_sizes,
                               n_windows=ws.n_full_windows)
    w = ws.k_draft + 1
    unique = {
        "empirical": float(np.nanmean(ws.unique)),
        "uniform": uniform_unique(ws.num_experts, ws.top_k, w),
        "independent": float(np.mean([independent_unique(q, w) for q in ws.q])),
    }
    unique["empirical_over_k"] = unique["empirical"] / ws.top_k
    # degenerate repetition routes alike: the same statistics without those windows, and the
    # overlap of each acceptance status
    rep = overlap.repetitive_windows(tr)
    no_rep = None
    if rep.any() and (~rep).sum() >= 2:
        no_rep = overlap.window_stats(overlap.select_windows(tr, ~rep),
                                      shuffle_seed=shuffle_seed).summary()
    by_status = overlap.overlap_by_status(tr)
    prov = dict(tr.meta.get("provenance", {}))
    prov.update(provenance({"batch_sizes": batch_sizes, "shuffle_seed": shuffle_seed},
                           model=prov.get("model"), stage="overlap", trace=str(trace_path)))
    write_json(out, {
        "run": tr.meta.get("run", {}),
        "summary": summary,
        "repetitive_windows": float(rep.mean()) if rep.size else 0.0,
        "summary_without_repetition": no_rep if no_rep is not None else summary,
        "overlap_by_status": by_status,
        "unique": unique,
        "unique_by_batch": uniq,
        "per_layer": {
            "overlap": ws.overlap, "shuffle": ws.shuffle, "independent": ws.independence,
            "unique": ws.unique, "q": ws.q, "used": ws.used,
        },
    }, prov)


def ipf_stage(overlap_json, out, batch_sizes) -> None:
    ov = read_json(overlap_json)
    s = ov["summary"]
    n, k = s["num_experts"], s["top_k"]
    per_layer_ov = np.asarray(ov["per_layer"]["overlap"], dtype=float)
    q = np.asarray(ov["per_layer"]["q"], dtype=float)
    mean_ov = per_layer_ov.mean(axis=0)
    uni = ipf.predict_uniform(n, k, mean_ov)
    skew = ipf.fit_layers(q, per_layer_ov)
    p0 = skew.p_zero
    emp = ov["unique"]["empirical"]
    pred = {
        "uniform": uni["unique"],
        "skewed": float((1 - p0).sum(axis=1).mean()),
    }
    rows = []
    for b in batch_sizes:
        rows.append({"batch": int(b),
                     "verify_ipf_uniform": float(n * (1 - (1 - uni["unique"] / n) ** b)),
                     "verify_ipf_skewed": float((1 - p0**b).sum(axis=1).mean())})
    prov = dict(ov.get("provenance", {}))
    prov.update(provenance({"batch_sizes": batch_sizes}, model=prov.get("model"), stage="ipf"))
    write_json(out, {
        "run": ov["run"],
        "empirical": emp,
        "prediction": pred,
        "relative_error": {key: (v - emp) / emp for key, v in pred.items()},
        "converged": {"uniform": uni["converged"], "skewed": skew.converged},
        "iterations": {"uniform": uni["iterations"], "skewed": skew.iterations},
        "max_error": {"uniform": uni["max_error"], "skewed": skew.max_error},
        "n_clipped": {"uniform": uni["n_clipped"], "skewed": skew.n_clipped},
        "n_unconverged_experts": {"uniform": 0 if uni["converged"] else n,
                                  "skewed": skew.n_unconverged},
        "by_batch": rows,
    }, prov)
    if not (uni["converged"] and skew.converged):
        log.warning("IPF did not converge for %d expert(s) (max margin error %.2e): their "
                    "pair margins are jointly infeasible", skew.n_unconverged,
                    max(uni["max_error"], skew.max_error))
    if uni["n_clipped"] or skew.n_clipped:
        log.warning("IPF clipped %d infeasible pair tables", uni["n_clipped"] + skew.n_clipped)


def model_dims(model_cfg: dict, num_experts: int, top_k: int) -> costmodel.ModelDims:
    """ModelDims from the model's config: an HF config.json path or explicit dims."""
    d = dict(model_cfg.get("dims") or {})
    if model_cfg.get("source") == "hf":  # the config.json of the model's download
        from .hfconfig import study_dims

        dims = study_dims(model_cfg["hf_config"], model_cfg.get("precision", "auto"),
                          model_cfg.get("tp", 1))
        if (dims.num_experts, dims.top_k) != (num_experts, top_k):
            raise InputError(f"model {model_cfg['name']}: config.json says {dims.top_k}-of-"
                             f"{dims.num_experts} experts but the trace has {top_k}-of-{num_experts}")
        return dims
    if model_cfg.get("hf_config"):
        return costmodel.ModelDims.from_hf_config(model_cfg["hf_config"], dtype=d.get("dtype"),
                                                  tp=int(d.get("tp", 1)))
    if not d:
        raise InputError(f"model {model_cfg['name']}: needs 'dims' or 'hf_config' for the cost model")
    d.setdefault("num_experts", num_experts)
    d.setdefault("top_k", top_k)
    if (d["num_experts"], d["top_k"]) != (num_experts, top_k):
        raise InputError(f"model {model_cfg['name']}: dims say {d['top_k']}-of-{d['num_experts']} "
                         f"experts but the trace has {top_k}-of-{num_experts}")
    return costmodel.ModelDims.from_dims(**d)


def costmodel_stage(model_cfg: dict, hardware_cfg: dict, overlap_json, ipf_json, out) -> None:
    ov, ip = read_json(overlap_json), read_json(ipf_json)
    s = ov["summary"]
    dims = model_dims(model_cfg, s["num_experts"], s["top_k"])
    hw_name = model_cfg.get("hardware", "H100")
    if hw_name not in hardware_cfg:
        raise InputError(f"model {model_cfg['name']}: unknown hardware '{hw_name}' "
                         f"(config has {', '.join(hardware_cfg)})")
    hw = costmodel.Hardware.from_config(hw_name, hardware_cfg[hw_name])
    table = pd.DataFrame(ov["unique_by_batch"]).merge(pd.DataFrame(ip["by_batch"]), on="batch")
    table = table.set_index("batch")
    curves = []
    for routing, (vcol, dcol) in ROUTINGS.items():
        rows = costmodel.te_curve(dims, hw, s["k_draft"], table.index.tolist(),
                                  lambda b, c=vcol: table.loc[b, c],
                                  lambda b, c=dcol: table.loc[b, c])
        for r in rows:  # measured windows: is the trace large enough for this batch size?
            ok = (bool(table.loc[r["batch"], "verify_empirical_reliable"])
                  if vcol == "verify_empirical" and "verify_empirical_reliable" in table else True)
            curves.append({"routing": routing, **r, "sample_ok": ok})
    u = ov["unique"]
    te_b1 = {"uniform": dims.te_weight(u["uniform"]),
             "independent": dims.te_weight(u["independent"]),
             "ipf_skewed": dims.te_weight(ip["prediction"]["skewed"]),
             "empirical": dims.te_weight(u["empirical"])}
    prov = dict(ov.get("provenance", {}))
    prov.update(provenance({"model": model_cfg, "hardware": hardware_cfg[hw_name]},
                           model=prov.get("model"), stage="costmodel"))
    write_json(out, {"run": ov["run"], "hardware": hw_name, "dims": dims.to_dict(),
                     **dims.summary(), "unique_ratio": u["empirical"] / s["top_k"],
                     "te_weight_batch1": te_b1, "te_vs_batch": curves}, prov)


def acceptance_stage(trace_path, out, threads: int | None = None) -> None:
    use_threads(threads)
    tr = trace.read_trace(trace_path)
    consec, anchor = overlap.row_overlaps(tr)
    res = acceptance.acceptance_stats(tr, consec, anchor)
    prov = dict(tr.meta.get("provenance", {}))
    prov.update(provenance(None, model=prov.get("model"), stage="acceptance"))
    write_json(out, {"run": tr.meta.get("run", {}), **res}, prov)


# --- aggregation ----------------------------------------------------------------------------------

def _runs(paths) -> list[dict]:
    return [read_json(p) for p in paths]


def _run_cols(run: dict) -> dict:
    return {"model": run.get("model"), "drafter": run.get("drafter"), "k": run.get("k"),
            "dataset": run.get("dataset")}


def build_tables(overlap_jsons, ipf_jsons, cost_jsons, acc_jsons) -> dict[str, pd.DataFrame]:
    """All tables of the report, as DataFrames keyed by file stem."""
    ovs, ips, cms, accs = (_runs(x) for x in (overlap_jsons, ipf_jsons, cost_jsons, acc_jsons))
    t: dict[str, list] = {k: [] for k in ("overlap_decomposition_step1", "overlap_by_distance",
                                          "overlap_by_status",
                                          "per_layer_overlap", "unique_experts", "target_efficiency",
                                          "te_vs_batch", "acceptance_consecutive",
                                          "anchor_overlap", "heldout_acceptance")}
    for ov in ovs:
        s, rc = ov["summary"], _run_cols(ov["run"])
        t["overlap_decomposition_step1"].append({
            **rc, "k_over_n": s["top_k"] / s["num_experts"], "uniform": s["uniform"],
            "independent": s["independent"], "empirical": s["step1"],
            "temporal": s["temporal"], "temporal_share": s["temporal_share"],
            "shuffle_null": s.get("shuffle_step1", float("nan"))})
        row = {**rc}
        for d, v in enumerate(s["overlap_by_distance"], 1):
            row[f"step{d}"] = v
        row["independent"] = s["independent"]
        for d, v in enumerate(s.get("shuffle_by_distance", []), 1):
            row[f"shuffle{d}"] = v
        nr = ov.get("summary_without_repetition") or {}
        for d, v in enumerate(nr.get("overlap_by_distance", []), 1):
            row[f"step{d}_no_repetition"] = v
        row["repetitive_windows"] = ov.get("repetitive_windows", np.nan)
        t["overlap_by_distance"].append(row)
        if ov.get("overlap_by_status"):
            t["overlap_by_status"].append({**rc, **ov["overlap_by_status"],
                                           "repetitive_windows": ov.get("repetitive_windows")})
        pl = ov["per_layer"]
        for layer, (o, ind) in enumerate(zip(pl["overlap"], pl["independent"])):
            t["per_layer_overlap"].append({
                **rc, "layer": layer, "step1_overlap": o[0], "independent": ind,
                "shuffle": pl["shuffle"][layer][0] if pl.get("shuffle") else float("nan")})
    for ov, ip in zip(ovs, ips):
        u = ov["unique"]
        t["unique_experts"].append({
            **_run_cols(ov["run"]), "empirical": u["empirical"],
            "empirical_over_k": u["empirical_over_k"], "uniform": u["uniform"],
            "independent": u["independent"], "ipf_uniform": ip["prediction"]["uniform"],
            "ipf_skewed": ip["prediction"]["skewed"],
            "ipf_uniform_rel_err": ip["relative_error"]["uniform"],
            "ipf_skewed_rel_err": ip["relative_error"]["skewed"],
            "ipf_converged": bool(all(ip["converged"].values())),
            "ipf_clipped": int(sum(ip["n_clipped"].values())),
            "ipf_unconverged_experts": int(ip["n_unconverged_experts"]["skewed"])})
    for cm in cms:
        rc = _run_cols(cm["run"])
        t["target_efficiency"].append({
            **rc, "hardware": cm["hardware"], "c_expert_mib": cm["c_expert_mib"],
            "c_dense_mib": cm["c_dense_mib"], "moe_weight_share": cm["moe_weight_share"],
            **{f"te_{k}": v for k, v in cm["te_weight_batch1"].items()}})
        for r in cm["te_vs_batch"]:
            t["te_vs_batch"].append({**rc, "routing": r["routing"], "batch": r["batch"],
                                     "te": r["te"], "compute_bound": r["compute_bound"],
                                     "sample_ok": r.get("sample_ok", True)})
    for ac in accs:
        rc = _run_cols(ac["run"])
        for r in ac["by_position"]:
            t["acceptance_consecutive"].append({**rc, **r})
        eff = {e["draft_position"]: e for e in ac.get("anchor_effects", [])}
        for r in ac["anchor"]:
            e = eff.get(r["draft_position"], {})
            # the effect of acceptance on anchor overlap at this position (accepted vs
            # first-rejected), the label of the anchor-overlap figure
            t["anchor_overlap"].append({**rc, **r, "cohens_d": e.get("cohens_d", np.nan),
                                        "p_value": e.get("p_value", np.nan)})
        heldout = ac.get("heldout", {})
        slice_set = {n: ds for ds, h in heldout.items() for n in h["slices"]}
        for name, rows in ac.get("slices", {}).items():
            t["heldout_acceptance"].append({
                **rc, "slice": name, "heldout_dataset": slice_set.get(name, ""),
                **{f"delta_pos{r['draft_position']}": r["delta"] for r in rows},
                **{f"n_rejected_pos{r['draft_position']}": r["n_first_rejected"] for r in rows}})
        for ds, h in heldout.items():  # the median across each held-out dataset's slices
            t["heldout_acceptance"].append({
                **rc, "slice": f"median of {ds}", "heldout_dataset": ds,
                **{f"delta_pos{j}": v for j, v in enumerate(h["median_delta_by_position"], 1)}})
    return {k: pd.DataFrame(v) for k, v in t.items()}


CAPTIONS = {
    "overlap_decomposition_step1": "Step-1 overlap decomposition: uniform, independence, empirical, "
                                   "temporal, and the within-window shuffle null.",
    "overlap_by_distance": "Overlap by step distance with the independence baseline and the "
                           "within-window shuffle null; step<d>_no_repetition without the windows "
                           "that repeat a token (repetitive_windows: their share).",
    "overlap_by_status": "Mean consecutive overlap overlap(S(j-1), S(j)) of the window positions in "
                         "each acceptance status (committed, accepted, first rejected, after "
                         "rejection), and the share of windows with degenerate repetition.",
    "per_layer_overlap": "Step-1 overlap per layer against the independence baseline.",
    "unique_experts": "Unique experts per verification window: empirical, closed forms and IPF.",
    "target_efficiency": "Weight-model target efficiency at batch 1 under each routing assumption.",
    "te_vs_batch": "Target efficiency vs batch size with a roofline floor; sample_ok is false where "
                   "the trace holds too few windows for the measured-windows estimate at that "
                   "batch size (unseen experts could add more than 2%).",
    "acceptance_consecutive": "Deconfounded consecutive overlap, accepted vs first-rejected drafts "
                              "at the same position.",
    "anchor_overlap": "Anchor overlap overlap(S(0), S(j)) by acceptance status, with standard errors, "
                      "and the accepted vs first-rejected effect at each position (Cohen's d, "
                      "Welch p).",
    "heldout_acceptance": "Accepted minus first-rejected consecutive overlap per slice, and its "
                          "median across the slices of each held-out dataset.",
}


def write_tables(dfs: dict[str, pd.DataFrame], outdir, prov: dict) -> list[Path]:
    paths = []
    for stem, df in dfs.items():
        paths += tables.write_table(df, Path(outdir) / stem, prov, CAPTIONS.get(stem, ""))
    return paths


def by_distance(row, suffix: str = "", n: int | None = None) -> list[float]:
    """A row of the overlap_by_distance table as a list over d = 1, 2, ... (columns step<d><suffix>,
    up to the first missing one, or exactly n of them, NaN where missing)."""
    out, d = [], 1
    while (n is None and pd.notna(row.get(f"step{d}{suffix}"))) or (n is not None and d <= n):
        out.append(float(row.get(f"step{d}{suffix}", np.nan)))
        d += 1
    return out


def write_figures(table_dir, outdir, prov: dict) -> list[Path]:
    """Render every figure from the CSV tables (so figures never disagree with tables)."""
    td, od = Path(table_dir), Path(outdir)

    def load(stem):
        df = tables.read_csv(td / f"{stem}.csv")
        if not df.empty:
            df["run"] = (df["model"] + " " + df["drafter"] + " K=" + df["k"].astype(str) + " "
                         + df["dataset"])
        return df

    paths = []
    ob = load("overlap_by_distance")
    long = []
    for _, r in ob.iterrows():
        for d, v in enumerate(by_distance(r), 1):
            long.append({"run": r["run"], "distance": d, "empirical": v,
                         "shuffle": r.get(f"shuffle{d}", np.nan), "independent": r["independent"],
                         "uniform": np.nan})
    dec = load("overlap_decomposition_step1").set_index("run")["uniform"]
    long = pd.DataFrame(long)
    long["uniform"] = long["run"].map(dec)
    paths += figures.save(figures.overlap_by_distance(long), od / "overlap_by_distance", prov)
    paths += figures.save(figures.per_layer_overlap(load("per_layer_overlap")),
                          od / "per_layer_overlap", prov)
    paths += figures.save(figures.te_vs_batch(load("te_vs_batch")), od / "te_vs_batch", prov)
    anchor = load("anchor_overlap")
    effects = anchor.drop_duplicates(["run", "draft_position"])[
        ["run", "draft_position", "cohens_d"]] if not anchor.empty else anchor
    paths += figures.save(figures.anchor_overlap(anchor, effects), od / "anchor_overlap", prov)
    return paths


FIGURE_CAPTIONS = {
    "overlap_by_distance": "Expert overlap by step distance inside verification windows, with the "
                           "independence baseline and the within-window shuffle null.",
    "per_layer_overlap": "Step-1 overlap per layer against the independence baseline.",
    "te_vs_batch": "Target efficiency vs batch size under uniform, independent-skewed, IPF and "
                   "measured (temporally correlated) routing.",
    "anchor_overlap": "Anchor overlap by acceptance status with standard-error bars; labels give "
                      "Cohen's d of accepted vs first-rejected anchor overlap at each position.",
}


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
        fmt = lambda xs: " / ".join(f"{x:.3f}" for x in xs)  # noqa: E731
        line = (f"{r['model']} {r['drafter']} K={r['k']} {r['dataset']}: overlap at d = 1..{len(steps)} "
                f"{fmt(steps)} ({_trend(steps)}), independence {r['independent']:.3f}, "
                f"within-window shuffle {r.get('shuffle1', np.nan):.3f}")
        rep = float(r.get("repetitive_windows", 0) or 0)
        if rep > 0.01:
            line += (f"; {rep:.0%} of windows repeat a token, and without them {fmt(clean)} "
                     f"({_trend(clean)})")
        out.append(line)
    return out


def write_report(table_dir, figure_dir, out, prov: dict) -> None:
    """results/report/index.md linking every table and figure."""
    out = Path(out)
    rel = lambda p: Path(p).resolve().relative_to(out.parent.resolve().parent)  # noqa: E731
    lines = ["# specmoe report", "",
             f"Configuration hash `{prov.get('config_hash')}`, created {prov.get('created')}.", ""]
    findings = report_findings(table_dir)
    if findings:
        lines += ["## What the routing shows", "",
                  "Temporal overlap is what the study's argument rests on: overlap that decays with "
                  "step distance, above both the independence baseline and the within-window "
                  "shuffle null. Untrained controls clear independence without it (every position "
                  "of a window feeds the routers nearly the same vector) and stay flat; weak models "
                  "decoding greedily repeat tokens, which route alike, so overlap is also given "
                  "without such windows.", "", *[f"- {f}" for f in findings], "",
                  "What a CPU run cannot show: timings of these tiny models are dominated by "
                  "per-step host overhead rather than by reading weights, so their speedup and TE "
                  "curves test the pipeline, not the study's GPU claims.", ""]
    caveats = report_caveats(table_dir)
    if caveats:
        lines += ["## Caveats", "", *[f"- {c}" for c in caveats], ""]
    lines += ["## Figures", ""]
    for stem, cap in FIGURE_CAPTIONS.items():
        png = Path(figure_dir) / f"{stem}.png"
        if png.exists():
            lines += [f"### {stem.replace('_', ' ')}", "", cap, "",
                      f"![{stem}](../{rel(png)})  ([PDF](../{rel(png.with_suffix('.pdf'))}))", ""]
    lines += ["## Tables", ""]
    for stem, cap in CAPTIONS.items():
        md = Path(table_dir) / f"{stem}.md"
        if md.exists():
            lines.append(f"- [{stem}](../{rel(md)}): {cap} "
                         f"([CSV](../{rel(md.with_suffix('.csv'))}), "
                         f"[LaTeX](../{rel(md.with_suffix('.tex'))}))")
    write_text(out, "\n".join(lines) + f"\n\n<!-- provenance: {prov} -->\n")


# Captions of the measured side's tables and figures (specmoe.measured builds them).
CAPTIONS.update({
    "speedup_vs_batch": "Measured SD speedup vs batch size (mean TPOT without SD over with SD, timed "
                        "as `timing` says; the other timing's speedup beside it), acceptance "
                        "length tau, draft cost c, TE from the sweep, curve shape.",
    "te_three_ways": "Target efficiency three ways: from the sweep (tau / speedup and c, with c "
                     "from the drafter served alone and from profiling), from profiled decode and "
                     "verify forward passes, from the cost model with the measured windows' "
                     "unique experts.",
    "kernel_time_shares": "Profiled time per op/kernel class in decode and verify forward passes, "
                          "shares and verify/decode ratios (CTAs vs SM count on CUDA).",
    "three_step_correction": "Three-step correction at batch 1: weight baseline, then measured MoE "
                             "time share, MoE kernel time ratio and non-MoE time ratio, against the "
                             "TE from the sweep.",
})

FIGURE_CAPTIONS["speedup_vs_batch"] = ("Measured SD speedup vs batch size per model, with the "
                                      "curve's shape label.")
