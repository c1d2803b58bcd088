"""Coverage of `specmoe predict`'s 95% speedup intervals on public measurements of speculative
decoding on MoE models (src/specmoe/data/public_sd_moe.csv: never used to fit or size anything;
only the rows its admission rule admits, specmoe.cost.admission, at their admitted TP), and the
intervals' median half-width over the prediction, at batch 1 and past batch 1 apart.

Rows of one source share a setup, so coverage is counted two ways: over rows, and over sources
(each source's share of rows inside, averaged with every source weighing one), each with its
exact binomial 95% interval (Clopper-Pearson; over rows it treats rows as independent, which
they are not). Beside each row, what it says of the model: the cost of one SD cycle in decode
steps the measurement implies (acceptance length over speedup) against the model's (c + 1/TE),
and the model's decode step against the source's baseline time per token. A row whose TE
interval spans its whole physical range at its batch size (`no_information`: the model says
nothing there, and the ends of its speedup interval are drawn from TE's clip bounds) is listed
apart, counted in no coverage, half-width or error.

--study reports the study's Table 10 the same way: each configuration's leave-one-model-out
95% interval of TE at batch 1 (stepmodel.lomo_coverage), coverage over rows and over models.

--loso adds the leave-one-source-out analysis: each source's rows scored with an extra error on
the speedup (log-normal) whose size is the root mean square of the other sources' log errors
(each source weighing one); never predict's default, and a fold sized on one other source sizes
nothing.

    python bench/public_coverage.py [--json] [--study] [--loso] [--ids S08-c1,...] [--draws N]
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from specmoe.cost import predictor, stepmodel
from specmoe.cost.admission import HARDWARE_FILE
from specmoe.cost.hfconfig import dims_from_config

REPO = Path(__file__).resolve().parents[1]
DATA = resources.files("specmoe") / "data"


def load(ids: list[str] | None = None) -> pd.DataFrame:
    """The public set; the admitted rows only (or the named ones among them), each at its
    admitted TP (stated or inferred: `layout_evidence`)."""
    table = pd.read_csv(str(DATA / "public_sd_moe.csv"), keep_default_na=False)
    scored = table[table["admitted"] == "yes"].copy()
    scored["tp_pred"] = scored["tp_admitted"]
    if ids:
        missing = sorted(set(ids) - set(scored["id"]))
        if missing:
            raise SystemExit(f"not admitted rows: {', '.join(missing)}")
        scored = scored[scored["id"].isin(ids)]
    return scored


def setup(r):
    """A row's dimensions (its config.json at its precision and TP) and GPU (built in, else from
    the package's hardware file, with its caveat)."""
    config = REPO / r["config"]
    fmt = None if r["precision_pred"] == "auto" else r["precision_pred"]
    dims = dims_from_config(config, dtype=fmt, tp=int(r["tp_pred"]))
    gpu = r["hardware_pred"]
    hw, caveats = predictor.hardware(gpu, None if gpu in predictor.shipped_gpus()
                                     else HARDWARE_FILE)
    return config, dims, hw, caveats


def predict_row(r, draws: int, extra_log_sd: float = 0.0) -> dict:
    """What `specmoe predict` says of one row's setup, at its batch size."""
    config, dims, hw, caveats = setup(r)
    tau = ((float(r["acceptance_low"]), float(r["acceptance_high"]))
           if r["acceptance_low"] else None)
    return predictor.prediction(dims, hw, int(r["k_pred"]), r["method_pred"],
                                [int(r["batch_pred"])], config=config,
                                study_model=r["study_model"] or None, tau=tau,
                                engine=r["engine_pred"], caveats=caveats, draws=draws,
                                extra_log_sd=extra_log_sd)


def decode_ms(r) -> float:
    """The model's decode step at the row's batch (parameters fitted on every calibration row)."""
    _, dims, hw, _ = setup(r)
    b = int(r["batch_pred"])
    return 1e3 * stepmodel.step_time(dims, hw, b, 1, stepmodel.unique_decode(dims, b),
                                     stepmodel.fitted())


