"""Coverage of the request bootstrap's 95% intervals near the floor of requests
(routing.bootstrap.MIN_REQUESTS): the share of simulated traces whose interval leaves out the
truth, for the pipeline's intervals (each half-width widened about its point by
bootstrap.small_sample_factor(n) = sqrt(n / (n - 1)) t_{n-1} / z: bootstrap.widen) and for the
plain bootstrap's (the same resamples, unwidened: the factor held at 1).

Design: routing with no locality at all (each token's k = 2 of N = 16 experts drawn uniformly
and independently, one layer, K = 3, 10 steps a request, each step's accepted count uniform on
0..K), so the truth is known: overlap k/N at every distance inside windows, 0 for the decay
inside windows (d = 1 to K), for step 1 above the within-window shuffle null, for the step-1
excess over independence along the committed sequence and for the sequence decay (d = 1 to 8).
Their intervals: percentile (window step 1, window decay, above shuffle), basic (sequence
excess, against the bias-corrected baseline) and BCa (sequence decay), as the overlap stage
builds them (overlap.window_intervals, overlap.trace_sequence_stats). Seeded: trace t of a size
is drawn from seed 1000 * requests + t; every run prints the same table.

A widening through the resamples' weights instead (Dirichlet weights spread the factor times as
far, in overlap.request_weights) covered as well but moved the convex independence baseline's
resamples c^2 times as far above its plug-in, and the basic intervals measured against it off
their bias-corrected points (tests/test_routing_fixes.py's
test_paired_differences_against_the_baseline_cover_the_truth: 0.14 of the width off, where
0.05 is asked): the pipeline widens each interval about its point where it is built.

    .venv/bin/python bench/interval_coverage.py [--traces 300] [--requests 10 12 20 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specmoe.routing import bootstrap, overlap  # noqa: E402
from specmoe.routing.trace import Trace, status_for  # noqa: E402

STATISTICS = ("window step 1", "window decay", "above shuffle", "sequence excess",
              "sequence decay")
METHODS = {"pipeline": "pipeline (widened)", "plain": "plain bootstrap (unwidened)"}


def iid_trace(requests: int, seed: int, steps: int = 10, k_draft: int = 3, n: int = 16,
              k: int = 2) -> Trace:
    """A trace of routing without locality: k of n experts uniformly per token, one layer."""
    rng = np.random.default_rng(seed)
    acc = rng.integers(0, k_draft + 1, requests * steps)
    req = np.repeat(np.arange(requests), steps * (k_draft + 1))
    step = np.tile(np.repeat(np.arange(steps), k_draft + 1), requests)
    pos = np.tile(np.arange(k_draft + 1), requests * steps)
    accepted = np.repeat(acc, k_draft + 1)
    rows = req.size
    experts = np.argsort(rng.random((rows, n)), axis=1)[:, :k].reshape(rows, 1, k)
    cols = {"request": req.astype(np.int32), "step": step.astype(np.int32),
            "position": pos.astype(np.int8), "accepted": accepted.astype(np.int8),
            "status": status_for(pos, accepted), "token_id": np.arange(rows, dtype=np.int32),
            "n_drafts": np.full(rows, k_draft, np.int8)}
    return Trace(experts=experts.astype(np.uint8), columns=cols, num_experts=n, k_draft=k_draft)


def misses(tr: Trace, statistics=STATISTICS, n: int = 16, k: int = 2) -> np.ndarray:
    """Per statistic (of STATISTICS): does its interval leave out the truth?"""
    out = []
    if any(s.startswith("sequence") for s in statistics):
        s = overlap.trace_sequence_stats(tr)[2]
    if any(not s_.startswith("sequence") for s_ in statistics):
        w = overlap.window_intervals(tr, shuffle_null=True)
    for name in statistics:
        lo, hi, truth = {
            "window step 1": lambda: (w["overlap_low"][0], w["overlap_high"][0], k / n),
            "window decay": lambda: (w["decay_low"], w["decay_high"], 0.0),
            "above shuffle": lambda: (w["above_shuffle_low"], w["above_shuffle_high"], 0.0),
            "sequence excess": lambda: (s["excess_low"], s["excess_high"], 0.0),
            "sequence decay": lambda: (s["decay_low"], s["decay_high"], 0.0)}[name]()
        out.append(not lo <= truth <= hi)
    return np.array(out)


def miss_rates(requests: int, traces: int, method: str, statistics=STATISTICS) -> np.ndarray:
    """The share of `traces` traces of `requests` requests whose interval of each statistic
    leaves out the truth, the intervals built by `method` (METHODS): the pipeline's, or its
    resamples' own (bootstrap.small_sample_factor held at 1)."""
    factor = bootstrap.small_sample_factor
    if method == "plain":
        bootstrap.small_sample_factor = lambda n, level=None: 1.0
    try:
        hits = np.array([misses(iid_trace(requests, 1000 * requests + t), statistics)
                         for t in range(traces)])
    finally:
        bootstrap.small_sample_factor = factor
    return hits.mean(axis=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=300)
    ap.add_argument("--requests", type=int, nargs="+", default=[10, 12, 20, 40])
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    a = ap.parse_args()
    table = {m: {n: miss_rates(n, a.traces, m).tolist() for n in a.requests} for m in METHODS}
    if a.json:
        print(json.dumps({"statistics": STATISTICS, "traces": a.traces, "miss_rates": table}))
        return 0
    se = 100 * np.sqrt(0.05 * 0.95 / a.traces)
    print(f"share of nominal-95% intervals leaving out the truth, {a.traces} traces each "
          f"(SE about {se:.1f} points at 5%)")
    print(f"{'':32s}{'requests':>9s}" + "".join(f"{s:>17s}" for s in STATISTICS))
    for m, label in METHODS.items():
        for n in a.requests:
            print(f"{label:32s}{n:9d}" + "".join(f"{100 * x:16.1f}%" for x in table[m][n]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
