"""Engine-to-engine variation of serving series: the same series measured on several fresh engine
starts, beside the spread of its repeats within one engine, which is all that the speedup's
interval uses (specmoe.measured.sweep).

Run it in the directory of a finished run (trained checkpoints and sweeps in place):

    .venv/bin/python bench/engine_variation.py results/sweeps/tiny-fine/ar.json \
        results/sweeps/tiny-fine/tiny-drafter/K3.json --engines 3 [--json]

Each engine reruns the series' own rule (`snakemake --force` on that file) one after the other,
in one session: the run's own points, measured at another time, are kept out of the statistics
(a machine's speed drifts between sessions) and put back at the end; the engines' points stay
under results/bench/engine_variation/. Per series, dataset and batch size, on the
log scale of TPOT (the timing of the run's configuration, `sweep.timing`):
- within: the repeats' standard deviation inside one engine, pooled over engines and batch sizes
  (what the sweep's interval uses, per engine);
- between: the standard deviation of the engines' true means, by the method of moments
  (variance of the engine means minus within^2 / repeats, at least 0);
- inflation: how much wider a one-engine mean's standard error is with the engine's own offset
  counted, sqrt(1 + between^2 / (within^2 / repeats)).
The pooled value (root mean square of `between` over every series, dataset and batch size) is
what a configuration's `sweep.engine_log_sd` takes, and (engines - 1) summed over the series its
degrees of freedom, `sweep.engine_log_sd_df` (the points of one series share its engines, so they
add none), and the device the engines ran on (from their provenance), `sweep.engine_log_sd_device`:
the spread applies to the series swept on that device alone.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specmoe.measured.sweep import TIMINGS, tpot  # noqa: E402
from specmoe.provenance import measured_device  # noqa: E402

OUT = Path("results") / "bench" / "engine_variation"


def points_of(series: dict) -> dict[str, list[dict]]:
    """A series' points by dataset (its json, read)."""
    return {ds: v["points"] for ds, v in series["datasets"].items()}


def device_of(series: dict) -> str | None:
    """The device a series was measured on (its provenance's engine: cpu or cuda)."""
    return measured_device(series.get("provenance") or {})


def paths(series_json: Path) -> list[Path]:
    return [series_json, series_json.with_suffix(".points")]


def measure_again(series_json: Path, engine: int) -> None:
    """Move the series' files aside, rerun its rule on a fresh engine, keep what it measured."""
    keep = OUT / series_json.parent / f"{series_json.stem}.engine{engine}"
    if (keep / series_json.name).exists():
        print(f"{series_json}: engine {engine} already measured ({keep})", file=sys.stderr)
        return
    aside = OUT / series_json.parent / f"{series_json.stem}.run"
    aside.mkdir(parents=True, exist_ok=True)
    for p in paths(series_json):
        if p.exists() and not (aside / p.name).exists():
            shutil.move(str(p), aside / p.name)
    try:
        subprocess.run([sys.executable, "-m", "snakemake", str(series_json), "--cores", "all",
                        "--force", "--rerun-triggers", "mtime"], check=True)
        keep.mkdir(parents=True, exist_ok=True)
        for p in paths(series_json):
            shutil.move(str(p), keep / p.name)
    finally:
        for p in paths(series_json):
            if (aside / p.name).exists():
                if p.exists():
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
                shutil.move(str(aside / p.name), p)


def variation(engines: list[dict[str, list[dict]]], timing: str) -> list[dict]:
    rows = []
    for ds in engines[0]:
        by_batch: dict[int, list[list[float]]] = {}
        for eng in engines:
            groups: dict[int, list[float]] = {}
            for p in eng[ds]:
                groups.setdefault(p["batch"], []).append(math.log(tpot(p, timing)))
            for b, xs in groups.items():
                by_batch.setdefault(b, []).append(xs)
        ss = df = 0.0
        for reps in by_batch.values():
            for xs in reps:
                m = sum(xs) / len(xs)
                ss += sum((x - m) ** 2 for x in xs)
                df += len(xs) - 1
        within = math.sqrt(ss / df) if df else float("nan")
        for b, reps in sorted(by_batch.items()):
            means = [sum(xs) / len(xs) for xs in reps]
            r = min(len(xs) for xs in reps)
            g = sum(means) / len(means)
            var_means = sum((m - g) ** 2 for m in means) / (len(means) - 1)
            between2 = max(0.0, var_means - within ** 2 / r)
            rows.append({"dataset": ds, "batch": b, "engines": len(means), "repeats": r,
                         "tpot_ms_by_engine": [round(math.exp(m), 4) for m in means],
                         "within_log_sd": within, "between_log_sd": math.sqrt(between2),
                         "inflation": math.sqrt(1 + between2 / (within ** 2 / r))})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("series", nargs="+", type=Path, help="a series' JSON (results/sweeps/...)")
    ap.add_argument("--engines", type=int, default=3, help="fresh engines per series (3)")
    ap.add_argument("--config", type=Path, default=Path("config.yaml"),
                    help="the run's configuration, for its timing (config.yaml)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args()
    if a.engines < 2:
        ap.error("--engines: at least 2")
    timing = (yaml.safe_load(a.config.read_text()).get("sweep") or {}).get("timing")
    if timing not in TIMINGS:
        ap.error(f"{a.config}: sweep.timing must be one of {', '.join(TIMINGS)}")
    report, devices = {}, set()
    for s in a.series:
        if not s.exists():
            ap.error(f"{s}: no such series (run the workflow first)")
        for e in range(1, a.engines + 1):
            measure_again(s, e)
        measured = [json.loads((OUT / s.parent / f"{s.stem}.engine{e}" / s.name).read_text())
                    for e in range(1, a.engines + 1)]
        report[str(s)] = variation([points_of(d) for d in measured], timing)
        devices |= {device_of(d) for d in measured}
    if len(devices) != 1 or None in devices:
        print(f"the engines ran on {sorted(map(str, devices))}, not one known device: their spread "
              "is no one device's sweep.engine_log_sd", file=sys.stderr)
        return 1
    device = devices.pop()
    between = [r["between_log_sd"] for rows in report.values() for r in rows]
    pooled = math.sqrt(sum(b * b for b in between) / len(between))
    df = (a.engines - 1) * len(a.series)
    if a.json:
        print(json.dumps({"timing": timing, "engine_log_sd": pooled, "engine_log_sd_df": df,
                          "engine_log_sd_device": device, "series": report}, indent=1))
        return 0
    print(f"timing: {timing}; pooled between-engine log sd (sweep.engine_log_sd): {pooled:.3f}, "
          f"with {df} degrees of freedom (sweep.engine_log_sd_df), measured on {device} "
          "(sweep.engine_log_sd_device)")
    for s, rows in report.items():
        print(s)
        print(f"  {'dataset':<40} {'B':>3} {'eng':>3} {'rep':>3} {'within':>7} {'between':>7} "
              f"{'infl':>5}  TPOT ms by engine")
        for r in rows:
            print(f"  {r['dataset']:<40} {r['batch']:>3} {r['engines']:>3} {r['repeats']:>3} "
                  f"{r['within_log_sd']:>7.3f} {r['between_log_sd']:>7.3f} {r['inflation']:>5.2f}"
                  f"  {r['tpot_ms_by_engine']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
