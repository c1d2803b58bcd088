"""Benchmark: decode throughput with and without routing capture, in one run.

Trains nothing: it uses the pipeline's tiny models (run the default pipeline first, or pass
--target/--drafter). Each engine runs in its own process, one after the other, on the same prompts
with SD (draft_model, K) and greedy fixed-length outputs; the order alternates over --repeats and the
best throughput of each mode is compared.

    python bench/capture_overhead.py [--target results/models/tiny-fine] [--json]

With --json the last line is {"overhead_pct": ..., ...}. Target (issue "Routing capture"): <= 10%.
"""

from __future__ import annotations

import argparse
import json
import tempfile

from specmoe.capture import capture_generate
from specmoe.engine import engine_kwargs, generate, run_in_child
from specmoe.prompts import load, schedule


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="results/models/tiny-fine")
    ap.add_argument("--drafter", default="results/models/tiny-drafter")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    texts = [p.text for p in schedule(load("builtin:v1", ["tinybench"]), a.prompts)]
    engine = engine_kwargs(a.target, a.drafter, a.k, dtype="float32", kv_cache_mib=1024,
                           max_num_seqs=16)
    tokens = a.prompts * a.max_tokens
    best = {"plain": 0.0, "capture": 0.0}
    for r in range(a.repeats):
        for mode in (("plain", "capture") if r % 2 == 0 else ("capture", "plain")):
            if mode == "plain":
                res = run_in_child(generate, texts, a.max_tokens, engine)
            else:
                with tempfile.TemporaryDirectory() as d:
                    res = run_in_child(capture_generate, texts, a.max_tokens, engine, d)
            best[mode] = max(best[mode], tokens / res["generate_s"])
    out = {"overhead_pct": 100 * (best["plain"] / best["capture"] - 1),
           "tokens_per_s_plain": best["plain"], "tokens_per_s_capture": best["capture"],
           "prompts": a.prompts, "max_tokens": a.max_tokens, "k": a.k, "repeats": a.repeats}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>22}: {v:.4g}" if isinstance(v, float) else f"{k:>22}: {v}")


if __name__ == "__main__":
    main()
