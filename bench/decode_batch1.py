"""The step model's decode step at batch 1 against public batch-1 decode times without SD of
configurations outside the scored public rows (src/specmoe/data/decode_batch1.csv, each with its
quote and address). A published time per token includes the engine's scheduling (and, where the
source times whole requests, the prefill): an upper bound on the decode step, so the model's
step should lie at or below it, and well below it says the step misses a fixed cost.

    python bench/decode_batch1.py [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specmoe.cost import predictor, stepmodel, steptables
from specmoe.cost.hfconfig import dims_from_config

REPO = Path(__file__).resolve().parents[1]
HARDWARE_FILE = str(REPO / "src" / "specmoe" / "data" / "public_sd_moe_hardware.yaml")


def check() -> list[dict]:
    p = stepmodel.fitted()
    out = []
    for r in steptables.decode_batch1():
        fmt = None if r["precision"] == "auto" else r["precision"]
        dims = dims_from_config(REPO / r["config"], dtype=fmt, tp=int(r["tp"]))
        hw, _ = predictor.hardware(r["hardware"], None if r["hardware"] in
                                   predictor.shipped_gpus() else HARDWARE_FILE)
        t = stepmodel.step_times(dims, hw, 1, 1, stepmodel.unique_decode(dims, 1), p)
        model = 1e3 * sum(t.values())
        launches = 1e3 * sum(stepmodel.kernels(dims).values()) * p.node_us * 1e-6
        public = float(r["decode_ms_per_token"])
        out.append({"id": r["id"], "model": r["model"], "hardware": r["hardware"],
                    "tp": int(r["tp"]), "engine": r["engine"], "public_ms": public,
                    "model_ms": round(model, 3), "launch_ms": round(launches, 3),
                    "kernels_per_layer": round(sum(stepmodel.kernels(dims).values())
                                               / dims.num_layers, 1),
                    "public_over_model": round(public / model, 2), "source": r["source_url"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    rows = check()
    if ap.parse_args().json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'id':16} {'model':14} {'gpu':6} {'tp':>2} {'public ms':>9} {'model ms':>8} "
          f"{'launch ms':>9} {'k/layer':>7} {'ratio':>5}")
    for r in rows:
        print(f"{r['id']:16} {r['model'][:14]:14} {r['hardware']:6} {r['tp']:2d} "
              f"{r['public_ms']:9.2f} {r['model_ms']:8.2f} {r['launch_ms']:9.2f} "
              f"{r['kernels_per_layer']:7.1f} {r['public_over_model']:5.2f}")


if __name__ == "__main__":
    main()
