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
  experts      fixed_size_binary[L*k*w]  top-k expert ids as little-endian integers of w bytes
               (meta experts_dtype: uint8 when N <= 256, uint16 when N <= 65,536, else uint32),
               layer-major: id of (layer l, slot i) at element l*k + i
  weights      fixed_size_binary[L*k*2]  router weights as little-endian float16 (optional)

The id matrix is stored as fixed-size binary rather than a list column because Parquet decodes
flat fixed-width values at memory speed and nested lists about 40x slower; any reader gets the ids
back with numpy.frombuffer(column.buffers()[1], dtype).reshape(rows, L, k).
Schema-level metadata: `specmoe.schema_version` and `specmoe.meta` (JSON: num_layers, top_k,
num_experts, k_draft, experts_dtype, provenance). Readers need only pyarrow and numpy.
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

from ..errors import TraceError
from ..provenance import atomic_path
from .unique import MAX_POSITIONS

SCHEMA_VERSION = 1
STATUS = ("committed", "accepted", "first_rejected", "after_rejection")
COMMITTED, ACCEPTED, FIRST_REJECTED, AFTER_REJECTION = range(4)

_INT_COLUMNS = {
    "request": np.int32, "k_draft": np.int8, "step": np.int32, "position": np.int8,
    "n_drafts": np.int8, "accepted": np.int8, "status": np.int8, "token_id": np.int32,
}
# the per-row columns every trace has (SPEC: request, step, position, token id, acceptance)
REQUIRED_COLUMNS = ("request", "step", "position", "token_id", "accepted", "status")
_STR_COLUMNS = ("prompt_id", "category", "model", "drafter", "dataset")


def status_for(position: np.ndarray, accepted: np.ndarray) -> np.ndarray:
    """Acceptance status of each window position from the step's accepted count (docs/method.md, "Setting")."""
    position = np.asarray(position)
    accepted = np.asarray(accepted)
    status = np.full(position.shape, AFTER_REJECTION, dtype=np.int8)
    status[position <= accepted + 1] = FIRST_REJECTED
    status[position <= accepted] = ACCEPTED
    status[position == 0] = COMMITTED
    return status


