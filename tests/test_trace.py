import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specmoe.errors import TraceError
from specmoe.routing.trace import (ACCEPTED, AFTER_REJECTION, COMMITTED, FIRST_REJECTED,
                           read_trace, status_for, write_trace)


def test_roundtrip_keeps_everything(tmp_path, small_trace):
    path = tmp_path / "t.parquet"
    write_trace(path, small_trace, {"config_hash": "abc", "model": {"name": "m"}})
    back = read_trace(path)
    assert back.experts.dtype == np.uint8
    np.testing.assert_array_equal(back.experts, small_trace.experts)
    for name in ("request", "step", "position", "status", "accepted", "token_id"):
        np.testing.assert_array_equal(back.columns[name], small_trace.columns[name])
    assert list(back.columns["category"][:3]) == list(small_trace.columns["category"][:3])
    meta = back.meta
    assert meta["provenance"]["config_hash"] == "abc"
    assert (meta["num_layers"], meta["top_k"], meta["num_experts"], meta["k_draft"]) == (3, 4, 32, 3)


def test_status_follows_spec():
    pos = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3])
    acc = np.array([1] * 4 + [3] * 4 + [0] * 4)
    assert status_for(pos, acc).tolist() == [
        COMMITTED, ACCEPTED, FIRST_REJECTED, AFTER_REJECTION,
        COMMITTED, ACCEPTED, ACCEPTED, ACCEPTED,
        COMMITTED, FIRST_REJECTED, AFTER_REJECTION, AFTER_REJECTION]


def test_windows_follow_request_and_step(small_trace):
    starts, lengths = small_trace.windows()
    assert starts.size == 40 * 30
    assert set(lengths.tolist()) == {4}


def test_truncated_file_is_one_line_error(tmp_path, small_trace):
    path = tmp_path / "t.parquet"
    write_trace(path, small_trace)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(TraceError) as exc:
        read_trace(bad)
    msg = str(exc.value)
    assert "bad.parquet" in msg and "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "nope.parquet")


def test_foreign_parquet_is_rejected(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), path)
    with pytest.raises(TraceError, match="not a specmoe routing trace"):
        read_trace(path)


def test_wrong_schema_version(tmp_path, small_trace):
    path = tmp_path / "t.parquet"
    write_trace(path, small_trace)
    table = pq.read_table(path)
    md = dict(table.schema.metadata)
    md[b"specmoe.schema_version"] = b"99"
    pq.write_table(table.replace_schema_metadata(md), path)
    with pytest.raises(TraceError, match="schema version 99"):
        read_trace(path)


def test_expert_id_out_of_range_is_caught(tmp_path, small_trace):
    path = tmp_path / "t.parquet"
    write_trace(path, small_trace)
    table = pq.read_table(path)
    md = dict(table.schema.metadata)
    meta = json.loads(md[b"specmoe.meta"])
    meta["num_experts"] = 8
    md[b"specmoe.meta"] = json.dumps(meta).encode()
    pq.write_table(table.replace_schema_metadata(md), path)
    with pytest.raises(TraceError, match="num_experts=8"):
        read_trace(path)


def test_failed_write_leaves_no_file(tmp_path, small_trace, monkeypatch):
    path = tmp_path / "t.parquet"

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError):
        write_trace(path, small_trace)
    assert list(tmp_path.iterdir()) == []


