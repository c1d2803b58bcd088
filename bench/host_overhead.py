"""Benchmark: the engine's host-side work per sequence of a decode step, with and without
speculative decoding (the step model's `host_seq_us` and `verify_seq_us`, docs/method.md).

vLLM (its CPU build, here) serves a model whose forward pass costs next to nothing (the pipeline's
tiny target: 4 layers of width 128), so a step's time is the engine's own work: scheduling, input
preparation, sampling and output processing. B sequences decode together for a fixed number of
tokens; the time of a step at B is the time of a long run minus a short one over the steps between
them (prefill and start-up cancel), and its slope over B is the work per sequence. With SD (the
same model drafting for itself, K = 3, so drafts are cheap and mostly accepted) a step is one
verification; the difference of the two slopes is what SD adds per sequence and verification.

What transfers to a GPU: the Python-side work per sequence (the scheduler, the input batch, the
rejection sampler's bookkeeping), which a GPU server's CPU runs likewise, faster by its cores'
speed; this machine's value is an upper bound. What does not: the tiny model's own per-token
compute (here in the slope, on a GPU in the kernels), and any overlap of host work with a GPU step.

    flock /tmp/specmoe-heavy.lock python bench/host_overhead.py \
        [--model /work/runs/base/results/models/tiny-fine] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from specmoe.engine import engine_kwargs, generate, run_in_child
from specmoe.prompts import load, schedule

BATCHES = (1, 4, 16, 32)


def step_seconds(model: str, k: int | None, batch: int, short: int, long: int) -> float:
    """Seconds of one engine step with `batch` sequences (long run minus short run)."""
    texts = [p.text for p in schedule(load("builtin:v1", ["tinybench"]), batch)]
    engine = engine_kwargs(model, model if k else None, k, dtype="float32", kv_cache_mib=512,
                           max_num_seqs=max(BATCHES))
    runs = [run_in_child(generate, texts, n, engine) for n in (short, long)]
    steps = []
    for n, r in zip((short, long), runs):
        drafts = (r["spec"] or {}).get("num_drafts")
        steps.append(drafts / batch if k and drafts else n)
    return (runs[1]["generate_s"] - runs[0]["generate_s"]) / (steps[1] - steps[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/work/runs/base/results/models/tiny-fine")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--long", type=int, default=72)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {"batches": list(BATCHES)}
    for mode, k in (("plain", None), ("sd", a.k)):
        t = [step_seconds(a.model, k, b, a.short, a.long) for b in BATCHES]
        slope, icept = np.polyfit(BATCHES, t, 1)
        out[mode] = {"step_us": [round(x * 1e6, 1) for x in t],
                     "per_seq_us": float(slope * 1e6), "per_step_us": float(icept * 1e6)}
    out["sd_extra_per_seq_us"] = out["sd"]["per_seq_us"] - out["plain"]["per_seq_us"]
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
