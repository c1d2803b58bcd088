"""Cost-model dimensions read from a Hugging Face config.json, for every MoE family the study uses.

Nothing here is a hand-kept table: each number comes from the model's own config.json.

- Experts: `num_experts` / `num_local_experts` / `n_routed_experts`, top-k from
  `num_experts_per_tok` / `experts_per_token`, width from `moe_intermediate_size` (or
  `intermediate_size` where the model has no separate one: Mixtral, GPT-OSS).
- Shared experts: `shared_expert_intermediate_size` (Qwen2-MoE, Qwen3-Next, Qwen3.5) or
  `n_shared_experts` x `moe_intermediate_size` (DeepSeek-style: GLM-4.x, Kimi).
- Layers without experts: the first `first_k_dense_replace` layers (DeepSeek-style), `mlp_only_layers`
  and `decoder_sparse_step` (Qwen-MoE); their attention and dense FFN (`intermediate_size`) are counted
  once per model.
- Attention per layer type: grouped-query attention (with the output gate of Qwen3-Next/Qwen3.5 where
  `attn_output_gate` is set), multi-head latent attention (`kv_lora_rank`, `q_lora_rank`), and Gated
  DeltaNet linear attention (`layer_types` entries "linear_attention", or every layer but each
  `full_attention_interval`-th).
- Storage format from `quantization_config`: fp8 (block-scaled with `weight_block_size`), mxfp4
  (GPT-OSS: experts only), compressed-tensors integer groups (Kimi-K2.5: routed experts only, the
  `ignore` list keeping attention and shared experts in the checkpoint dtype); else `torch_dtype`.
  Any other quantisation method or dtype is an error, never a silent bf16.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .costmodel import ModelDims, dtype_bytes
from .errors import InputError

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16",
                 "float": "fp32"}


def load_config(cfg: dict | str | Path) -> tuple[dict, str]:
    """(config dict, a name for messages); the text model's part of a multimodal config."""
    name = "config.json"
    if not isinstance(cfg, dict):
        path = Path(cfg)
        if path.is_dir():
            path = path / "config.json"
        name = str(path)
        if not path.exists():
            raise InputError(f"{path}: no such config file")
        try:
            cfg = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON ({exc.msg})") from None
    text = cfg.get("text_config")
    if isinstance(text, dict):
        # multimodal wrappers (Kimi-K2.5, Qwen3.5) keep the language model in text_config; the
        # quantisation config may sit at either level
        merged = dict(text)
        if "quantization_config" not in merged and "quantization_config" in cfg:
            merged["quantization_config"] = cfg["quantization_config"]
        for key in ("torch_dtype", "dtype"):
            if key not in merged and key in cfg:
                merged[key] = cfg[key]
        cfg = merged
    return cfg, name


_GATED_ATTENTION = ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_text")


class _Reader:
    def __init__(self, cfg: dict, name: str):
        self.cfg, self.name = cfg, name

    def get(self, *keys, default=None):
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        if default is not None:
            return default
        raise InputError(f"{self.name}: lacks any of {', '.join(keys)}")

    def int(self, *keys, default=None) -> int:
        return int(self.get(*keys, default=default))


def _gqa(r: _Reader, hidden: int) -> int:
    heads = r.int("num_attention_heads")
    kv = r.int("num_key_value_heads", default=heads)
    head_dim = int(r.cfg.get("head_dim") or hidden // heads)
    # Qwen3-Next and Qwen3.5 gate the attention output: q_proj also produces the gate
    gated = r.cfg.get("attn_output_gate", r.cfg.get("model_type") in _GATED_ATTENTION)
    q = hidden * heads * head_dim * (2 if gated else 1)
    return q + 2 * hidden * kv * head_dim + heads * head_dim * hidden


def _mla(r: _Reader, hidden: int) -> int:
    heads = r.int("num_attention_heads")
    nope, rope = r.int("qk_nope_head_dim"), r.int("qk_rope_head_dim")
    v_dim, kv_rank = r.int("v_head_dim"), r.int("kv_lora_rank")
    q_rank = r.cfg.get("q_lora_rank")
    q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
    kv = hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim)
    return q + kv + heads * v_dim * hidden


