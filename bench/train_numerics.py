"""What pinning training's numerics costs and what it buys: tiny-fine's training steps per second
with the numerics specmoe.runtime.tiny pins (TRAIN_NUMERICS_ENV: torch's kernels at AVX2, MKL's
GEMMs on its COMPATIBLE branch, oneDNN at most AVX2) and without them, side by side in one run,
and the sha256 of the weights each trains, also under settings that move the choices a CPU
makes (ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=SSE4_2: what an older CPU would get).
Pinned, every row's sha256 must be one; unpinned, the moved settings train other weights.

Each measurement is a fresh interpreter (torch and MKL read the settings when torch loads)
training `--steps` steps of tiny-fine's shape (config.yaml's model and tiny.train settings) on
seeded random tokens with specmoe.runtime.tiny.train, the conditions interleaved for `--repeats`
rounds; the table gives each one's median rate and range. The load average at each start is
printed: on a machine shared with other work the rates are noisy.

Run: .venv/bin/python bench/train_numerics.py [--steps 100] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MOVED = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
CONDITIONS = {"pinned": (True, {}), "pinned, moved": (True, MOVED),
              "unpinned": (False, {}), "unpinned, moved": (False, MOVED)}


def child(steps: int, pinned: bool, config: str) -> None:
    """One measurement in this (fresh) process; prints one JSON line."""
    import yaml

    from specmoe.runtime import tiny

    cfg = yaml.safe_load(Path(config).read_text())
    entry = next(m for m in cfg["models"] if m["name"] == "tiny-fine")
    spec = tiny.spec_from_dict({**cfg["tiny"]["train"], "steps": steps})
    tiny.training_threads(spec.threads)
    if pinned:
        tiny.training_numerics()
    import torch
    from train_contention import train_and_hash

    rate, sha = train_and_hash(cfg, entry, spec)
    print(json.dumps({"steps_per_s": rate, "sha256": sha,
                      "capability": torch.backends.cpu.get_cpu_capability()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--config", default=str(REPO / "config.yaml"))
    ap.add_argument("--child", choices=["pinned", "unpinned"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < 1 or a.repeats < 1:
        sys.exit("--steps and --repeats must be at least 1")
    if a.child:
        return child(a.steps, a.child == "pinned", a.config)
    rows: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    base = {k: v for k, v in os.environ.items() if k not in (*MOVED, "MKL_CBWR")}
    for rep in range(a.repeats):
        for name, (pinned, extra) in CONDITIONS.items():
            print(f"round {rep + 1}, {name}: load average {os.getloadavg()[0]:.2f}", flush=True)
            r = subprocess.run([sys.executable, __file__, "--child",
                                "pinned" if pinned else "unpinned", "--steps", str(a.steps),
                                "--config", a.config], env={**base, **extra},
                               capture_output=True, text=True, check=True)
            rows[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"\ntiny-fine's shape, {a.steps} steps, {a.repeats} rounds")
    print(f"{'condition':<17} {'steps/s median':>14} {'range':>13} {'torch at':>9}  sha256")
    for name, rs in rows.items():
        rates = [r["steps_per_s"] for r in rs]
        shas = sorted({r["sha256"][:16] for r in rs})
        print(f"{name:<17} {statistics.median(rates):>14.2f} "
              f"{min(rates):>6.2f}-{max(rates):<6.2f} {rs[0]['capability']:>9}  {', '.join(shas)}")
    pinned = {r["sha256"] for n in ("pinned", "pinned, moved") for r in rows[n]}
    unpinned = {r["sha256"] for n in ("unpinned", "unpinned, moved") for r in rows[n]}
    slow = statistics.median(r["steps_per_s"] for r in rows["unpinned"]) / statistics.median(
        r["steps_per_s"] for r in rows["pinned"])
    print(f"\npinned: {'one set of weights' if len(pinned) == 1 else 'WEIGHTS DIFFER'} under "
          f"every setting; unpinned: {len(unpinned)} sets of weights; a pinned step takes "
          f"{slow:.2f}x the time of an unpinned one")
    if len(pinned) != 1:
        sys.exit(1)


if __name__ == "__main__":
    main()
