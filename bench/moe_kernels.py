"""The step model's MoE layer against public fused-MoE kernel times (data/moe_kernel_times.csv:
vLLM's and SGLang's benchmark_moe tables, random routing, one layer, M tokens), as tokens per
expert M k / N grow: the per-expert GEMMs leave the bandwidth-bound regime where the kernel time
grows past what the unique experts' bytes explain.

Per row: the unique experts of M tokens routed uniformly (the benchmark's random gating), the
model's MoE time of one layer (stepmodel.step_times' moe class over its layers, at the fitted
parameters), and the public time; and the verification's MoE growth at K = 3, T(4M) / T(M), for
the model and the public table where both M and 4M are printed (the MoE part of 1 / TE at
batch M). Nothing here is fitted.

    python bench/moe_kernels.py [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
from importlib import resources

import numpy as np

from specmoe.cost import stepmodel
from specmoe.cost.costmodel import Hardware, ModelDims
from specmoe.routing.unique import uniform_unique

DATA = resources.files("specmoe") / "data"


def rows() -> list[dict]:
    with open(str(DATA / "moe_kernel_times.csv"), newline="") as f:
        return list(csv.DictReader(f))


def layer(r: dict) -> tuple[ModelDims, Hardware]:
    """One MoE layer of the row's shape on one GPU (its share of each expert: n_per_gpu)."""
    dims = ModelDims(hidden=int(r["hidden"]), expert_intermediate=int(r["n_per_gpu"]),
                     num_experts=int(r["num_experts"]), top_k=int(r["top_k"]),
                     attention_params=1.0, dtype=r["dtype"])
    peak = float(r["gpu_peak_tflops"]) * 1e12
    hw = Hardware(name=r["gpu"], hbm_bandwidth=float(r["gpu_hbm_gbs"]) * 1e9,
                  peak_flops={"bf16": peak if r["dtype"] == "bf16" else peak / 2,
                              "fp8": peak if r["dtype"] == "fp8" else 2 * peak})
    return dims, hw


def model_us(r: dict, m: int, p: stepmodel.StepParams) -> tuple[float, float]:
    dims, hw = layer(r)
    u = float(uniform_unique(dims.num_experts, dims.top_k, m))
    return 1e6 * stepmodel.step_times(dims, hw, m, 1, u, p)["moe"], u


def score(p: stepmodel.StepParams | None = None) -> list[dict]:
    p = p or stepmodel.fitted()
    out = []
    table = rows()
    by = {(r["shape"], r["gpu"], int(r["m_tokens"])): float(r["kernel_us"]) for r in table}
    for r in table:
        m = int(r["m_tokens"])
        t_model, u = model_us(r, m, p)
        dims, hw = layer(r)
        public = float(r["kernel_us"])
        four = by.get((r["shape"], r["gpu"], 4 * m))
        out.append({"shape": r["shape"], "gpu": r["gpu"], "m": m,
                    "tokens_per_expert": round(m * dims.top_k / dims.num_experts, 3),
                    "unique": round(u, 2), "public_us": public, "model_us": round(t_model, 2),
                    "model_over_public": round(t_model / public, 3),
                    "bandwidth_share": round(u * dims.c_expert / hw.hbm_bandwidth * 1e6
                                             / public, 3),
                    "verify_growth_public": None if four is None else round(four / public, 3),
                    "verify_growth_model": None if four is None else round(
                        model_us(r, 4 * m, p)[0] / t_model, 3)})
    return out


def text(res: list[dict]) -> str:
    lines = [f"{'shape':20} {'gpu':15} {'M':>5} {'tok/exp':>7} {'public us':>9} {'model us':>9} "
             f"{'model/pub':>9} {'bw share':>8} {'T(4M)/T(M) pub':>14} {'model':>6}"]
    for r in res:
        g = ("" if r["verify_growth_public"] is None else
             f"{r['verify_growth_public']:14.2f} {r['verify_growth_model']:6.2f}")
        lines.append(f"{r['shape']:20} {r['gpu']:15} {r['m']:5d} {r['tokens_per_expert']:7.2f} "
                     f"{r['public_us']:9.1f} {r['model_us']:9.1f} {r['model_over_public']:9.2f} "
                     f"{r['bandwidth_share']:8.2f} {g}")
    ratios = np.array([r["model_over_public"] for r in res])
    lines.append(f"model over public: median {np.median(ratios):.2f}, range "
                 f"{ratios.min():.2f}-{ratios.max():.2f} ({len(res)} rows)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = score()
    print(json.dumps(res, indent=1) if a.json else text(res))


if __name__ == "__main__":
    main()
