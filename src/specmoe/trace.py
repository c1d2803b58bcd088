"""The routing trace: one row per (request, SD step, window position), stored as Parquet.

Columns (schema version 1):
  request      int32   request index inside the trace
  prompt_id    string  id of the prompt in the prompt table (dictionary encoded)
  category     string  prompt category or held-out slice (dictionary encoded)
  model, drafter, dataset  string (dictionary encoded; constant within one trace)
  k_draft      int8    K, drafts requested per step
  step         int32   SD step index within the request
  position     int8    window position j (0 = last committed token, 1..K = drafts)
  n_drafts     int8    drafts the engine actually scheduled in this step (<= K)
  accepted     int8    accepted drafts in this step (a)
  status       int8    0 committed, 1 accepted, 2 first_rejected, 3 after_rejection
  token_id     int32
  experts      fixed_size_list<uint8|uint16>[L*k]  top-k expert ids, layer-major
  weights      fixed_size_list<float16>[L*k]       router weights (optional)

Schema-level metadata: `specmoe.schema_version` and `specmoe.meta` (JSON: num_layers, top_k,
num_experts, k_draft, provenance). Readers need only pyarrow and numpy.
Rows are sorted by (request, step, position); a window is a run of rows with the same (request, step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import TraceError
from .provenance import atomic_path

SCHEMA_VERSION = 1
STATUS = ("committed", "accepted", "first_rejected", "after_rejection")
COMMITTED, ACCEPTED, FIRST_REJECTED, AFTER_REJECTION = range(4)

_INT_COLUMNS = {
    "request": np.int32, "k_draft": np.int8, "step": np.int32, "position": np.int8,
    "n_drafts": np.int8, "accepted": np.int8, "status": np.int8, "token_id": np.int32,
}
_STR_COLUMNS = ("prompt_id", "category", "model", "drafter", "dataset")


def status_for(position: np.ndarray, accepted: np.ndarray) -> np.ndarray:
    """Acceptance status of each window position from the step's accepted count (SPEC.md)."""
    position = np.asarray(position)
    accepted = np.asarray(accepted)
    status = np.full(position.shape, AFTER_REJECTION, dtype=np.int8)
    status[position <= accepted + 1] = FIRST_REJECTED
    status[position <= accepted] = ACCEPTED
    status[position == 0] = COMMITTED
    return status