def test_outputs_get_the_usual_permissions_not_mkstemps_0600(tmp_path, small_trace):
    import os

    from specmoe.provenance import write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        write_trace(tmp_path / "t.parquet", small_trace)
    finally:
        os.umask(old)
    for name in ("a.json", "t.parquet"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644


def test_expert_ids_past_uint16_read_back_as_written(tmp_path, small_trace):
    """70,000 experts: ids are stored as uint32 (expert 69,999 once wrapped to 4,463 in uint16)."""
    experts = small_trace.experts.astype(np.int64) * 2258  # spread over 0..69,998
    experts[0, 0, 0] = 69_999
    tr = type(small_trace)(experts=experts, columns=small_trace.columns, num_experts=70_000,
                           k_draft=small_trace.k_draft)
    write_trace(tmp_path / "wide.parquet", tr)
    back = read_trace(tmp_path / "wide.parquet")
    assert back.meta["experts_dtype"] == "uint32"
    assert np.array_equal(back.experts, experts) and int(back.experts[0, 0, 0]) == 69_999


@pytest.mark.parametrize("column,value,dtype", [("step", 2**31, "int32"),
                                                 ("token_id", -2**31 - 1, "int32"),
                                                 ("accepted", 200, "int8")])
def test_a_value_its_column_cannot_hold_is_an_error_before_writing(tmp_path, small_trace, column,
                                                                   value, dtype):
    cols = {k: np.asarray(v).astype(np.int64) if k == column else v
            for k, v in small_trace.columns.items()}
    cols[column] = cols[column].copy()
    cols[column][-1] = value  # the last row: the rows stay sorted
    tr = type(small_trace)(experts=small_trace.experts, columns=cols,
                           num_experts=small_trace.num_experts, k_draft=small_trace.k_draft)
    with pytest.raises(TraceError, match=rf"column '{column}' holds {value:,}, beyond its {dtype}"):
        write_trace(tmp_path / "t.parquet", tr)
    assert not (tmp_path / "t.parquet").exists()


def test_a_run_whose_k_differs_from_its_windows_is_caught(tmp_path, small_trace):
    """K is one number: the tables read the run's K, the arithmetic the windows' k_draft."""
    small_trace.meta["run"] = {"model": "m", "drafter": "d", "k": small_trace.k_draft,
                               "dataset": "x"}
    path = tmp_path / "t.parquet"
    write_trace(path, small_trace)
    assert read_trace(path).meta["run"]["k"] == small_trace.k_draft
    table = pq.read_table(path)
    md = dict(table.schema.metadata)
    meta = json.loads(md[b"specmoe.meta"])
    meta["run"]["k"] = small_trace.k_draft + 2
    md[b"specmoe.meta"] = json.dumps(meta).encode()
    pq.write_table(table.replace_schema_metadata(md), path)
    with pytest.raises(TraceError, match=f"its run says K={small_trace.k_draft + 2}"):
        read_trace(path)


@pytest.mark.parametrize("arr", [
    pa.array(np.arange(-5, 5, dtype=np.int8)),
    pa.array(np.arange(70000, dtype=np.int32)).slice(123, 1000),  # an offset into its buffer
    pa.array(np.arange(10, dtype=np.uint16)),
    pa.array([1, None, 3], type=pa.int32()),  # nulls: through to_numpy
    pa.array(["code", "prose", None, "code"]),
    pa.array([True, False, True]),
])
def test_columns_read_as_pyarrow_converts_them(arr):
    """read_trace's own conversion (it skips to_numpy's import of pandas) gives what to_numpy
    gives: the same values, dtype and read-only flag."""
    from specmoe.routing.trace import _numpy

    want, got = arr.to_numpy(zero_copy_only=False), _numpy(arr)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if not np.issubdtype(want.dtype, np.floating):
        assert got.flags.writeable == want.flags.writeable


def test_reading_a_trace_imports_no_pandas(tmp_path, small_trace):
    """An analysis job reads a trace at its start: pyarrow's read_table and to_numpy import
    pandas (about a second), read_trace does not."""
    import subprocess
    import sys

    write_trace(tmp_path / "t.parquet", small_trace)
    code = ("import sys; from specmoe.routing.trace import read_trace; "
            f"t = read_trace({str(tmp_path / 't.parquet')!r}); "
            "print(len(t), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(len(small_trace)), "False"]


def test_a_trace_routing_a_token_to_one_expert_twice_is_refused():
    """A token's top-k experts are k different ones; the checker let a repeated expert through."""
    import pytest

    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import TraceError

    tr = generate(SynthParams(num_experts=16, top_k=2, num_layers=2, k_draft=3, requests=2,
                              steps=3, seed=0))
    tr.validate()
    tr.experts[5, 1, 1] = tr.experts[5, 1, 0]
    with pytest.raises(TraceError, match="row 5 routes to one expert twice in layer 1"):
        tr.validate()


def _window(accepted, status, n_drafts=(2, 2, 2)):
    """One window of K=2 drafts (request 0, step 4) with the given per-row columns."""
    from specmoe.routing.trace import Trace

    cols = {"request": np.zeros(3, np.int32), "step": np.full(3, 4, np.int32),
            "position": np.arange(3, dtype=np.int8), "n_drafts": np.array(n_drafts, np.int8),
            "accepted": np.array(accepted, np.int8), "status": np.array(status, np.int8),
            "token_id": np.arange(3, dtype=np.int32)}
    return Trace(experts=np.array([[[0, 1]], [[1, 2]], [[2, 3]]]), columns=cols, num_experts=4,
                 k_draft=2)


@pytest.mark.parametrize("accepted,status,n_drafts,message", [
    ([5, 5, 5], [0, 1, 1], [2, 2, 2], r"accepted 5 is outside 0\.\.2, its drafts"),
    ([-1, -1, -1], [0, 2, 3], [2, 2, 2], r"accepted -1 is outside 0\.\.2, its drafts"),
    ([1, 1, 1], [0, 3, 3], [2, 2, 2], r"position 1 has status 3 \(after_rejection\), where its "
                                      r"accepted count 1 gives 1 \(accepted\)"),
    ([0, 0, 0], [0, 2, 7], [2, 2, 2], r"position 2 has status 7 \(no status\), where its "
                                      r"accepted count 0 gives 3 \(after_rejection\)"),
    ([0, 2, 2], [0, 2, 3], [2, 2, 2], r"its rows' accepted counts differ"),
    ([0, 0, 0], [0, 2, 3], [2, 2, 1], r"its rows' n_drafts differ"),
])
def test_a_window_whose_acceptance_cannot_be_is_refused(tmp_path, accepted, status, n_drafts,
                                                        message):
    """A K=2 window with 5 accepted drafts (tau 6 > K + 1 in the tables), a status that is not
    its accepted count's, or counts that change inside the window: the writer let all through."""
    with pytest.raises(TraceError, match=r"^\S*t\.parquet: the window of request 0 step 4: "
                                         + message + r" \(1 such window\(s\)\)$"):
        write_trace(tmp_path / "t.parquet", _window(accepted, status, n_drafts))
    assert not (tmp_path / "t.parquet").exists()
    write_trace(tmp_path / "t.parquet", _window([1, 1, 1], [0, 1, 2]))  # what can be is written
    assert read_trace(tmp_path / "t.parquet").columns["accepted"].tolist() == [1, 1, 1]


@pytest.mark.parametrize("column", ["accepted", "token_id"])
def test_a_trace_without_a_required_column_is_refused_in_one_line(tmp_path, small_trace, column):
    """acceptance reads the accepted column; a trace without it failed there in a KeyError.
    token_id is required too (SPEC: each row records its token id); a trace without it was read,
    and the repetition and looping checks failed later with a KeyError."""
    path = tmp_path / "t.parquet"
    write_trace(path, small_trace)
    table = pq.read_table(path)
    pq.write_table(table.drop([column]).replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(TraceError, match=rf"t\.parquet: missing column\(s\) {column}$"):
        read_trace(path)
    tr = _copy(small_trace)
    del tr.columns[column]
    with pytest.raises(TraceError, match=rf"^trace: missing column '{column}'$"):
        tr.validate()


def test_a_broken_window_in_a_large_trace_is_named(small_trace):
    """The check runs over every window at once: the one window out of 1,200 that is wrong is the
    one named."""
    tr = _copy(small_trace)
    starts, _ = tr.windows()
    acc = tr.columns["accepted"]
    row = int(next(s for s in starts[777:] if acc[s] < tr.k_draft))
    tr.validate()
    tr.columns["status"][row + 1 + int(acc[row])] = 1  # its rejected draft marked accepted
    req, step = int(tr.columns["request"][row]), int(tr.columns["step"][row])
    with pytest.raises(TraceError, match=rf"window of request {req} step {step}: position "
                                         r"\d has status 1 \(accepted\), where .*\(1 such"):
        tr.validate()


def _copy(tr):
    """A trace of its own columns (the fixture's is shared by the session)."""
    return type(tr)(experts=tr.experts.copy(), columns={k: v.copy() for k, v in tr.columns.items()},
                    num_experts=tr.num_experts, k_draft=tr.k_draft, meta=dict(tr.meta))


def test_a_request_with_a_window_missing_is_refused(tmp_path, small_trace):
    """A request whose steps skip one (a whole window lost: steps 0, 1, 3) passed the checker;
    the committed sequence then paired the tokens on either side of the gap as d apart. Steps
    need not start at 0 (a trace of one window at step 4 is whole); they go up by one."""
    from specmoe.routing.overlap import select_windows

    tr = _copy(small_trace)
    starts, _ = tr.windows()
    req, step = tr.columns["request"][starts], tr.columns["step"][starts]
    gap = int(np.flatnonzero((req == 3) & (step == 2))[0])
    keep = np.ones(starts.size, bool)
    keep[gap] = False
    cut = select_windows(tr, keep)
    with pytest.raises(TraceError, match=r"^trace: request 3 has no window at step 2 \(its "
                                         r"steps go from 1 to 3\): a window is missing$"):
        cut.validate()
    with pytest.raises(TraceError, match=r"t\.parquet: request 3 has no window at step 2"):
        write_trace(tmp_path / "t.parquet", cut)
    assert not (tmp_path / "t.parquet").exists()
    # the request's first window need not be step 0: the same request from step 1 on is whole
    keep = np.ones(starts.size, bool)
    keep[int(np.flatnonzero((req == 3) & (step == 0))[0])] = False
    select_windows(tr, keep).validate()


def _k_trace(k_draft, requests=3, steps=2, n=8, k=2):
    """A whole trace of windows of K + 1 positions, every draft rejected."""
    from specmoe.routing.trace import Trace

    rows = [(r, s, j) for r in range(requests) for s in range(steps) for j in range(k_draft + 1)]
    r, s, j = (np.array(c) for c in zip(*rows))
    rng = np.random.default_rng(0)
    experts = np.stack([rng.permutation(n)[:k] for _ in rows])[:, None, :].astype(np.uint8)
    acc = np.zeros(len(rows), np.int8)
    cols = {"request": r.astype(np.int32), "step": s.astype(np.int32),
            "position": j.astype(np.int8), "accepted": acc, "status": status_for(j, acc),
            "token_id": np.arange(len(rows), dtype=np.int32),
            "n_drafts": np.full(len(rows), k_draft, np.int8)}
    return Trace(experts=experts, columns=cols, num_experts=n, k_draft=k_draft)


@pytest.mark.parametrize("k_draft", [0, 9])
def test_a_trace_whose_k_the_statistics_cannot_take_is_refused(tmp_path, k_draft):
    """K = 0 (windows of the committed token alone) passed write_trace and read_trace, and the
    overlap stage then failed with an IndexError; K = 9 passed too, past the IPF's window of at
    most 9 positions. Both are refused in one line naming K, before anything is written; K = 1
    and K = 8, the ends of the range, are written."""
    from specmoe.routing.unique import MAX_POSITIONS

    with pytest.raises(TraceError, match=rf"^.*t\.parquet: K={k_draft} is outside 1\.\."
                                         rf"{MAX_POSITIONS - 1}[^\n]*$"):
        write_trace(tmp_path / "t.parquet", _k_trace(k_draft))
    assert not (tmp_path / "t.parquet").exists()
    for ok in (1, MAX_POSITIONS - 1):
        write_trace(tmp_path / f"k{ok}.parquet", _k_trace(ok))
        assert read_trace(tmp_path / f"k{ok}.parquet").k_draft == ok
