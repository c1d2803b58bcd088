"""vLLM's MoE layers outside an engine, and the expert kernel each study model gets on a GPU.

`build_model` makes vLLM's own model class from a config.json (a VllmConfig context and a
one-process group, no engine, weights on the meta device: nothing is allocated). `moe_layers`
finds vLLM's MoE layers in it (MoERunner, what FusedMoEFactory builds), whatever the model's
classes are called.

`resolve` answers, before a GPU job is submitted, which expert class vLLM 0.32 picks for a model
on a GPU and whether routing capture can bind to it: the model is built with the platform faked
as CUDA of the GPU's compute capability (`cuda_platform`), so that each MoE layer's quantisation
method runs vLLM's own backend oracle (oracle/unquantized.py, fp8.py, mxfp4.py, ...) as it would
on that GPU. Capture binds as vLLM's `bind_routed_experts_capturer` does: to the router of a
modular kernel, or to a monolithic kernel only where it supports routing replay capture
(`supports_routing_replay_capture`). Where the default cannot capture (GPT-OSS's mxfp4 experts
on Hopper: the monolithic OAI Triton kernel), `capture_backend` names the first of
CAPTURE_BACKENDS (vLLM's engine argument `moe_backend`) whose kernel can, checked the same way.

What the oracle asks of the machine beyond the platform (is FlashInfer installed, are the
triton_kernels importable, ...) is answered from what vLLM 0.32.0's CUDA build brings
(GPU_KERNELS), not from this machine.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..sources.published import compute_capabilities

# Compute capability of the study's GPUs (published/hardware.csv).
CAPABILITY = compute_capabilities()

# What vLLM 0.32.0's CUDA wheel (envs/gpu.yaml: vllm==0.32.0) brings where vLLM asks while it
# makes the layers: it requires flashinfer-python 0.7.0.post1 (with its fused-MoE entry points),
# ships the triton_kernels and DeepGEMM packages in vllm.third_party, and its _C extension has
# CUTLASS's fp8 and grouped GEMMs for SM90 and SM100 (the study's GPUs). The names are the
# probes' own, patched wherever a vLLM module holds them.
GPU_KERNELS = {
    "has_flashinfer": True, "has_flashinfer_moe": True, "has_flashinfer_cubin": True,
    "has_flashinfer_trtllm_fused_moe": True, "has_flashinfer_cutlass_fused_moe": True,
    "has_triton_kernels": True, "has_deep_gemm": True,
    "cutlass_scaled_mm_supports_fp8": True, "cutlass_scaled_mm_supports_block_fp8": True,
    "cutlass_group_gemm_supported": True,
}

# The language model of the study's multimodal wrappers, as vLLM's registry and transformers name
# it: (architectures, model_type).
LANGUAGE_MODEL = {
    "Qwen3_5MoeForConditionalGeneration": (["Qwen3_5MoeForCausalLM"], "qwen3_5_moe_text"),
    "KimiK25ForConditionalGeneration": (["DeepseekV3ForCausalLM"], "deepseek_v3"),
}

# vLLM `moe_backend` values tried for a capture engine whose default kernel cannot capture, in
# order: Triton (vLLM's modular default on Hopper for bf16 and fp8 block weights); for mxfp4, the
# fused OAI Triton family starts with its monolithic kernel, so the unfused one follows; Marlin,
# FlashInfer CUTLASS last.
CAPTURE_BACKENDS = ("triton", "triton_unfused", "marlin", "flashinfer_cutlass")


def build_model(config: dict, dtype: str = "bfloat16", quantization: str | None = None,
                tp: int = 1, moe_backend: str = "auto", platform=contextlib.nullcontext):
    """vLLM's model class for a config.json, built as the engine builds it (VllmConfig from
    EngineArgs, model class from vLLM's registry), on the meta device.

    tp: the tensor-parallel degree the MoE layers are sized for (vLLM's own split of each
    expert's width); the process group itself has one rank. platform: a context (cuda_platform)
    in which the model's layers are made; the configuration and the model's class are resolved
    before it, on this machine's platform."""
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture, initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(config))
        vc = EngineArgs(model=d, skip_tokenizer_init=True, load_format="dummy",
                        enforce_eager=True, max_model_len=256, dtype=dtype,
                        quantization=quantization, moe_backend=moe_backend).create_engine_config()
        # the dtype a GPU serves in (this machine's platform may have upcast it), the default
        # while the layers are made, as vLLM's loader sets it
        vc.model_config.dtype = getattr(torch, dtype)
        model_class, _ = get_model_architecture(vc.model_config)
        with _one_rank(vc, Path(d) / "dist"), platform(), torch.device("meta"), _tp_size(tp), \
                set_default_torch_dtype(vc.model_config.dtype):
            return initialize_model(vc, model_class=model_class)