def _status_name(code: int) -> str:
    """A status code as the error messages name it: 2 (first_rejected), 7 (no status)."""
    return f"{code} ({STATUS[code] if 0 <= code < len(STATUS) else 'no status'})"


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
        # no windows, no statistic: a trace of no rows gave an independence baseline of 0 below
        # its floor k/N, and failed in the overlap stage and in write_trace with numpy's errors
        if t == 0:
            raise TraceError(f"{source}: the trace has no rows")
        # K = 0 (windows of the committed token alone) has no distance to measure and failed in
        # the overlap stage with an IndexError; K past the window the IPF fits, in its stage
        if not 1 <= self.k_draft <= MAX_POSITIONS - 1:
            raise TraceError(f"{source}: K={self.k_draft} is outside 1..{MAX_POSITIONS - 1}, the "
                             "drafts per step the statistics take")
        if self.num_experts < k:
            raise TraceError(f"{source}: top_k={k} exceeds num_experts={self.num_experts}")
        if int(self.experts.max()) >= self.num_experts:
            raise TraceError(f"{source}: expert id {int(self.experts.max())} >= num_experts="
                             f"{self.num_experts}")
        if int(self.experts.min()) < 0:  # written, -1 became 255: an expert of N = 256
            raise TraceError(f"{source}: expert id {int(self.experts.min())} is negative")
        if k > 1:  # a token's k experts are k different ones
            twice = (np.diff(np.sort(self.experts, axis=2), axis=2) == 0).any(axis=2)
            if twice.any():
                row, layer = (int(x[0]) for x in np.nonzero(twice))
                raise TraceError(f"{source}: row {row} routes to one expert twice in layer "
                                 f"{layer} ({int(twice.sum())} such row-layers): top-k experts "
                                 "are distinct")
        for name in REQUIRED_COLUMNS:
            if name not in self.columns:
                raise TraceError(f"{source}: missing column '{name}'")
            if len(self.columns[name]) != t:
                raise TraceError(f"{source}: column '{name}' has {len(self.columns[name])} rows, "
                                 f"expected {t}")
        key = (self.columns["request"].astype(np.int64) << 40) \
            + (self.columns["step"].astype(np.int64) << 8) + self.columns["position"]
        if np.any(np.diff(key) <= 0):
            raise TraceError(f"{source}: rows are not sorted by (request, step, position)")
        pos = self.columns["position"]
        if pos.min() < 0 or pos.max() > self.k_draft:
            raise TraceError(f"{source}: window position outside 0..K={self.k_draft}")
        self._check_whole_windows(source)
        self._check_consecutive_steps(source)
        self._check_acceptance(source)
        run_k = (self.meta.get("run") or {}).get("k")
        if run_k is not None and int(run_k) != self.k_draft:  # K is one number: the tables read
            raise TraceError(f"{source}: its run says K={run_k} but its windows K={self.k_draft}")

    def _check_acceptance(self, source: str) -> None:
        """Each window's acceptance can be: one accepted count (and one n_drafts, where recorded)
        for all its rows, 0 <= accepted <= its drafts (the window's rows less position 0, which
        _check_whole_windows holds equal to n_drafts), and each row's status the one status_for
        gives its position. A window that breaks any is an error naming its request and step
        (acceptance and the status-split statistics read these columns as they stand)."""
        starts, lengths = self.windows()
        window_of = np.repeat(np.arange(len(starts)), lengths)
        acc = self.columns["accepted"].astype(np.int64)
        first = acc[starts]
        problems = [(acc != first[window_of], "its rows' accepted counts differ")]
        if "n_drafts" in self.columns:
            nd = self.columns["n_drafts"].astype(np.int64)
            problems.append((nd != nd[starts][window_of], "its rows' n_drafts differ"))
        drafts = lengths - 1
        bad_count = np.repeat((first < 0) | (first > drafts), lengths)
        problems.append((bad_count, "accepted {acc} is outside 0..{drafts}, its drafts"))
        status = self.columns["status"].astype(np.int64)
        want = status_for(self.columns["position"], acc)
        problems.append((status != want, "position {pos} has status {status}, where its "
                                          "accepted count {acc} gives {want}"))
        for bad, what in problems:
            if not bad.any():
                continue
            row = int(np.argmax(bad))
            w = int(window_of[row])
            what = what.format(acc=int(acc[row]), drafts=int(drafts[w]),
                               pos=int(self.columns["position"][row]),
                               status=_status_name(int(status[row])),
                               want=_status_name(int(want[row])))
            raise TraceError(
                f"{source}: the window of request {int(self.columns['request'][row])} step "
                f"{int(self.columns['step'][row])}: {what} ({int(np.unique(window_of[bad]).size)} "
                "such window(s))")

    def _check_consecutive_steps(self, source: str) -> None:
        """A request's windows are steps s, s + 1, ... without a gap (its first need not be
        step 0): the committed sequence joins its windows, and a lost window would pair the tokens
        on either side of it as adjacent."""
        starts, _ = self.windows()
        req = self.columns["request"][starts].astype(np.int64)
        step = self.columns["step"][starts].astype(np.int64)
        gap = (req[1:] == req[:-1]) & (step[1:] != step[:-1] + 1)
        if gap.any():
            w = int(np.argmax(gap))
            raise TraceError(f"{source}: request {int(req[w])} has no window at step "
                             f"{int(step[w]) + 1} (its steps go from {int(step[w])} to "
                             f"{int(step[w + 1])}): a window is missing")

    def _check_whole_windows(self, source: str) -> None:
        """Each window is whole: positions 0, 1, ... in a row, as many as the engine scheduled
        (n_drafts + 1, where recorded); a window with a row cut out is an error naming it."""
        starts, lengths = self.windows()
        window_of = np.repeat(np.arange(len(starts)), lengths)
        pos = self.columns["position"].astype(np.int64)
        broken = np.zeros(len(starts), dtype=bool)
        broken[window_of[pos != np.arange(len(pos)) - starts[window_of]]] = True
        want = lengths
        if "n_drafts" in self.columns:
            want = self.columns["n_drafts"][starts].astype(np.int64) + 1
            broken |= lengths != want
        if broken.any():
            w = int(np.argmax(broken))
            row = int(starts[w])
            raise TraceError(
                f"{source}: the window of request {int(self.columns['request'][row])} step "
                f"{int(self.columns['step'][row])} is not whole: positions "
                f"{pos[row:row + int(lengths[w])].tolist()} where 0..{int(want[w]) - 1} are "
                "expected (a row is missing)")


def _experts_dtype(num_experts: int) -> np.dtype:
    """The narrowest unsigned integer that holds every expert id 0..N-1."""
    for dtype in ("<u1", "<u2", "<u4"):
        if num_experts <= np.iinfo(np.dtype(dtype)).max + 1:
            return np.dtype(dtype)
    raise TraceError(f"num_experts={num_experts} does not fit the trace's expert ids (at most "
                     f"{np.iinfo(np.uint32).max + 1:,})")


def _fitted(name: str, values, dtype) -> np.ndarray:
    """An integer column in its stored type; a value the type cannot hold is an error, never a
    wrapped number."""
    v = np.asarray(values)
    info = np.iinfo(dtype)
    if v.size and (v.min() < info.min or v.max() > info.max):
        bad = v.max() if v.max() > info.max else v.min()
        raise TraceError(f"column '{name}' holds {int(bad):,}, beyond its {np.dtype(dtype).name} "
                         f"range {info.min:,}..{info.max:,}")
    return v.astype(dtype)


def _fixed_binary(values: np.ndarray) -> pa.Array:
    """(rows, ...) array -> fixed_size_binary column of each row's little-endian bytes."""
    rows = np.ascontiguousarray(values).reshape(values.shape[0], -1)
    width = rows.shape[1] * rows.dtype.itemsize
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), rows.shape[0],
                                                [None, pa.py_buffer(rows.tobytes())])


