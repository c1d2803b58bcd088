"""The study's datasets, normalised into the prompt-table schema (prompt_id, dataset, category, text).

Where vLLM's `bench serve` already reads a dataset, its own loader reads it here too, so that the
prompts are the ones vLLM would send:
- MT-Bench and Spec-Bench (`question.jsonl`: question_id, category, turns): vLLM's `SpecBench`
  loader, one category at a time; the first turn is the prompt.
- ShareGPT (a JSON list of {id, conversations: [{from, value}, ...]}): vLLM's `ShareGPTDataset`;
  the first turn is the prompt.
- InstructCoder (parquet: instruction, input, output): vLLM's `InstructCoderDataset` prompt
  (the input, then the instruction and "Just output the code").
No vLLM loader exists for these two, so they are read as published:
- Aya (parquet: inputs, targets, language, language_code, ...): `inputs`, one category per language,
  for the configured held-out languages.
- SPEED-Bench (parquet per config, e.g. throughput_32k/: question_id, category, turns, ...): the
  first turn, by category.
"""

from __future__ import annotations

import csv
import glob
import io
from pathlib import Path

from ..errors import InputError
from .prompts import COLUMNS, prompt_limits

FORMATS = ("mt-bench", "spec-bench", "sharegpt", "instructcoder", "aya", "speed-bench")
DEFAULT_FILES = {
    "mt-bench": ["question.jsonl"],
    "spec-bench": ["question.jsonl", "data/spec_bench/question.jsonl"],
    "sharegpt": ["ShareGPT_V3_unfiltered_cleaned_split.json"],
    "instructcoder": ["*.parquet", "data/*.parquet"],
    "aya": ["data/*.parquet", "*.parquet"],
    "speed-bench": ["throughput_32k/*.parquet"],
}


def _vllm_datasets():
    try:
        from vllm.benchmarks.datasets import datasets as vd
    except ImportError as exc:
        raise InputError("reading this dataset uses vLLM's own loader: install the `cpu` or `gpu` "
                         f"extra ({exc})") from None
    return vd


def _files(root: Path, patterns: list[str], what: str) -> list[Path]:
    found = sorted({Path(p) for pat in patterns for p in glob.glob(str(root / pat))})
    if not found:
        raise InputError(f"{what}: no file matching {', '.join(patterns)} under {root}")
    return found


def _kind(value) -> str:
    """What a cell holds, for a message."""
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, list):
        return "an empty list" if not value else "a list that holds " + ", ".join(
            sorted({type(v).__name__ for v in value if not isinstance(v, str)}))
    return f"a {type(value).__name__}"


def _first_turn(path: Path, row: int, turns) -> str:
    """The first turn of a row's `turns`: a non-empty list of strings (a parquet file's list
    arrives as an array), else InputError naming the file, row and column (a string's first
    character would otherwise be the prompt, an empty list an IndexError)."""
    if hasattr(turns, "tolist") and not isinstance(turns, str):
        turns = turns.tolist()
    if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
        raise InputError(f"{path}: column 'turns' of row {row} is {_kind(turns)}, not a "
                         "non-empty list of strings")
    return turns[0]


def _check_text(path: Path, df, column: str, empty: bool = True) -> None:
    """Every cell of a text column is a string (a null one would become the prompt 'nan', or the
    category 'nan'), and not an empty one where `empty` is False (a category: vLLM's SpecBench
    reads the category '' as no category at all); rows by their number in the file."""
    for row, value in zip(df.index, df[column]):
        if not isinstance(value, str) or not (empty or value):
            raise InputError(f"{path}: column '{column}' of row {row} is {_kind(value)}, not "
                             + ("text" if empty else "a category's name"))


def _read_parquet(path: Path, columns: list[str], what: str):
    """The columns of a parquet file, each checked to be there first (else one line naming the
    file and the missing columns, not pyarrow's error)."""
    import pandas as pd
    import pyarrow.parquet as pq

    try:
        have = pq.read_schema(path).names
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors vary; mapped to one line
        raise InputError(f"{path}: not a readable parquet file ({exc})") from None
    missing = [c for c in columns if c not in have]
    if missing:
        raise InputError(f"{path}: no column {', '.join(map(repr, missing))} (a {what} file "
                         f"has {', '.join(map(repr, columns))})")
    return pd.read_parquet(path, columns=columns)


