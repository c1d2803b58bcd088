"""Where a finished run's time went: wall time per stage from the rule benchmarks, and the share of
the serving sweeps' wall time spent starting engines.

Reads `benchmarks/**/*.tsv` (Snakemake's `benchmark:` files, first column seconds) and each sweep
series' own record of its engine's start-up (`results/sweeps/**.json`). Run it in the directory of
a finished run: .venv/bin/python bench/run_costs.py [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def seconds(tsv: Path) -> float:
    with tsv.open() as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    return float(rows[1][0])


def stage_costs(root: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for tsv in sorted((root / "benchmarks").rglob("*.tsv")):
        stage = tsv.relative_to(root / "benchmarks").parts[0]
        s = out.setdefault(stage, {"jobs": 0, "seconds": 0.0})
        s["jobs"] += 1
        s["seconds"] += seconds(tsv)
    return out


def sweep_startups(root: Path) -> dict:
    series = []
    for f in sorted((root / "results" / "sweeps").rglob("*.json")):
        if any(p.endswith(".points") for p in f.parts):
            continue
        d = json.loads(f.read_text())
        points = d.get("points") or [p for v in d.get("datasets", {}).values() for p in v["points"]]
        measured = [p for p in points if not p.get("reused")]
        start = max((p.get("engine_startup_s", 0.0) for p in measured), default=0.0)
        bench = root / "benchmarks" / f.relative_to(root / "results").with_suffix(".tsv")
        series.append({"series": str(f.relative_to(root / "results" / "sweeps")),
                       "datasets": len(d.get("datasets", {None: 0})), "points": len(points),
                       "startup_s": start, "wall_s": seconds(bench) if bench.exists() else None})
    wall = sum(s["wall_s"] or 0.0 for s in series)
    start = sum(s["startup_s"] for s in series)
    return {"series": series, "starts": sum(s["startup_s"] > 0 for s in series),
            "startup_s": start, "wall_s": wall, "startup_share": start / wall if wall else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=".", type=Path)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {"stages": stage_costs(a.root), "sweeps": sweep_startups(a.root)}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for stage, s in out["stages"].items():
        print(f"{stage:>12}: {s['seconds']:7.0f} s in {s['jobs']} jobs")
    sw = out["sweeps"]
    if sw["wall_s"]:
        print(f"sweeps: {sw['starts']} engine starts, {sw['startup_s']:.0f} s of {sw['wall_s']:.0f} s "
              f"starting engines ({sw['startup_share']:.0%})")


if __name__ == "__main__":
    main()
