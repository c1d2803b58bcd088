"""The MoE kernel each study model gets on the study's GPUs, resolved before submission
(specmoe.runtime.moebackend): vLLM 0.32's own fused-MoE backend oracles, run with the platform faked
as CUDA of capability 9.0 (H100) and 10.0 (B200) while vLLM makes each model's first MoE layer
from its config.json; whether routing capture binds to the kernel, as vLLM's
bind_routed_experts_capturer decides; what capture runs with where it cannot (`moe_backend`),
at job time and in the preflight."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specmoe.checks.preflight import shipped_config
from test_preflight import PAPER, paper

pytestmark = pytest.mark.slow
GPUS = ("H100", "B200")
# The study names no repository for these; their shipped config.json stands for them. Qwen3.5
# (no repository either) is left out: vLLM's Qwen3.5 module imports transformers' Qwen2-VL image
# processor, which needs torchvision, and the CPU environment has none.
FAMILY = {"Qwen3-Next-80B": "Qwen/Qwen3-Next-80B-A3B-Instruct", "Kimi-K2.5": "moonshotai/Kimi-K2.5"}
MODELS = {m["name"]: m for m in PAPER["models"] if m["repo_id"] or m["compare_with"] in FAMILY}


def query(m: dict, gpu: str) -> dict:
    return {"config": shipped_config(m["repo_id"] or FAMILY[m["compare_with"]]), "gpu": gpu,
            "tp": m["tp"], "precision": m.get("precision", "auto")}


@pytest.fixture(scope="module")
def study_backends():
    """Every study model's kernel on both GPUs, from one vLLM process (each distinct model once)."""
    pytest.importorskip("vllm")
    keys = {(name, gpu): json.dumps(query(m, gpu), sort_keys=True)
            for name, m in MODELS.items() for gpu in GPUS}
    distinct = sorted(set(keys.values()))
    r = subprocess.run([sys.executable, "-m", "specmoe.runtime.moebackend"],
                       input="[" + ",".join(distinct) + "]", capture_output=True, text=True,
                       timeout=3000)
    assert r.returncode == 0, r.stderr[-2000:]
    answers = dict(zip(distinct, json.loads(r.stdout)))
    return {k: answers[q] for k, q in keys.items()}


