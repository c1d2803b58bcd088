"""The study's published speedup shapes (published/speedup_shapes.csv: Mixtral-8x7B concave, the
fine-grained models' peak at batch 1), scored and never fitted: each curve drawn as `specmoe
predict` draws it (every uncertain input, the leave-one-model-out fits, K = 3 at the study's
schedule of batch sizes, the model's own published overlaps or its granularity's prior): the
shape predict states (decided by the 95% intervals of the draws' speedup ratios between batch
sizes, by the rule that names the measured shapes: stepmodel.draw_shape, else "undecided") and
each shape's share of the drawn curves (a curve with a TE at a clip bound counts toward none:
stepmodel.CLIPPED); P(published) is the share with the published shape.

    python bench/study_shapes.py [--json] [--draws N] [--models Mixtral-8x7B,...]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from specmoe.cost import stepmodel


def score(draws: int = stepmodel.DRAWS, models: list[str] | None = None) -> list[dict]:
    cal = stepmodel.calibration()
    out = []
    for r in stepmodel.shape_rows():
        if models and r["model"] not in models:
            continue
        overlaps, source = stepmodel.study_overlaps(r["dims"], 3, r["model"])
        res = stepmodel.predict(r["dims"], r["hw"], 3, r["method"], r["batches"], cal.params,
                                cal.te_rmse, overlaps, stepmodel.tau_prior(3),
                                fits=cal.lomo_fits, draws=draws)
        shares = res["shape_shares"]
        out.append({"model": r["model"], "precision": r["precision"], "tp": r["tp"],
                    "gpu": r["gpu"], "method": r["method"], "published": r["published"],
                    "rule_made": r["rule_made"], "overlaps": source,
                    "predicted": res["shape"],
                    "p_published": round(float(shares.get(r["published"], 0.0)), 3),
                    "decided_right": res["shape"] == r["published"],
                    "shape_shares": {k: round(float(v), 3) for k, v in shares.items()},
                    "batches": r["batches"],
                    "speedup_median_over_tau": [round(float(x), 3) for x in np.asarray(
                        res["speedup"]) / float(np.mean(stepmodel.tau_prior(3)))]})
    return out


def text(rows: list[dict]) -> str:
    lines = [f"{'model':14} {'published':18} {'predicted':18} {'P(published)':>12}  shares"]
    for r in rows:
        mark = " (the study's N/k rule)" if r["rule_made"] else ""
        lines.append(f"{r['model']:14} {r['published']:18} {r['predicted']:18} "
                     f"{r['p_published']:12.2f}  " + ", ".join(
                         f"{k} {v:.2f}" for k, v in sorted(r["shape_shares"].items(),
                                                           key=lambda kv: -kv[1])) + mark)
    right = sum(r["decided_right"] for r in rows)
    lines.append(f"decided right: {right} of {len(rows)}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--draws", type=int, default=stepmodel.DRAWS)
    ap.add_argument("--models", help="comma-separated study models (default: every shape)")
    a = ap.parse_args()
    rows = score(a.draws, a.models.split(",") if a.models else None)
    print(json.dumps(rows, indent=1) if a.json else text(rows))


if __name__ == "__main__":
    main()
