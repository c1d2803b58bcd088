"""Benchmark: overlap by distance + unique experts + skewed IPF on a large synthetic trace.

Builds (and caches) a synthetic trace of 1,000,000 tokens, 48 layers, top-8 of 128 experts, K = 3,
and times, each in a fresh child process so that peak memory is the analysis's own:
  analysis  overlap by distance, loads, window unions (unique experts) and the skewed IPF
            prediction (specmoe.routing.overlap.window_stats + specmoe.routing.ipf.predict_skewed) on the trace in
            memory; the Parquet read before it is timed and reported apart, and so is numba's
            once-per-process load of its compiled code;
  memread   np.load of the same expert ids as a bare .npy file (from the page cache);
  python    the plain-Python reference (sets and loops) on a 20,000-token slice, scaled per token.
ratio_to_memread = analysis / memread; ratio_to_memread_incl_parquet adds the Parquet read.

    python bench/analysis.py [--tokens N] [--layers L] [--json]

With --json the last line is {"speedup_vs_python": ..., "ratio_to_memread": ..., ...}.
Targets: >= 50x the plain-Python reference, within 4x of the bare read, peak memory <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache"


def build(tokens: int, layers: int, k_draft: int, cache: Path) -> tuple[Path, Path]:
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace

    windows = tokens // (k_draft + 1)
    stem = cache / f"trace_{tokens}_{layers}_{k_draft}"
    pq_path, npy_path = stem.with_suffix(".parquet"), stem.with_suffix(".npy")
    if pq_path.exists() and npy_path.exists():
        return pq_path, npy_path
    cache.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    tr = generate(SynthParams(num_experts=128, top_k=8, num_layers=layers, k_draft=k_draft,
                              skew=0.6, stickiness=0.45, requests=windows // 250, steps=250,
                              seed=0))
    write_trace(pq_path, tr)
    np.save(npy_path, tr.experts)
    print(f"built {len(tr):,} x {layers} x 8 trace in {time.perf_counter() - t:.0f} s",
          file=sys.stderr)
    return pq_path, npy_path


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _analysis(pq_path: str, q) -> None:
    from specmoe.routing import ipf
    from specmoe.routing.overlap import window_stats
    from specmoe.routing.trace import read_trace

    t0 = time.perf_counter()
    tr = read_trace(pq_path)
    t1 = time.perf_counter()
    # numba loads its compiled code from disk on a process's first call (~0.3 s, once per
    # process): take that on a tiny slice and report it apart.
    small = type(tr)(experts=tr.experts[:400], columns={k: v[:400] for k, v in tr.columns.items()},
                     num_experts=tr.num_experts, k_draft=tr.k_draft)
    window_stats(small, shuffle_null=False)
    jit_s = time.perf_counter() - t1
    t1 = time.perf_counter()
    ws = window_stats(tr, shuffle_null=False)
    t2 = time.perf_counter()
    pred = ipf.predict_skewed(ws.q, ws.overlap)
    t3 = time.perf_counter()
    q.put({"read_s": t1 - t0 - jit_s, "jit_load_s": jit_s, "window_pass_s": t2 - t1,
           "ipf_s": t3 - t2, "compute_s": t3 - t1, "total_s": t3 - t1 + (t1 - t0 - jit_s),
           "peak_mib": _peak_mib(), "tokens": len(tr), "step1": float(ws.overlap[:, 0].mean()),
           "unique": float(ws.unique.mean()), "ipf_unique": pred["unique"]})


def _warm(pq_path: str, q) -> None:
    """Compile (numba caches to disk) on a small slice, so timing excludes JIT."""
    from specmoe.routing.overlap import window_stats
    from specmoe.routing.trace import read_trace

    tr = read_trace(pq_path)
    tr.experts = tr.experts[:4000]
    tr.columns = {k: v[:4000] for k, v in tr.columns.items()}
    window_stats(tr, shuffle_null=False)
    q.put({})


def _memread(npy_path: str, q) -> None:
    t0 = time.perf_counter()
    a = np.load(npy_path)
    q.put({"total_s": time.perf_counter() - t0, "peak_mib": _peak_mib(), "shape": a.shape})


def _python(pq_path: str, slice_tokens: int, q) -> None:
    from specmoe.routing.overlap import reference_stats
    from specmoe.routing.trace import read_trace

    tr = read_trace(pq_path)
    starts, lengths = tr.windows()
    keep = np.searchsorted(starts, slice_tokens)
    starts, lengths = starts[:keep], lengths[:keep]
    n = int(lengths.sum())
    t0 = time.perf_counter()
    reference_stats(tr.experts, starts, lengths, tr.k_draft, tr.num_experts)
    q.put({"slice_tokens": n, "slice_s": time.perf_counter() - t0})


def child(fn, *args) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=fn, args=(*args, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--draft-length", dest="k_draft", type=int, default=3,
                    help="the draft length K")
    ap.add_argument("--python-slice", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3, help="best of N for analysis and memread")
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    pq_path, npy_path = build(a.tokens, a.layers, a.k_draft, a.cache)
    child(_warm, str(pq_path))
    analysis = min((child(_analysis, str(pq_path)) for _ in range(a.repeats)),
                   key=lambda r: r["total_s"])
    memread = min((child(_memread, str(npy_path)) for _ in range(a.repeats)),
                  key=lambda r: r["total_s"])
    py = child(_python, str(pq_path), a.python_slice)
    python_s = py["slice_s"] / py["slice_tokens"] * analysis["tokens"]
    result = {
        "speedup_vs_python": python_s / analysis["compute_s"],
        "ratio_to_memread": analysis["compute_s"] / memread["total_s"],
        "ratio_to_memread_incl_parquet": analysis["total_s"] / memread["total_s"],
        "analysis_s": analysis["compute_s"],
        "parquet_read_s": analysis["read_s"],
        "jit_load_s": analysis["jit_load_s"],
        "window_pass_s": analysis["window_pass_s"],
        "ipf_s": analysis["ipf_s"],
        "memread_s": memread["total_s"],
        "python_scaled_s": python_s,
        "peak_mib": analysis["peak_mib"],
        "tokens": analysis["tokens"],
        "layers": a.layers,
        "step1_overlap": analysis["step1"],
        "unique": analysis["unique"],
        "ipf_unique": analysis["ipf_unique"],
    }
    if a.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>18}: {v:.4g}" if isinstance(v, float) else f"{k:>18}: {v}")


if __name__ == "__main__":
    main()
