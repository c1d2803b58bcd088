"""The GPU branches of the engines' arguments, checked on this (GPU-less) machine against vLLM
0.32's own code, imported from the CUDA build installed here and driven on stand-in configs:
the CUDA graph sizes of an SD series' engines (cudagraphs.cuda_graph_config) as vLLM resolves
them, the tokenizer of vLLM's bench serve client, and the model runner a profile's engines
run."""

from __future__ import annotations

import types
from types import SimpleNamespace
from unittest import mock

import pytest

from specmoe.errors import InputError
from specmoe.runtime import engine as engine_mod
from specmoe.cudagraphs import cuda_graph_config, token_grid
# the sweeps' engines as sweep_stage builds them, the checkpoint they serve, and vLLM's own
# choice of model runner (this folder's tests of the paired arms)
from test_paired_arms import _swept_engines, checkpoint, vllm_picks_v2  # noqa: F401

pytest.importorskip("vllm")

# batches (max_num_seqs) and K where a ceiling of B (K + 1) tokens alone stopped short
SHORT = [(12, 2), (100, 4), (4, 2)]
# the paper's schedule: powers of two up to 128, K 3, 5, 7
PAPER = [(b, k) for b in (1, 2, 4, 8, 16, 32, 64, 128) for k in (3, 5, 7)]


def vllm_sizes(cc_kw: dict, max_num_seqs: int, k: int, batched_tokens: int = 8192):
    """vLLM's own capture sizes for an engine's compilation_config: VllmConfig's
    _set_cudagraph_sizes on a stand-in config (an H100: not the data-centre Blackwell family)
    with SD of K drafts (K 0: none); the resolved CompilationConfig."""
    from vllm.config.compilation import CompilationConfig, CUDAGraphMode
    from vllm.config.vllm import VllmConfig
    from vllm.platforms import current_platform

    cc = CompilationConfig(**cc_kw)
    cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    config = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False), compilation_config=cc,
        scheduler_config=SimpleNamespace(max_num_batched_tokens=batched_tokens,
                                         max_num_seqs=max_num_seqs),
        performance_mode="balanced", uniform_decode_query_len=k + 1,
        speculative_config=(SimpleNamespace(uses_dynamic_speculative_decoding=lambda: False)
                            if k else None))
    with mock.patch.object(type(current_platform), "is_device_capability_family",
                           lambda *a, **kw: False, create=True):
        VllmConfig._set_cudagraph_sizes(config)
    return cc


def v1_reach(cc_kw: dict, max_num_seqs: int, k: int) -> int:
    """The widest verify step Model Runner V1 runs in a full CUDA graph: vLLM's sizes rounded
    by its own adjust_cudagraph_sizes_for_spec_decode (wider steps: no graphs,
    cudagraph_dispatcher)."""
    cc = vllm_sizes(cc_kw, max_num_seqs, k)
    cc.adjust_cudagraph_sizes_for_spec_decode(k + 1)
    return cc.max_cudagraph_capture_size


def v2_reach(cc_kw: dict, max_num_seqs: int, k: int) -> int:
    """The widest uniform verify step Model Runner V2 captures a full graph for: its own
    CudaGraphManager._init_candidates run on a stand-in manager."""
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager

    cc = vllm_sizes(cc_kw, max_num_seqs, k)
    mgr = SimpleNamespace(
        compilation_config=cc, cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
        max_num_reqs=max_num_seqs, decode_query_len=k + 1, varlen_decode=False,
        lora_capture_cases=[0], _capture_descs={}, _candidates={},
        vllm_config=SimpleNamespace(
            speculative_config=SimpleNamespace(uses_dynamic_speculative_decoding=lambda: False),
            cache_config=SimpleNamespace(use_kda_recoverssm=False)))
    mgr._maybe_ubatch_twin = lambda desc: None
    CudaGraphManager._init_candidates(mgr)
    return max((d.num_tokens for d in mgr._capture_descs.get(CUDAGraphMode.FULL, [])
                if d.uniform_token_count == k + 1), default=0)


@pytest.mark.parametrize("b,k", SHORT + PAPER + [(48, 7), (200, 3), (300, 5)])
def test_vllms_own_sizing_v1_and_v2_graphs_the_verify_step_at_the_largest_batch(b, k):
    """A ceiling of B (K + 1) tokens alone was truncated by vLLM to its grid and rounded to
    multiples of K + 1 within that: at B 12, K 2 graphs stopped at 24 tokens of 36, at B 100,
    K 4 at 480 of 500, at B 4, K 2 at 6 of 12. The explicit sizes reach B (K + 1) under both
    of vLLM's model runners, with a graph for a verify step at every batch up to B."""
    cc_kw = cuda_graph_config(None, b, k)
    assert v1_reach(cc_kw, b, k) == b * (k + 1) == v2_reach(cc_kw, b, k)
    cc = vllm_sizes(cc_kw, b, k)
    cc.adjust_cudagraph_sizes_for_spec_decode(k + 1)
    assert all(any(s >= n * (k + 1) for s in cc.cudagraph_capture_sizes)
               for n in range(1, b + 1))


