"""The prompt table: one schema for the embedded prompt set and the study's datasets.

Columns: prompt_id (unique), dataset, category (or held-out slice), text. The embedded set
(`builtin:v1`, src/specmoe/data/prompts_v1.csv) has 80 prompts in 8 categories (dataset `tinybench`)
and two held-out slices (`heldout-code`, `heldout-prose`), written for this project.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import InputError
from ..provenance import past_provenance
from ..runs import dataset_parts

COLUMNS = ("prompt_id", "dataset", "category", "text")
DEFAULT_SOURCE = "builtin:v1"  # the tiny models' prompts unless tiny.prompts names others
BUILTIN = {DEFAULT_SOURCE: "prompts_v1.csv"}


@dataclass(frozen=True)
class Prompt:
    prompt_id: str
    dataset: str
    category: str
    text: str


def _open(source: str):
    """The table's file, past its provenance line where it has one (results/prompts/ tables do,
    a user's own need not)."""
    if source in BUILTIN:
        return resources.files("specmoe.data").joinpath(BUILTIN[source]).open(newline="")
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path}: no such prompt table (or use one of {', '.join(BUILTIN)})")
    return past_provenance(path.open(newline=""))


def load(source: str = DEFAULT_SOURCE, datasets: list[str] | None = None) -> list[Prompt]:
    """Read and check a prompt table; keep the given datasets (all if None).

    A dataset name "a+b" stands for datasets a and b together.
    """
    with _open(source) as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{source}: prompt table lacks column(s) {', '.join(missing)}")
        rows = [Prompt(**{c: r[c] for c in COLUMNS}) for r in reader]
    seen: set[str] = set()
    for r in rows:
        if r.prompt_id in seen:
            raise InputError(f"{source}: duplicate prompt_id '{r.prompt_id}'")
        seen.add(r.prompt_id)
        if not r.text.strip():
            raise InputError(f"{source}: prompt '{r.prompt_id}' is empty")
    if datasets is not None:
        datasets = [d for name in datasets for d in dataset_parts(name)]
        known = {r.dataset for r in rows}
        unknown = [d for d in datasets if d not in known]
        if unknown:
            raise InputError(f"{source}: no dataset(s) {', '.join(unknown)} (has "
                             f"{', '.join(sorted(known))})")
        rows = [r for r in rows if r.dataset in datasets]
    return rows


def interleave(prompts: list[Prompt]) -> list[Prompt]:
    """The prompts round-robin over their (dataset, category) slices, in order of first
    appearance: any first n of them hold every slice in the same proportions, so that points
    measured on fewer prompts see the same category mix as those measured on more."""
    slices: dict[tuple[str, str], list[Prompt]] = {}
    for p in prompts:
        slices.setdefault((p.dataset, p.category), []).append(p)
    out, queues = [], [list(v) for v in slices.values()]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def prompt_limits(spec: dict) -> tuple[int | None, int | None]:
    """(per category, in all) the most prompts a dataset's table keeps (config entry `spec`;
    sources.studydata.normalise keeps to them): its `max_prompts` in all, but Aya's per language
    (in all: times its languages, not known without them); None: no limit, or not known before
    its download."""
    limit = int(spec["max_prompts"]) if spec.get("max_prompts") else None
    if limit and spec.get("format") == "aya":
        return limit, limit * len(spec["languages"]) if spec.get("languages") else None
    return None, limit


def distinct_prompts(rows: list[Prompt], limit: int | None) -> list[Prompt]:
    """The prompts a capture runs: each distinct prompt once, at most `limit`. Greedy decoding
    commits the same tokens for a repeated prompt, so a repeat would count one prompt's windows
    again in every statistic (pseudo-replication); a small set stays small."""
    seen, out = set(), []
    for r in interleave(rows):
        if r.text not in seen:
            seen.add(r.text)
            out.append(r)
    return out[:limit] if limit else out


def schedule(prompts: list[Prompt], n: int, set_size: int | None = None) -> list[Prompt]:
    """n prompts from one prompt set: the first `set_size` prompts (all by default), interleaved
    over slices so that every prefix has the set's category mix; up to the set's size each prompt
    once, beyond it the set again and again (the study's rule: one prompt set up to its size,
    oversampled beyond; cycling keeps the mix exact where random draws would not)."""
    if not prompts:
        raise InputError("no prompts to schedule")
    base = interleave(prompts)[:set_size]
    return [base[i % len(base)] for i in range(n)]
