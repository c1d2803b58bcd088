"""Are two runs of one configuration the same, bit for bit, where they should be?

Compares run directories A and B (each with results/): the sha256 of every model file (weights,
config, tokenizer, token arrays, manifests; a training's manifest without its wall time and when
it ran, MANIFEST_TIMINGS) and of every trace's Parquet file (a captured trace records its engine's
start-up and generation times: of it, the columns, expert ids, router weights and its metadata
besides those times, TRACE_TIMINGS), the tokens of every SD check, every non-timing table's CSV
with its provenance line, and every timing table's CSV without its provenance line and without
its timing columns (TIMING_COLUMNS; in the three-step correction those of each row's step,
CORRECTION_INPUTS; the step model's table without its measured columns). Only a timing
measurement's provenance says when it was made (specmoe.provenance.provenance's `timed`), and
nothing else in a record changes between two runs on one machine. A file that only one run has
is a difference. Only finished runs are compared (each with its report, results/report/index.md,
which waits on every table its configuration declares), and two runs with neither a model file
nor a trace are refused: nothing of theirs would be compared.

Run: .venv/bin/python bench/compare_runs.py RUN_A RUN_B   (exit 1 if anything differs)

Across a change that adds or renames a table's columns on purpose, `--rename TABLE:OLD=NEW` (A's
column OLD is B's NEW) and `--schema` say, for each table whose text differs, whether every value
in the columns both runs have is the same: the line then reads `cols` with the columns only one
run has (or that only the provenance lines differ, as across two revisions whose records differ),
and such a table counts as identical only with `--schema`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from specmoe.cost.costmodel import CORRECTION_STEPS
from specmoe.errors import InputError
from specmoe.provenance import CSV_PROVENANCE
from specmoe.report.tables import read_csv
from specmoe.routing.trace import read_trace

REPORT = Path("report") / "index.md"  # under results/: written after every table

# Each timing table's columns that come from timing (clocks, or numbers derived from them) on
# every row: names, and prefixes ending in "*". Every other column of these tables (keys, settings
# such as the speedup's timing, the cost model's numbers, acceptance counts, grid sizes, device)
# is compared as in any table.
TIMING_COLUMNS = {
    "speedup_vs_batch": ("tpot_*", "speedup*", "draft_cost*", "te_sweep*", "shape", "direction",
                         "below_highest"),
    # a profiled value with its interval over engine starts, raw value and status (bounded_te)
    "te_three_ways": ("te_sweep*", "te_profiled*", "gap_sweep_minus_costmodel*", "moe_time_share*",
                      "draft_cost_profiled*"),
    "kernel_time_shares": ("decode_us", "verify_us", "decode_share*", "verify_share*",
                           "decode_kernel_share*", "ratio*"),
    "three_step_correction": ("te_sweep",),
}
# three_step_correction's inputs in the order its steps measure them (costmodel.CORRECTION_STEPS):
# step i has the first i measured, the others are the weight model's; its TE, the change from the
# step before and the share of the gap closed are timings from step 1 on (step 0, the weight
# baseline, is the cost model's alone)
CORRECTION_INPUTS = ("f", "s_moe", "s_dense")
# Snakemake's marker in a model folder: no weights, tokens or settings
MODEL_SKIP = (".snakemake_timestamp",)
# a trained model's manifest: its training's wall time and the time it ran (a timed record)
MANIFEST = "manifest.json"
# the times a captured trace's metadata holds: its provenance's engine start (its phases) and its
# capture's seconds (start-up, generation, the capture's own); everything else is compared
TRACE_TIMINGS = {"provenance": ("engine_start",), "capture": ("startup_s", "generate_s",
                                                              "capture_s")}
# the times a training's manifest holds (results/models/*/manifest.json): its wall time (top
# level, part None) and when it ran; its losses, parameters, tokens seen, tokenizer digest,
# architecture and training settings are compared
MANIFEST_TIMINGS = {None: ("wall_s",), "provenance": ("created",)}
SD_CHECK_FIELDS = ("sd_equals_plain", "mismatched_prompts", "sd_token_ids", "plain_token_ids",
                   "prompt_ids")


def is_timing(table: str, column: str, step: int | None = None) -> bool:
    """Is the column a timing of the table (on a three_step_correction row of `step`; without
    one: on every row)?"""
    cols = TIMING_COLUMNS.get(table, ())
    if table == "three_step_correction" and step:
        # a measured input with its interval, raw value and status (f, f_low, f_raw, f_status)
        cols += tuple(c for x in CORRECTION_INPUTS[:step] for c in (x, f"{x}_*")) + (
            "te*", "delta*", "gap_closed_pct*")
    return any(column == c or (c.endswith("*") and column.startswith(c[:-1])) for c in cols)


def step_of(table: str, row) -> int | None:
    """The three-step correction's step of a row: by its name in three_step_correction, by its
    key ("step i") in the comparison table; None in any other table."""
    if table == "three_step_correction":
        if row["name"] not in CORRECTION_STEPS:
            raise InputError(f"three_step_correction: {row['name']!r} is none of its steps "
                             f"({', '.join(CORRECTION_STEPS)})")
        return CORRECTION_STEPS.index(row["name"])
    if table == "comparison" and row["table"] == "three_step_correction":
        return int(str(row["key"]).removeprefix("step "))
    return None


def untimed(table: str, d: pd.DataFrame) -> pd.DataFrame:
    """A timing table without its timings: the columns that are one on every row left out, each
    cell that is one on its row (three_step_correction's, by the row's step) blanked."""
    steps = [step_of(table, r) for _, r in d.iterrows()]
    d = d[[c for c in d if not is_timing(table, c)]].copy()
    for c in d:
        d[c] = d[c].mask([is_timing(table, c, s) for s in steps], "")
    return d


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def timed_manifest(p: Path) -> bool:
    """Is a model folder's manifest a timed record (a training's: its provenance says when)?"""
    try:
        return "created" in (json.loads(p.read_text()).get("provenance") or {})
    except (json.JSONDecodeError, AttributeError):
        return False  # not a manifest the pipeline wrote: compared as any file


def without_timings(record: dict, timings: dict) -> tuple[dict, list[str]]:
    """A record (a trace's metadata, a training's manifest) without its times (`timings`: part ->
    keys, part None for the top level; TRACE_TIMINGS, MANIFEST_TIMINGS), and which it held."""
    record, held = dict(record), []
    for part, keys in timings.items():
        if part is None:
            held += [k for k in keys if record.pop(k, None) is not None]
        elif isinstance(record.get(part), dict):
            record[part] = dict(record[part])
            held += [f"{part}.{k}" for k in keys if record[part].pop(k, None) is not None]
    return record, held


def _manifest(p: Path, q: Path) -> tuple[bool, str]:
    """Two manifests of which one or both are a training's (timed): the same values besides
    their times (MANIFEST_TIMINGS)."""
    (ma, held_a), (mb, held_b) = (without_timings(json.loads(x.read_text()), MANIFEST_TIMINGS)
                                  for x in (p, q))
    return ma == mb, f"all but {', '.join(sorted(set(held_a + held_b)))}"


def _trace(p: Path, q: Path) -> tuple[bool, str]:
    """Two traces: the same Parquet bytes; where either records times (a captured trace), the
    same columns, expert ids, router weights and metadata besides its times."""
    ta, tb = read_trace(p, with_weights=True), read_trace(q, with_weights=True)
    (ma, held_a), (mb, held_b) = (without_timings(t.meta, TRACE_TIMINGS) for t in (ta, tb))
    if not held_a and not held_b:
        return sha(p) == sha(q), f"{len(ta)} rows, bytes"
    same = np.array_equal(ta.experts, tb.experts) and ta.columns.keys() == tb.columns.keys() \
        and all(np.array_equal(ta.columns[c], tb.columns[c]) for c in ta.columns) \
        and (ta.weights is None) == (tb.weights is None) \
        and (ta.weights is None or np.array_equal(ta.weights, tb.weights)) and ma == mb
    return same, f"{len(ta)} rows, all but {', '.join(sorted(set(held_a + held_b)))}"


def same_values(p: Path, q: Path, renames: dict[str, str]) -> str | None:
    """Where two tables differ only in columns one of them lacks (after renaming A's columns):
    which columns those are; None where a value in a shared column differs."""
    da, db = (read_csv(x, dtype=str, keep_default_na=False) for x in (p, q))
    da = da.rename(columns=renames)
    shared = [c for c in da if c in db]
    if len(da) != len(db) or not da[shared].equals(db[shared]):
        return None
    only_a, only_b = [c for c in da if c not in db], [c for c in db if c not in da]
    return "; ".join(x for x in (f"only in A: {', '.join(only_a)}" if only_a else "",
                                 f"only in B: {', '.join(only_b)}" if only_b else "",
                                 f"renamed: {', '.join(f'{o}={n}' for o, n in renames.items())}"
                                 if renames else "") if x)


def _files(a: Path, b: Path, folder: str, pattern: str, skip=()) -> list[Path]:
    """The relative paths of the files under folder in either run: a file one run lacks is a
    difference, not a file left out."""
    return sorted({p.relative_to(root) for root in (a, b) for p in (root / folder).rglob(pattern)
                   if p.is_file() and p.name not in skip})


def _table(p: Path, q: Path, renames: dict) -> tuple[bool | str, str]:
    stem = p.stem
    if stem == "step_model" or stem in TIMING_COLUMNS:  # the timing columns left out
        da, db = (read_csv(x, dtype=str, keep_default_na=False) for x in (p, q))
        if stem == "step_model":
            da, db = (d[[c for c in d if "measured" not in c]] for d in (da, db))
            return da.equals(db), f"{len(da)} rows, predicted"
        da, db = (untimed(stem, d) for d in (da, db))
        return da.equals(db), f"{len(da)} rows, non-timing columns"
    if stem == "comparison":
        da, db = (read_csv(x) for x in (p, q))
        da, db = (d[[not is_timing(r["table"], r["quantity"], step_of(stem, r))
                     for _, r in d.iterrows()]].reset_index(drop=True)
                  if len(d) else d for d in (da, db))
        return da.equals(db), f"{len(da)} non-timing rows"
    # a table of no timing: its bytes, its provenance line (no time in it) included
    (pa, la), (pb, lb) = (_provenance_and_rows(x) for x in (p, q))
    if la != lb:
        cols = same_values(p, q, renames.get(stem, {}))
        if cols is not None:
            return "cols", f"{len(la) - 1} rows, same values; {cols}"
    elif pa != pb:  # another configuration, package or machine (or revision: --schema)
        return "cols", f"{len(la) - 1} rows, same values; provenance lines differ"
    return p.read_bytes() == q.read_bytes(), f"{len(la) - 1} rows, bytes"


def _provenance_and_rows(p: Path) -> tuple[list[str], list[str]]:
    lines = p.read_text().splitlines()
    return ([ln for ln in lines if ln.startswith(CSV_PROVENANCE)],
            [ln for ln in lines if not ln.startswith(CSV_PROVENANCE)])


def compare(a: Path, b: Path, renames: dict | None = None) -> list[tuple[str, bool | str, str]]:
    renames = renames or {}
    out = []

    def both(rel: Path) -> bool:
        missing = [name for name, root in (("A", a), ("B", b)) if not (root / rel).is_file()]
        if missing:
            out.append((str(rel), False, "in neither run" if len(missing) == 2 else
                        f"only in {'B' if missing == ['A'] else 'A'}"))
        return not missing

    for name, root in (("A", a), ("B", b)):
        if not (root / REPORT).is_file():  # a run that stopped early lacks tables both may lack
            raise InputError(f"run {name} has no {REPORT}: not a finished run (give two complete "
                             "runs' directories)")
    models, traces = _files(a, b, "models", "*", MODEL_SKIP), _files(a, b, "traces", "*.parquet")
    if not models and not traces:
        raise InputError("no models/ or traces/ file in either run: nothing of theirs to compare "
                         "(give two complete runs' directories)")
    for rel in models:
        if not both(rel):
            continue
        if rel.name == MANIFEST and any(timed_manifest(root / rel) for root in (a, b)):
            out.append((str(rel), *_manifest(a / rel, b / rel)))  # a training's: but its times
        else:
            out.append((str(rel), sha(a / rel) == sha(b / rel), sha(a / rel)[:16]))
    for rel in traces:
        if both(rel):
            out.append((str(rel), *_trace(a / rel, b / rel)))
    for rel in _files(a, b, "sd_check", "*.json"):  # the tokens SD and plain decoding gave
        if both(rel):
            ja, jb = (json.loads((root / rel).read_text()) for root in (a, b))
            out.append((str(rel), all(ja.get(f) == jb.get(f) for f in SD_CHECK_FIELDS),
                        f"{len(ja.get('sd_token_ids') or [])} prompts' tokens"))
    for rel in _files(a, b, "tables", "*.csv"):
        if both(rel):
            out.append((str(rel), *_table(a / rel, b / rel, renames)))
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
    try:
        rows = compare(args.run_a / "results", args.run_b / "results", renames)
    except InputError as exc:
        ap.error(str(exc))
    for name, same, what in rows:
        print(f"{'cols' if same == 'cols' else 'same' if same else 'DIFF'}  {name}  ({what})")
    n_same = sum(s is True for _, s, _ in rows)
    n_cols = sum(s == "cols" for _, s, _ in rows)
    print(f"{n_same} of {len(rows)} identical" + (f", {n_cols} with the same values in their "
                                                   "shared columns" if n_cols else ""))
    sys.exit(0 if n_same + (n_cols if args.schema else 0) == len(rows) else 1)


if __name__ == "__main__":
    main()
