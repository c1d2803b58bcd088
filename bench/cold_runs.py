"""Cold default runs of two revisions side by side on one machine, quiet and beside a busy process.

For each revision (OLD, NEW: anything `git checkout` takes) and each condition, a fresh clone of
this repository at that revision runs the README's default (`snakemake --cores all`) from nothing,
one run at a time, in ABBA order per condition (old, new, then new, old for the next condition)
so that a drift of the machine spreads over both. "busy": one CPU-bound process
(`python -c 'while True: pass'`) runs for the whole of the run. Each clone uses this checkout's
`.venv` (its own `src` first on PYTHONPATH).

Printed per run: wall clock; the end-of-run breakdown of the run's own benchmark files
(specmoe.report.timing, as the run's summary prints it): job time by stage and engine start-up's
share of the engine jobs; the median start of the sweep engines (each engine's start to its first
token, from the points it measured); training steps per second of each tiny model (its manifest);
then `bench/compare_runs.py` between the two revisions of each condition and between the two
conditions of each revision (the same code: every checkpoint, trace and non-timing table must be
identical).

    .venv/bin/python bench/cold_runs.py OLD NEW [--conditions quiet,busy] [--dir /work/cold]
        [--compare-args "--rename TABLE:OLD=NEW ..."] [--json]

A run whose directory already holds a finished run (its `wall_s` file) is not run again: an
interrupted bench resumes. An interrupted run's outputs are removed first (its jobs left would
not make a cold run), and a clone at another commit than its revision names is refused. Takes
20-60 minutes a run on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


# what a run writes in its clone (all ignored by git): an interrupted run's are removed
RUN_OUTPUTS = ("results", "logs", "benchmarks", ".snakemake")


def commit_of(rev: str, repo: Path) -> str:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q",
                          f"{rev}^{{commit}}"], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{rev}: not a commit of {repo}")
    return out.stdout.strip()


def clone(rev: str, where: Path) -> None:
    """A checkout of this repository's `rev` in `where`: a fresh clone, or the one an interrupted
    bench left there if it is at that very commit (one at another would time other code)."""
    want = commit_of(rev, REPO)
    if not (where / ".git").is_dir():
        subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
        subprocess.run(["git", "-C", str(where), "checkout", "-q", want], check=True)
        (where / ".venv").symlink_to(REPO / ".venv")
    head = commit_of("HEAD", where)
    if head != want:
        sys.exit(f"{where}: a checkout of {head[:12]}, not of {rev} ({want[:12]}): remove it or "
                 "give another --dir")


def run(where: Path, busy: bool) -> float:
    """The default run in `where` (cold); its wall clock, also kept in where/wall_s."""
    done = where / "wall_s"
    if done.is_file():
        return float(done.read_text())
    left = [d for d in RUN_OUTPUTS if (where / d).exists()]
    if left:  # an interrupted run: resumed, only its jobs left would be timed
        print(f"{where}: an interrupted run, removing its {', '.join(left)} to run it cold",
              file=sys.stderr, flush=True)
        for d in left:
            shutil.rmtree(where / d)
    env = {**os.environ, "PYTHONPATH": str(where / "src")}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    t0 = time.perf_counter()
    try:
        with open(where / "run.log", "w") as log:
            subprocess.run([str(where / ".venv" / "bin" / "snakemake"), "--cores", "all"],
                           cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    wall = time.perf_counter() - t0
    done.write_text(f"{wall:.1f}\n")
    return wall


def sweep_engine_starts(where: Path) -> list[float]:
    """Each sweep engine's start to its first token, once per engine (its points share it)."""
    seen = {}
    for p in (where / "results" / "sweeps").rglob("*.points/**/*.json"):
        d = json.loads(p.read_text())
        start = d.get("engine_start") or {}
        t = (start.get("at_s") or {}).get("first_token")
        if t is not None:
            seen[json.dumps(start, sort_keys=True)] = float(t)
    return sorted(seen.values())


def training_rates(where: Path) -> dict[str, float]:
    out = {}
    for m in sorted((where / "results" / "models").glob("*/manifest.json")):
        d = json.loads(m.read_text())
        if d.get("trained") and d.get("steps") and d.get("wall_s"):
            out[d["name"]] = round(d["steps"] / d["wall_s"], 2)
    return out


def metrics(where: Path, wall: float) -> dict:
    from specmoe.report import timing

    b = timing.collect(where)
    starts = sweep_engine_starts(where)
    return {"wall_s": round(wall, 1),
            "job_s": {k: round(v, 1) for k, v in b.seconds.items()},
            "engine_starts": b.engine_starts,
            "engine_start_share": round(b.engine_start_share, 3),
            "sweep_engine_start_median_s": round(statistics.median(starts), 2) if starts else None,
            "sweep_engines": len(starts),
            "train_steps_per_s": training_rates(where)}


def compare(a: Path, b: Path, extra: list[str]) -> str:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "compare_runs.py"), str(a), str(b),
                          *extra], capture_output=True, text=True)
    return out.stdout + out.stderr


def clock(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:04.1f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--dir", default="/work/cold", help="where the clones go")
    ap.add_argument("--compare-args", default="",
                    help="extra arguments of bench/compare_runs.py for old against new")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    conditions = a.conditions.split(",")
    if not set(conditions) <= {"quiet", "busy"}:
        sys.exit(f"conditions are quiet and busy, not {a.conditions}")
    base = Path(a.dir)
    base.mkdir(parents=True, exist_ok=True)
    revs = {"old": a.old, "new": a.new}
    res: dict[str, dict] = {}
    for i, cond in enumerate(conditions):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for which in order:
            where = base / f"{which}-{cond}"
            clone(revs[which], where)
            sha = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            print(f"{which} ({sha}) {cond}: running in {where} (load {os.getloadavg()[0]:.1f})",
                  file=sys.stderr, flush=True)
            wall = run(where, cond == "busy")
            res[f"{which}-{cond}"] = {"rev": sha, **metrics(where, wall)}
            print(f"  {clock(wall)}", file=sys.stderr, flush=True)
    comparisons = {}
    for cond in conditions:
        comparisons[f"old-{cond} vs new-{cond}"] = compare(
            base / f"old-{cond}", base / f"new-{cond}", shlex.split(a.compare_args))
    if len(conditions) == 2:
        for which in ("old", "new"):
            comparisons[f"{which}-quiet vs {which}-busy"] = compare(
                base / f"{which}-quiet", base / f"{which}-busy", [])
    if a.json:
        print(json.dumps({"runs": res, "comparisons": comparisons}, indent=1))
        return
    print(f"{'run':<12}{'rev':<9}{'wall':>14}{'engine start':>14}{'share':>7}{'sweep start':>13}"
          "  training steps/s")
    for name, r in res.items():
        print(f"{name:<12}{r['rev']:<9}{clock(r['wall_s']):>14}"
              f"{clock(r['job_s'].get('engine start', 0)):>14}{r['engine_start_share']:>7.0%}"
              f"{r['sweep_engine_start_median_s'] or float('nan'):>12.1f}s  "
              + ", ".join(f"{k} {v}" for k, v in r["train_steps_per_s"].items()))
    for name, text in comparisons.items():
        print(f"\n== {name}\n{text.strip()}")


if __name__ == "__main__":
    main()
