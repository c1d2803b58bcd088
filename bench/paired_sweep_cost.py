"""What interleaving costs an SD series: the wall time of one SD series alone (one engine) and of
the same series with its no-SD points interleaved (a second engine started beside it,
serving.run_series(paired=...)), alternating the two kinds of run (single, paired, single,
paired, ...) so that a drift of the machine falls on both.

Run it in the directory of a finished run (its trained models in place):

    .venv/bin/python bench/paired_sweep_cost.py [--models results/models] [--rounds 2]

The schedule, output length, warm-ups and repeats are config.yaml's sweep section's; the prompts
are 10 of the built-in set. Prints each run's wall time (start-up included) and the mean added
time per series.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=Path("results/models"))
    ap.add_argument("--target", default="tiny-fine")
    ap.add_argument("--drafter", default="tiny-drafter")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", type=Path, default=Path("config.yaml"))
    a = ap.parse_args()
    from specmoe.runtime.engine import engine_kwargs
    from specmoe.runtime.serving import run_series
    from specmoe.sources import prompts as prompt_table

    target, drafter = a.models / a.target, a.models / a.drafter
    for p in (target, drafter):
        if not (p / "config.json").exists():
            ap.error(f"{p}: no checkpoint (run the workflow first)")
    from specmoe.checks import schema

    cfg = yaml.safe_load(a.config.read_text())
    schema.check(cfg, Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml")
    sweep = cfg["sweep"]  # the schema's defaults filled
    sched = [(int(p["batch"]), int(p["prompts"])) for p in sweep["schedule"]]
    rows = prompt_table.load("builtin:v1", ["tinybench"])
    texts = [r.text for r in prompt_table.schedule(rows, max(n for _, n in sched),
                                                   set_size=min(n for _, n in sched))]
    opts = dict(max_num_seqs=max(b for b, _ in sched), kv_cache_mib=int(sweep["kv_cache_mib"]),
                dtype=sweep.get("dtype", "float32"))
    sd = engine_kwargs(target, drafter, a.k, **opts)
    plain = engine_kwargs(target, **opts)
    walls: dict[str, list[float]] = {"single": [], "paired": []}
    for rnd in range(a.rounds):
        for mode in ("single", "paired"):
            tmp = Path(tempfile.mkdtemp(prefix="paired_cost_"))
            try:
                t0 = time.perf_counter()
                run_series(sd, str(target), texts, sched, int(sweep["output_len"]),
                           int(sweep["warmups"]), tmp / "sd", {"round": rnd, "mode": mode}, {},
                           repeats=int(sweep["repeats"]),
                           startup_timeout=float(sweep["startup_timeout_s"]),
                           paired=(plain, {"round": rnd}, tmp / "ar") if mode == "paired"
                           else None)
                walls[mode].append(time.perf_counter() - t0)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"round {rnd} {mode:<7} {walls[mode][-1]:7.1f} s", flush=True)
    single = sum(walls["single"]) / len(walls["single"])
    paired = sum(walls["paired"]) / len(walls["paired"])
    print(f"mean: single {single:.1f} s, paired {paired:.1f} s, added {paired - single:.1f} s "
          f"per SD series ({100 * (paired / single - 1):.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
