"""A run's identity: a target, its drafter, K (the draft length) and a dataset, as one type with one
string form for paths and one for labels, each built and parsed here only.

- path: "tiny-fine/tiny-drafter/K3/tinybench", where the run's files lie under results/<kind>/
  (specmoe.paths.RUN), how its jobs are named ("capture tiny-fine/tiny-drafter/K3/tinybench") and
  its key in the report's tables (their `run` column); a part of one names a serving series
  ("tiny-fine/tiny-drafter/K3") or a model alone. `Run.parse` reads it back.
- label: "tiny-fine, K=3, tinybench+2", how titles, legends and sentences name a run (the
  dataset in its short form: a main set and two held-out sets).

A result's JSON and a trace's metadata hold a run as its fields (`Run.as_dict`); `Run.of` reads
those, a job's wildcards or a table's row. Whether a model is an untrained control is not part of
a run: the tables carry it as data (their `control_of` column, specmoe.report.runs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InputError

FIELDS = ("model", "drafter", "k", "dataset")
K_PREFIX = "K"  # K as a path names it: K3
_K_PART = re.compile(rf"^{K_PREFIX}([0-9]+)$")


def path_of(model, drafter="", k=None, dataset="") -> str:
    """The path form of a run or of a part of one (empty parts left out): "m/d/K3/ds", a series
    "m/d/K3", a model "m". Wildcards in braces make a pattern ("{model}/{drafter}/K{k}/...")."""
    parts = [model, drafter, f"{K_PREFIX}{k}" if k not in ("", None) else "", dataset]
    return "/".join(str(p) for p in parts if p)


DATASET_JOIN = "+"  # a run's dataset joins its main set and its held-out sets: "a+b+c"


def dataset_parts(ds: str) -> list[str]:
    """The datasets a run's dataset joins, in order: its main set, then its held-out sets
    ("tinybench+heldout-code" -> ["tinybench", "heldout-code"])."""
    return str(ds).split(DATASET_JOIN)


def max_batch_of(datasets: dict, dataset: str) -> int | None:
    """The largest batch size the sweeps measure `dataset` at, from the configuration's datasets
    section: its `max_batch` ("a+b": the least of its parts'); None: every batch size."""
    caps = [int(datasets[p]["max_batch"]) for p in dataset_parts(dataset)
            if (datasets.get(p) or {}).get("max_batch") is not None]
    return min(caps) if caps else None


def datasets_in(names) -> list[str]:
    """Every dataset that the runs' datasets `names` join, once each, sorted."""
    return sorted({p for ds in names for p in dataset_parts(ds)})


def short_dataset(ds: str) -> str:
    """A run's dataset in a few characters: "tinybench+heldout-code+heldout-prose" (a main set
    and two held-out sets) reads "tinybench+2"."""
    parts = dataset_parts(ds)
    return parts[0] + (f"+{len(parts) - 1}" if len(parts) > 1 else "")


def label_of(model: str, k, dataset: str | None = None, shape: str | None = None) -> str:
    """The label form: "tiny-fine, K=3, tinybench+2"; without a dataset "tiny-fine, K=3"; a speedup
    curve's legend names the shape of its curve instead of the dataset: "tiny-fine, K=3
    (rising)"."""
    label = f"{model}, K={int(k)}"
    if dataset is not None:
        label += f", {short_dataset(dataset)}"
    if shape is not None:
        label += f" ({shape})"
    return label


def draft_length(value, where: str = "run") -> int:
    """K from a wildcard, a JSON field or a table's cell ("3", 3, 3.0): a whole number >= 1."""
    try:
        k = int(value)
        ok = k == float(value) and k >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"{where}: K must be a whole number >= 1 (got {value!r})")
    return k


@dataclass(frozen=True)
class Run:
    """One run: a routing capture, its analyses and its serving series' share of one dataset."""
    model: str
    drafter: str
    k: int
    dataset: str

    def __post_init__(self):
        object.__setattr__(self, "k", draft_length(self.k, f"run of {self.model}"))

    @classmethod
    def of(cls, source) -> "Run":
        """A run from anything that names its four fields: a job's wildcards (attributes), a
        result's `run` record or a table's row (keys). A missing field is an error."""
        get = source.get if isinstance(source, Mapping) else (
            lambda f: getattr(source, f, None))
        values = {f: get(f) for f in FIELDS}
        missing = [f for f, v in values.items() if v is None or v == ""]
        if missing:
            raise InputError(f"not a run: {dict(values)} has no {', '.join(missing)}")
        return cls(**values)

    @classmethod
    def parse(cls, text: str) -> "Run":
        """A run from its path form, "model/drafter/K3/dataset"."""
        parts = str(text).split("/")
        m = _K_PART.match(parts[2]) if len(parts) == 4 else None
        if m is None or not all(parts):
            raise InputError(f"not a run: {text!r} (a run reads model/drafter/K<n>/dataset)")
        return cls(parts[0], parts[1], int(m.group(1)), parts[3])

    def as_dict(self) -> dict:
        """Its fields, as results' JSON and patterns' wildcards hold them."""
        return {"model": self.model, "drafter": self.drafter, "k": self.k,
                "dataset": self.dataset}

    def fill(self, pattern: str) -> str:
        """A results/ pattern (specmoe.paths) filled for this run."""
        return pattern.format(**self.as_dict())

    @property
    def path(self) -> str:
        return path_of(self.model, self.drafter, self.k, self.dataset)

    @property
    def label(self) -> str:
        return label_of(self.model, self.k, self.dataset)

    def __str__(self) -> str:
        return self.path
