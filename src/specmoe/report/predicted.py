"""The step model's tables: its prediction for each model of the configuration beside what the
run measured, and its calibration on the study's measured TE (leave-one-model-out)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stepmodel
from ..provenance import read_json


def prediction_table(predict_jsons, speedup_jsons) -> pd.DataFrame:
    """One row per model and batch size: predicted TE and speedup with their 95% intervals, and
    the run's measured speedup where a sweep of the same model at the same K measured it."""
    measured = {}
    for path in speedup_jsons:
        sp = read_json(path)
        run = sp["run"]
        for r in sp["rows"]:
            measured.setdefault((run["model"], int(run["k"]), int(r["batch"])), {
                "dataset": run["dataset"], "speedup_measured": r["speedup"],
                "speedup_measured_low": r.get("speedup_low", np.nan),
                "speedup_measured_high": r.get("speedup_high", np.nan),
                "shape_measured": sp["shape"]})
    rows = []
    for path in predict_jsons:
        p = read_json(path)
        for i, b in enumerate(p["batch_sizes"]):
            m = measured.get((p["model"], int(p["k"]), int(b)), {})
            rows.append({"model": p["model"], "k": p["k"], "method": p["method"],
                         "hardware": p["hardware"], "overlaps": p["overlaps"], "batch": b,
                         "te_predicted": p["te"][i], "te_low": p["te_low"][i],
                         "te_high": p["te_high"][i], "speedup_predicted": p["speedup"][i],
                         "speedup_low": p["speedup_low"][i],
                         "speedup_high": p["speedup_high"][i],
                         "speedup_measured": m.get("speedup_measured", np.nan),
                         "speedup_measured_low": m.get("speedup_measured_low", np.nan),
                         "speedup_measured_high": m.get("speedup_measured_high", np.nan),
                         "shape_predicted": p["shape"],
                         "shape_measured": m.get("shape_measured", "")})
    return pd.DataFrame(rows)


def calibration_table() -> pd.DataFrame:
    """Each of the study's measured TE at batch 1 (K = 3) beside the step model's prediction from
    parameters fitted without that model's rows, and the weight model's."""
    rows = stepmodel.calibration_rows()
    lomo = stepmodel.leave_one_model_out(rows)
    full = stepmodel.fit(rows).as_dict()
    out = []
    for r, lo in zip(rows, lomo):
        out.append({"model": r["model"], "precision": r["precision"], "tp": r["tp"],
                    "method": r["method"], "in_table_10": r["goal"],
                    "te_published": r["te_published"],
                    "te_weight_model": stepmodel.weight_model_te(r),
                    "te_step_model": lo["te_predicted"], "error": lo["error"],
                    "weight_model_error": stepmodel.weight_model_te(r) - r["te_published"],
                    "overlaps": "prior" if r["overlap_prior"] else "published",
                    **{f"fit_{k}": lo[f"fit_{k}"] for k in full},
                    **{f"all_{k}": v for k, v in full.items()}})
    return pd.DataFrame(out)