def _linear_attention(r: _Reader, hidden: int) -> int:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): q/k/v/z and b/a input projections, the short causal
    convolution over q, k, v, and the output projection."""
    nk, nv = r.int("linear_num_key_heads"), r.int("linear_num_value_heads")
    dk, dv = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
    kernel = r.int("linear_conv_kernel_dim", default=4)
    qkvz = hidden * (2 * nk * dk + 2 * nv * dv)
    ba = hidden * 2 * nv
    conv = (2 * nk * dk + nv * dv) * kernel
    return qkvz + ba + conv + nv * dv * hidden


def _layer_kinds(r: _Reader, layers: int) -> list[str]:
    """'full' (softmax attention) or 'linear' per layer."""
    types = r.cfg.get("layer_types")
    if types:
        if len(types) != layers:
            raise InputError(f"{r.name}: layer_types has {len(types)} entries for {layers} layers")
        kinds = []
        for t in types:
            if t == "linear_attention":
                kinds.append("linear")
            elif t in ("full_attention", "sliding_attention", "attention"):
                kinds.append("full")
            else:
                raise InputError(f"{r.name}: unknown layer type '{t}'")
        return kinds
    interval = r.cfg.get("full_attention_interval")
    if interval:
        return ["full" if (i + 1) % int(interval) == 0 else "linear" for i in range(layers)]
    return ["full"] * layers


def _moe_layers(r: _Reader, layers: int) -> list[bool]:
    first_dense = int(r.cfg.get("first_k_dense_replace") or 0)
    mlp_only = set(r.cfg.get("mlp_only_layers") or [])
    step = int(r.cfg.get("decoder_sparse_step") or 1)
    return [i >= first_dense and i not in mlp_only and (i + 1) % step == 0 for i in range(layers)]


def _matches(patterns, module: str) -> bool:
    for p in patterns or []:
        if p.startswith("re:"):
            if re.search(p[3:], module):
                return True
        elif p in module:
            return True
    return False


def storage_formats(cfg: dict, name: str = "config.json") -> tuple[str, str]:
    """(routed experts' format, attention and shared experts' format) of a checkpoint."""
    raw = str(cfg.get("torch_dtype") or cfg.get("dtype") or "")
    if not raw:
        raise InputError(f"{name}: no torch_dtype; set the model's dtype in the config")
    base = _TORCH_DTYPES.get(raw, raw)
    try:
        dtype_bytes(base)
    except InputError:
        raise InputError(f"{name}: unknown torch_dtype '{raw}'") from None
    q = cfg.get("quantization_config")
    if not q:
        return base, base
    method = str(q.get("quant_method") or "").lower()
    if method == "fp8":
        block = q.get("weight_block_size")
        fmt = f"fp8-b{int(block[0])}" if block else "fp8"
        if block and len(set(block)) != 1:
            raise InputError(f"{name}: non-square fp8 blocks {block} are not supported")
        skip = q.get("modules_to_not_convert") or q.get("ignored_layers") or []
        return fmt, base if _matches(skip, "model.layers.0.self_attn.q_proj") else fmt
    if method == "mxfp4":
        # vLLM's mxfp4 applies to the fused MoE experts only; attention stays in the base dtype
        return "mxfp4", base
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        if len(groups) != 1:
            raise InputError(f"{name}: compressed-tensors with {len(groups)} config groups is not "
                             "supported (one group expected)")
        w = next(iter(groups.values())).get("weights") or {}
        bits, kind = int(w.get("num_bits", 0)), w.get("type", "int")
        if kind != "int" or bits not in (4, 8) or w.get("strategy") != "group":
            raise InputError(f"{name}: compressed-tensors weights {kind}{bits} "
                             f"({w.get('strategy')}) are not supported (int4/int8 groups are)")
        fmt = f"int{bits}-g{int(w['group_size'])}"
        ignore = q.get("ignore") or []
        attn_kept = _matches(ignore, "model.layers.1.self_attn.q_proj")
        experts_kept = _matches(ignore, "model.layers.1.mlp.experts.0.up_proj")
        if experts_kept:
            raise InputError(f"{name}: compressed-tensors leaves the routed experts unquantised; "
                             "this layout is not supported")
        return fmt, base if attn_kept else fmt
    raise InputError(f"{name}: unknown quantization method '{method or q}' (known: fp8, mxfp4, "
                     "compressed-tensors)")


def dims_from_config(cfg: dict | str | Path, dtype: str | None = None, tp: int = 1) -> ModelDims:
    cfg, name = load_config(cfg)
    r = _Reader(cfg, name)
    hidden = r.int("hidden_size")
    layers = r.int("num_hidden_layers")
    num_experts = r.int("num_experts", "num_local_experts", "n_routed_experts")
    top_k = r.int("num_experts_per_tok", "experts_per_token", "moe_topk")
    expert_inter = r.int("moe_intermediate_size", "intermediate_size")
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if not shared and cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * r.int("moe_intermediate_size")
    mla = bool(cfg.get("kv_lora_rank"))
    kinds = _layer_kinds(r, layers)
    moe = _moe_layers(r, layers)
    if not any(moe):
        raise InputError(f"{name}: no layer has experts")

    def attention(kind: str) -> int:
        if kind == "linear":
            return _linear_attention(r, hidden)
        return _mla(r, hidden) if mla else _gqa(r, hidden)

    def kv_cache(kind: str) -> int:  # elements per token: linear attention keeps a fixed state
        if kind == "linear":
            return 0
        if mla:
            return r.int("kv_lora_rank") + r.int("qk_rope_head_dim")
        heads = r.int("num_attention_heads")
        return (2 * r.int("num_key_value_heads", default=heads)
                * int(r.cfg.get("head_dim") or hidden // heads))

    moe_attn = [attention(k) for k, m in zip(kinds, moe) if m]
    dense_layers = [attention(k) for k, m in zip(kinds, moe) if not m]
    dense_ffn = 3 * hidden * r.int("intermediate_size") if dense_layers else 0
    expert_fmt, dense_fmt = storage_formats(cfg, name)
    if dtype is not None:  # online quantisation of the whole model (e.g. vLLM --quantization fp8)
        expert_fmt = dense_fmt = dtype
    return ModelDims(
        hidden=hidden, expert_intermediate=expert_inter, num_experts=num_experts, top_k=top_k,
        attention_params=sum(moe_attn) / len(moe_attn), shared_intermediate=shared,
        num_layers=layers, dtype=expert_fmt, tp=tp, dense_dtype=dense_fmt,
        num_moe_layers=len(moe_attn),
        dense_layer_params=float(sum(dense_layers) + dense_ffn * len(dense_layers)),
        vocab_size=int(cfg.get("vocab_size") or 0), kv_per_token=float(sum(map(kv_cache, kinds))))


def study_dims(config_or_manifest, precision: str = "auto", tp: int = 1) -> ModelDims:
    """A study model's dimensions from its config.json, given directly or as a download manifest
    (its snapshot's config.json); precision "fp8" is vLLM's online fp8 of the whole model, "bf16",
    "fp16" or "fp32" the dtype it is served in."""
    path = Path(config_or_manifest)
    if path.suffix == ".json" and path.name != "config.json":
        from .hub import snapshot_of

        path = snapshot_of(path) / "config.json"
    return dims_from_config(path, dtype=None if precision in (None, "auto") else precision,
                            tp=int(tp))


def dense_dims_from_config(cfg: dict | str | Path, tp: int = 1) -> ModelDims:
    """A dense model (a separate draft model) as the step model reads it: every layer's FFN as one
    expert that every token uses, grouped-query attention."""
    cfg, name = load_config(cfg)
    r = _Reader(cfg, name)
    hidden, layers = r.int("hidden_size"), r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    kv, head_dim = r.int("num_key_value_heads", default=heads), int(cfg.get("head_dim")
                                                                   or hidden // heads)
    _, fmt = storage_formats(cfg, name)
    return ModelDims(hidden=hidden, expert_intermediate=r.int("intermediate_size"), num_experts=1,
                     top_k=1, attention_params=_gqa(r, hidden), num_layers=layers, dtype=fmt,
                     tp=tp, vocab_size=int(cfg.get("vocab_size") or 0),
                     kv_per_token=float(2 * kv * head_dim * layers))
