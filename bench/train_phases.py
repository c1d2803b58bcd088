"""Where a training step of a tiny model goes: forward, loss, backward, gradient clipping,
optimizer, data and the rest (the loop's own Python, the scheduler, zero_grad), and the operators
that take the most CPU time.

It runs specmoe.runtime.tiny.train itself, as rule train_model does (the config's threads, OpenMP's
wait policy, deterministic kernels), `--steps` steps of one model of config.yaml (a target or a
drafter) on seeded random tokens, with a timer around each phase's function; then the same number
of steps again under torch.profiler for the operator table. The cores used are the process's CPU
time over its wall time (2.0: both threads busy all the time). Timings on a machine that other
work shares are noisy.

    .venv/bin/python bench/train_phases.py [--model tiny-fine] [--steps 40] [--top 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def entry_of(cfg: dict, name: str) -> dict:
    for e in [*cfg["models"], *cfg.get("drafters", [])]:
        if e["name"] == name and e.get("source") == "tiny":
            return e
    raise SystemExit(f"no tiny model {name!r} in the configuration")


def timed(spent: dict, name: str, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - t0
    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-fine")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--config", default=str(REPO / "config.yaml"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import numpy as np
    import yaml

    from specmoe.runtime import tiny

    cfg = yaml.safe_load(Path(a.config).read_text())
    entry = entry_of(cfg, a.model)
    spec = tiny.spec_from_dict({**cfg["tiny"]["train"], "steps": a.steps})
    tiny.training_threads(spec.threads)  # before torch loads OpenMP
    import torch

    vocab = int(cfg["tiny"]["vocab_size"])
    tokens = np.random.default_rng(0).integers(0, vocab, 400_000).astype(np.int32)

    def model():
        return tiny.build_model(tiny.arch_from_dict(entry["arch"]), vocab, spec.seed,
                                aux_coef=spec.aux_coef)

    spent: dict[str, float] = defaultdict(float)
    m = model()
    m.forward = timed(spent, "forward", m.forward)
    patches = [(torch.Tensor, "backward", "backward"), (torch.nn.utils, "clip_grad_norm_", "clip"),
               (torch.optim.AdamW, "step", "optimizer"), (tiny, "next_token_loss", "loss"),
               (tiny, "load_balancing_loss", "loss")]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
    for obj, attr, name in patches:
        setattr(obj, attr, timed(spent, name, getattr(obj, attr)))
    batches = tiny._batches

    def timed_batches(*args):
        gen = batches(*args)
        while True:
            t0 = time.perf_counter()
            x = next(gen)
            spent["data"] += time.perf_counter() - t0
            yield x

    tiny._batches = timed_batches
    cpu0 = os.times()
    res = tiny.train(m, tokens, spec, progress=False)
    cpu1 = os.times()
    for obj, attr, fn in saved:
        setattr(obj, attr, fn)
    tiny._batches = batches
    wall = res["wall_s"]
    cores = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (cpu1.elapsed - cpu0.elapsed)
    phases = {k: v / a.steps * 1000 for k, v in spent.items()}
    phases["other"] = wall / a.steps * 1000 - sum(phases.values())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        tiny.train(model(), tokens, spec, progress=False)
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:a.top]
    table = [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / 1000 / a.steps,
              "calls_per_step": e.count / a.steps} for e in ops]
    out = {"model": a.model, "steps": a.steps, "threads": spec.threads,
           "ms_per_step": wall / a.steps * 1000, "cores_used": cores, "phases_ms": phases,
           "ops": table}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{a.model}: {out['ms_per_step']:.0f} ms a step over {a.steps} steps on {spec.threads} "
          f"threads, {cores:.2f} cores busy on average")
    for k, v in sorted(phases.items(), key=lambda kv: -kv[1]):
        print(f"  {k:>10}: {v:7.1f} ms ({v / out['ms_per_step']:.0%})")
    print("operators by self CPU time (ms a step, calls a step; under the profiler):")
    for r in table:
        print(f"  {r['self_ms_per_step']:8.1f} {r['calls_per_step']:6.0f}  {r['op']}")


if __name__ == "__main__":
    main()