@dataclass
class Trace:
    """An in-memory routing trace. `experts` has shape (rows, num_layers, top_k)."""

    experts: np.ndarray
    columns: dict[str, np.ndarray]
    num_experts: int
    k_draft: int
    meta: dict[str, Any] = field(default_factory=dict)
    weights: np.ndarray | None = None

    @property
    def num_layers(self) -> int:
        return self.experts.shape[1]

    @property
    def top_k(self) -> int:
        return self.experts.shape[2]

    def __len__(self) -> int:
        return self.experts.shape[0]

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) of each verification window, in row order."""
        req = self.columns["request"].astype(np.int64)
        step = self.columns["step"].astype(np.int64)
        if len(req) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        new = np.ones(len(req), dtype=bool)
        new[1:] = (req[1:] != req[:-1]) | (step[1:] != step[:-1])
        starts = np.flatnonzero(new)
        lengths = np.diff(np.append(starts, len(req)))
        return starts.astype(np.int64), lengths.astype(np.int64)

    def validate(self, source: str = "trace") -> None:
        """Check internal consistency; raise TraceError with one line naming what is wrong."""
        t, n_layers, k = self.experts.shape
        if k < 1 or n_layers < 1:
            raise TraceError(f"{source}: empty expert arrays (layers={n_layers}, top_k={k})")
        if self.num_experts < k:
            raise TraceError(f"{source}: top_k={k} exceeds num_experts={self.num_experts}")
        if t and int(self.experts.max()) >= self.num_experts:
            raise TraceError(f"{source}: expert id {int(self.experts.max())} >= num_experts="
                             f"{self.num_experts}")
        for name in ("request", "step", "position", "status"):
            if name not in self.columns:
                raise TraceError(f"{source}: missing column '{name}'")
            if len(self.columns[name]) != t:
                raise TraceError(f"{source}: column '{name}' has {len(self.columns[name])} rows, "
                                 f"expected {t}")
        if t:
            key = (self.columns["request"].astype(np.int64) << 40) \
                + (self.columns["step"].astype(np.int64) << 8) + self.columns["position"]
            if np.any(np.diff(key) <= 0):
                raise TraceError(f"{source}: rows are not sorted by (request, step, position)")
            pos = self.columns["position"]
            if pos.min() < 0 or pos.max() > self.k_draft:
                raise TraceError(f"{source}: window position outside 0..K={self.k_draft}")


def _experts_type(num_experts: int) -> pa.DataType:
    return pa.uint8() if num_experts <= 256 else pa.uint16()


def write_trace(path: str | Path, trace: Trace, provenance: dict | None = None) -> None:
    """Write a trace atomically as Parquet (zstd), with schema version and provenance."""
    trace.validate(str(path))
    t, n_layers, k = trace.experts.shape
    etype = _experts_type(trace.num_experts)
    flat = pa.array(np.ascontiguousarray(trace.experts).reshape(-1).astype(etype.to_pandas_dtype()),
                    type=etype)
    arrays: dict[str, pa.Array] = {}
    for name, dtype in _INT_COLUMNS.items():
        if name in trace.columns:
            arrays[name] = pa.array(np.asarray(trace.columns[name]).astype(dtype))
    for name in _STR_COLUMNS:
        if name in trace.columns:
            arrays[name] = pa.array(np.asarray(trace.columns[name]).astype(str)).dictionary_encode()
    arrays["experts"] = pa.FixedSizeListArray.from_arrays(flat, n_layers * k)
    if trace.weights is not None:
        w = pa.array(np.asarray(trace.weights, dtype=np.float16).reshape(-1))
        arrays["weights"] = pa.FixedSizeListArray.from_arrays(w, n_layers * k)
    meta = dict(trace.meta)
    meta.update(num_layers=n_layers, top_k=k, num_experts=trace.num_experts, k_draft=trace.k_draft,
                rows=t)
    if provenance is not None:
        meta["provenance"] = provenance
    table = pa.table(arrays).replace_schema_metadata({
        "specmoe.schema_version": str(SCHEMA_VERSION),
        "specmoe.meta": json.dumps(meta, default=str),
    })
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=1 << 18)


def read_meta(path: str | Path) -> dict[str, Any]:
    """Only the metadata of a trace (cheap: reads the footer)."""
    path = Path(path)
    schema = _read_schema(path)
    return _parse_meta(path, schema)


def _read_schema(path: Path) -> pa.Schema:
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    try:
        return pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(f"{path}: not a readable Parquet file, truncated or corrupt "
                         f"({str(exc).splitlines()[0]})") from None


def _parse_meta(path: Path, schema: pa.Schema) -> dict[str, Any]:
    md = schema.metadata or {}
    version = md.get(b"specmoe.schema_version")
    if version is None:
        raise TraceError(f"{path}: not a specmoe routing trace (no specmoe.schema_version)")
    if int(version) != SCHEMA_VERSION:
        raise TraceError(f"{path}: trace schema version {int(version)}, this reader knows "
                         f"{SCHEMA_VERSION}")
    try:
        meta = json.loads(md[b"specmoe.meta"])
    except (KeyError, json.JSONDecodeError):
        raise TraceError(f"{path}: trace metadata missing or unreadable") from None
    for key in ("num_layers", "top_k", "num_experts", "k_draft"):
        if key not in meta:
            raise TraceError(f"{path}: trace metadata lacks '{key}'")
    return meta


def read_trace(path: str | Path, with_weights: bool = False) -> Trace:
    """Read a trace; any problem is a TraceError with one line naming the file and the fault."""
    path = Path(path)
    schema = _read_schema(path)
    meta = _parse_meta(path, schema)
    missing = [c for c in ("request", "step", "position", "status", "experts") if c not in schema.names]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
    cols = [c for c in schema.names if with_weights or c != "weights"]
    try:
        table = pq.read_table(path, columns=cols)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(f"{path}: truncated or corrupt ({str(exc).splitlines()[0]})") from None
    n_layers, k = int(meta["num_layers"]), int(meta["top_k"])
    ex = table.column("experts").combine_chunks()
    if not pa.types.is_fixed_size_list(ex.type) or ex.type.list_size != n_layers * k:
        raise TraceError(f"{path}: 'experts' is {ex.type}, expected fixed lists of "
                         f"{n_layers}x{k}")
    experts = ex.values.to_numpy(zero_copy_only=False).reshape(len(table), n_layers, k)
    weights = None
    if with_weights and "weights" in table.column_names:
        w = table.column("weights").combine_chunks()
        weights = w.values.to_numpy(zero_copy_only=False).reshape(len(table), n_layers, k)
    columns: dict[str, np.ndarray] = {}
    for name in table.column_names:
        if name in ("experts", "weights"):
            continue
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        columns[name] = col.to_numpy(zero_copy_only=False)
    trace = Trace(experts=experts, columns=columns, num_experts=int(meta["num_experts"]),
                  k_draft=int(meta["k_draft"]), meta=meta, weights=weights)
    trace.validate(str(path))
    return trace
