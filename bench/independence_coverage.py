"""Coverage of the 95% intervals of the pooled independence baseline, the step-1 excess over it
and its temporal share along the committed sequence (docs/method.md, "The independence
baseline's bias"): the pipeline's (jackknife bias-corrected baseline, basic intervals:
overlap.sequence_intervals) beside the percentile interval of the plug-in and the BCa interval
of the corrected point (bca_interval of the resamples moved by the correction), all from the
same resamples.

Designs, each with a known truth:
- uniform: synthetic traces of 24 requests with uniform loads and no topics, whose truth has a
  closed form (synth.uniform_truth); `--uniform-trials` traces;
- a synthetic run's process (`--process results/traces/<model>/synth/K3/synth.parquet`: the
  generator of its metadata): `--process-trials` traces of its size, the truth from one trace of
  `--truth-scale` times as many requests (its bias-corrected values: noisy, about 1/sqrt(scale)
  of a trace's standard error);
- a trace (`--trace T`): its requests as the population, `--trials` samples of as many requests
  with replacement (the truth: the population's own values).

    .venv/bin/python bench/independence_coverage.py [--trace T ...] [--process P ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specmoe.routing import overlap  # noqa: E402
from specmoe.routing.synth import SynthParams, generate, uniform_truth  # noqa: E402

STATS = ("independent", "excess", "temporal_share")
METHODS = ("pipeline", "percentile", "bca_corrected")


def pieces(tr) -> dict:
    """Per request: layer-mean step-1 intersections and pairs along its committed sequence, its
    [layer, expert] loads and tokens (the units every design resamples), and k."""
    rows, starts, lengths = overlap.committed_sequences(tr)
    sums, pairs = overlap._sequence_sums(tr.experts[rows], starts, lengths, tr.num_experts, 1)
    b = overlap.sequence_baselines(tr, rows, starts, lengths)
    return {"sums": sums.astype(np.float64), "pairs": pairs.astype(np.float64),
            "loads": b["loads"], "tokens": b["tokens"], "within": b["within"], "k": tr.top_k}


def intervals(p: dict, seed: int = 0) -> dict:
    """Each statistic's point and interval by each method, from one set of resamples."""
    k, n = p["k"], p["tokens"].size
    ci = overlap.sequence_intervals(p["sums"], p["pairs"], k, seed=seed, baselines=p)
    per_seq = p["sums"].mean(axis=1)[:, 0]
    w = overlap.request_weights(n, seed=seed)
    step1 = per_seq.sum() / (p["pairs"][:, 0].sum() * k)
    boot1 = (w @ per_seq) / (w @ p["pairs"][:, 0] * k)
    jk1 = (per_seq.sum() - per_seq) / ((p["pairs"][:, 0].sum() - p["pairs"][:, 0]) * k)
    plug, ind_boot = overlap._resampled_independence(w, p["loads"], p["tokens"], k)
    ind_jk = overlap.independence_of(p["loads"].sum(axis=0)[None] - p["loads"],
                                     p["tokens"].sum() - p["tokens"], k)
    ind = ci["independence"]
    share = (step1 - ind) / step1
    out = {"independent": (ind, {"pipeline": (ci["independence_low"], ci["independence_high"])}),
           "excess": (ci["excess"], {"pipeline": (ci["excess_low"], ci["excess_high"])}),
           "temporal_share": (share, {"pipeline": (ci["temporal_share_low"],
                                                   ci["temporal_share_high"])})}
    plain = {"independent": (plug, ind_boot, ind_jk),
             "excess": (step1 - plug, boot1 - ind_boot, jk1 - ind_jk),
             "temporal_share": ((step1 - plug) / step1, (boot1 - ind_boot) / boot1,
                                (jk1 - ind_jk) / jk1)}
    for name, (est, boot, jack) in plain.items():
        point = out[name][0]
        out[name][1]["percentile"] = tuple(np.percentile(boot, [2.5, 97.5]))
        out[name][1]["bca_corrected"] = overlap.bca_interval(boot + point - est, point, jack)
    return out


