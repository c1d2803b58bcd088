"""The CUDA graphs of a separate draft model's SD series on a GPU, checked against vLLM 0.32's own
sizing code (the CUDA build installed here, driven on stand-in configs as in
test_gpu_branches_fixes): V1's draft-model proposer gives each request one input slot more than
the verify step, so its first draft pass at batch B takes B (K + 2) tokens."""

from __future__ import annotations

import pytest

from specmoe.runtime import engine as engine_mod
from test_gpu_branches_fixes import vllm_sizes  # noqa: F401  (vLLM's own _set_cudagraph_sizes)

pytest.importorskip("vllm")


def _v1_sizes(cc_kw: dict, b: int, k: int):
    """The SD engine's capture sizes as Model Runner V1 resolves them (rounded to multiples of
    K + 1 within the largest, adjust_cudagraph_sizes_for_spec_decode)."""
    cc = vllm_sizes(dict(cc_kw), b, k)
    cc.adjust_cudagraph_sizes_for_spec_decode(k + 1)
    return cc


def test_the_proposers_extra_slot_is_one_token_a_request_for_a_draft_model():
    """The premise, read from vLLM's proposer: a draft model (no hidden states passed, no
    parallel drafting) adds one input slot a request."""
    import inspect

    from vllm.v1.spec_decode import llm_base_proposer

    src = inspect.getsource(llm_base_proposer)
    assert "1 if not self.parallel_drafting else self.num_speculative_tokens" in src
    assert "- (\n            1 if (self.pass_hidden_states_to_model" in src


@pytest.mark.parametrize("b", [1, 8, 12, 100, 128])
@pytest.mark.parametrize("k", [2, 3, 5, 7])
def test_a_draft_models_first_pass_runs_in_a_graph_at_every_batch(b, k, monkeypatch):
    """At batch 128, K = 3 the first draft pass (640 tokens) ran without graphs above the
    largest capture size 512 (K 5: 896 > 768; K 7: 1152 > 1024). Both engines of a draft
    model's series now capture sizes that reach B (K + 2) tokens at every batch up to
    max_num_seqs, the verify steps still graphed at every batch."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd = engine_mod.engine_kwargs("t", "d", k, max_num_seqs=b, graph_k=k,
                                  draft_model_series=True)
    plain = engine_mod.engine_kwargs("t", None, None, max_num_seqs=b, graph_k=k,
                                     draft_model_series=True)
    assert sd["compilation_config"] == plain["compilation_config"]
    cc = _v1_sizes(sd["compilation_config"], b, k)
    for n in range(1, b + 1):
        assert n * (k + 2) <= cc.max_cudagraph_capture_size, (n, cc.max_cudagraph_capture_size)
        assert any(s >= n * (k + 1) for s in cc.cudagraph_capture_sizes)
    # the engine without SD keeps a graph for its decode step at every batch
    alone = vllm_sizes(dict(plain["compilation_config"]), b, 0)
    assert all(any(s >= n for s in alone.cudagraph_capture_sizes) for n in range(1, b + 1))


def test_an_eagle_or_mtp_series_keeps_the_verify_steps_sizes(monkeypatch):
    """Only a separate draft model takes the extra slot: another method's sizes stay those of
    its verify steps."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    from specmoe.cudagraphs import cuda_graph_config

    kw = engine_mod.engine_kwargs("t", {"method": "mtp"}, 3, max_num_seqs=128, graph_k=3)
    assert kw["compilation_config"] == cuda_graph_config(None, 128, 3)
    assert max(kw["compilation_config"]["cudagraph_capture_sizes"]) == 512
