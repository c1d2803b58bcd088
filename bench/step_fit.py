"""The step model's fit as a job pays for it, under one or more source trees side by side: the CPU
time of importing specmoe.cost.stepmodel, of `fitted()` (what the costmodel jobs and the report
price with) and of `calibration()` after it (the leave-one-model-out fits a prediction's intervals
need), each in a fresh interpreter, and whether every tree fits the same parameters bit for bit.

CPU time of the one process (time.process_time), so another process on the machine slows it
less than it slows the wall clock; trees alternate, `--rounds` times, and the table gives each
one's median.

    .venv/bin/python bench/step_fit.py TREE [TREE ...] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, time
t0 = time.process_time()
from specmoe.cost import stepmodel
t1 = time.process_time()
p = stepmodel.fitted()
t2 = time.process_time()
c = stepmodel.calibration()
t3 = time.process_time()
print(json.dumps({"import_s": t1 - t0, "fitted_s": t2 - t1, "calibration_s": t3 - t2,
                  "params": [float(x).hex() for x in p.as_dict().values()],
                  "same_as_calibration": c.params == p}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    runs: dict[str, list[dict]] = {str(t): [] for t in a.trees}
    for _ in range(a.rounds):
        for t in a.trees:
            env = {**os.environ, "PYTHONPATH": str(t.resolve() / "src")}
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                 text=True, check=True)
            runs[str(t)].append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = runs[str(a.trees[0])][0]["params"]
    table = {t: {k: statistics.median(r[k] for r in rs)
                 for k in ("import_s", "fitted_s", "calibration_s")}
             | {"same_params": all(r["params"] == first for r in rs),
                "fitted_is_calibration_params": all(r["same_as_calibration"] for r in rs)}
             for t, rs in runs.items()}
    if a.json:
        print(json.dumps({"rounds": a.rounds, "load": os.getloadavg()[0], "trees": table},
                         indent=1))
        return
    print(f"CPU seconds, median of {a.rounds} (load {os.getloadavg()[0]:.1f} at the end):")
    for t, r in table.items():
        print(f"  {t}: import {r['import_s']:.2f}, fitted() {r['fitted_s']:.2f}, calibration() "
              f"after it {r['calibration_s']:.2f}; parameters as the first tree's: "
              f"{r['same_params']}; fitted() is calibration().params: "
              f"{r['fitted_is_calibration_params']}")


if __name__ == "__main__":
    main()