@contextlib.contextmanager
def _one_rank(vc, init_file: Path):
    """vLLM's process groups of one rank (gloo) while a model is made, unless some exist; the
    groups it made are gone after it."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        yield
        return
    with set_current_vllm_config(vc):
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                        distributed_init_method=f"file://{init_file}",
                                        backend="gloo")
        ps.ensure_model_parallel_initialized(1, 1)
    try:
        yield
    finally:
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()


@contextlib.contextmanager
def _tp_size(tp: int):
    """vLLM's layers split by get_tensor_model_parallel_world_size(): that degree, one rank."""
    import vllm.distributed.parallel_state as ps

    if tp == 1:
        yield
        return
    group = ps.get_tp_group()
    saved = group.world_size
    group.world_size = tp
    try:
        yield
    finally:
        group.world_size = saved


def moe_layers(model) -> list[tuple[str, object]]:
    """vLLM's MoE layers of a model, (name, module), in module order."""
    from vllm.model_executor.layers.fused_moe.runner.moe_runner_interface import (
        MoERunnerInterface,
    )

    return [(n, m) for n, m in model.named_modules() if isinstance(m, MoERunnerInterface)]


# --- the platform faked as CUDA ------------------------------------------------------------------

@contextlib.contextmanager
def cuda_platform(capability: tuple[int, int], name: str = "NVIDIA GPU"):
    """vLLM's current platform as CUDA of one compute capability, with the kernel packages of
    vLLM's CUDA build (GPU_KERNELS), for as long as the context lasts. Its SM count is the
    package's for a GPU it ships (published/hardware.csv), else 132."""
    from ..sources.published import sm_counts
    import vllm.platforms as platforms

    sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    cap = DeviceCapability(*capability)
    sms = sm_counts().get(name, 132)
    platform = platforms.current_platform
    saved = platform.__class__

    class FakeCuda(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return cap

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return name

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return sms

        # attention is made as on this machine (CUDA's backends need their compiled kernels);
        # it does not enter the MoE oracle
        get_attn_backend_cls = staticmethod(saved.get_attn_backend_cls)
        get_mla_prefill_backend_cls = staticmethod(saved.get_mla_prefill_backend_cls)

    probes = _patch_probes(GPU_KERNELS)
    platform.__class__ = FakeCuda
    try:
        with probes:
            yield platform
    finally:
        platform.__class__ = saved
        _clear_caches()


def _patch_probes(answers: dict[str, bool]) -> contextlib.ExitStack:
    from unittest import mock

    stack = contextlib.ExitStack()
    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("vllm") and m]:
        for probe, answer in answers.items():
            if callable(getattr(mod, probe, None)):
                stack.enter_context(mock.patch.object(mod, probe, lambda *a, _v=answer, **k: _v))
    return stack


def _clear_caches() -> None:
    """The cached answers of probes that read the platform (deep_gemm's, ...)."""
    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("vllm") and m]:
        for name in ("is_deep_gemm_supported", "is_deep_gemm_e8m0_used"):
            fn = getattr(mod, name, None)
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()


# --- the expert kernel of a (model, GPU) -------------------------------------------------------

@dataclass(frozen=True)
class Resolution:
    experts: str          # the expert class vLLM picks
    monolithic: bool      # router fused into the kernel
    can_capture: bool     # bind_routed_experts_capturer binds to it
    moe_backend: str      # the moe_backend it was resolved with


def resolve(config: dict, gpu: str | None, tp: int = 1, precision: str = "auto",
            moe_backend: str = "auto") -> Resolution:
    """The expert class of the first MoE layer of a model, as vLLM 0.32 picks it with
    `moe_backend`: on a GPU of CAPABILITY (the platform faked), or on this machine's own
    platform (gpu None: on the GPU node itself)."""
    if gpu is not None and gpu not in CAPABILITY:
        raise InputError(f"no compute capability known for GPU {gpu} (known: "
                         f"{', '.join(CAPABILITY)})")
    platform = contextlib.nullcontext if gpu is None else (
        lambda: cuda_platform(CAPABILITY[gpu], gpu))
    model = build_model(_first_moe_layers(config), "bfloat16",
                        "fp8" if precision == "fp8" else None, tp, moe_backend, platform)
    (_, layer), *_ = moe_layers(model)
    return _resolution(layer, moe_backend)


def capture_backend(config: dict, gpu: str | None, tp: int = 1, precision: str = "auto"
                    ) -> tuple[Resolution, Resolution]:
    """(the default kernel, what capture uses): the default where it can capture, else the first
    of CAPTURE_BACKENDS that vLLM accepts for the model and whose kernel can."""
    default = resolve(config, gpu, tp, precision)
    if default.can_capture:
        return default, default
    tried = []
    for backend in CAPTURE_BACKENDS:
        try:
            r = resolve(config, gpu, tp, precision, backend)
        except (ValueError, NotImplementedError) as exc:
            tried.append(f"{backend}: {str(exc).splitlines()[0]}")
            continue
        if r.can_capture:
            return default, r
        tried.append(f"{backend}: {r.experts} cannot capture")
    raise InputError(f"no MoE backend of vLLM lets capture bind on {gpu or 'this GPU'} "
                     f"(default {default.experts}; {'; '.join(tried)})")


