"""Fixes to the routing statistics' intervals and to what the trace and the synthetic generator
accept (specmoe.routing.controls, overlap, synth, trace)."""

import dataclasses

import numpy as np
import pytest

from specmoe.routing import controls, overlap
from specmoe.routing.synth import SynthParams, generate

# A target whose requests each prefer their own experts (topics): its plug-in independence
# baseline on 12 requests lies about one interval half-width above the truth
_PREFERRING = dict(num_experts=32, top_k=4, num_layers=3, k_draft=3, skew=1.2, stickiness=0.3,
                   topic_spread=2.0, topic_switch=0.05, steps=30, accept_prob=0.7)


def test_paired_differences_against_the_baseline_cover_the_truth():
    """The matched contrast's excess and temporal share measure each trace against its
    bias-corrected baseline. Its resamples had been moved by the correction, so they centred on
    the plug-in point: their percentile interval of target - control sat about one baseline bias
    below its own point and covered the true difference in 72 of 100 traces of 12 requests (every
    miss below the truth), and the share's interval sat 0.12 of its width below its point. Basic
    intervals of the plug-in resamples (as the overlap stage's own) cover the excess at about the
    nominal 95% and centre both on their points. Truth: the target's process on 4,000 requests;
    the control routes iid uniformly over the target's own windows (true excess and share 0)."""
    big = generate(SynthParams(requests=4000, seed=999, **_PREFERRING))
    ov, _, ci = overlap.trace_sequence_stats(big, overlap.SEQUENCE_DISTANCES)
    step1 = float(np.nanmean(ov, axis=0)[0])
    truth = {"seq_excess": step1 - ci["independence"],
             "seq_temporal_share": (step1 - ci["independence"]) / step1}
    uniform = {**_PREFERRING, "skew": 0.0, "stickiness": 0.0, "topic_spread": 0.0,
               "topic_switch": 1.0}
    trials, hits, below = 100, dict.fromkeys(truth, 0), dict.fromkeys(truth, 0)
    off = {name: [] for name in truth}  # (interval's middle - point) / width
    for seed in range(trials):
        t = generate(SynthParams(requests=12, seed=seed, **_PREFERRING))
        t = dataclasses.replace(t, meta={"run": {"model": "t"}})
        u = generate(SynthParams(requests=12, seed=10_000 + seed, **uniform))
        res = controls.control_contrast(t, dataclasses.replace(t, experts=u.experts))
        for name, true in truth.items():
            v = res["statistics"][name]
            hits[name] += v["difference_low"] <= true <= v["difference_high"]
            below[name] += v["difference_high"] < true
            off[name].append(((v["difference_low"] + v["difference_high"]) / 2
                              - v["difference"]) / (v["difference_high"] - v["difference_low"]))
    assert hits["seq_excess"] >= 88, (hits, below)  # 72 before
    # before: -0.29 (excess) and -0.12 (share)
    assert {name: abs(np.mean(o)) for name, o in off.items()} == {
        name: pytest.approx(0, abs=0.05) for name in off}, (hits, below)


def test_a_share_lead_from_an_overlap_file_without_the_shares_points_is_not_paired(small_trace):
    """An overlap file written before the contrast kept its plug-in resamples beside the shares'
    points holds resamples moved by the baseline's correction: its lead is not computed from
    them (no KeyError either), the row says why."""
    tr = dataclasses.replace(small_trace, meta={"run": {"model": "t"}})
    boot = controls.control_contrast(tr, tr)["share_boot"]
    assert boot["target_point"] == pytest.approx(
        controls.control_contrast(tr, tr)["statistics"]["seq_temporal_share"]["target"])
    old = {key: v for key, v in boot.items() if not key.endswith("_point")}
    res = controls.share_contrast(boot, old)
    assert not res["paired"] and np.isnan(res["lead"]) and "rerun" in res["why"]


