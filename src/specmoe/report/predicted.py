"""The step model's tables: its prediction for each run of the configuration's predicted models
beside what the run measured, and its calibration on what the study measured
(leave-one-model-out)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..cost import stepmodel
from ..errors import InputError
from ..provenance import read_json
from ..runs import Run


def prediction_table(predict_jsons, speedup_jsons) -> pd.DataFrame:
    """One row per predicted run and batch size (each predict JSON holds its model's predictions,
    one per run: rule predict): predicted TE and speedup with their 95% intervals, and the
    measured speedup of the run the prediction was made for (its drafter, K and dataset: the
    prediction's `run`, named in the row) where a sweep measured it, so that every swept run of
    a predicted model stands beside its own prediction; beside each, its acceptance length (the
    speedup scales with it): the one the prediction drew (its range: the capture's, or the
    prior's) and the sweep's. Another run's sweep (another drafter, K or dataset) is not this
    prediction's measurement."""
    measured = {}
    for path in speedup_jsons:
        sp = read_json(path)
        run = Run.of(sp["run"])
        for r in sp["rows"]:
            measured[(run, int(r["batch"]))] = {
                "speedup_measured": r["speedup"],
                "speedup_measured_low": r.get("speedup_low", np.nan),
                "speedup_measured_high": r.get("speedup_high", np.nan),
                "tau_measured": r.get("tau", np.nan),
                "tau_measured_low": r.get("tau_low", np.nan),
                "tau_measured_high": r.get("tau_high", np.nan), "shape_measured": sp["shape"]}
    rows = []
    for path in predict_jsons:
        whole = read_json(path)
        if "predictions" not in whole:
            raise InputError(f"{path}: holds one prediction, not one per run of its model "
                             "(written before rule predict predicted every run): rerun rule "
                             "predict")
        for p in whole["predictions"]:
            rows += _prediction_rows(path, p, measured)
    return pd.DataFrame(rows)


def _prediction_rows(path, p: dict, measured: dict) -> list[dict]:
    """prediction_table's rows of one run's prediction `p` (an entry of a predict JSON's
    `predictions`), each batch size beside its run's measurement where `measured` has it."""
    if not p.get("run"):
        raise InputError(f"{path}: a prediction names no run (written before predictions "
                         "named theirs): rerun rule predict")
    if "te_low_clipped" not in p:
        raise InputError(f"{path}: the prediction does not say which ends of TE's intervals "
                         "are clipped (written before predictions did): rerun rule predict")
    run = Run.of(p["run"])
    rows = []
    for i, b in enumerate(p["batch_sizes"]):
        m = measured.get((run, int(b)), {})
        rows.append({"model": p["model"], "drafter": run.drafter, "k": p["k"],
                     "dataset": run.dataset, "method": p["method"],
                     "hardware": p["hardware"], "overlaps": p["overlaps"], "batch": b,
                     "te_predicted": p["te"][i], "te_low": p["te_low"][i],
                     "te_high": p["te_high"][i],
                     "te_low_clipped": bool(p["te_low_clipped"][i]),
                     "te_high_clipped": bool(p["te_high_clipped"][i]),
                     "no_information": bool(p["no_information"][i]),
                     "speedup_predicted": p["speedup"][i],
                     "speedup_low": p["speedup_low"][i],
                     "speedup_high": p["speedup_high"][i],
                     "speedup_measured": m.get("speedup_measured", np.nan),
                     "speedup_measured_low": m.get("speedup_measured_low", np.nan),
                     "speedup_measured_high": m.get("speedup_measured_high", np.nan),
                     "tau_predicted_low": p["acceptance_length"][0],
                     "tau_predicted_high": p["acceptance_length"][-1],
                     "tau_measured": m.get("tau_measured", np.nan),
                     "tau_measured_low": m.get("tau_measured_low", np.nan),
                     "tau_measured_high": m.get("tau_measured_high", np.nan),
                     "shape_predicted": p["shape"],
                     "shape_measured": m.get("shape_measured", "")})
    return rows


def calibration_tables() -> dict[str, pd.DataFrame]:
    """Each number the step model is calibrated on (the study's TE at batch 1, K = 3, its
    profiled MoE share of decode time and time ratios) beside the step model's prediction from
    parameters fitted without that model's rows, and its baselines: for TE the mean TE of the
    other models' Table 10 rows of its method family and granularity, and for every row the
    weight model, which fits nothing (weight_model; what it is in `weight_model_is`)
    (`step_model_calibration`); each speedup curve the study
    shows with its published shape beside the shape predicted the same way and the two
    baselines' (the study's N/k rule, stepmodel.nk_rule_shape; every curve peaking at low batch,
    stepmodel.CONSTANT_SHAPE), the shapes the study gives by its N/k rule rather than from the
    model's own curve marked (`step_model_shapes`)."""
    cal = stepmodel.calibration()
    rows, shapes = stepmodel.calibration_rows(), stepmodel.shape_rows()
    full = cal.params
    lomo = list(cal.lomo)
    keys = ("model", "gpu", "precision", "tp")
    fits = lambda lo: {**{f"fit_{k}": lo[f"fit_{k}"] for k in stepmodel.FITTED},  # noqa: E731
                       **{f"all_{k}": getattr(full, k) for k in stepmodel.FITTED}}
    cal_rows = []
    for r, lo in zip(rows, lomo):
        te = r["quantity"] == stepmodel.TE
        weight, basis = weight_model(r)
        mean = lo["baseline_mean"] if te else np.nan
        cal_rows.append({"quantity": r["quantity"], **{k: r[k] for k in keys},
                         "method": r["method"] or "", "in_table_10": r["goal"],
                         "published": r["published"], "step_model": lo["predicted"],
                         "error": lo["error"], "mean_baseline": mean,
                         "mean_baseline_error": mean - r["published"], "weight_model": weight,
                         "weight_model_error": weight - r["published"],
                         "weight_model_is": basis,
                         "overlaps": "prior" if r["overlap_prior"] else "published", **fits(lo)})
    shp = []
    for r, lo in zip(shapes, lomo[len(rows):]):
        curve = stepmodel.shape_curve(r, full)
        shp.append({**{k: r[k] for k in keys}, "method": r["method"],
                    "published_shape": r["published"],
                    "published_by": "the study's N/k rule" if r["rule_made"]
                    else "the model's own curve",
                    "step_model_shape": lo["predicted"],
                    "agrees": lo["predicted"] == r["published"],
                    "nk_rule_shape": stepmodel.nk_rule_shape(r["dims"]),
                    "nk_rule_agrees": stepmodel.nk_rule_shape(r["dims"]) == r["published"],
                    "constant_shape": stepmodel.CONSTANT_SHAPE,
                    "constant_agrees": stepmodel.CONSTANT_SHAPE == r["published"],
                    "step_model_shape_all": stepmodel.predict_shape(r, full),
                    "peak_batch": r["batches"][int(np.argmax(curve))],
                    "speedup_over_tau_batch1": curve[0], "speedup_over_tau_peak": max(curve),
                    "overlaps": "prior" if r["overlap_prior"] else "published"})
    return {"step_model_calibration": pd.DataFrame(cal_rows),
            "step_model_shapes": pd.DataFrame(shp),
            "step_model_parameters": parameter_table(full)}


def weight_model(r: dict) -> tuple[float, str]:
    """The weight model's value of a calibration row's quantity (time in proportion to the bytes
    a step reads, nothing fitted), from the row's own dimensions and unique experts, and what it
    is: TE (stepmodel.weight_model_te); the MoE share of decode time as the experts' share of the
    weights a decode step reads; the MoE verify/decode time ratio as unique experts / k (the
    experts' bytes verification reads over decode's); the non-MoE ratio as 1 (both steps read
    the same non-expert bytes)."""
    q, dims = r["quantity"], r["dims"]
    if q == stepmodel.TE:
        return stepmodel.weight_model_te(r), "weight-model TE (bytes read)"
    if q == stepmodel.MOE_SHARE:
        return dims.moe_weight_share, "the experts' share of the weights decode reads"
    if q == stepmodel.MOE_RATIO:
        return r["unique"] / dims.top_k, "unique experts / k (the experts' bytes read)"
    if q == stepmodel.REST_RATIO:
        return 1.0, "1 (the same non-expert bytes read)"
    raise ValueError(f"no weight model for the calibration quantity {q!r}")


def parameter_table(p: stepmodel.StepParams) -> pd.DataFrame:
    """Every mechanism of the step model: its value (fitted or set), its physical range, whether
    it is fitted, and where the value and range come from; a fitted one on an end of its range
    is `at_bound` and its `missing_effect` says what the data want that physics does not give
    (stepmodel.missing_effects), never a fit accepted silently."""
    missing = stepmodel.missing_effects(p)
    return pd.DataFrame([{"parameter": k, "value": getattr(p, k), "physical_low": m.low,
                          "physical_high": m.high, "unit": m.unit, "fitted": m.fitted,
                          "at_bound": k in missing, "missing_effect": missing.get(k, ""),
                          "source": m.source} for k, m in stepmodel.MECHANISMS.items()])