@pytest.mark.parametrize("b,k", SHORT + PAPER)
def test_the_no_sd_arms_graphs_cover_every_size_they_did_before(b, k):
    """The engine without SD gets the same compilation_config (graph_k): vLLM's sizes for it,
    one token a sequence, hold every size the former ceiling of B (K + 1) gave it, so its
    decode steps are graphed at every batch as before."""
    before = vllm_sizes({"max_cudagraph_capture_size": b * (k + 1)}, b, 0)
    now = vllm_sizes(cuda_graph_config(None, b, k), b, 0)
    assert set(before.cudagraph_capture_sizes) <= set(now.cudagraph_capture_sizes)
    assert now.max_cudagraph_capture_size >= b


def test_the_token_grid_is_vllms_own():
    """cudagraphs.token_grid, written out (vLLM's config module imports torch), is the grid vLLM
    builds for a ceiling given alone."""
    for ceiling in list(range(1, 300)) + [500, 512, 1000, 1024, 2048]:
        got = vllm_sizes({"max_cudagraph_capture_size": ceiling}, 1024, 0, batched_tokens=10**6)
        assert token_grid(ceiling) == got.cudagraph_capture_sizes, ceiling


@pytest.mark.parametrize("given", [
    {"cudagraph_capture_sizes": [1, 2, 512]}, {"max_cudagraph_capture_size": 500},
    {"max_cudagraph_capture_size": 36}, {"max_cudagraph_capture_size": 12},
    {"max_cudagraph_capture_size": 512}, {"cudagraph_capture_sizes": [1, 8, 320]},
    {"cudagraph_capture_sizes": [1, 2, 500]}, {"max_cudagraph_capture_size": 1024},
    {"cudagraph_capture_sizes": [4, 12, 36]}, {"max_cudagraph_capture_size": 48}])
@pytest.mark.parametrize("b,k", [(64, 4), (100, 4), (12, 2), (4, 2), (64, 7), (8, 3)])
def test_a_users_sizes_or_ceiling_is_kept_exactly_where_vllms_rounding_reaches_the_verify_step(
        given, b, k):
    """A user's sizes or ceiling were accepted when their largest reached B (K + 1) tokens,
    ignoring vLLM's truncation to its grid and rounding to multiples of K + 1: sizes
    [1, 2, 512] at B 64, K 4 passed, and graphed verify steps up to 5 tokens of 320. They are
    now kept, unchanged, where vLLM's own resolution reaches the verify step at B, and refused
    in one line where it does not."""
    need = b * (k + 1)
    reach = v1_reach(dict(given), b, k)
    if reach >= need:
        assert cuda_graph_config(dict(given), b, k) == given
    else:
        with pytest.raises(InputError) as exc:
            cuda_graph_config(dict(given), b, k)
        msg = str(exc.value)
        assert "\n" not in msg and f"below the {need} of a verify step at batch {b}" in msg
        # the size or ceiling the message asks for does reach it
        if "cudagraph_capture_sizes" in given:
            assert f"add {need} to its sizes" in msg
            fixed = {"cudagraph_capture_sizes": [*given["cudagraph_capture_sizes"], need]}
        else:
            fixed = {"max_cudagraph_capture_size": int(msg.split("raise it to ")[1].split()[0])}
        assert v1_reach(fixed, b, k) >= need
        assert cuda_graph_config(fixed, b, k) == fixed


def test_the_reviewers_cases_are_refused_with_what_vllm_graphs():
    with pytest.raises(InputError) as exc:
        cuda_graph_config({"cudagraph_capture_sizes": [1, 2, 512]}, 64, 4)
    assert str(exc.value) == (
        "engine_args compilation_config captures CUDA graphs up to 512 tokens, 5 in verify "
        "steps of K + 1 = 5 tokens (vLLM rounds its sizes to multiples of K + 1 within the "
        "largest), below the 320 of a verify step at batch 64 with K = 4: those steps would "
        "run without graphs; add 320 to its sizes or remove it")
    assert v1_reach({"cudagraph_capture_sizes": [1, 2, 512]}, 64, 4) == 5
    with pytest.raises(InputError, match="up to 500 tokens, 480 in verify steps.*raise it to "):
        cuda_graph_config({"max_cudagraph_capture_size": 500}, 100, 4)


def test_engine_kwargs_on_a_faked_cuda_platform_give_both_arms_the_sizes_and_a_cpu_none(
        monkeypatch):
    """Both arms of an SD series (graph_k) get the same explicit sizes on CUDA; a CPU engine
    (eager) none, as before."""
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd = engine_mod.engine_kwargs("t", {"method": "mtp"}, 2, max_num_seqs=12, graph_k=2)
    plain = engine_mod.engine_kwargs("t", max_num_seqs=12, graph_k=2)
    assert sd["compilation_config"] == plain["compilation_config"] == \
        cuda_graph_config(None, 12, 2)
    assert v1_reach(sd["compilation_config"], 12, 2) == 36
    monkeypatch.setattr(engine_mod, "device", lambda: "cpu")
    assert "compilation_config" not in engine_mod.engine_kwargs("t", max_num_seqs=12, graph_k=2)