def _questions(path: Path) -> list[tuple[str, str]]:
    """(category, first turn) in file order, through vLLM's SpecBench loader, after checking
    the file is JSON lines whose rows each have a category (a non-empty string: the loader reads
    '' as every category, and a null one matches no row) and a non-empty list of turns."""
    import pandas as pd

    vd = _vllm_datasets()
    try:
        cats = pd.read_json(path, lines=True)
    except ValueError as exc:
        raise InputError(f"{path}: not a question.jsonl (one JSON object a line: {exc})") from None
    missing = [c for c in ("category", "turns") if c not in cats.columns]
    if missing:
        raise InputError(f"{path}: no column {', '.join(map(repr, missing))} (not a "
                         "question.jsonl: each line has 'category' and 'turns')")
    _check_text(path, cats, "category", empty=False)
    for row, turns in enumerate(cats["turns"]):
        _first_turn(path, row, turns)
    out = []
    for cat in dict.fromkeys(cats["category"]):
        data = vd.SpecBench(dataset_path=str(path), category=cat, disable_shuffle=True).data
        out += [(cat, d["prompt"]) for d in data]
    return out


def _sharegpt(path: Path) -> list[tuple[str, str]]:
    vd = _vllm_datasets()
    data = vd.ShareGPTDataset(dataset_path=str(path), disable_shuffle=True).data
    return [("sharegpt", e["conversations"][0]["value"]) for e in data]


class _Rows:
    """The `.take(n)` that vLLM's HF loaders iterate, over rows read from parquet."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def take(self, n: int):
        return self.rows[:n]


def _instructcoder(paths: list[Path]) -> list[tuple[str, str]]:
    import pandas as pd

    vd = _vllm_datasets()
    frames = []
    for p in paths:  # a null cell would be the text 'nan' in the prompt
        df = _read_parquet(p, ["instruction", "input"], "InstructCoder")
        _check_text(p, df, "instruction")
        _check_text(p, df, "input")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    loader = vd.InstructCoderDataset.__new__(vd.InstructCoderDataset)  # no load_dataset call
    loader.data = _Rows(df.to_dict("records"))
    return [("instructcoder", p) for p in loader.sample_prompts(n=len(df))]


def _aya(paths: list[Path], languages: list[str] | None) -> list[tuple[str, str]]:
    import pandas as pd

    frames = []
    for p in paths:
        df = _read_parquet(p, ["inputs", "language"], "Aya")
        if languages:
            df = df[df["language"].isin(languages)]
        _check_text(p, df, "inputs")
        _check_text(p, df, "language", empty=False)  # its category
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    if languages:
        unknown = sorted(set(languages) - set(df["language"]))
        if unknown:
            raise InputError(f"Aya has no language(s) {', '.join(unknown)}")
    return [(lang, text) for text, lang in zip(df["inputs"], df["language"])]


def _speed_bench(paths: list[Path]) -> list[tuple[str, str]]:
    out = []
    for p in paths:
        df = _read_parquet(p, ["category", "turns"], "SPEED-Bench")
        _check_text(p, df, "category", empty=False)
        out += [(c, _first_turn(p, row, t))
                for row, (c, t) in enumerate(zip(df["category"], df["turns"]))]
    return out


def normalise(name: str, spec: dict, root: str | Path) -> list[dict]:
    """The prompt rows of dataset `name` (config entry `spec`) from its files under `root`."""
    fmt = spec["format"]
    if fmt not in FORMATS:
        raise InputError(f"dataset {name}: unknown format '{fmt}' (known: {', '.join(FORMATS)})")
    root = Path(root)
    files = _files(root, spec.get("files") or DEFAULT_FILES[fmt], f"dataset {name}")
    if fmt in ("mt-bench", "spec-bench"):
        pairs = [p for f in files for p in _questions(f)]
    elif fmt == "sharegpt":
        pairs = [p for f in files for p in _sharegpt(f)]
    elif fmt == "instructcoder":
        pairs = _instructcoder(files)
    elif fmt == "aya":
        pairs = _aya(files, spec.get("languages"))
    else:
        pairs = _speed_bench(files)
    cat_limit, limit = prompt_limits(spec)
    rows, per_cat = [], {}
    for cat, text in pairs:
        if not str(text).strip():
            continue
        i = per_cat.get(cat, 0)
        if (cat_limit and i >= cat_limit) or (limit and len(rows) >= limit):
            continue
        per_cat[cat] = i + 1
        rows.append({"prompt_id": f"{name}/{cat}/{i:05d}", "dataset": name, "category": cat,
                     "text": text})
    if not rows:
        raise InputError(f"dataset {name}: no prompts after normalisation")
    return rows


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def summary(rows: list[dict]) -> dict:
    cats: dict[str, int] = {}
    for r in rows:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    return {"prompts": len(rows), "categories": cats}
