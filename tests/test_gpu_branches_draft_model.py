"""The CUDA graphs of a separate draft model's SD series on a GPU, checked against vLLM 0.32's own
sizing code (the CUDA build installed here, driven on stand-in configs as in
test_gpu_branches_fixes): V1's draft-model proposer gives each request one input slot more than
the verify step, so its first draft pass at batch B takes B (K + 2) tokens."""

from __future__ import annotations

import pytest

from specmoe.runtime import engine as engine_mod
# vLLM's own _set_cudagraph_sizes; the engines of a sweep and of a profile as their stages build
# them, and the checkpoint they serve
from test_gpu_branches_fixes import _profiled_engines, vllm_sizes  # noqa: F401
from test_paired_arms import _swept_engines, checkpoint  # noqa: F401

pytest.importorskip("vllm")


def _v1_sizes(cc_kw: dict, b: int, k: int):
    """The SD engine's capture sizes as Model Runner V1 resolves them (rounded to multiples of
    K + 1 within the largest, adjust_cudagraph_sizes_for_spec_decode)."""
    cc = vllm_sizes(dict(cc_kw), b, k)
    cc.adjust_cudagraph_sizes_for_spec_decode(k + 1)
    return cc


def _padded(cc) -> list[int]:
    """The step (tokens) Model Runner V1's dispatcher pads a step of each number of tokens to,
    up to the largest capture size of a resolved CompilationConfig: vLLM's own
    CudagraphDispatcher._compute_bs_to_padded_graph_size on a stand-in dispatcher."""
    from types import SimpleNamespace

    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    d = SimpleNamespace(compilation_config=cc, cudagraph_mode=CUDAGraphMode.NONE)
    CudagraphDispatcher._compute_bs_to_padded_graph_size(d)
    return d._bs_to_padded_graph_size


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
    max_num_seqs, and the verify step at each batch n (n (K + 1) tokens) is still graphed as
    V1 dispatches it: padded to a multiple of K + 1 no wider than vLLM's own default sizes pad
    it, where those graph it at all (so not to the first pass's ceiling)."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd = engine_mod.engine_kwargs("t", "d", k, max_num_seqs=b, graph_k=k,
                                  draft_model_series=True)
    plain = engine_mod.engine_kwargs("t", None, None, max_num_seqs=b, graph_k=k,
                                     draft_model_series=True)
    assert sd["compilation_config"] == plain["compilation_config"]
    cc = _v1_sizes(sd["compilation_config"], b, k)
    pads = _padded(cc)
    default = _v1_sizes({}, b, k)  # vLLM's own sizes for this engine, its ceiling 512 tokens
    default_pads = _padded(default)
    for n in range(1, b + 1):
        assert n * (k + 2) <= cc.max_cudagraph_capture_size, (n, cc.max_cudagraph_capture_size)
        verify = n * (k + 1)
        assert pads[verify] % (k + 1) == 0, (n, pads[verify])
        if verify <= default.max_cudagraph_capture_size:
            assert pads[verify] <= default_pads[verify], (n, pads[verify], default_pads[verify])
    # the engine without SD keeps a graph for its decode step at every batch
    alone = vllm_sizes(dict(plain["compilation_config"]), b, 0)
    assert all(any(s >= n for s in alone.cudagraph_capture_sizes) for n in range(1, b + 1))


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
def test_an_eagle_or_mtp_series_keeps_the_verify_steps_sizes(method, checkpoint, tmp_path,
                                                             monkeypatch):
    """Only a separate draft model takes the extra slot: an EAGLE-3 or MTP series' engines, as
    sweep_stage builds them from the drafter's method (draft_model_series there), capture the
    sizes of its verify steps (128 x 4 tokens at batch 128, K = 3), not a draft model's first
    pass (128 x 5), and run vLLM's own choice of model runner; so do an EAGLE-3 profile's
    engines (kernelprof.profile_calls)."""
    from specmoe.cudagraphs import cuda_graph_config
    from specmoe.runtime.engine import ENGINE_ENV

    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd, plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=3, largest=128,
                               method=method)
    assert sd["speculative_config"]["method"] == method
    verify = cuda_graph_config(None, 128, 3)
    assert verify != cuda_graph_config(None, 128, 3, draft_model=True)
    assert sd["compilation_config"] == plain["compilation_config"] == verify
    assert max(sd["compilation_config"]["cudagraph_capture_sizes"]) == 512
    assert ENGINE_ENV not in sd and ENGINE_ENV not in plain
    profiled = _profiled_engines(checkpoint, tmp_path, monkeypatch, method="eagle3")
    assert [e.get("speculative_config", {}).get("method") for e in profiled] == \
        [None, "eagle3"] * 2
    assert not any(ENGINE_ENV in e for e in profiled)
