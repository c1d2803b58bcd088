"""A serving series' max_num_batched_tokens against its widest step on a GPU, refused when the
configuration loads (Config.graph_problems): vLLM's scheduler spends K + 1 tokens a request (and
a draft model's extra input slot) from that budget, so below B (K + 1) fewer requests than the
point's batch verify each step while the target without SD decodes all of them."""

from __future__ import annotations

import dataclasses

import pytest

from specmoe.checks.preflight import batched_tokens
from specmoe.errors import InputError
from test_config import resolved


def _budget(tokens):
    def edit(cfg):
        cfg["sweep"]["engine_args"] = {**(cfg["sweep"].get("engine_args") or {}),
                                       "max_num_batched_tokens": tokens}
    return edit


def test_a_budget_below_the_step_at_the_largest_batch_is_refused_on_load():
    """sweep.engine_args max_num_batched_tokens 512 with paper.yaml's schedule (batch 128)
    loaded cleanly; at K = 7 vLLM would verify about 56 requests a step of the 128. Each K whose
    step it stops is one line, naming the models; a draft model's series counts its extra
    slot."""
    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", _budget(512))
    lines = str(err.value).splitlines()
    c = resolved("config/paper.yaml")
    for j in (j for j in c.gpu_jobs() if j.rule == "sweep_sd"):
        draft = c.drafters[j.drafter].served_alone
        need = 128 * (int(j.k) + (2 if draft else 1))
        assert c.series_batch(j.model) == 128
        mine = [ln for ln in lines if j.model in ln and f"below the {need} tokens of a step at "
                f"batch 128 with K = {j.k} " in ln]
        if need <= 512:  # MTP at K = 3: 128 x 4 tokens fit
            assert not mine, (j, lines)
            continue
        assert len(mine) == 1, (j, lines)
        assert "max_num_batched_tokens 512 is below" in mine[0]
        assert "(sweep.engine_args)" in mine[0]
    # a budget of the widest step loads
    widest = max(128 * (int(j.k) + (2 if c.drafters[j.drafter].served_alone else 1))
                 for j in c.gpu_jobs() if j.rule == "sweep_sd")
    resolved("config/paper.yaml", _budget(widest))


# GPUs of each of vLLM's memory classes as CUDA reports them: (hardware entry name, its gpu_model,
# torch's device name, total memory in MiB); an A100 named by its entry or only by its gpu_model
GPUS = [("A100", "a100", "NVIDIA A100-SXM4-80GB", 81920),
        ("big", "a100_80gb", "NVIDIA A100 80GB PCIe", 81920),
        ("H100", "h100", "NVIDIA H100 80GB HBM3", 81559),
        ("H200", "h200", "NVIDIA H200", 143771),
        ("L40S", "l40s", "NVIDIA L40S", 46068),
        ("B200", "b200", "NVIDIA B200", 183359),
        ("A100-40", "a100", "NVIDIA A100-PCIE-40GB", 40960)]


def vllms_defaults(device_name: str, mib: int) -> tuple[int, int]:
    """(server, offline LLM) max_num_batched_tokens by vLLM's own EngineArgs.get_batch_defaults
    on a CUDA platform faked to report this device's name and memory."""
    from types import SimpleNamespace
    from unittest import mock

    import vllm.engine.arg_utils as arg_utils
    from vllm.usage.usage_lib import UsageContext

    platform = SimpleNamespace(get_device_total_memory=lambda device_id=0: mib * 2**20,
                               get_device_name=lambda device_id=0: device_name,
                               is_tpu=lambda: False, is_cpu=lambda: False)
    with mock.patch.object(arg_utils, "current_platform", platform):
        tokens, _ = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
    return tokens[UsageContext.OPENAI_API_SERVER], tokens[UsageContext.LLM_CLASS]


@pytest.mark.parametrize("name,gpu_model,device_name,mib", GPUS)
def test_the_default_budget_is_vllms_own_on_each_gpu(name, gpu_model, device_name, mib):
    """preflight.batched_tokens left out vLLM's A100 rule: a device whose name holds "a100"
    stays out of the 70 GiB class, so an A100-SXM4-80GB's server runs 2048 tokens a step and
    its offline engine 8192, where the preflight said 8192 and 16384. The hardware entry's name
    or gpu_model names the A100."""
    pytest.importorskip("vllm")
    server, offline = vllms_defaults(device_name, mib)
    hardware = {"gpu_model": gpu_model, "cuda_memory_mib": mib}
    assert batched_tokens(mib / 1024, False, {}, name, hardware) == server
    assert batched_tokens(mib / 1024, True, {}, name, hardware) == offline
    # the engine's own budget, where given, whatever the GPU
    assert batched_tokens(mib / 1024, False, {"max_num_batched_tokens": 512}, name,
                          hardware) == 512


MOVED = "qwen3-30b-bf16-tp1"


def test_vllms_default_budget_on_the_models_gpu_is_the_one_checked(monkeypatch):
    """Without max_num_batched_tokens the check reads vLLM's server default for the model's GPU
    (preflight.batched_tokens): on an A100-80GB (vLLM's server: 2048 tokens a step, not the 8192
    of other GPUs of its memory) a series at batch 256 with K = 8 (2304 tokens a step) is
    refused, as vLLM's server would run it short; on an H100 of the same memory it is not, nor
    on the A100 at paper.yaml's batch 128 (at most 128 x 9 = 1152 tokens)."""
    pytest.importorskip("vllm")
    server, _ = vllms_defaults("NVIDIA A100-SXM4-80GB", 81920)

    def a100(cfg):
        # an A100-SXM4-80GB's datasheet (data/moe_kernel_times.csv's; NVLink 3: 600 GB/s both
        # directions together), one bf16 model of paper.yaml's H100 series moved onto it
        cfg["hardware"]["A100"] = {"gpu_model": "a100", "hbm_bandwidth_gbs": 2039,
                                   "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5},
                                   "nvlink_gbs": 300, "cuda_memory_mib": 81920}
        next(m for m in cfg["models"] if m["name"] == MOVED)["hardware"] = "A100"

    c = resolved("config/paper.yaml", a100)
    assert not c.graph_problems()
    j = next(j for j in c.gpu_jobs() if j.rule == "sweep_sd" and j.model == MOVED)
    assert c.hardware_of(j.model) == "A100" and not c.drafters[j.drafter].served_alone
    monkeypatch.setattr(c, "series_batch", lambda name: 256)
    problem = c._step_budget_problem(dataclasses.replace(j, k=8), {})
    assert problem == (
        f"max_num_batched_tokens {server} (vLLM's default on A100's 80.00 GiB (81,920 MiB as "
        "CUDA reports it)) is below the 2304 tokens of a step at batch 256 with K = 8 (K + 1 = 9 "
        "tokens a request): vLLM would verify fewer requests a step than the batch; set "
        "max_num_batched_tokens to at least 2304")
    assert c._step_budget_problem(dataclasses.replace(j, k=8),
                                  {"max_num_batched_tokens": 2304}) is None
    h100 = resolved("config/paper.yaml")
    monkeypatch.setattr(h100, "series_batch", lambda name: 256)
    assert h100.hardware_of(j.model) == "H100"
    assert h100._step_budget_problem(dataclasses.replace(j, k=8), {}) is None
