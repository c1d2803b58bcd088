"""Coverage of the sequence decay's 95% intervals (BCa, the pipeline's, and the plain percentile
interval from the same resamples) where a few requests loop (docs/method.md, "Heavy tails").

Two designs, each a population of requests whose sequence decay (overlap along the committed
sequence at d = 1 minus d = 8, ratio of sums over requests) is known, sampled `--trials` times
(112 requests with replacement, as the default run captures), each sample's intervals computed by
`overlap.sequence_intervals`:
- synthetic: a trained-like request has overlap 0.25 + 0.08 exp(-(d - 1) / 3) plus a request
  offset (sd 0.03) and noise (sd 0.01); a looping request (period 2: its tokens alternate) has
  overlap 0.3 at odd d and 0.9 at even d. `--loop-share` of the population loops (default 2/112,
  an earlier default run's tiny-fine, 2 of 112 requests, on which docs/method.md's coverage
  figures were measured; the current default's loop in 9 of 112);
- a trace (`--trace results/traces/.../<dataset>.parquet`): the run's own requests are the
  population (resampling a run as if it were the world: what its intervals would cover if the
  run were drawn again).

    .venv/bin/python bench/bca_coverage.py [--trials 1000] [--boot 2000] [--trace T] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specmoe.routing import overlap  # noqa: E402

D, K, LENGTH, REQUESTS = 8, 8, 48, 112


def synthetic_population(size: int, loop_share: float, seed: int = 0):
    """Per request: layer-mean intersection sums [request, 1, d] and pair counts [request, d]
    (as overlap._sequence_sums gives them), and which requests loop."""
    rng = np.random.default_rng(seed)
    d = np.arange(1, D + 1)
    o = (0.25 + 0.08 * np.exp(-(d - 1) / 3))[None, :] + rng.normal(0, 0.03, (size, 1)) \
        + rng.normal(0, 0.01, (size, D))
    loop = np.zeros(size, bool)
    loop[:round(loop_share * size)] = True
    o[loop] = np.where(d % 2 == 1, 0.30, 0.90)
    pairs = np.repeat(np.clip(LENGTH - d, 0, None)[None, :], size, 0).astype(float)
    return (o * pairs * K)[:, None, :], pairs, loop


def trace_population(path: Path):
    from specmoe.routing import trace as tr_mod

    tr = tr_mod.read_trace(path)
    rows, starts, lengths = overlap.committed_sequences(tr)
    sums, pairs = overlap._sequence_sums(tr.experts[rows], starts, lengths, tr.num_experts, D)
    loops = overlap.looping_requests(tr)
    req = tr.columns["request"][rows[starts]].astype(np.int64)
    return sums, pairs.astype(float), np.isin(req, loops), tr.top_k


def decay(sums: np.ndarray, pairs: np.ndarray, k: int) -> float:
    per = sums.mean(axis=1).sum(axis=0) / (pairs.sum(axis=0) * k)
    return float(per[0] - per[-1])


def coverage(sums, pairs, k: int, trials: int, n_boot: int, n: int = REQUESTS,
             seed: int = 0) -> dict:
    """Share of `trials` samples of n requests (with replacement) whose BCa and percentile 95%
    intervals of the sequence decay cover the population's decay."""
    truth = decay(sums, pairs, k)
    rng = np.random.default_rng(seed)
    hit = {"bca": 0, "percentile": 0}
    width = {"bca": [], "percentile": []}
    no_loop = 0
    for t in range(trials):
        idx = rng.integers(0, sums.shape[0], n)
        s, p = sums[idx], pairs[idx]
        r = overlap.sequence_intervals(s, p, k, n_boot=n_boot, seed=t)
        # the percentile interval from the same resamples (sequence_intervals' seed and draws)
        w = np.random.default_rng(t).multinomial(n, np.full(n, 1.0 / n), size=n_boot)
        with np.errstate(invalid="ignore", divide="ignore"):
            b = (w @ s.mean(axis=1)) / (w @ p * k)
        lo, hi = np.nanpercentile(b[:, 0] - b[:, -1], [2.5, 97.5])
        for name, (a, z) in (("bca", (r["decay_low"], r["decay_high"])),
                             ("percentile", (lo, hi))):
            hit[name] += a <= truth <= z
            width[name].append(z - a)
    return {"truth": truth, "trials": trials, "boot": n_boot, "requests": n,
            **{f"{m}_coverage": hit[m] / trials for m in hit},
            **{f"{m}_median_width": float(np.median(width[m])) for m in width}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--loop-share", type=float, nargs="+", default=[0.0, 2 / 112, 0.05])
    ap.add_argument("--trace", type=Path, action="append", default=[])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for share in a.loop_share:
        sums, pairs, loop = synthetic_population(10_000, share)
        rows.append({"design": f"synthetic, {100 * share:.1f}% of requests loop",
                     **coverage(sums, pairs, K, a.trials, a.boot)})
    for path in a.trace:
        sums, pairs, loop, k = trace_population(path)
        rows.append({"design": f"{path} as the population ({int(loop.sum())} of {loop.size} "
                               "requests loop)", **coverage(sums, pairs, k, a.trials, a.boot)})
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'design':<70} {'truth':>7} {'BCa':>6} {'pct':>6}  median width BCa / pct")
    for r in rows:
        print(f"{r['design']:<70} {r['truth']:>7.4f} {r['bca_coverage']:>6.3f} "
              f"{r['percentile_coverage']:>6.3f}  {r['bca_median_width']:.4f} / "
              f"{r['percentile_median_width']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
