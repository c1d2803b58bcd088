"""The analysis jobs of a finished run, run again under one or more source trees, side by side:
each job's wall and CPU time (Snakemake's own benchmark files) per rule, and whether the outputs
are the same.

For each tree (a checkout: its src/ and workflow), in turn and `--rounds` times: a scratch copy of
the run (results/ hard-linked; outputs are replaced by rename, never rewritten in place) with the
tree's Snakefile, workflow/, config and profiles, in which Snakemake re-runs every job of the
chosen rules (`--forcerun`, `--rerun-triggers mtime`: nothing upstream runs), on 2 cores, with
PYTHONPATH=<tree>/src. A job's time is what Snakemake measures of it: the script's interpreter,
the Snakemake preamble, the imports and the work. The machine's load is printed: compare trees
of one invocation only. The outputs (JSON without its provenance) of every tree are compared
with the first tree's.

    .venv/bin/python bench/analysis_jobs.py RUN_DIR TREE [TREE ...]
        [--rules acceptance,overlap,ipf,costmodel,predict,speedup] [--rounds 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RULES = ("acceptance", "overlap", "ipf", "costmodel", "predict", "speedup")
TREE_PATHS = ("Snakefile", "workflow", "config.yaml", "config", "profiles", "envs")


def targets(run: Path, rules) -> list[str]:
    """The outputs of the run's jobs of these rules (from their benchmark files' paths)."""
    out = []
    for rule in rules:
        for b in sorted((run / "benchmarks" / rule).rglob("*.tsv")):
            t = Path("results") / rule / b.relative_to(run / "benchmarks" / rule).with_suffix(
                ".json")
            if (run / t).exists():
                out.append(str(t))
    return out


def scratch(run: Path, tree: Path, d: Path) -> None:
    for p in TREE_PATHS:
        src = tree / p
        if src.is_dir():
            shutil.copytree(src, d / p)
        elif src.exists():
            shutil.copy2(src, d / p)
    subprocess.run(["cp", "-al", str(run / "results"), str(d / "results")], check=True)


def times(d: Path, rules) -> dict[str, list[tuple[float, float]]]:
    """(wall s, CPU s) of each job of each rule, from its benchmark file."""
    out = {}
    for rule in rules:
        for b in sorted((d / "benchmarks" / rule).rglob("*.tsv")):
            head, row = b.read_text().splitlines()[:2]
            rec = dict(zip(head.split("\t"), row.split("\t")))
            out.setdefault(rule, []).append((float(rec["s"]), float(rec["cpu_time"])))
    return out


def outputs(d: Path, tgts: list[str]) -> dict[str, object]:
    res = {}
    for t in tgts:
        obj = json.loads((d / t).read_text())
        if isinstance(obj, dict):
            obj.pop("provenance", None)
        res[t] = obj
    return res


def one(run: Path, tree: Path, rules, tgts, keep: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="analysis-jobs-") as tmp:
        d = Path(tmp)
        scratch(run, tree, d)
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--quiet",
                               "--rerun-triggers", "mtime", "--forcerun", *rules, "--", *tgts],
                              cwd=d, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            sys.exit(f"{tree}: snakemake failed:\n{proc.stderr[-3000:]}")
        res = {"tree": str(tree), "load": load, "snakemake_wall_s": wall,
               "jobs": times(d, rules), "outputs": outputs(d, tgts)}
        if keep is not None:
            shutil.copytree(d / "logs", keep, dirs_exist_ok=True)
        return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("trees", type=Path, nargs="+")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rules = a.rules.split(",")
    tgts = targets(a.run.resolve(), rules)
    if not tgts:
        sys.exit(f"{a.run}: no outputs of {', '.join(rules)} with a benchmark file: not a run")
    runs: dict[str, list[dict]] = {}
    for rnd in range(a.rounds):
        for tree in a.trees:
            r = one(a.run.resolve(), tree.resolve(), rules, tgts, None)
            runs.setdefault(str(tree), []).append(r)
            n = sum(len(v) for v in r["jobs"].values())
            print(f"round {rnd + 1}: {tree}: {n} jobs in {r['snakemake_wall_s']:.0f} s "
                  f"(load {r['load']:.1f} at start)", file=sys.stderr, flush=True)
    first = runs[str(a.trees[0])][0]["outputs"]
    summary = {}
    for tree, rs in runs.items():
        per_rule = {}
        for rule in rules:
            jobs = [j for r in rs for j in r["jobs"].get(rule, [])]
            if jobs:
                per_rule[rule] = {"jobs": len(jobs) // len(rs),
                                  "wall_mean_s": statistics.mean(w for w, _ in jobs),
                                  "cpu_mean_s": statistics.mean(c for _, c in jobs)}
        same = sum(r["outputs"][t] == first[t] for r in rs for t in tgts)
        summary[tree] = {"rules": per_rule,
                         "wall_s": statistics.median(r["snakemake_wall_s"] for r in rs),
                         "job_wall_sum_s": statistics.mean(
                             sum(w for v in r["jobs"].values() for w, _ in v) for r in rs),
                         "job_cpu_sum_s": statistics.mean(
                             sum(c for v in r["jobs"].values() for _, c in v) for r in rs),
                         "outputs_same_as_first": f"{same} of {len(tgts) * len(rs)}"}
    if a.json:
        print(json.dumps(summary, indent=1))
        return
    for tree, s in summary.items():
        print(f"{tree}: jobs' wall {s['job_wall_sum_s']:.1f} s, CPU {s['job_cpu_sum_s']:.1f} s "
              f"(snakemake {s['wall_s']:.0f} s); outputs as the first tree's: "
              f"{s['outputs_same_as_first']}")
        for rule, t in s["rules"].items():
            print(f"  {rule:>10}: {t['jobs']:3d} jobs, mean wall {t['wall_mean_s']:.2f} s, "
                  f"CPU {t['cpu_mean_s']:.2f} s")


if __name__ == "__main__":
    main()
