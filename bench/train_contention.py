"""Training beside a busy process: tiny-fine's training steps per second alone and beside one
CPU-bound process (`python -c 'while True: pass'`), under libgomp's default wait policy ("old")
and under the policy specmoe.runtime.tiny applies to training ("new"), side by side in one run.

Each measurement is a fresh interpreter (OpenMP reads its settings when torch loads) training
`--steps` steps of tiny-fine's shape (config.yaml's model and tiny.train settings) on seeded
random tokens with specmoe.runtime.tiny.train, then saving the checkpoint; the sha256 of every
saved model.safetensors must be equal (the policy must not change the weights). Settings and
conditions are interleaved, `--repeats` rounds; the table gives each one's median and range, and
the slowdown beside the busy process relative to the best rate alone. The load average at each
start is printed: on a machine shared with other work the rates are noisy.

Run: .venv/bin/python bench/train_contention.py [--steps 200] [--repeats 2]
     [--try NAME=VAR=VALUE[,VAR=VALUE]]   (another setting to compare, e.g. spin1k=GOMP_SPINCOUNT=1000)
     [--only new,spin1k]                  (a subset: under heavy load "old" can take many minutes)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")


def child(steps: int, policy: str, model_name: str, config: str) -> None:
    """One measurement in this (fresh) process; prints one JSON line."""
    import yaml

    from specmoe.runtime import tiny

    cfg = yaml.safe_load(Path(config).read_text())
    entry = next(m for m in cfg["models"] if m["name"] == model_name)
    spec = tiny.spec_from_dict({**cfg["tiny"]["train"], "steps": steps})
    applied = tiny.training_threads(spec.threads) if policy == "new" else None  # before torch
    tiny.training_numerics()  # as the training stage trains, under either wait policy
    rate, sha = train_and_hash(cfg, entry, spec)
    print(json.dumps({"steps_per_s": rate, "sha256": sha, "applied": applied}))


def train_and_hash(cfg: dict, entry: dict, spec) -> tuple[float, str]:
    """Train `entry`'s shape (spec: its tiny.TrainSpec) on seeded random tokens of the
    configuration's vocabulary, in this process: its training steps per second and the sha256
    of its saved model.safetensors. The caller sets the process's environment first."""
    import numpy as np

    from specmoe.runtime import tiny

    vocab = int(cfg["tiny"]["vocab_size"])
    model = tiny.build_model(tiny.arch_from_dict(entry["arch"]), vocab, spec.seed,
                             aux_coef=spec.aux_coef)
    tokens = np.random.default_rng(0).integers(0, vocab, 400_000).astype(np.int32)
    res = tiny.train(model, tokens, spec, progress=False)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        sha = hashlib.sha256((Path(d) / "model.safetensors").read_bytes()).hexdigest()
    return spec.steps / res["wall_s"], sha


def measure(env: dict, policy: str, busy: bool, a) -> dict:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, __file__, "--child", policy, "--steps",
                              str(a.steps), "--model", a.model, "--config", a.config],
                             env=env, capture_output=True, text=True, check=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load": load}


def settings(tries: list[str]) -> dict[str, tuple[str, dict]]:
    base = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    base["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), base.get("PYTHONPATH", "")])
    out = {"old": ("old", dict(base)), "new": ("new", dict(base))}
    for t in tries:
        name, _, assigns = t.partition("=")
        extra = dict(kv.split("=", 1) for kv in assigns.split(","))
        out[name] = ("old", {**base, **extra})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default="tiny-fine")
    ap.add_argument("--config", default=str(REPO / "config.yaml"))
    ap.add_argument("--try", dest="tries", action="append", default=[])
    ap.add_argument("--only", help="comma-separated settings to run (default: all)")
    ap.add_argument("--child", choices=("old", "new"), help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a.steps, a.child, a.model, a.config)
    runs: dict[tuple[str, bool], list[dict]] = {}
    sets = settings(a.tries)
    if a.only:
        sets = {k: v for k, v in sets.items() if k in a.only.split(",")}
    for rep in range(a.repeats):
        for name, (policy, env) in sets.items():
            for busy in (False, True):
                t0 = time.perf_counter()
                r = measure(env, policy, busy, a)
                runs.setdefault((name, busy), []).append(r)
                print(f"round {rep + 1}: {name:>6} {'beside busy' if busy else 'alone':>11}: "
                      f"{r['steps_per_s']:.2f} steps/s (load {r['load']:.1f} at start, "
                      f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    rate = {k: statistics.median(r["steps_per_s"] for r in v) for k, v in runs.items()}
    best_alone = max(rate[(n, False)] for n in sets)
    shas = {r["sha256"] for v in runs.values() for r in v}
    table = {name: {"alone": rate[(name, False)], "busy": rate[(name, True)],
                    "alone_range": [min(r["steps_per_s"] for r in runs[(name, False)]),
                                    max(r["steps_per_s"] for r in runs[(name, False)])],
                    "busy_range": [min(r["steps_per_s"] for r in runs[(name, True)]),
                                   max(r["steps_per_s"] for r in runs[(name, True)])],
                    "slowdown_beside_busy": best_alone / rate[(name, True)],
                    "applied": runs[(name, False)][0]["applied"]}
             for name in sets}
    summary = {"steps": a.steps, "repeats": a.repeats, "settings": table,
               "checkpoints_identical": len(shas) == 1, "sha256": sorted(shas)}
    if a.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"{a.model}, {a.steps} steps, median of {a.repeats} (steps/s; slowdown = best rate alone "
          "/ rate beside busy):")
    for name, t in table.items():
        print(f"  {name:>6}: alone {t['alone']:.2f} [{t['alone_range'][0]:.2f}-"
              f"{t['alone_range'][1]:.2f}], beside busy {t['busy']:.2f} [{t['busy_range'][0]:.2f}-"
              f"{t['busy_range'][1]:.2f}], slowdown {t['slowdown_beside_busy']:.2f}x"
              + (f"  ({t['applied']})" if t["applied"] else ""))
    print(f"  checkpoints bit-identical across all runs: {len(shas) == 1} "
          f"({', '.join(s[:16] for s in sorted(shas))})")


if __name__ == "__main__":
    main()