def point(r, res: dict) -> dict:
    """One row's prediction beside its measurement. Where TE's 95% interval spans its whole
    physical range (`no_information`: both ends at TE's clip bounds, and the speedup's interval
    drawn from them) the model says nothing of the row: its ends are the clip's, so it is not
    scored (inside, half-width and error None) and is counted apart."""
    mid, lo, hi = res["speedup"][0], res["speedup_low"][0], res["speedup_high"][0]
    measured, tau = float(r["speedup"]), float(np.mean(res["acceptance_length"]))
    te, cost = res["te"][0], res["draft_cost"][0]
    blind = bool(res["no_information"][0])
    scored = (lambda x: None if blind else x)  # noqa: E731
    return {"id": r["id"], "source": r["id"][:3], "batch": int(r["batch_pred"]),
            "engine": r["engine_pred"], "measured": measured,
            "predicted": round(mid, 3), "low": round(lo, 3), "high": round(hi, 3),
            "no_information": blind,
            "inside": scored(bool(round(lo, 3) <= measured <= round(hi, 3))),
            "half_width_rel": scored(round((hi - lo) / 2 / mid, 3)),
            "error_rel": scored(round(mid / measured - 1, 3)),
            "log_error": scored(round(float(np.log(measured / mid)), 3)),
            "te": round(te, 3), "draft_cost": round(cost, 3),
            "cycle_model": round(cost + 1 / te, 3), "cycle_implied": round(tau / measured, 3),
            "decode_ms_model": round(decode_ms(r), 3),
            "decode_ms_baseline": float(r["baseline_ms_per_token"] or "nan"),
            "acceptance_length": res["acceptance_length"],
            "calibration_distance": res["calibration_distance"], "caveats": res["caveats"]}


def score(table: pd.DataFrame, draws: int = stepmodel.DRAWS,
          extra_log_sd: dict[str, float] | None = None) -> dict:
    """Each row's prediction beside its measurement; `extra_log_sd` per source (--loso)."""
    extra = extra_log_sd or {}
    points = [point(r, predict_row(r, draws, extra.get(r["id"][:3], 0.0)))
              for _, r in table.iterrows()]
    return summarise(points)


def loso_sizes(points: list[dict]) -> dict[str, float]:
    """Each source's extra log-sd: the RMS of the other sources' log errors over their rows with
    information, each source's mean square weighing one (0 where no other source is scored)."""
    by: dict[str, list[float]] = {}
    for p in points:
        if not p["no_information"]:
            by.setdefault(p["source"], []).append(p["log_error"])
    ms = {s: float(np.mean(np.square(v))) for s, v in by.items()}
    return {s: float(np.sqrt(np.mean([m for o, m in ms.items() if o != s]))) if len(ms) > 1
            else 0.0 for s in {p["source"] for p in points}}


def clopper_pearson(k: float, n: int) -> list[float]:
    from scipy.stats import beta

    low = beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    high = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return [round(float(low), 3), round(float(high), 3)]


def summarise(all_points: list[dict]) -> dict:
    """Coverage, half-width and error over the rows with information (point); the rows without
    it are listed apart (`no_information`), counted in no coverage or half-width."""
    blind = [p["id"] for p in all_points if p["no_information"]]
    points = [p for p in all_points if not p["no_information"]]
    if not points:
        raise SystemExit(f"no scored row with information (TE's 95% interval spans its whole "
                         f"range at {', '.join(blind)}): no coverage to count")
    by_source: dict[str, list[dict]] = {}
    for p in points:
        by_source.setdefault(p["source"], []).append(p)
    sources = {s: {"rows": len(ps), "coverage": float(np.mean([p["inside"] for p in ps])),
                   "median_half_width_rel": float(np.median([p["half_width_rel"] for p in ps]))}
               for s, ps in by_source.items()}
    inside = sum(p["inside"] for p in points)
    src_cov = float(np.mean([s["coverage"] for s in sources.values()]))
    by_batch = {}
    for name, keep in (("batch 1", lambda p: p["batch"] == 1), ("past batch 1",
                                                                 lambda p: p["batch"] > 1)):
        ps = [p for p in points if keep(p)]
        none = [p["id"] for p in all_points if keep(p) and p["no_information"]]
        if ps or none:
            by_batch[name] = {"rows": len(ps), "no_information": none}
        if ps:
            k = sum(p["inside"] for p in ps)
            src: dict[str, list[dict]] = {}
            for p in ps:
                src.setdefault(p["source"], []).append(p)
            cov_src = [float(np.mean([p["inside"] for p in v])) for v in src.values()]
            by_batch[name] |= {"coverage": k / len(ps),
                              "coverage_ci95": clopper_pearson(k, len(ps)),
                              "median_half_width_rel": float(np.median(
                                  [p["half_width_rel"] for p in ps])),
                              "sources": len(src),
                              "coverage_sources": float(np.mean(cov_src)),
                              "median_half_width_rel_sources": float(np.median(
                                  [np.median([p["half_width_rel"] for p in v])
                                   for v in src.values()]))}
    engines = {}
    for p in points:
        engines.setdefault(p["engine"], []).append(p["log_error"])
    return {"rows": len(points), "sources": len(sources), "by_batch": by_batch,
            # rows whose TE interval spans its whole range: the model says nothing there
            "no_information": blind,
            # log(measured / predicted median): > 0 where the model is low (its bias)
            "median_log_error_by_engine": {e: {"rows": len(v), "median": float(np.median(v))}
                                           for e, v in engines.items()},
            "coverage_rows": inside / len(points),
            "coverage_rows_ci95": clopper_pearson(inside, len(points)),
            "coverage_sources": src_cov,
            "coverage_sources_ci95": clopper_pearson(src_cov * len(sources), len(sources)),
            "median_half_width_rel": float(np.median([p["half_width_rel"] for p in points])),
            "median_half_width_rel_sources": float(np.median(
                [s["median_half_width_rel"] for s in sources.values()])),
            "median_abs_error_rel": float(np.median([abs(p["error_rel"]) for p in points])),
            "by_source": sources, "points": all_points}


