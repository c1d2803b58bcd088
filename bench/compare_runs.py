"""Are two runs of one configuration the same, bit for bit, where they should be?

Compares run directories A and B (each with results/): the sha256 of every model file (weights,
config, tokenizer, token arrays), every trace's columns and expert ids (not the Parquet bytes,
whose provenance holds a timestamp), and every non-timing table's CSV without its provenance line
(the comparison table without its rows from timing tables, the step model's table without its
measured columns). Timing tables are left out.

Run: .venv/bin/python bench/compare_runs.py RUN_A RUN_B   (exit 1 if anything differs)

Across a change that adds or renames a table's columns on purpose, `--rename TABLE:OLD=NEW` (A's
column OLD is B's NEW) and `--schema` say, for each table whose text differs, whether every value
in the columns both runs have is the same: the line then reads `cols` with the columns only one
run has, and such a table counts as identical only with `--schema`.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from specmoe.routing.trace import read_trace

TIMING = {"speedup_vs_batch", "te_three_ways", "kernel_time_shares", "three_step_correction"}
MODEL_FILES = (".safetensors", ".npy")


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def same_values(p: Path, q: Path, renames: dict[str, str]) -> str | None:
    """Where two tables differ only in columns one of them lacks (after renaming A's columns):
    which columns those are; None where a value in a shared column differs."""
    da, db = (pd.read_csv(x, comment="#", dtype=str, keep_default_na=False) for x in (p, q))
    da = da.rename(columns=renames)
    shared = [c for c in da if c in db]
    if len(da) != len(db) or not da[shared].equals(db[shared]):
        return None
    only_a, only_b = [c for c in da if c not in db], [c for c in db if c not in da]
    return "; ".join(x for x in (f"only in A: {', '.join(only_a)}" if only_a else "",
                                 f"only in B: {', '.join(only_b)}" if only_b else "",
                                 f"renamed: {', '.join(f'{o}={n}' for o, n in renames.items())}"
                                 if renames else "") if x)


def compare(a: Path, b: Path, renames: dict | None = None) -> list[tuple[str, bool, str]]:
    renames = renames or {}
    out = []
    for p in sorted((a / "models").rglob("*")):
        if p.is_file() and (p.suffix in MODEL_FILES or p.name in ("config.json",
                                                                 "tokenizer.json")):
            q = b / p.relative_to(a)
            out.append((str(p.relative_to(a)), q.exists() and sha(p) == sha(q), sha(p)[:16]))
    for p in sorted((a / "traces").rglob("*.parquet")):
        ta, tb = read_trace(p), read_trace(b / p.relative_to(a))
        same = np.array_equal(ta.experts, tb.experts) and ta.columns.keys() == tb.columns.keys() \
            and all(np.array_equal(ta.columns[c], tb.columns[c]) for c in ta.columns)
        out.append((str(p.relative_to(a)), same, f"{len(ta)} rows"))
    for p in sorted((a / "tables").glob("*.csv")):
        if p.stem in TIMING:
            continue
        q = b / "tables" / p.name
        if p.stem == "step_model":  # the prediction; its measured columns are timings
            da, db = (pd.read_csv(x, comment="#") for x in (p, q))
            da, db = (d[[c for c in d if "measured" not in c]] for d in (da, db))
            out.append((str(p.relative_to(a)), da.equals(db), f"{len(da)} rows, predicted"))
            continue
        if p.stem == "comparison":
            da, db = (pd.read_csv(x, comment="#") for x in (p, q))
            da, db = (d[~d["table"].isin(TIMING)].reset_index(drop=True) for d in (da, db))
            out.append((str(p.relative_to(a)), da.equals(db), f"{len(da)} non-timing rows"))
            continue
        la, lb = ([ln for ln in x.read_text().splitlines() if not ln.startswith("#")]
                  for x in (p, q))
        if la != lb and q.exists():
            cols = same_values(p, q, renames.get(p.stem, {}))
            if cols is not None:
                out.append((str(p.relative_to(a)), "cols", f"{len(la) - 1} rows, same values; "
                            f"{cols}"))
                continue
        out.append((str(p.relative_to(a)), la == lb, f"{len(la) - 1} rows"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--rename", action="append", default=[], metavar="TABLE:OLD=NEW",
                    help="A's column OLD of TABLE is B's NEW (repeatable)")
    ap.add_argument("--schema", action="store_true",
                    help="a table whose shared columns hold the same values counts as identical")
    args = ap.parse_args()
    renames: dict[str, dict[str, str]] = {}
    for r in args.rename:
        try:
            table, pair = r.split(":", 1)
            old, new = pair.split("=", 1)
        except ValueError:
            ap.error(f"--rename {r!r}: give TABLE:OLD=NEW")
        renames.setdefault(table, {})[old] = new
    for run in (args.run_a, args.run_b):
        if not (run / "results" / "tables").is_dir():
            ap.error(f"{run}: no results/tables/ here: give the run's directory (the one holding "
                     "results/), after a complete run")
    rows = compare(args.run_a / "results", args.run_b / "results", renames)
    for name, same, what in rows:
        print(f"{'cols' if same == 'cols' else 'same' if same else 'DIFF'}  {name}  ({what})")
    n_same = sum(s is True for _, s, _ in rows)
    n_cols = sum(s == "cols" for _, s, _ in rows)
    print(f"{n_same} of {len(rows)} identical" + (f", {n_cols} with the same values in their "
                                                   "shared columns" if n_cols else ""))
    sys.exit(0 if n_same + (n_cols if args.schema else 0) == len(rows) else 1)


if __name__ == "__main__":
    main()
