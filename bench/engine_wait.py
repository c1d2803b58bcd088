"""Untimed engines side by side: OpenMP's waiting under libgomp's default and passive.

In a finished default run (RUN: a directory where `snakemake` made the results), the two untimed
controls' captures (rule capture_control, whose engines time nothing) are made again, both at once
as the run's scheduler runs them (two engine slots, one core claimed each), once per setting and
`--repeats` rounds, settings interleaved:

- default: libgomp's own waiting (a waiting thread spins ~300,000 times, then sleeps); the
  variable is set empty, which libgomp ignores (it prints that the value is invalid) and which
  specmoe keeps as the user's own value;
- passive: specmoe.runtime.engine.UNTIMED_OMP_ENV, what the untimed engines run under.

Each round prints the run's wall clock and each job's time (its log's "done in"), and every
control's routing (its trace's expert ids) must be the same bit for bit under both settings.
The traces are the run's own again at the end (the last round is passive, as the run makes them).

Run: .venv/bin/python bench/engine_wait.py RUN [--repeats 1]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {"default": "", "passive": "PASSIVE"}


def controls(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in (run / "results/traces").glob(
        "*-random/*/K*/*.parquet"))


def routing_digest(path: Path) -> str:
    from specmoe.routing.trace import read_trace

    return hashlib.sha256(read_trace(path).experts.tobytes()).hexdigest()[:16]


def once(run: Path, targets: list[str], value: str) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": value, "PYTHONPATH": str(run / "src")}
    t0 = time.perf_counter()
    r = subprocess.run([str(run / ".venv/bin/snakemake"), "--cores", "all", "--forcerun",
                        *targets, "-q", "--", *targets], cwd=run, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(r.stdout[-2000:] + r.stderr[-2000:])
    jobs = []
    for t in targets:
        log = (run / "logs" / Path(t).relative_to("results")).with_suffix(".log")
        m = re.findall(r"stage capture_control done in ([\d.]+) s", log.read_text())
        jobs.append(float(m[-1]))
    return {"wall_s": wall, "jobs_s": jobs,
            "routing": [routing_digest(run / t) for t in targets]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    run = a.run.resolve()
    targets = controls(run)
    if len(targets) < 2:
        sys.exit(f"{run}: fewer than two controls' traces (run the default first)")
    before = [routing_digest(run / t) for t in targets]
    print(f"{len(targets)} controls side by side in {run} (load {os.getloadavg()[0]:.1f})")
    digests = set()
    for i in range(a.repeats):
        for name, value in SETTINGS.items():
            r = once(run, targets, value)
            digests.add(tuple(r["routing"]))
            print(f"round {i + 1} {name:<8} wall {r['wall_s']:5.1f} s  jobs "
                  + ", ".join(f"{s:.1f} s" for s in r["jobs_s"]), flush=True)
    same = digests == {tuple(before)}
    print("routing: the same bit for bit under both settings and as the run made it" if same
          else f"routing DIFFERS: {before} vs {sorted(digests)}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