def _from_fixed_binary(col: pa.ChunkedArray | pa.Array, dtype: np.dtype,
                       shape: tuple) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        raise ValueError("null rows")
    width = arr.type.byte_width
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype=dtype, count=len(arr) * width // dtype.itemsize,
                         offset=arr.offset * width).reshape(shape)


def write_trace(path: str | Path, trace: Trace, provenance: dict | None = None) -> None:
    """Write a trace atomically as Parquet (LZ4), with schema version and provenance."""
    arrays: dict[str, pa.Array] = {}
    for name, dtype in _INT_COLUMNS.items():  # first: a value its column cannot hold is the fault
        if name in trace.columns:
            arrays[name] = pa.array(_fitted(name, trace.columns[name], dtype))
    trace.validate(str(path))
    t, n_layers, k = trace.experts.shape
    edtype = _experts_dtype(trace.num_experts)
    for name in _STR_COLUMNS:
        if name in trace.columns:
            arrays[name] = pa.array(np.asarray(trace.columns[name]).astype(str)).dictionary_encode()
    arrays["experts"] = _fixed_binary(trace.experts.astype(edtype, copy=False))
    if trace.weights is not None:
        arrays["weights"] = _fixed_binary(np.asarray(trace.weights, dtype="<f2"))
    meta = dict(trace.meta)
    meta.update(num_layers=n_layers, top_k=k, num_experts=trace.num_experts, k_draft=trace.k_draft,
                rows=t, experts_dtype=edtype.name)
    if provenance is not None:
        meta["provenance"] = provenance
    table = pa.table(arrays).replace_schema_metadata({
        "specmoe.schema_version": str(SCHEMA_VERSION),
        "specmoe.meta": json.dumps(meta, default=str),
    })
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="lz4", row_group_size=1 << 18)


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


def read_meta(path: str | Path) -> dict[str, Any]:
    """A trace's metadata alone (its Parquet schema), without reading its rows."""
    return _parse_meta(Path(path), _read_schema(Path(path)))


def _numpy(arr: pa.Array) -> np.ndarray:
    """An Arrow column as NumPy, as arr.to_numpy(zero_copy_only=False) gives it, without its
    import of pandas (about a second of each analysis job's start): an integer column without
    nulls is a read-only view of its data, a string column an object array of its words (a
    dictionary's few); any other column goes through to_numpy."""
    t = arr.type
    if pa.types.is_integer(t) and arr.null_count == 0:
        dtype = np.dtype(f"<{'i' if pa.types.is_signed_integer(t) else 'u'}{t.bit_width // 8}")
        out = np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr),
                            offset=arr.offset * dtype.itemsize)
        out.flags.writeable = False
        return out
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out = np.empty(len(arr), dtype=object)
        out[:] = arr.to_pylist()
        return out
    return arr.to_numpy(zero_copy_only=False)


def read_trace(path: str | Path, with_weights: bool = False) -> Trace:
    """Read a trace; any problem is a TraceError with one line naming the file and the fault."""
    path = Path(path)
    schema = _read_schema(path)
    meta = _parse_meta(path, schema)
    missing = [c for c in (*REQUIRED_COLUMNS, "experts") if c not in schema.names]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
    cols = [c for c in schema.names if with_weights or c != "weights"]
    try:
        # the file's own reader: pq.read_table goes through pyarrow.dataset, which imports pandas
        # (a second of an analysis job's start), for the same table
        table = pq.ParquetFile(path).read(columns=cols)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(f"{path}: truncated or corrupt ({str(exc).splitlines()[0]})") from None
    n_layers, k = int(meta["num_layers"]), int(meta["top_k"])
    edtype = np.dtype(meta.get("experts_dtype", _experts_dtype(int(meta["num_experts"])).name))
    ex_type = table.schema.field("experts").type
    if not pa.types.is_fixed_size_binary(ex_type) or \
            ex_type.byte_width != n_layers * k * edtype.itemsize:
        raise TraceError(f"{path}: 'experts' is {ex_type}, expected {n_layers}x{k} {edtype.name} "
                         f"ids as fixed_size_binary[{n_layers * k * edtype.itemsize}]")
    try:
        experts = _from_fixed_binary(table.column("experts"), edtype, (len(table), n_layers, k))
        weights = None
        if with_weights and "weights" in table.column_names:
            weights = _from_fixed_binary(table.column("weights"), np.dtype("<f2"),
                                         (len(table), n_layers, k))
    except ValueError as exc:
        raise TraceError(f"{path}: unreadable expert ids ({exc})") from None
    columns: dict[str, np.ndarray] = {}
    for name in table.column_names:
        if name in ("experts", "weights"):
            continue
        col = table.column(name).combine_chunks()
        if pa.types.is_dictionary(col.type):  # decode through the (small) dictionary
            columns[name] = _numpy(col.dictionary)[_numpy(col.indices)]
        else:
            columns[name] = _numpy(col)
    trace = Trace(experts=experts, columns=columns, num_experts=int(meta["num_experts"]),
                  k_draft=int(meta["k_draft"]), meta=meta, weights=weights)
    trace.validate(str(path))
    return trace