def truth_of(p: dict) -> dict:
    """The population's own values (the plug-in of all its requests: nothing to correct)."""
    step1 = p["sums"].mean(axis=1)[:, 0].sum() / (p["pairs"][:, 0].sum() * p["k"])
    ind = float(overlap.independence_of(p["loads"].sum(axis=0), p["tokens"].sum(), p["k"]))
    return {"independent": ind, "excess": step1 - ind, "temporal_share": (step1 - ind) / step1}


def coverage(samples, truth: dict) -> dict:
    """Share of samples whose interval covers the truth and holds its own point, and the
    points' mean error, per statistic and method."""
    hit, holds, err, count = {}, {}, {s: [] for s in STATS}, 0
    for res in samples:
        count += 1
        for s, (point, ivs) in res.items():
            err[s].append(point - truth[s])
            for m, (lo, hi) in ivs.items():
                hit[s, m] = hit.get((s, m), 0) + (lo <= truth[s] <= hi)
                holds[s, m] = holds.get((s, m), 0) + (lo <= point <= hi)
    return {"samples": count, "truth": truth,
            **{f"{s}_mean_error": float(np.mean(err[s])) for s in STATS},
            **{f"{s}_{m}_coverage": hit[s, m] / count for s in STATS for m in METHODS},
            **{f"{s}_{m}_holds_point": holds[s, m] / count for s in STATS for m in METHODS}}


def uniform_design(trials: int) -> dict:
    n, k, stick = 32, 4, 0.4
    t = uniform_truth(n, k, stick)
    truth = {"independent": t["independent"], "excess": t["excess"],
             "temporal_share": t["temporal_share"]}
    gen = (intervals(pieces(generate(SynthParams(
        num_experts=n, top_k=k, num_layers=3, k_draft=3, stickiness=stick, requests=24,
        steps=30, accept_prob=0.7, skew=0.0, seed=100 + s)))) for s in range(trials))
    return {"design": f"uniform loads, {n} experts top-{k}, 24 requests", **coverage(gen, truth)}


def process_design(path: Path, trials: int, scale: int) -> dict:
    from specmoe.routing.trace import read_trace

    g = read_trace(path).meta["generator"]
    g = {key: v for key, v in g.items() if key in SynthParams.__dataclass_fields__}
    big = intervals(pieces(generate(SynthParams(**{**g, "requests": g["requests"] * scale,
                                                   "seed": 999}))))
    truth = {s: big[s][0] for s in STATS}
    gen = (intervals(pieces(generate(SynthParams(**{**g, "seed": 100 + s}))))
           for s in range(trials))
    return {"design": f"{path}'s process, {g['requests']} requests", **coverage(gen, truth)}


def population_design(path: Path, trials: int) -> dict:
    from specmoe.routing.trace import read_trace

    p = pieces(read_trace(path))
    n = p["tokens"].size
    rng = np.random.default_rng(0)

    def gen():
        for t in range(trials):
            idx = rng.integers(0, n, n)
            yield intervals({**{key: p[key][idx] for key in ("sums", "pairs", "loads", "tokens",
                                                              "within")}, "k": p["k"]}, seed=t)

    return {"design": f"{path} as the population ({n} requests)", **coverage(gen(), truth_of(p))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uniform-trials", type=int, default=200)
    ap.add_argument("--process", type=Path, action="append", default=[])
    ap.add_argument("--process-trials", type=int, default=100)
    ap.add_argument("--truth-scale", type=int, default=8)
    ap.add_argument("--trace", type=Path, action="append", default=[])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = [uniform_design(a.uniform_trials)] if a.uniform_trials else []
    rows += [process_design(p, a.process_trials, a.truth_scale) for p in a.process]
    rows += [population_design(p, a.trials) for p in a.trace]
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['design']} ({r['samples']} samples)")
        for s in STATS:
            print(f"  {s:<15} truth {r['truth'][s]:.5f}, mean error {r[f'{s}_mean_error']:+.1e}; "
                  "coverage (holds its point): " + ", ".join(
                      f"{m} {r[f'{s}_{m}_coverage']:.3f} ({r[f'{s}_{m}_holds_point']:.2f})"
                      for m in METHODS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
