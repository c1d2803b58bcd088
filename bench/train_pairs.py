"""Two trainings one after the other against side by side: the wall time of both, and the sha256 of
each checkpoint, which must not depend on how they ran.

Each training is a fresh interpreter that trains `--steps` steps of one tiny model of config.yaml
(a target or a drafter) with specmoe.runtime.tiny.train, as rule train_model does (the config's
threads, OpenMP's wait policy, deterministic kernels), on seeded random tokens, and saves it.
"apart": the two in turn; "side by side": both started together, as Snakemake starts two jobs of
one thread each on a 2-core machine. `--omp` sets OMP_NUM_THREADS in the children, as Snakemake
does from a job's `threads` (torch's own thread count stays the config's). Rounds alternate the two
ways; the wall time of each way is its rounds' median, with the load average at each start, and
each training's CPU time a step (its threads' time, waiting excluded: two side by side that cost
no more CPU a step than apart take (CPU a + CPU b) / cores on an otherwise quiet machine).

    .venv/bin/python bench/train_pairs.py [--models tiny-coarse,tiny-drafter] [--steps 60]
        [--rounds 2] [--omp 1] [--json]
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


def child(name: str, steps: int, config: str) -> None:
    """One training in this (fresh) process; prints one JSON line."""
    import numpy as np
    import yaml

    from specmoe.runtime import tiny

    cfg = yaml.safe_load(Path(config).read_text())
    entry = next(e for e in [*cfg["models"], *cfg.get("drafters", [])]
                 if e["name"] == name and e.get("source") == "tiny")
    spec = tiny.spec_from_dict({**cfg["tiny"]["train"], "steps": steps,
                                "seed": entry.get("seed", 0)})
    tiny.training_threads(spec.threads)
    vocab = int(cfg["tiny"]["vocab_size"])
    model = tiny.build_model(tiny.arch_from_dict(entry["arch"]), vocab, spec.seed,
                             aux_coef=spec.aux_coef)
    tokens = np.random.default_rng(0).integers(0, vocab, 400_000).astype(np.int32)
    t0 = os.times()
    res = tiny.train(model, tokens, spec, progress=False)
    t1 = os.times()
    cpu = t1.user + t1.system - t0.user - t0.system
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        sha = hashlib.sha256((Path(d) / "model.safetensors").read_bytes()).hexdigest()
    print(json.dumps({"model": name, "steps_per_s": steps / res["wall_s"],
                      "cpu_ms_per_step": 1000 * cpu / steps, "sha256": sha}))


def start(name: str, a) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    if a.omp:
        env["OMP_NUM_THREADS"] = str(a.omp)
    return subprocess.Popen([sys.executable, __file__, "--child", name, "--steps", str(a.steps),
                             "--config", a.config], env=env, stdout=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen) -> dict:
    out, _ = p.communicate()
    if p.returncode:
        raise SystemExit(f"a training failed (exit {p.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def one_way(way: str, a) -> dict:
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    if way == "apart":
        res = [finish(start(n, a)) for n in a.models]
    else:
        procs = [start(n, a) for n in a.models]
        res = [finish(p) for p in procs]
    return {"wall_s": time.perf_counter() - t0, "load": load, "runs": res}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-coarse,tiny-drafter")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--omp", type=int, default=None)
    ap.add_argument("--config", default=str(REPO / "config.yaml"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.steps, a.config)
    a.models = a.models.split(",")
    ways: dict[str, list[dict]] = {"apart": [], "side by side": []}
    for rnd in range(a.rounds):
        order = list(ways) if rnd % 2 == 0 else list(reversed(ways))
        for way in order:
            r = one_way(way, a)
            ways[way].append(r)
            print(f"round {rnd + 1}: {way:>12}: {r['wall_s']:.1f} s (load {r['load']:.1f} at "
                  "start; " + ", ".join(f"{x['model']} {x['steps_per_s']:.2f} steps/s, "
                                        f"{x['cpu_ms_per_step']:.0f} ms CPU a step"
                                        for x in r["runs"]) + ")", file=sys.stderr, flush=True)
    shas = {m: {x["sha256"] for rs in ways.values() for r in rs for x in r["runs"]
                if x["model"] == m} for m in a.models}
    out = {"models": a.models, "steps": a.steps, "omp_num_threads": a.omp,
           "wall_s": {w: statistics.median(r["wall_s"] for r in rs) for w, rs in ways.items()},
           "checkpoints_identical": all(len(s) == 1 for s in shas.values()),
           "sha256": {m: sorted(s) for m, s in shas.items()}}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    w = out["wall_s"]
    print(f"{' + '.join(a.models)}, {a.steps} steps each, median of {a.rounds}: apart "
          f"{w['apart']:.1f} s, side by side {w['side by side']:.1f} s "
          f"({w['side by side'] / w['apart']:.2f}x)")
    print("  checkpoints bit-identical either way: " + str(out["checkpoints_identical"]) + " ("
          + ", ".join(f"{m} {s[0][:16]}" for m, s in out["sha256"].items()) + ")")


if __name__ == "__main__":
    main()
