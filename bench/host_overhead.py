"""Benchmark: the engine's host-side work per sequence of a decode step, with and without
speculative decoding (the step model's `host_seq_us` and `verify_seq_us`, docs/method.md).

vLLM (its CPU build, here) serves a model whose forward pass costs next to nothing (the pipeline's
tiny target: 4 layers of width 128), so a step's time is mostly the engine's own work: scheduling,
input preparation, sampling and output processing. One engine per mode stays up for the whole
measurement (no start-up in any timing): for each batch size B it generates a short and a long
completion for B prompts, `repeats` times in turn, and a step's time is the difference of the two
over the difference of their steps (prefill cancels). The steps are counted, not assumed: plain
decoding takes one step per token; with SD (the tiny drafter, K = 3) the engine's own counter of
drafts, read before and after each call, gives the verification steps. The slope of a step's time
over B is the work per sequence; the difference of the two slopes is what SD adds per sequence
and verification (its drafter's K passes included).

What transfers to a GPU: the Python-side work per sequence (the scheduler, the input batch, the
rejection sampler's bookkeeping), which a GPU server's CPU runs likewise, faster by its cores'
speed; the tiny model's own compute per token is in these slopes too (on a GPU it is in the
kernels), so each is an upper bound of the host work. What does not: any overlap of host work
with a GPU step (vLLM's asynchronous scheduling hides part of it there).

    flock /tmp/specmoe-heavy.lock python bench/host_overhead.py \
        [--model RUN/results/models/tiny-fine --drafter RUN/results/models/tiny-drafter] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from specmoe.runtime.engine import _spec_metrics, engine_kwargs, open_llm, run_in_child
from specmoe.sources.prompts import load, schedule

BATCHES = (1, 4, 16, 32)


def measure(engine: dict, sd: bool, short: int, long: int, repeats: int) -> dict:
    """Seconds per engine step at each batch size (one engine, kept up; run in a child)."""
    from vllm import SamplingParams

    prompts = load("builtin:v1", ["tinybench"])
    out = {}
    with open_llm(engine) as llm:
        def run(texts, n):
            params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
            before = _spec_metrics(llm).get("num_drafts", 0)
            t0 = time.perf_counter()
            llm.generate(texts, params, use_tqdm=False)
            dt = time.perf_counter() - t0
            drafts = _spec_metrics(llm).get("num_drafts", 0) - before
            return dt, (drafts / len(texts) if sd else n)

        run([p.text for p in schedule(prompts, 4)], long)  # warm-up: first calls are slower
        for b in BATCHES:
            texts = [p.text for p in schedule(prompts, b)]
            per_step = []
            for _ in range(repeats):
                (t_s, n_s), (t_l, n_l) = run(texts, short), run(texts, long)
                per_step.append((t_l - t_s) / (n_l - n_s))
            out[b] = per_step
    return out


def fit(per_step: dict) -> dict:
    batches = sorted(per_step)
    med = [statistics.median(per_step[b]) for b in batches]
    slope, icept = np.polyfit(batches, med, 1)
    return {"step_us": [round(x * 1e6, 1) for x in med],
            "spread_us": [round((max(per_step[b]) - min(per_step[b])) * 1e6, 1)
                          for b in batches],
            "per_seq_us": round(float(slope * 1e6), 2), "per_step_us": round(float(icept * 1e6), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="results/models/tiny-fine")
    ap.add_argument("--drafter", default="results/models/tiny-drafter")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--long", type=int, default=112)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {"batches": list(BATCHES), "short": a.short, "long": a.long, "repeats": a.repeats}
    for mode, drafter in (("plain", None), ("sd", a.drafter)):
        engine = engine_kwargs(a.model, drafter, a.k if drafter else None, dtype="float32",
                               kv_cache_mib=512, max_num_seqs=max(BATCHES))
        out[mode] = fit(run_in_child(measure, engine, drafter is not None, a.short, a.long,
                                     a.repeats))
    out["sd_extra_per_seq_us"] = round(out["sd"]["per_seq_us"] - out["plain"]["per_seq_us"], 2)
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