@pytest.mark.parametrize("trust", [True, False])
def test_vllms_own_bench_serve_client_gets_the_engines_trust_remote_code(trust, monkeypatch,
                                                                         tmp_path):
    """vLLM's bench serve builds its own tokenizer with its trust_remote_code
    (vllm/benchmarks/serve.py); bench() never passed it, so a model whose tokenizer is its
    own code (Kimi-K2.5, trust_remote_code in its engine_args) failed at its first point after
    its server had started. vLLM's own argument parser and main, its main stood in for to
    capture the arguments it gets."""
    from vllm.benchmarks import serve

    from specmoe.runtime import serving

    got = {}
    monkeypatch.setattr(serve, "main", lambda args: got.setdefault("args", args) and {})
    engine = {"model": "m", **({"trust_remote_code": True} if trust else {})}
    serving.bench(serving.Server(engine, startup_timeout=60), "m", tmp_path / "p.jsonl", 2, 2, 8)
    assert got["args"].trust_remote_code is trust


def _profiled_engines(checkpoint, tmp_path, monkeypatch, method: str | None = None) -> list:
    """The engine arguments of a profile's engine starts (decode, verify) as profile_stage
    builds them (K 3; its drafter's speculative method, none: a separate draft model), from a
    stand-in for run_each that keeps them."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import ProfileParams
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import profile_stage

    kept = []

    class Stop(Exception):
        pass

    def each(fn, calls, **kw):
        kept.extend(c[2] for c in calls)
        raise Stop

    monkeypatch.setattr(engine_mod, "run_each", each)
    prof = {"batch_sizes": [1, 2], "max_tokens": 8, "engines": 2}
    with pytest.raises(Stop):
        profile_stage(Named({"target": str(checkpoint), "drafter": str(checkpoint),
                             "prompts": []}),
                      Named({"json": str(tmp_path / "p.json"), "traces": str(tmp_path / "t")}),
                      ProfileParams(job={"model": "t", "drafter": "d", "k": 3,
                                         "dataset": "tinybench"}, settings=prof, method=method,
                                    gpu=False, prompts=prompt_table.DEFAULT_SOURCE,
                                    prompting={}))
    return kept


def _llm_environment(engine: dict, monkeypatch) -> dict:
    """The environment vLLM's LLM is built under by open_llm for `engine` (the stand-in for LLM
    builds vLLM's own EngineArgs from the arguments it gets, refusing any that is not vLLM's)."""
    import os

    import vllm
    from vllm.engine.arg_utils import EngineArgs

    seen = {}

    def llm(**kw):
        EngineArgs(**kw)
        seen.update(os.environ)
        core = SimpleNamespace(shutdown=lambda: None)
        return SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core))

    monkeypatch.setattr(vllm, "LLM", llm)
    with engine_mod.open_llm(engine):
        pass
    return seen


def test_on_a_faked_cuda_platform_a_draft_model_profile_runs_the_runner_its_sweeps_run(
        checkpoint, tmp_path, monkeypatch):
    """A separate draft model's sweeps pin vLLM's V1 model runner on CUDA (engine_kwargs
    draft_model_series); its profile's engines did not, so vLLM picked Model Runner V2 for
    them (its own choice, VllmConfig.use_v2_model_runner, below) and the profile measured
    another runner's drafting than the speedup it is set beside. With the platform faked as
    CUDA, both of the profile's engines get the sweep's pin, and the offline engine is built
    under it, vLLM's own choice then V1 (and vLLM's EngineArgs never sees specmoe's argument);
    this process's environment is as it was afterwards. An EAGLE-3 profile, like its sweeps,
    keeps vLLM's choice."""
    import os

    from specmoe.runtime.engine import ENGINE_ENV, V1_RUNNER_ENV

    var = "VLLM_USE_V2_MODEL_RUNNER"
    monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(engine_mod, "device", lambda: "cuda")
    sd, plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=3, largest=2)
    profiled = _profiled_engines(checkpoint, tmp_path, monkeypatch)
    # two starts of each, decode and verify alternating (profiling's minimum)
    assert [bool(e.get("speculative_config")) for e in profiled] == [False, True] * 2
    assert sd[ENGINE_ENV] == plain[ENGINE_ENV] == V1_RUNNER_ENV
    for engine in profiled:
        assert engine[ENGINE_ENV] == sd[ENGINE_ENV]
        env = _llm_environment(engine, monkeypatch)
        assert env[var] == "0" and not vllm_picks_v2(env, monkeypatch)
        assert var not in os.environ
    assert vllm_picks_v2(dict(os.environ), monkeypatch)  # vLLM's choice without the pin
    eagle, eagle_plain = _swept_engines(checkpoint, tmp_path, monkeypatch, k=3, largest=2,
                                        method="eagle3")
    eagle_profiled = _profiled_engines(checkpoint, tmp_path, monkeypatch, method="eagle3")
    assert len(eagle_profiled) == 4 and ENGINE_ENV not in eagle
    assert not any(ENGINE_ENV in e for e in eagle_profiled)