# (default expert class, can it capture, moe_backend capture runs with, its expert class) as
# vLLM 0.32.0 resolves them.
EXPECTED = {
    ("mixtral-8x7b-bf16-tp2", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("mixtral-8x7b-bf16-tp2", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("mixtral-8x7b-fp8-tp1", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("mixtral-8x7b-fp8-tp1", "B200"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("mixtral-8x7b-fp8-tp1-b200", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("mixtral-8x7b-fp8-tp1-b200", "B200"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen2-57b-bf16-tp2", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen2-57b-bf16-tp2", "B200"): ("FlashInferExperts", True, "auto", "FlashInferExperts"),
    ("glm-4.7-flash-bf16-tp1", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("glm-4.7-flash-bf16-tp1", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("glm-4.7-flash-bf16-tp2", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("glm-4.7-flash-bf16-tp2", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("qwen3-30b-fp8-tp1", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-30b-fp8-tp1", "B200"):
        ("TrtLlmFp8ExpertsMonolithic", True, "auto", "TrtLlmFp8ExpertsMonolithic"),
    ("qwen3-30b-fp8-tp2", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-30b-fp8-tp2", "B200"):
        ("TrtLlmFp8ExpertsMonolithic", True, "auto", "TrtLlmFp8ExpertsMonolithic"),
    ("qwen3-30b-bf16-tp1", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-30b-bf16-tp1", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("qwen3-30b-bf16-tp2", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-30b-bf16-tp2", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("qwen3-30b-fp8-tp1-b200", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-30b-fp8-tp1-b200", "B200"):
        ("TrtLlmFp8ExpertsMonolithic", True, "auto", "TrtLlmFp8ExpertsMonolithic"),
    ("qwen3-30b-fp8-tp2-b200", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-30b-fp8-tp2-b200", "B200"):
        ("TrtLlmFp8ExpertsMonolithic", True, "auto", "TrtLlmFp8ExpertsMonolithic"),
    ("qwen3-235b-fp8-tp4", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-235b-fp8-tp4", "B200"):
        ("TrtLlmFp8ExpertsMonolithic", True, "auto", "TrtLlmFp8ExpertsMonolithic"),
    ("qwen3-235b-bf16-tp8", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-235b-bf16-tp8", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("gpt-oss-120b-tp4", "H100"):
        ("OAITritonMxfp4ExpertsMonolithic", False, "triton_unfused", "UnfusedOAITritonExperts"),
    ("gpt-oss-120b-tp4", "B200"):
        ("TrtLlmMxfp4ExpertsMonolithic", True, "auto", "TrtLlmMxfp4ExpertsMonolithic"),
    ("qwen3-next-80b-bf16-tp4", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-next-80b-bf16-tp4", "B200"):
        ("TrtLlmBf16ExpertsMonolithic", True, "auto", "TrtLlmBf16ExpertsMonolithic"),
    ("qwen3-next-80b-fp8-tp2", "H100"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("qwen3-next-80b-fp8-tp2", "B200"): ("TritonExperts", True, "auto", "TritonExperts"),
    ("kimi-k2.5-tp8", "H100"): ("MarlinExperts", True, "auto", "MarlinExperts"),
    ("kimi-k2.5-tp8", "B200"): ("MarlinExperts", True, "auto", "MarlinExperts"),
}


@pytest.mark.parametrize("name,gpu", [(n, g) for n in MODELS for g in GPUS])
def test_every_study_model_has_a_kernel_capture_can_bind_to(study_backends, name, gpu):
    a = study_backends[(name, gpu)]
    assert "error" not in a, a
    default, capture = a["default"], a["capture"]
    assert capture["can_capture"]
    assert (capture == default) == default["can_capture"]  # the default kept where it can
    assert EXPECTED[(name, gpu)] == (default["experts"], default["can_capture"],
                                     capture["moe_backend"], capture["experts"])


def test_gpt_oss_capture_on_hopper_leaves_the_monolithic_triton_kernel(study_backends):
    """Finding 4: on H100 the mxfp4 oracle picks OAITritonMxfp4ExpertsMonolithic, which cannot
    write routed expert ids, so capture runs with another moe_backend; on B200 the TRT-LLM
    monolithic kernel can, and the default stays."""
    h100, b200 = (study_backends[("gpt-oss-120b-tp4", g)] for g in GPUS)
    assert (h100["default"]["experts"], h100["default"]["monolithic"],
            h100["default"]["can_capture"]) == ("OAITritonMxfp4ExpertsMonolithic", True, False)
    assert h100["capture"]["moe_backend"] != "auto" and h100["capture"]["can_capture"]
    assert (b200["default"]["experts"], b200["default"]["can_capture"]) == (
        "TrtLlmMxfp4ExpertsMonolithic", True)
    assert b200["capture"] == b200["default"]


def test_capture_job_sets_the_backend_capture_needs(tmp_path):
    """At job time (specmoe.stages.traces.capture_stage on a GPU): GPT-OSS's capture engine gets
    the moe_backend, resolved in a child process; a Qwen3 engine is left as it is."""
    pytest.importorskip("vllm")
    from specmoe.runtime.engine import engine_kwargs
    from specmoe.runtime.moebackend import capture_engine

    for name in ("gpt-oss-120b-tp4", "qwen3-30b-fp8-tp1"):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(shipped_config(MODELS[name]["repo_id"])))
    oss = engine_kwargs(tmp_path / "gpt-oss-120b-tp4", extra={"tensor_parallel_size": 4})
    qwen = engine_kwargs(tmp_path / "qwen3-30b-fp8-tp1")
    assert capture_engine(oss, gpu="H100") == dict(oss, moe_backend="triton_unfused")
    assert capture_engine(qwen, gpu="H100") == qwen


def test_the_preflight_says_which_backend_capture_uses(tmp_path, study_drafters):
    """The preflight of GPT-OSS's capture job on H100 names the backend in one line, a warning
    (the job runs), from vLLM's own oracle in the preflight's vLLM process."""
    pytest.importorskip("vllm")
    from specmoe.checks import preflight

    c = paper()
    job = next(j for j in c.gpu_jobs() if j.rule == "capture" and j.model == "gpt-oss-120b-tp4")
    report = preflight.run([c.engine_of(job)], tmp_path / "cache")
    assert report.vllm.startswith("checked with vLLM 0.32") and not report.fatal
    (line,) = [x for x in report.lines(False) if "MoE backend" in x]
    assert line == (f"preflight: {job.label}: MoE backend: vLLM's expert kernel on H100, "
                    "OAITritonMxfp4ExpertsMonolithic, cannot capture routing (monolithic, no "
                    "routing replay): capture runs with moe_backend=triton_unfused "
                    "(UnfusedOAITritonExperts)")