def _empty_trace_file(path):
    """A trace file of no rows, the schema's columns and metadata otherwise whole."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from specmoe.routing import trace as T

    arrays = {n: pa.array(np.zeros(0, t)) for n, t in T._INT_COLUMNS.items()}
    arrays["experts"] = pa.array([], pa.binary(12))
    meta = {"num_layers": 3, "top_k": 4, "num_experts": 32, "k_draft": 3, "experts_dtype": "uint8"}
    pq.write_table(pa.table(arrays).replace_schema_metadata({
        "specmoe.schema_version": str(T.SCHEMA_VERSION), "specmoe.meta": json.dumps(meta)}), path)
    return path


def test_a_trace_of_no_rows_is_refused_where_it_is_read(tmp_path):
    """read_trace took a trace of no rows: window_stats gave an independence baseline of 0,
    below its floor k/N, and the sequence statistics and the matched contrast failed with
    reshape errors; only `specmoe analyze` refused it, by a check of its own."""
    from specmoe.errors import TraceError
    from specmoe.routing.trace import read_trace

    with pytest.raises(TraceError, match="no rows"):
        read_trace(_empty_trace_file(tmp_path / "e.parquet"))


def test_a_trace_of_no_rows_is_refused_where_it_is_written(small_trace, tmp_path):
    from specmoe.errors import TraceError
    from specmoe.routing.trace import write_trace

    empty = dataclasses.replace(small_trace, experts=small_trace.experts[:0],
                                columns={k: v[:0] for k, v in small_trace.columns.items()})
    with pytest.raises(TraceError, match="no rows"):
        empty.validate()
    with pytest.raises(TraceError, match="no rows"):  # it crashed in pyarrow
        write_trace(tmp_path / "e.parquet", empty)
    assert not (tmp_path / "e.parquet").exists()


def test_analyze_of_a_trace_of_no_rows_says_so_in_one_line(tmp_path):
    """The command's message comes from the trace's own check (its duplicate is gone)."""
    import subprocess
    import sys

    path = _empty_trace_file(tmp_path / "e.parquet")
    r = subprocess.run([sys.executable, "-m", "specmoe", "analyze", str(path)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "the trace has no rows" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_negative_expert_id_is_refused(small_trace, tmp_path):
    """An expert id of -1 passed validate (only ids >= N were checked) and write_trace cast it
    to 255, a real expert at N = 256."""
    from specmoe.errors import TraceError
    from specmoe.routing.trace import write_trace

    experts = small_trace.experts.astype(np.int16)
    experts[5, 1, 0] = -1
    bad = dataclasses.replace(small_trace, experts=experts, num_experts=256)
    with pytest.raises(TraceError, match="expert id -1 is negative"):
        bad.validate()
    with pytest.raises(TraceError, match="negative"):
        write_trace(tmp_path / "n.parquet", bad)


def test_a_trace_whose_metadata_names_other_layers_is_one_trace_error(tmp_path, small_trace):
    """A file whose metadata says 2 layers where its ids hold 3: the piece-by-piece reader
    (iter_trace, window_stats_file) met it with numpy's reshape error; read_trace, now the
    one reader, names the file and the fault."""
    import json

    import pyarrow.parquet as pq

    from specmoe.errors import TraceError
    from specmoe.routing import trace as T

    good, bad = tmp_path / "t.parquet", tmp_path / "bad.parquet"
    T.write_trace(good, small_trace)
    table = pq.read_table(good)
    md = dict(table.schema.metadata)
    meta = json.loads(md[b"specmoe.meta"])
    md[b"specmoe.meta"] = json.dumps({**meta, "num_layers": 2})
    pq.write_table(table.replace_schema_metadata(md), bad)
    with pytest.raises(TraceError, match="bad.parquet: 'experts' is fixed_size_binary"):
        T.read_trace(bad)
    assert not hasattr(T, "iter_trace") and not hasattr(overlap, "window_stats_file")