def capture_engine(engine: dict, gpu: str | None = None, timeout: float = 900) -> dict:
    """A capture engine's arguments with the MoE backend capture needs: unchanged where vLLM's
    default kernel (or the configured `moe_backend`) can capture, else with the backend
    capture_backend names. Resolved in a child process (vLLM's groups and platform stay there),
    on this machine's GPU unless `gpu` names one."""
    from .engine import run_in_child

    backend = engine.get("moe_backend", "auto")
    config = json.loads((Path(engine["model"]) / "config.json").read_text())
    tp = int(engine.get("tensor_parallel_size", 1))
    precision = "fp8" if engine.get("quantization") == "fp8" else "auto"
    default, capture = run_in_child(_resolve_for_capture, config, gpu, tp, precision, backend,
                                    timeout=timeout)
    if capture == default:
        return engine
    return dict(engine, moe_backend=capture.moe_backend)


def _resolve_for_capture(config, gpu, tp, precision, backend):
    if backend == "auto":
        return capture_backend(config, gpu, tp, precision)
    chosen = resolve(config, gpu, tp, precision, backend)
    if not chosen.can_capture:
        raise InputError(f"moe_backend {backend}: vLLM's {chosen.experts} cannot capture "
                         "routing; leave moe_backend out of the capture's engine_args")
    return chosen, chosen


def _first_moe_layers(config: dict) -> dict:
    """The config cut to its layers up to the first MoE layer (vLLM makes its MoE layers alike),
    and of a multimodal wrapper its language model, as vLLM registers it (LANGUAGE_MODEL: the
    same MoE layers). Linear-attention layers become full attention: vLLM's GDN layers ask torch
    for the CUDA device as they are made, and the attention kind does not enter the MoE oracle."""
    from ..cost.hfconfig import _moe_layers, _Reader, load_config

    cfg, name = load_config(dict(config))  # a wrapper's text_config, with its quantisation
    moe = _moe_layers(_Reader(cfg, name), int(cfg["num_hidden_layers"]))
    if True not in moe:
        raise InputError(f"{name}: no layer has experts")
    n = moe.index(True) + 1
    out = dict(cfg, num_hidden_layers=n)
    if "text_config" in config:
        arch = (config.get("architectures") or ["?"])[0]
        if arch not in LANGUAGE_MODEL:
            raise InputError(f"{name}: no language model known for the multimodal {arch}")
        out.update(zip(("architectures", "model_type"), LANGUAGE_MODEL[arch]))
    types = out.get("layer_types")
    if out.get("full_attention_interval") or (types and "linear_attention" in types):
        out.update(layer_types=["full_attention"] * n, full_attention_interval=1)
    elif isinstance(types, list):
        out["layer_types"] = types[:n]
    return out


def _resolution(layer, moe_backend: str) -> Resolution:
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEExpertsMonolithic
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter

    method = layer._quant_method
    cls = getattr(method, "experts_cls", None)
    if cls is None:
        raise InputError(f"{type(method).__name__} chose no expert class")
    monolithic = issubclass(cls, FusedMoEExpertsMonolithic)
    if monolithic:  # as bind_routed_experts_capturer: the kernel must write the routed ids
        can = bool(cls.supports_routing_replay_capture(object.__new__(cls)))
    else:
        can = isinstance(layer.router, BaseRouter)
    return Resolution(cls.__name__, monolithic, can, moe_backend)


@contextlib.contextmanager
def stdout_to_stderr():
    """vLLM logs to stdout: while it works, file descriptor 1 goes to stderr, so that a JSON
    answer printed on stdout afterwards stays clean."""
    import os

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main() -> int:
    """`python -m specmoe.runtime.moebackend`: a JSON list of {config, gpu, tp, precision} on
    stdin; prints, for each, the default kernel and what capture uses (or the one-line reason
    none can), as JSON."""
    import dataclasses

    out = []
    with stdout_to_stderr():
        for q in json.load(sys.stdin):
            try:
                default, capture = capture_backend(q["config"], q["gpu"], int(q.get("tp", 1)),
                                                   q.get("precision", "auto"))
                out.append({"default": dataclasses.asdict(default),
                            "capture": dataclasses.asdict(capture)})
            except Exception as exc:  # noqa: BLE001 - vLLM cannot make the model: say why
                out.append({"error": f"{type(exc).__name__}: "
                                     f"{(str(exc).splitlines() or [''])[0]}"})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