def study_coverage() -> dict:
    """Table 10's leave-one-model-out TE intervals, counted over rows and over models."""
    rows = stepmodel.lomo_coverage()
    cal = stepmodel.calibration()
    errs = np.array([r["error"] for r in cal.lomo if r["goal"]])
    table = lomo_table(cal)
    by: dict[str, list[bool]] = {}
    for r in rows:
        by.setdefault(r["model"], []).append(r["inside"])
    inside = sum(r["inside"] for r in rows)
    return {"rows": len(rows), "models": len(by), "coverage_rows": inside / len(rows),
            "coverage_rows_ci95": clopper_pearson(inside, len(rows)),
            "coverage_models": float(np.mean([np.mean(v) for v in by.values()])),
            "median_half_width_rel": float(np.median([r["half_width_rel"] for r in rows])),
            # Table 10's leave-one-model-out TE error: each configuration from the fit without
            # its model (stepmodel.leave_one_model_out)
            "lomo_mean_abs_error": float(np.mean(np.abs(errs))),
            "lomo_rms_error": float(np.sqrt(np.mean(errs ** 2))),
            "table": table,
            "baseline_mean_abs_error": float(np.mean(
                [abs(r["baseline_mean"] - r["published"]) for r in table])),
            "weight_model_mean_abs_error": float(np.mean(
                [abs(r["weight_model"] - r["published"]) for r in table])),
            "missing_effects": stepmodel.missing_effects(cal.params),
            "lomo_folds_at_bound": {k: sum(stepmodel.at_bound(f).get(k) is not None
                                           for f in cal.lomo_fits) for k in stepmodel.FITTED},
            "lomo_folds": len(cal.lomo_fits),
            "outside": [f"{r['model']} {r['precision']} TP{r['tp']}: {r['published']} not in "
                        f"[{r['te_low']:.3f}, {r['te_high']:.3f}]"
                        for r in rows if not r["inside"]]}


def lomo_table(cal) -> list[dict]:
    """Table 10's rows: the leave-one-model-out TE beside the two baselines (the mean of the other
    models' rows, and the weight model, which fits nothing)."""
    rows = stepmodel.calibration_rows()
    out = []
    for r, lo in zip(rows, cal.lomo):
        if not lo["goal"]:
            continue
        out.append({k: lo[k] for k in ("model", "precision", "tp", "gpu", "method", "published")}
                   | {"lomo": round(lo["predicted"], 3),
                      "baseline_mean": round(lo["baseline_mean"], 3),
                      "weight_model": round(stepmodel.weight_model_te(r), 3)})
    return out


