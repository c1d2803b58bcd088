"""Coverage of `specmoe predict`'s 95% speedup intervals on public measurements of speculative
decoding on MoE models (src/specmoe/data/public_sd_moe.csv; never used to fit or size anything),
and the intervals' median half-width over the prediction (target: >= 80% inside, < 35% wide).

    python bench/public_coverage.py [--json]
"""

from __future__ import annotations

import argparse
import json
from importlib import resources

import numpy as np
import pandas as pd

from specmoe import predictor, stepmodel
from specmoe.hfconfig import dims_from_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = resources.files("specmoe") / "data" / "public_sd_moe.csv"
    rows = []
    for r in pd.read_csv(str(data)).itertuples():
        fmt = None if r.precision in ("mxfp4", "auto") else r.precision
        dims = dims_from_config(stepmodel.config_path(r.config), dtype=fmt, tp=int(r.tp))
        hw, caveats = predictor.hardware(r.gpu)
        tau = (r.acceptance_length,) * 2 if r.acceptance_length == r.acceptance_length else None
        res = predictor.prediction(dims, hw, int(r.k), r.method, [int(r.batch)], tau=tau,
                                   engine=r.engine, caveats=caveats)
        mid, lo, hi = res["speedup"][0], res["speedup_low"][0], res["speedup_high"][0]
        rows.append({"id": r.id, "measured": r.speedup, "predicted": round(mid, 3),
                     "low": round(lo, 3), "high": round(hi, 3),
                     "inside": bool(lo <= r.speedup_high and r.speedup_low <= hi),
                     "half_width_rel": round((hi - lo) / 2 / mid, 3),
                     "error_rel": round(mid / r.speedup - 1, 3)})
    out = {"coverage": float(np.mean([r["inside"] for r in rows])),
           "median_half_width_rel": float(np.median([r["half_width_rel"] for r in rows])),
           "median_abs_error_rel": float(np.median([abs(r["error_rel"]) for r in rows])),
           "points": rows}
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