def text(res: dict) -> str:
    lines = [f"{'id':18} {'measured':>8} {'predicted [95%]':>22} {'inside':>6} {'±rel':>5} "
             f"{'TE':>5} {'c':>5} {'far':>3}"]
    for p in res["points"]:
        if p["no_information"]:
            lines.append(f"{p['id']:18} {p['measured']:8.3f} no information (TE's 95% interval "
                         f"spans its whole range; not scored) {p['te']:5.2f} "
                         f"{p['draft_cost']:5.2f} {p['calibration_distance']:3d}")
            continue
        lines.append(f"{p['id']:18} {p['measured']:8.3f} {p['predicted']:8.3f} "
                     f"[{p['low']:.3f}, {p['high']:.3f}] {str(p['inside']):>6} "
                     f"{p['half_width_rel']:5.2f} {p['te']:5.2f} {p['draft_cost']:5.2f} "
                     f"{p['calibration_distance']:3d}")
    lines.append(f"coverage over rows {res['coverage_rows']:.2f} (95% {res['coverage_rows_ci95']}, "
                 f"{res['rows']} rows with information); over sources "
                 f"{res['coverage_sources']:.2f} (95% {res['coverage_sources_ci95']}, "
                 f"{res['sources']} sources)")
    if res["no_information"]:
        lines.append(f"not scored, no information (TE's 95% interval spans its whole range): "
                     f"{', '.join(res['no_information'])} ({len(res['no_information'])})")
    lines.append(f"median half-width over the prediction {res['median_half_width_rel']:.3f} "
                 f"(rows), {res['median_half_width_rel_sources']:.3f} (sources); median |error| "
                 f"{res['median_abs_error_rel']:.3f}")
    for name, b in res["by_batch"].items():
        if not b["rows"]:
            lines.append(f"{name}: no row with information ({len(b['no_information'])} without)")
            continue
        lines.append(f"{name}: coverage over rows {b['coverage']:.2f} (95% {b['coverage_ci95']}, "
                     f"{b['rows']} rows), over sources {b['coverage_sources']:.2f} "
                     f"({b['sources']} sources); median half-width "
                     f"{b['median_half_width_rel']:.3f} (rows), "
                     f"{b['median_half_width_rel_sources']:.3f} (sources)"
                     + (f"; without information, apart: {len(b['no_information'])}"
                        if b["no_information"] else ""))
    lines.append("median log error (log measured/predicted) per engine: " + ", ".join(
        f"{e} {v['median']:+.3f} ({v['rows']} rows)"
        for e, v in res["median_log_error_by_engine"].items()))
    lines.append(f"{'id':18} {'SD cycle in decode steps: implied':>33} {'model':>6}   "
                 f"{'decode ms: model':>16} {'baseline':>8}")
    for p in res["points"]:
        lines.append(f"{p['id']:18} {p['cycle_implied']:33.3f} {p['cycle_model']:6.3f}   "
                     f"{p['decode_ms_model']:16.3f} {p['decode_ms_baseline']:8.3f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--study", action="store_true",
                    help="also Table 10's leave-one-model-out coverage of TE at batch 1")
    ap.add_argument("--loso", action="store_true",
                    help="also score with an extra error sized leave-one-source-out")
    ap.add_argument("--ids", help="comma-separated scored row ids (default: every scored row)")
    ap.add_argument("--draws", type=int, default=stepmodel.DRAWS,
                    help=f"draws per prediction (default {stepmodel.DRAWS}, predict's)")
    a = ap.parse_args()
    table = load(a.ids.split(",") if a.ids else None)
    res = score(table, a.draws)
    if a.loso:
        sizes = loso_sizes(res["points"])
        res["loso"] = {"extra_log_sd": sizes, **score(table, a.draws, sizes)}
    if a.study:
        res["study"] = study_coverage()
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(text(res))
    if a.loso:
        print(f"\nleave-one-source-out extra log-sd {res['loso']['extra_log_sd']}")
        print(text(res["loso"]))
    if a.study:
        st = res["study"]
        print(f"\nTable 10, leave-one-model-out TE at batch 1: coverage over rows "
              f"{st['coverage_rows']:.2f} (95% {st['coverage_rows_ci95']}, {st['rows']} rows), "
              f"over models {st['coverage_models']:.2f} ({st['models']} models); median "
              f"half-width {st['median_half_width_rel']:.3f}; outside: {'; '.join(st['outside'])}")
        print(f"Table 10 leave-one-model-out TE error: mean |error| "
              f"{st['lomo_mean_abs_error']:.3f}, RMS {st['lomo_rms_error']:.3f}; baselines: "
              f"mean of the other models {st['baseline_mean_abs_error']:.3f}, weight model "
              f"{st['weight_model_mean_abs_error']:.3f}")
        print(f"{'model':14} {'prec':5} {'TP':>2} {'gpu':5} {'method':11} {'published':>9} "
              f"{'LOMO':>6} {'mean':>6} {'weight':>6}")
        for r in st["table"]:
            print(f"{r['model']:14} {r['precision']:5} {r['tp']:>2} {r['gpu']:5} "
                  f"{r['method']:11} {r['published']:9.3f} {r['lomo']:6.3f} "
                  f"{r['baseline_mean']:6.3f} {r['weight_model']:6.3f}")
        print(f"fitted terms on a bound (of {st['lomo_folds']} leave-one-model-out fits): "
              f"{st['lomo_folds_at_bound']}")
        for line in st["missing_effects"].values():
            print(f"missing effect: {line}")


if __name__ == "__main__":
    main()
