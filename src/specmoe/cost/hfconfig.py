"""Cost-model dimensions read from a Hugging Face config.json, for every MoE family the study uses.

Each number comes from the model's own config.json; where it leaves a key out, from the model
type's default in transformers' config class, which vLLM reads (the tables of such defaults here are
checked against transformers by the tests), never a guess.

- Experts: `num_experts` / `num_local_experts` / `n_routed_experts`, top-k from
  `num_experts_per_tok` / `experts_per_token`, width from `moe_intermediate_size` (or
  `intermediate_size` where the model has no separate one: Mixtral, GPT-OSS).
- Shared experts: `shared_expert_intermediate_size` (Qwen2-MoE, Qwen3-Next, Qwen3.5),
  `n_shared_experts` x `moe_intermediate_size` (DeepSeek-style: GLM-4.x, Kimi) or
  `num_shared_experts` x `moe_shared_expert_intermediate_size`, else `moe_intermediate_size`
  (Bailing-MoE: Ling).
- Layers without experts: the first `first_k_dense_replace` layers (DeepSeek-style), all but every
  `moe_layer_freq`-th (DeepSeek-V2), `mlp_only_layers` and `decoder_sparse_step` (Qwen-MoE); their
  attention and dense FFN (`intermediate_size`) are counted once per model.
- Attention per layer type: grouped-query attention (with the output gate of Qwen3-Next/Qwen3.5 where
  `attn_output_gate` is set), multi-head latent attention (`kv_lora_rank`, `q_lora_rank`), and Gated
  DeltaNet linear attention (`layer_types` entries "linear_attention", or every layer but each
  `full_attention_interval`-th).
- Head width: `head_dim`, else the model type's own default in transformers (HEAD_DIM_DEFAULT:
  Qwen3-Next, Qwen3.5, gpt-oss, Llama-4), else hidden_size / num_attention_heads, which must
  then be a whole number (a config whose heads do not divide its hidden size names head_dim).
- Storage format from `quantization_config`: fp8 (block-scaled with `weight_block_size`), mxfp4
  (GPT-OSS: experts only), compressed-tensors integer groups (Kimi-K2.5: routed experts only, the
  `ignore` list keeping attention and shared experts in the checkpoint dtype); else `torch_dtype`.
  Any other quantisation method or dtype is an error, never a silent bf16.
- Keys left out: a layout key a config.json leaves out (first_k_dense_replace, q_lora_rank,
  kv_lora_rank, shared experts, intermediate_size_mlp, full_attention_interval, ...) is its model
  type's default in transformers, which vLLM reads (LAYOUT_DEFAULTS), never "none".
- Model types: only those whose layout this reads (MODELLED_TYPES); any other, and any layout key
  it does not model (UNMODELLED_LAYOUTS), is an error, never a model priced without its blocks.
- Values: each size, count or layer index a whole number, each list a list and each section of
  settings a JSON object; anything else is an error naming the file and the key, never a string or
  a fraction read as some number or passed over.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .costmodel import FLOAT_DTYPES, ModelDims
from ..errors import InputError
from ..provenance import read_json as _read_json

TORCH_DTYPE_OF = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # FLOAT_DTYPES' names
_TORCH_DTYPES = {**{v: k for k, v in TORCH_DTYPE_OF.items()}, "half": "fp16", "float": "fp32"}


def read_json(path: str | Path) -> Any:
    """A config.json or a download manifest as it is (provenance.read_json, one reader of JSON
    files): a missing, non-text or invalid file is a one-line error naming it."""
    return _read_json(path, what="config file")


def load_config(cfg: dict | str | Path) -> tuple[dict, str]:
    """(config dict, a name for messages); the text model's part of a multimodal config."""
    name = "config.json"
    if not isinstance(cfg, dict):
        path = Path(cfg)
        if path.is_dir():
            path = path / "config.json"
        name = str(path)
        cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise InputError(f"{name}: a config.json is a JSON object of settings, not a "
                         f"{type(cfg).__name__}")
    text = cfg.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise InputError(f"{name}: text_config = {text!r} is not a JSON object of the language "
                         "model's settings")
    if isinstance(text, dict):
        # multimodal wrappers (Kimi-K2.5, Qwen3.5) keep the language model in text_config; the
        # quantisation config may sit at either level
        merged = dict(text)
        if merged.get("model_type") is None and cfg.get("model_type") is not None:
            merged["model_type"] = cfg["model_type"]
        if "quantization_config" not in merged and "quantization_config" in cfg:
            merged["quantization_config"] = cfg["quantization_config"]
        for key in ("torch_dtype", "dtype"):
            if key not in merged and key in cfg:
                merged[key] = cfg[key]
        cfg = merged
    return _with_defaults(_flatten_dbrx(cfg, name), name), name


def _flatten_dbrx(cfg: dict, name: str) -> dict:
    """DBRX nests attention and FFN in attn_config/ffn_config and names the rest its own way:
    the same numbers under the keys every other family uses; either section anything but a
    JSON object is an error."""
    if cfg.get("model_type") != "dbrx":
        return cfg
    for key in ("attn_config", "ffn_config"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise InputError(f"{name}: {key} = {cfg[key]!r} is not a JSON object of DBRX's "
                             f"{'attention' if key == 'attn_config' else 'FFN'} settings")
    attn, ffn = cfg.get("attn_config") or {}, cfg.get("ffn_config") or {}
    flat = {"hidden_size": cfg.get("d_model"), "num_hidden_layers": cfg.get("n_layers"),
            "num_attention_heads": cfg.get("n_heads"),
            "num_key_value_heads": attn.get("kv_n_heads"),
            "intermediate_size": ffn.get("ffn_hidden_size"),
            "num_local_experts": ffn.get("moe_num_experts"),
            "num_experts_per_tok": ffn.get("moe_top_k")}
    return {**cfg, **{k: v for k, v in flat.items() if v is not None}}


# Layout keys the reader would read as "none" where a config.json leaves them out (no dense layers
# first, a full-rank q projection, grouped-query rather than latent attention, no shared expert, a
# dense FFN as wide as an expert, every layer full attention, no DSA indexer, no MTP layer), by the
# model types whose config class in transformers (5.x) has another default: vLLM reads that class,
# so it builds what the default says (DeepSeek-R1 without first_k_dense_replace, n_shared_experts
# and q_lora_rank was priced 708.8B parameters, not its 670.9B). load_config fills them in where a
# file leaves a key out (a key given as null stays null, as transformers keeps it). REQUIRED: a key
# vLLM reads that the class has no default for (glm4_moe_lite.py reads
# config.first_k_dense_replace): a file without it is refused. Model types outside transformers
# (remote code: DeepSeek-MoE, Kimi-K2, Bailing-MoE) have none here: their files give every key.
# tests/test_hfconfig.py checks this table against transformers where it is installed.
REQUIRED = "required"
LAYOUT_KEYS = ("first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "n_shared_experts",
               "shared_expert_intermediate_size", "intermediate_size_mlp",
               "full_attention_interval", "index_topk", "num_nextn_predict_layers")
_DEEPSEEK_V3 = {"first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                "n_shared_experts": 1}
_QWEN3_NEXT = {"shared_expert_intermediate_size": 512, "full_attention_interval": 4}
LAYOUT_DEFAULTS = {
    "deepseek_v2": {"q_lora_rank": 1536, "kv_lora_rank": 512, "n_shared_experts": 2},
    "deepseek_v3": {**_DEEPSEEK_V3, "num_nextn_predict_layers": 1},
    "kimi_k25": {**_DEEPSEEK_V3, "num_nextn_predict_layers": 1},
    "deepseek_v32": {**_DEEPSEEK_V3, "index_topk": 2048},
    "glm_moe_dsa": {**_DEEPSEEK_V3, "q_lora_rank": 2048, "index_topk": 2048},
    "glm4_moe": {"first_k_dense_replace": 1, "n_shared_experts": 1,
                 "num_nextn_predict_layers": 1},
    "glm4_moe_lite": {"first_k_dense_replace": REQUIRED, "q_lora_rank": 768,
                      "kv_lora_rank": 512, "n_shared_experts": 1},
    "qwen2_moe": {"shared_expert_intermediate_size": 5632},
    "qwen3_next": _QWEN3_NEXT, "qwen3_5_moe": _QWEN3_NEXT, "qwen3_5_moe_text": _QWEN3_NEXT,
    "llama4": {"intermediate_size_mlp": 16384}, "llama4_text": {"intermediate_size_mlp": 16384},
}


def _with_defaults(cfg: dict, name: str) -> dict:
    """`cfg` with the layout keys it leaves out at its model type's defaults (LAYOUT_DEFAULTS); a
    key vLLM needs that has no default (REQUIRED) left out is an error."""
    kind = str(cfg.get("model_type"))
    defaults = LAYOUT_DEFAULTS.get(kind, {})
    lacking = [k for k, v in defaults.items() if v == REQUIRED and k not in cfg]
    if lacking:
        raise InputError(f"{name}: lacks {lacking[0]}, which vLLM reads from a {kind} config and "
                         "transformers' config class gives no default for")
    return {**{k: v for k, v in defaults.items() if v != REQUIRED}, **cfg}


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

    def int(self, *keys, default=None, least: int = 1) -> int:
        """A size or count: a whole number >= `least`, never truncated (7.5 experts is an error)."""
        key = next((k for k in keys if self.cfg.get(k) is not None), None)
        if key is None and default is not None:
            return default
        return whole(self.get(*keys), f"{self.name}: {key or keys[0]}", least)

    def size(self, key: str) -> int:
        """An optional width or count: 0 where the config leaves it out or gives 0 (none), else a
        whole number >= 1 (a string or a fraction is an error, never read as a number)."""
        v = self.cfg.get(key)
        if v is None or (type(v) in (int, float) and v == 0):
            return 0
        return whole(v, f"{self.name}: {key}")

    def indices(self, key: str, layers: int) -> set[int]:
        """A list of layer indices of a model of `layers` layers (whole numbers from 0 to
        layers - 1: an index past the last layer names none, and is an error, never passed
        over); absent: none."""
        v = self.cfg.get(key)
        if v is None:
            return set()
        if not isinstance(v, list):
            raise InputError(f"{self.name}: {key} = {v!r} is not a list of layer indices")
        out = {whole(i, f"{self.name}: {key} entry", 0) for i in v}
        past = sorted(i for i in out if i >= layers)
        if past:
            raise InputError(f"{self.name}: {key} names layer {past[0]}, which a model of "
                             f"{layers} layers (0 to {layers - 1}) does not have")
        return out


def required_int(cfg: dict, key: str, name: str = "config.json") -> int:
    """A size or count a config.json must give (vocab_size, hidden_size): a whole number >= 1;
    left out, or anything else, is an error naming the file and the key, never read as 0."""
    return _Reader(cfg, name).int(key)


# The keys vLLM 0.32 reads a model's positions from (ModelArchConfigConvertorBase.
# derive_max_model_len_and_key, in its order): the smallest of those given, model_max_length over
# the others where given (vLLM's rule for Command-R). tests/test_preflight.py checks the list
# against vLLM's where it is installed.
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_target_positions", "max_sequence_length",
                 "max_seq_length", "seq_len")


# RoPE types whose factor vLLM 0.32 does not apply to the positions (_get_and_verify_max_len in
# vllm/config/model.py: "YaRN variants leave max_position_embeddings already scaled, as
# Transformers' _compute_yarn_parameters assumes"); any other type's factor (linear, dynamic, ...)
# multiplies them, except in a Gemma 3 model, whose positions are already scaled. Legacy names as
# vLLM's patch_legacy_rope_type reads them (type for rope_type; su is longrope, mrope default,
# telechat3-yarn yarn).
ROPE_UNSCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
_ROPE_LEGACY = {"su": "longrope", "mrope": "default", "telechat3-yarn": "yarn"}
# The layer types a per-layer-type rope_parameters is keyed by (transformers 5.x,
# configuration_utils.ALLOWED_LAYER_TYPES; vLLM's is_rope_parameters_nested reads them):
# tests/test_hfconfig.py checks them against transformers where it is installed.
ROPE_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention",
                    "window_attention", "indexed_attention", "compressed_sparse_attention",
                    "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe", "hybrid",
                    "hybrid_sliding", "linear_attention", "sparse", "dense")


def rope_factor(cfg: dict, name: str = "config.json") -> tuple[float, str] | None:
    """(the factor vLLM 0.32 multiplies a model's positions by, its rope type) as
    _get_and_verify_max_len reads the RoPE parameters (rope_scaling, which transformers reads
    over rope_parameters; one dict per layer type where keyed by them, the last factor given
    counting); None: no factor applies (no RoPE parameters, only ROPE_UNSCALED types, or a
    Gemma 3 model). A null factor is 1, as vLLM falls back to; any other non-number is an error."""
    params = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(params, dict) or not params or "gemma3" in str(cfg.get("model_type")):
        return None
    nested = set(params) <= set(ROPE_LAYER_TYPES)
    found = None
    for rp in ([p for p in params.values() if isinstance(p, dict) and p] if nested else [params]):
        kind = rp.get("rope_type", rp.get("type", "default"))
        kind = _ROPE_LEGACY.get(kind, kind)
        if kind in ROPE_UNSCALED or "factor" not in rp:
            continue
        factor = rp["factor"]
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                                   or not factor > 0):
            raise InputError(f"{name}: rope factor = {factor!r} is not a number > 0")
        found = (1.0 if factor is None else float(factor), str(kind))
    return None if found is None or found[0] == 1.0 else found


def max_positions(cfg: dict, name: str = "config.json") -> tuple[int, str] | None:
    """(the positions a model takes, where they come from) as vLLM 0.32 derives its longest
    max_model_len from a config.json: the smallest of the POSITION_KEYS given (model_max_length
    over the others where given), times the RoPE factor of the types that extend the positions
    (rope_factor: linear or dynamic, not YaRN, whose max_position_embeddings already counts it);
    None: it gives none of the keys. Each value a whole number >= 1."""
    given = [(whole(cfg[k], f"{name}: {k}"), k) for k in POSITION_KEYS if cfg.get(k) is not None]
    own = [g for g in given if g[1] == "model_max_length"]
    found = own[0] if own else min(given, key=lambda g: g[0], default=None)
    rope = rope_factor(cfg, name) if found is not None else None
    if rope is None:
        return found
    return int(found[0] * rope[0]), f"{found[1]} x {rope[1]} rope factor {rope[0]:g}"


def whole(v, what: str, least: int = 1) -> int:
    """`v` as a size or count of a config.json (what: where it is, for the message), at least
    `least` (1: a size; 0: a layer index or a count of layers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or \
            isinstance(v, float) and not v.is_integer():
        raise InputError(f"{what} = {v!r} is not a whole number")
    if v < least:
        raise InputError(f"{what} = {v!r} must be >= {least}")
    return int(v)


# num_key_value_heads where a config.json leaves it out: the default of the model type's config
# class in transformers (5.x), which is not always the number of attention heads ("heads": it is;
# tests/test_meaning_cli.py checks this table against transformers where it is installed).
KV_HEADS_DEFAULT = {
    "mixtral": 8, "qwen2_moe": 16, "qwen3_moe": 4, "qwen3_next": 2, "qwen3_5_moe": 2,
    "qwen3_5_moe_text": 2, "gpt_oss": 8, "glm4_moe": 8, "glm4_moe_lite": 20, "deepseek_v3": 128,
    "llama4_text": 8, "phimoe": 8, "jamba": 8, "minimax": 8, "ernie4_5_moe": 4, "dots1": 32,
    "olmoe": "heads", "granitemoe": "heads", "hunyuan_v1_moe": "heads", "llama": "heads",
    "mistral": 8, "qwen2": 32, "qwen3": 32,
}


def kv_heads(cfg: dict, name: str = "config.json") -> int:
    """Key/value heads: num_key_value_heads, else the model type's default as transformers
    reads the file (KV_HEADS_DEFAULT); a model type whose default is not known is an error."""
    heads = whole(cfg.get("num_attention_heads"), f"{name}: num_attention_heads")
    if cfg.get("num_key_value_heads") is not None:
        kv = whole(cfg["num_key_value_heads"], f"{name}: num_key_value_heads")
    elif cfg.get("kv_lora_rank"):  # multi-head latent attention: every head reads the latent
        kv = heads
    else:
        default = KV_HEADS_DEFAULT.get(str(cfg.get("model_type")))
        if default is None:
            raise InputError(f"{name}: no num_key_value_heads, and model_type "
                             f"{cfg.get('model_type')!r} is not one whose default is known here "
                             "(transformers' default differs by model type): add "
                             "num_key_value_heads")
        kv = heads if default == "heads" else default
    if not cfg.get("kv_lora_rank") and (kv > heads or heads % kv):
        raise InputError(f"{name}: {kv} key/value heads do not divide the {heads} attention heads")
    return kv


# head_dim where a config.json leaves it out, for the model types whose config class in
# transformers (5.x) has a width of its own: transformers and vLLM (which reads that class) build
# heads of this width, whatever hidden_size / num_attention_heads is (gpt-oss: 2880 / 64 = 45,
# its heads 64 wide). Every other type without head_dim: hidden_size / num_attention_heads
# (tests/test_hfconfig.py checks this table against transformers where it is installed).
HEAD_DIM_DEFAULT = {"qwen3_next": 256, "qwen3_5_moe": 256, "qwen3_5_moe_text": 256,
                    "gpt_oss": 64, "llama4": 128, "llama4_text": 128, "qwen3": 128}


def head_dim(cfg: dict, name: str = "config.json") -> int:
    """Each attention head's width: head_dim where the config gives it (a whole number >= 1),
    else the model type's default as transformers reads the file (HEAD_DIM_DEFAULT), else
    hidden_size / num_attention_heads, which must then be a whole number. Where the heads do not
    divide hidden_size the engines part ways: transformers 5.x and vLLM 0.32 build heads of the
    quotient rounded down for most types (attention narrower than the hidden size), neither
    builds DBRX's, transformers refuses a DeepSeek-V2 config and cannot run OLMoE's; such a
    file is refused, head_dim being how a config says what its heads are. MLA (kv_lora_rank):
    its heads are qk_nope_head_dim + qk_rope_head_dim wide, and the quotient is only the width
    preflight's EAGLE estimate reads (GLM-4.7-Flash: 2048 / 20), never refused."""
    if cfg.get("head_dim") is not None:
        return whole(cfg["head_dim"], f"{name}: head_dim")
    default = HEAD_DIM_DEFAULT.get(str(cfg.get("model_type")))
    if default is not None:
        return default
    hidden = whole(cfg.get("hidden_size"), f"{name}: hidden_size")
    heads = whole(cfg.get("num_attention_heads"), f"{name}: num_attention_heads")
    if hidden % heads and not cfg.get("kv_lora_rank"):
        raise InputError(f"{name}: hidden_size {hidden} is not a multiple of num_attention_heads "
                         f"{heads}: head_dim must then be given (the width of each head; "
                         f"{hidden} / {heads} is not a whole number)")
    return hidden // heads


def _gqa(r: _Reader, hidden: int) -> int:
    heads = r.int("num_attention_heads")
    kv = kv_heads(r.cfg, r.name)
    dim = head_dim(r.cfg, r.name)
    # Qwen3-Next and Qwen3.5 gate the attention output: q_proj also produces the gate
    gated = r.cfg.get("attn_output_gate", r.cfg.get("model_type") in _GATED_ATTENTION)
    q = hidden * heads * dim * (2 if gated else 1)
    return q + 2 * hidden * kv * dim + heads * dim * hidden


def _mla(r: _Reader, hidden: int) -> int:
    heads = r.int("num_attention_heads")
    nope, rope = r.int("qk_nope_head_dim"), r.int("qk_rope_head_dim")
    v_dim, kv_rank = r.int("v_head_dim"), r.int("kv_lora_rank")
    q_rank = r.size("q_lora_rank")
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


# Layer layouts that the reader does not model (each key, what it means): read as every layer a
# softmax-attention MoE layer, such a model would be priced wrong without a word, so it is refused.
UNMODELLED_LAYOUTS = {
    "attn_layer_period": "Mamba layers between attention layers (Jamba)",
    "expert_layer_period": "MoE layers only every few layers (Jamba)",
    "layers_block_type": "non-attention blocks (Mamba)",
    "hybrid_override_pattern": "Mamba blocks (Nemotron-H)",
    "attn_type_list": "lightning (linear) attention layers (MiniMax)",
    "moe_layer_freq": "MoE layers listed one by one (MiMo-V2's moe_layer_freq list)",
    "num_dense_layers": "layers without experts counted by num_dense_layers (AFMoE)",
    "mlp_layer_types": "dense and sparse layers listed one by one (EXAONE-MoE)",
    "use_residual": "dense residual MLPs beside the MoE in every layer (Snowflake Arctic)",
    "parallel_attn_mlp_res": "residual MLPs run beside attention (Snowflake Arctic)",
    "moe_layer_frequency": "MoE layers every moe_layer_frequency-th layer (Snowflake Arctic)",
}
# ... where a number, moe_layer_freq is modelled: every freq-th layer has experts (_moe_layers)
MODELLED_AS_INT = {"moe_layer_freq"}


# The model types whose layer layout the reader models: in each layer softmax (or sliding-window,
# or Gated DeltaNet) attention and a MoE FFN, with the dense layers, shared experts and
# quantisation this module reads, and nothing else (tests/test_hfconfig.py reads the published
# config.json of each family the repository holds one of). Any other type may hold blocks the
# reader does not see (Arctic's dense residual MLP beside the MoE, JetMoE's attention experts,
# Mamba layers) and is refused, never priced as if it were one of these.
MODELLED_TYPES = frozenset({
    "mixtral", "phimoe", "olmoe", "granitemoe", "granitemoeshared", "dbrx",
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text",
    "deepseek", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25",
    "glm4_moe", "glm4_moe_lite", "glm_moe_dsa", "gpt_oss", "llama4", "llama4_text", "bailing_moe",
})


# Dense model types (transformers' names) a config.json may come with: no experts at all, so
# speculative decoding on a MoE, whose verification reads more experts than a decode step, is not
# what they are; each is refused as dense, never as a file that lacks the experts' keys.
DENSE_TYPES = frozenset({
    "llama", "mistral", "ministral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text",
    "phi", "phi3", "granite", "olmo", "olmo2", "olmo3", "cohere", "cohere2", "falcon", "gpt2",
    "gpt_neox", "gptj", "starcoder2", "internlm2", "exaone", "exaone4", "glm", "glm4", "stablelm",
    "mpt", "bloom", "opt", "smollm3", "seed_oss", "apertus", "nemotron", "ernie4_5",
    "hunyuan_v1_dense",
})
DENSE = "speculative decoding on an MoE does not apply"


def _check_model_type(cfg: dict, name: str) -> None:
    """A model type outside MODELLED_TYPES is an error, one line: a dense model's says so, any
    other's that its layout is not known here."""
    kind = cfg.get("model_type")
    if kind in DENSE_TYPES:
        raise InputError(f"{name}: model_type {kind!r} is a dense model: {DENSE} (the step "
                         "model prices a MoE target's experts; a dense one has none)")
    if kind not in MODELLED_TYPES:
        raise InputError(f"{name}: model_type {kind!r} is not one whose layer layout is modelled "
                         f"here ({', '.join(sorted(MODELLED_TYPES))}): its layers may hold blocks "
                         "the step model does not price, and its prediction could be wrong")


def _unmodelled(cfg: dict) -> str | None:
    """The first key of a layout the reader does not model (UNMODELLED_LAYOUTS), or None."""
    return next((k for k in UNMODELLED_LAYOUTS if cfg.get(k) is not None
                 and not (k in MODELLED_AS_INT and isinstance(cfg[k], int))), None)


def layer_kinds(cfg: dict | str | Path, name: str = "config.json",
                draft: bool = False) -> list[str]:
    """'full', 'sliding' or 'linear' per decoder layer of a config.json (a target's, or a draft
    model's: `draft`), as vLLM 0.32 serves them: the one reader of both the step model and the
    GPU preflight (specmoe.checks.preflight). A draft model is built with its target's
    CacheConfig (vllm/v1/spec_decode/draft_model.py:81-100 replaces the model config only), so
    its own model-level sliding_window slides none of its layers: with `draft`, such a window is
    left alone (its layer_types still say which layers slide)."""
    cfg, read = load_config(cfg)
    r = _Reader(cfg, read if read != "config.json" else name)
    return _layer_kinds(r, r.int("num_hidden_layers"), own_window=not draft)


def _layer_kinds(r: _Reader, layers: int, own_window: bool = True) -> list[str]:
    """'full' (softmax attention), 'sliding' (softmax over the last `sliding_window` tokens) or
    'linear' per layer; a layout the step model does not price (UNMODELLED_LAYOUTS) is an
    error. own_window: False where vLLM ignores a model-level sliding_window (a draft model's,
    layer_kinds)."""
    key = _unmodelled(r.cfg)
    if key is not None:
        raise InputError(f"{r.name}: {UNMODELLED_LAYOUTS[key]} ({key}) are not modelled: the step "
                         "model would price every layer as softmax attention over MoE, and its "
                         "prediction would be wrong")
    types = r.cfg.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise InputError(f"{r.name}: layer_types = {types!r} is not a list of layer types")
    if types:
        if len(types) != layers:
            raise InputError(f"{r.name}: layer_types has {len(types)} entries for {layers} layers")
        kinds = []
        for t in types:
            if t == "linear_attention":
                kinds.append("linear")
            elif t in ("full_attention", "attention"):
                kinds.append("full")
            elif t == "sliding_attention":
                if not r.cfg.get("sliding_window"):
                    raise InputError(f"{r.name}: sliding_attention layers without sliding_window")
                kinds.append("sliding")
            else:
                raise InputError(f"{r.name}: unknown layer type '{t}'")
        return kinds
    if r.cfg.get("full_attention_interval") is not None:
        interval = r.int("full_attention_interval")
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    return ["sliding" if own_window and _window_on_every_layer(r) else "full"] * layers


# The model types whose vLLM 0.32 attention takes a model-level sliding_window on every layer
# where the config (as transformers reads it) has no layer_types: vLLM sets CacheConfig's
# sliding_window from it (vllm/engine/arg_utils.py:2248-2254), and an Attention built with no
# per-layer window takes CacheConfig's (vllm/model_executor/layers/attention/attention.py:266-271),
# as mixtral.py, phimoe.py and qwen3_moe.py build theirs; value: max_position_embeddings where the
# config leaves it out (transformers' default for the type). transformers' Qwen3MoeConfig keeps
# the window only under use_sliding_window (WINDOW_GATES). Qwen2MoeConfig does too, and lists
# layer_types itself, never all sliding: vLLM then sets no model-level window, and qwen2_moe.py
# passes none per layer, so vLLM serves every layer full (WINDOW_UNUSED).
# Dense types (a draft model served alone; a draft model beside a target ignores its own window:
# layer_kinds): MistralAttention is LlamaAttention (vllm/model_executor/models/mistral.py:77),
# and LlamaAttention passes a per-layer window only where the config lists layer_types
# (llama.py:185-204, 219), so with none a model-level window (transformers' MistralConfig
# defaults it to 4096 where config.json leaves the key out: configuration_mistral.py:80,
# WINDOW_DEFAULT; LlamaConfig has no such key, but keeps one config.json gives) slides every
# layer; max_position_embeddings defaults to 4096 * 32 and 2048 (configuration_mistral.py:71,
# configuration_llama.py:71). Qwen2Config and Qwen3Config keep the window only under
# use_sliding_window and then list layer_types from max_window_layers
# (configuration_qwen2.py:84-93): all full, all sliding, or a mix vLLM's qwen2.py refuses
# (:351-359); which, is not modelled here, so a gated-on window of theirs is refused.
WINDOW_ON_EVERY_LAYER = {"mixtral": 4096 * 32, "phimoe": 4096 * 32, "qwen3_moe": 32768,
                         "mistral": 4096 * 32, "llama": 2048}
WINDOW_DEFAULT = {"mistral": 4096}
WINDOW_GATES = {"qwen3_moe": "use_sliding_window", "qwen2": "use_sliding_window",
                "qwen3": "use_sliding_window"}
WINDOW_UNUSED = frozenset({"qwen2_moe"})


def sliding_window(cfg: dict, name: str = "config.json") -> int:
    """The window of a config's sliding-window layers, in tokens, as transformers reads it:
    sliding_window, else the model type's default where the key is left out (WINDOW_DEFAULT:
    Mistral's 4096); 0: none. The one reader of the window of the layers layer_kinds says slide,
    for the step model and the GPU preflight (specmoe.checks.preflight.memory)."""
    window = cfg.get("sliding_window", WINDOW_DEFAULT.get(cfg.get("model_type")))
    return whole(window, f"{name}: sliding_window") if window else 0


def _window_on_every_layer(r: _Reader) -> bool:
    """Whether a config without layer_types slides every layer's attention: a sliding_window
    (0 or null: none) shorter than the model's positions (max_position_embeddings: a window that
    covers every position changes nothing), of a type vLLM applies it to every layer of
    (WINDOW_ON_EVERY_LAYER). Such a window of another type is an error: which of its layers
    slide, if any, is not known here."""
    kind = r.cfg.get("model_type")
    gate = WINDOW_GATES.get(kind)
    window = sliding_window(r.cfg, r.name)
    if not window or kind in WINDOW_UNUSED or gate and not r.cfg.get(gate):
        return False
    positions = r.int("max_position_embeddings", default=WINDOW_ON_EVERY_LAYER.get(kind, 0),
                      least=0)
    if positions and window >= positions:
        return False
    if kind in WINDOW_ON_EVERY_LAYER:
        return True
    raise InputError(f"{r.name}: sliding_window = {window} without layer_types"
                     f"{'' if positions else ' or max_position_embeddings'}: which layers of a "
                     f"{kind!r} model vLLM slides is not modelled here")


def _moe_layers(r: _Reader, layers: int) -> list[bool]:
    first_dense = r.int("first_k_dense_replace", default=0, least=0)
    mlp_only = r.indices("mlp_only_layers", layers)
    # Qwen-MoE's decoder_sparse_step, Llama-4's interleave_moe_layer_step: every step-th layer
    step = r.int("decoder_sparse_step", "interleave_moe_layer_step", default=1)
    # DeepSeek-V2's moe_layer_freq counts from layer 0 (vLLM deepseek_v2.py: layer_idx % freq)
    freq = r.int("moe_layer_freq", default=1)
    return [i >= first_dense and i not in mlp_only and (i + 1) % step == 0 and i % freq == 0
            for i in range(layers)]


def _matches(patterns, module: str) -> bool:
    for p in patterns or []:
        if p.startswith("re:"):
            if re.search(p[3:], module):
                return True
        elif p in module:
            return True
    return False


# The float dtype vLLM serves a checkpoint in at dtype "auto" on a GPU, by the dtype it is stored
# in: vLLM 0.32's _resolve_auto_dtype downcasts a float32 checkpoint to the platform's preferred
# dtype (vllm/config/model.py:2422-2424, "Downcast for float32 models"), the first of its
# supported_dtypes: bfloat16 on CUDA from compute capability 8.0 (vllm/platforms/cuda.py:255-258)
# and on ROCm (vllm/platforms/interface.py:189-194); the LM head runs in the model's dtype
# (_get_head_dtype, vllm/config/model.py:2517-2522) and kv_cache_dtype auto is the model's too.
# bf16 and fp16 checkpoints are served as stored. A CPU engine told dtype float32 (the tiny
# models) runs float32: that is dims_from_config's dtype None, the checkpoint's own.
AUTO_DTYPE = {"fp32": "bf16"}


def auto_dtype(fmt: str) -> str:
    """The float dtype (FLOAT_DTYPES' names) vLLM serves a checkpoint stored in `fmt` in at
    dtype auto on a GPU (AUTO_DTYPE); anything else as it is."""
    return AUTO_DTYPE.get(fmt, fmt)


def auto_torch_dtype(raw: str) -> str:
    """auto_dtype of a dtype as torch (and config.json) names it ("float32" -> "bfloat16"); a name
    it does not know as it is."""
    fmt = _TORCH_DTYPES.get(raw)
    return TORCH_DTYPE_OF[auto_dtype(fmt)] if fmt else raw


def torch_dtype_fmt(raw: str) -> str | None:
    """A float dtype as torch, config.json or vLLM's --dtype names it ("float32", "float", "half")
    in FLOAT_DTYPES' names; None where it is none of them ("auto")."""
    return _TORCH_DTYPES.get(raw)


def checkpoint_dtype(cfg: dict, name: str = "config.json", auto: bool = False) -> str:
    """The checkpoint's floating-point dtype: `dtype` (recent transformers) or `torch_dtype`;
    where a quantised checkpoint names neither (gpt-oss), bf16, the dtype its quantisation config
    leaves unquantised modules in (vLLM loads them so). `auto`: the one vLLM serves it in at
    dtype auto on a GPU (auto_dtype: float32 as bf16)."""
    raw = str(cfg.get("dtype") or cfg.get("torch_dtype") or "")
    if not raw:
        if cfg.get("quantization_config"):
            return "bf16"
        raise InputError(f"{name}: neither dtype nor torch_dtype nor quantization_config: the "
                         "dtype it is served in is not known; give --precision bf16 or fp16")
    base = _TORCH_DTYPES.get(raw, raw)
    if base not in FLOAT_DTYPES:
        raise InputError(f"{name}: unknown torch_dtype '{raw}' (known: "
                         f"{', '.join(_TORCH_DTYPES)})")
    return auto_dtype(base) if auto else base


def quantization(cfg: dict, name: str = "config.json") -> dict:
    """The checkpoint's quantization_config ({}: none); anything but a JSON object is an error."""
    q = cfg.get("quantization_config")
    if q is None:
        return {}
    if not isinstance(q, dict):
        raise InputError(f"{name}: quantization_config = {q!r} is not a JSON object of settings")
    return q


def _block(q: dict, name: str) -> list[int]:
    """The fp8 weight block's sides ([]: per-tensor scales), as vLLM's Fp8Config reads
    weight_block_size (vllm/model_executor/layers/quantization/fp8.py): null or absent,
    per-tensor scales; else exactly two sides, each a whole number >= 1 ([] is no block)."""
    block = q.get("weight_block_size")
    if block is None:
        return []
    if not isinstance(block, list):
        raise InputError(f"{name}: quantization_config.weight_block_size = {block!r} is not a list "
                         "of block sides")
    if len(block) != 2:
        raise InputError(f"{name}: quantization_config.weight_block_size = {block!r} is not two "
                         "block sides (vLLM's fp8 takes [rows, columns], or null for per-tensor "
                         "scales)")
    return [whole(b, f"{name}: quantization_config.weight_block_size entry") for b in block]


def _patterns(q: dict, key: str, name: str) -> list[str]:
    """A list of module names or "re:" patterns (modules_to_not_convert, ignore)."""
    v = q.get(key) or []
    if not isinstance(v, list) or not all(isinstance(p, str) for p in v):
        raise InputError(f"{name}: quantization_config.{key} = {v!r} is not a list of module names")
    return v


def storage_formats(cfg: dict, name: str = "config.json", auto: bool = False) -> tuple[str, str]:
    """(routed experts' format, attention and shared experts' format) of a checkpoint (`auto`:
    its float weights as vLLM serves them at dtype auto on a GPU, checkpoint_dtype)."""
    base = checkpoint_dtype(cfg, name, auto)
    q = quantization(cfg, name)
    if not q:
        return base, base
    method = str(q.get("quant_method") or "").lower()
    if method == "fp8":
        block = _block(q, name)
        fmt = f"fp8-b{block[0]}" if block else "fp8"
        if block and len(set(block)) != 1:
            raise InputError(f"{name}: non-square fp8 blocks {block} are not supported")
        skip = _patterns(q, "modules_to_not_convert", name) or _patterns(q, "ignored_layers", name)
        return fmt, base if _matches(skip, "model.layers.0.self_attn.q_proj") else fmt
    if method == "mxfp4":
        # vLLM's mxfp4 applies to the fused MoE experts only; attention stays in the base dtype
        return "mxfp4", base
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        if not isinstance(groups, dict):
            raise InputError(f"{name}: quantization_config.config_groups = {groups!r} is not a "
                             "JSON object of groups")
        if len(groups) != 1:
            raise InputError(f"{name}: compressed-tensors with {len(groups)} config groups is not "
                             "supported (one group expected)")
        group, g = next(iter(groups.items()))
        where = f"{name}: quantization_config.config_groups.{group}"
        if not isinstance(g, dict):
            raise InputError(f"{where} = {g!r} is not a JSON object of the group's settings")
        w = g.get("weights") or {}
        if not isinstance(w, dict):
            raise InputError(f"{where}.weights = {w!r} is not a JSON object of their format")
        bits, kind = w.get("num_bits", 0), w.get("type", "int")
        if kind != "int" or type(bits) is not int or bits not in (4, 8) or \
                w.get("strategy") != "group":
            raise InputError(f"{name}: compressed-tensors weights {kind}{bits} "
                             f"({w.get('strategy')}) are not supported (int4/int8 groups are)")
        if w.get("group_size") is None:
            raise InputError(f"{where}.weights: int{bits} groups without group_size")
        size = whole(w["group_size"], f"{where}.weights.group_size")
        fmt = f"int{bits}-g{size}"
        ignore = _patterns(q, "ignore", name)
        attn_kept = _matches(ignore, "model.layers.1.self_attn.q_proj")
        experts_kept = _matches(ignore, "model.layers.1.mlp.experts.0.up_proj")
        if experts_kept:
            raise InputError(f"{name}: compressed-tensors leaves the routed experts unquantised; "
                             "this layout is not supported")
        return fmt, base if attn_kept else fmt
    raise InputError(f"{name}: unknown quantization method '{method or q}' (known: fp8, mxfp4, "
                     "compressed-tensors)")


# vLLM 0.32's KV-cache dtypes (vllm.config.cache.CacheDType) whose elements are plain bytes, and the
# bytes of each; "auto" is the model's dtype (a compressed-tensors checkpoint's kv_cache_scheme makes
# it fp8: kv_cache_dtype). The rest pack values with scales per token, head or block, or lay out
# MLA's page their own way (vllm/v1/kv_cache_interface.py, KVQuantMode): no bytes per element
# sizes them, so they are refused, never sized as bf16 or fp8 (tests/test_preflight.py checks the
# two sets against vLLM's list where it is installed).
KV_CACHE_DTYPE_BYTES = {"float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0,
                        "fp8_e5m2": 1.0, "fp8_inc": 1.0}
KV_CACHE_DTYPES_UNSIZED = frozenset({
    "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
    "turboquant_3bit_nc", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
    "fp8_per_token_head", "nvfp4", "nvfp4_4over6"})


def kv_cache_dtype(cfg: dict, requested: str = "auto", name: str = "config.json") -> str:
    """The dtype vLLM 0.32 keeps a checkpoint's KV cache in, given the engine's kv_cache_dtype
    (`requested`): one of KV_CACHE_DTYPE_BYTES, or "auto" (the model's dtype). At auto, a
    compressed-tensors checkpoint whose quantization_config declares a kv_cache_scheme has its KV
    cache in fp8 (vllm/model_executor/layers/attention/attention.py, which honours the scheme
    where kv_cache_dtype is auto; CompressedTensorsKVCacheMethod takes 8-bit float schemes
    only). A dtype of KV_CACHE_DTYPES_UNSIZED, or one vLLM does not know, is an error."""
    if requested == "auto":
        q = quantization(cfg, name)
        scheme = q.get("kv_cache_scheme")
        if scheme is None or str(q.get("quant_method") or "").lower() != "compressed-tensors":
            return "auto"
        if not isinstance(scheme, dict) or scheme.get("type") != "float" or \
                scheme.get("num_bits") != 8:
            raise InputError(f"{name}: quantization_config.kv_cache_scheme = {scheme!r}: vLLM "
                             "keeps a compressed-tensors KV cache in 8-bit float only")
        return "fp8"
    if requested in KV_CACHE_DTYPE_BYTES:
        return requested
    if requested in KV_CACHE_DTYPES_UNSIZED:
        raise InputError(f"kv_cache_dtype {requested}: its pages pack values with their scales "
                         "(or lay out MLA's its own way), which the KV-cache sizing does not "
                         f"model; use auto, {', '.join(KV_CACHE_DTYPE_BYTES)}")
    raise InputError(f"kv_cache_dtype {requested!r} is not one of vLLM's (auto, "
                     f"{', '.join([*KV_CACHE_DTYPE_BYTES, *sorted(KV_CACHE_DTYPES_UNSIZED)])})")


def _shared_width(r: _Reader) -> int:
    """Intermediate width of a MoE layer's shared experts (0: none)."""
    cfg = r.cfg
    for key in ("shared_expert_intermediate_size", "shared_intermediate_size"):
        if r.size(key):  # Qwen2-MoE, Qwen3-Next, Qwen3.5; Granite-MoE-shared
            return r.size(key)
    if r.size("n_shared_experts"):  # DeepSeek-style: GLM-4.x, Kimi
        return r.size("n_shared_experts") * r.int("moe_intermediate_size")
    if r.size("num_shared_experts"):  # Bailing-MoE (Ling): vLLM bailing_moe.py's width
        return r.size("num_shared_experts") * (r.size("moe_shared_expert_intermediate_size")
                                              or r.int("moe_intermediate_size"))
    if str(cfg.get("model_type", "")).startswith("llama4"):  # one shared expert of the routed width
        return r.int("intermediate_size")
    return 0


def tp_problems(cfg: dict, tp: int, name: str = "config.json") -> list[str]:
    """How TP fails to split this model as vLLM splits it (empty: it splits): query heads
    divided over TP, KV heads divided or replicated, linear-attention heads and each expert's
    width divided, and each GPU's share of the width a whole number of fp8 blocks."""
    c = load_config(cfg)[0]
    if not c.get("num_attention_heads"):
        return []  # nothing to split (the reader names the missing key)
    heads, out = whole(c["num_attention_heads"], f"{name}: num_attention_heads"), []
    kv = kv_heads(c, name)
    if heads % tp:
        out.append(f"TP {tp} does not divide the {heads} attention heads")
    if not c.get("kv_lora_rank") and (tp % kv if tp >= kv else kv % tp):
        out.append(f"TP {tp} neither divides the {kv} KV heads nor is a multiple of them "
                   "(vLLM splits or replicates KV heads)")
    for key in ("linear_num_key_heads", "linear_num_value_heads"):
        if c.get(key) and whole(c[key], f"{name}: {key}") % tp:
            out.append(f"TP {tp} does not divide {key} = {c[key]}")
    key = next((k for k in ("moe_intermediate_size", "intermediate_size") if c.get(k)), None)
    inter = whole(c[key], f"{name}: {key}") if key else None
    if inter and inter % tp:
        out.append(f"TP {tp} does not divide the expert width {inter}")
    block = (_block(quantization(c, name), name) or [None])[0]
    if inter and block and not inter % tp and (inter // tp) % block:
        out.append(f"each GPU's share of an expert's width, {inter} / {tp} = {inter // tp}, "
                   f"is not a multiple of the fp8 weight block {block} (vLLM refuses it; TP "
                   f"{_block_tps(inter, block)} works)")
    return out


def _block_tps(inter: int, block: int) -> str:
    ok = [t for t in (1, 2, 4, 8) if not inter % t and not (inter // t) % block]
    return " or ".join(map(str, ok)) or "none of 1, 2, 4, 8"


def _check_tp(r: _Reader, tp: int) -> None:
    """vLLM's split of the model over TP (tp_problems): the first way it fails, one line."""
    if tp < 1:
        raise InputError(f"TP must be >= 1 (got {tp})")
    problems = tp_problems(r.cfg, tp, r.name)
    if problems:
        raise InputError(f"{r.name}: {problems[0]}")


def _attention_reads(r: _Reader, hidden: int, mla: bool, kinds: list[str], tp: int) -> dict:
    """What a step's attention reads and computes beyond weights: KV elements per token of the
    full and the sliding-window layers, the GPUs the cache is split over, the recurrent state of
    linear-attention layers per sequence, and attention FLOPs per query and context token."""
    heads = r.int("num_attention_heads")
    kv = 1 if mla else kv_heads(r.cfg, r.name)
    if mla:  # the latent and the rope key, every head reading them (absorbed decode)
        rank, rope = r.int("kv_lora_rank"), r.int("qk_rope_head_dim")
        per_token, flops, split = rank + rope, heads * (4 * rank + 2 * rope), 1
    else:
        dim = head_dim(r.cfg, r.name)
        per_token, flops, split = 2 * kv * dim, 4 * heads * dim, min(tp, kv)
    state = 0
    if "linear" in kinds:  # Gated DeltaNet: a dk x dv state per value head, and the conv window
        nk, nv = r.int("linear_num_key_heads"), r.int("linear_num_value_heads")
        dk, dv = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
        kernel = r.int("linear_conv_kernel_dim", default=4)
        state = nv * dk * dv + (2 * nk * dk + nv * dv) * (kernel - 1)
    n = {k: kinds.count(k) for k in ("full", "sliding", "linear")}
    return {"kv_per_token": float(per_token * n["full"]),
            "kv_sliding_per_token": float(per_token * n["sliding"]),
            "sliding_window": sliding_window(r.cfg, r.name) if n["sliding"] else 0,
            "kv_split": float(split), "state_per_seq": float(state * n["linear"]),
            "attention_layers": n["full"] + n["sliding"],
            "mla_layers": n["full"] + n["sliding"] if mla else 0,
            "dsa_layers": n["full"] + n["sliding"] if r.cfg.get("index_topk") else 0,
            "attn_flops_per_ctx": float(flops * n["full"]),
            "attn_flops_sliding_per_ctx": float(flops * n["sliding"])}


def attention_kinds(cfg: dict | str | Path) -> set[str]:
    """The attention kinds a checkpoint's layers use beside grouped-query softmax attention, as
    the step model and its calibration distance name them: "MLA" (multi-head latent attention,
    `kv_lora_rank`), "DSA" (DeepSeek's sparse attention indexer, `index_topk`), "linear
    attention" and "sliding window" (from the layer kinds)."""
    cfg, name = load_config(cfg)
    r = _Reader(cfg, name)
    layer = set(_layer_kinds(r, r.int("num_hidden_layers")))
    kinds = {"linear attention"} if "linear" in layer else set()
    if "sliding" in layer:
        kinds.add("sliding window")
    if cfg.get("kv_lora_rank"):
        kinds.add("MLA")
    if cfg.get("index_topk"):
        kinds.add("DSA")
    return kinds


def dims_from_config(cfg: dict | str | Path, dtype: str | None = None, tp: int = 1) -> ModelDims:
    """A MoE checkpoint's dimensions as vLLM serves it at tensor-parallel degree `tp`. `dtype`:
    None, the checkpoint's own dtype (what an engine told that dtype runs: the tiny models' CPU
    engines, float32); "auto", vLLM's dtype auto on a GPU (a float32 checkpoint served in bf16,
    auto_dtype); a float dtype, the one it is served in; else vLLM's online quantisation of the
    weights (e.g. --quantization fp8), never of the KV cache or the LM head, which stay in the
    float dtype vLLM's dtype auto serves the checkpoint in."""
    cfg, name = load_config(cfg)
    if cfg.get("model_type") is not None and _unmodelled(cfg) is None:
        # first: a family the reader cannot price (ERNIE-4.5's moe_num_experts, Hunyuan's lists
        # per layer) or a dense model says what it is, never which of the keys read here it
        # lacks; a layout key of its own (UNMODELLED_LAYOUTS) says more, and comes first
        _check_model_type(cfg, name)
    r = _Reader(cfg, name)
    hidden = r.int("hidden_size")
    layers = r.int("num_hidden_layers")
    num_experts = r.int("num_experts", "num_local_experts", "n_routed_experts")
    top_k = r.int("num_experts_per_tok", "experts_per_token", "moe_topk")
    expert_inter = r.int("moe_intermediate_size", "intermediate_size")
    if num_experts == 1:
        raise InputError(f"{name}: one expert, which every token uses, is a dense FFN: a dense "
                         f"model: {DENSE}")
    if top_k > num_experts:
        raise InputError(f"{name}: {top_k} experts per token of {num_experts} experts")
    if top_k == num_experts:
        raise InputError(f"{name}: every token uses all {num_experts} experts, a dense FFN: a "
                         f"dense model in effect: {DENSE}")
    mla = bool(cfg.get("kv_lora_rank"))
    kinds = _layer_kinds(r, layers)
    moe = _moe_layers(r, layers)
    if not any(moe):
        raise InputError(f"{name}: no layer has experts")
    _check_tp(r, int(tp))

    def attention(kind: str) -> int:
        if kind == "linear":
            return _linear_attention(r, hidden)
        return _mla(r, hidden) if mla else _gqa(r, hidden)

    moe_attn = [attention(k) for k, m in zip(kinds, moe) if m]
    dense_layers = [attention(k) for k, m in zip(kinds, moe) if not m]
    # the FFN of layers without experts: Llama-4 names it intermediate_size_mlp
    dense_ffn = (3 * hidden * r.int("intermediate_size_mlp", "intermediate_size")
                 if dense_layers else 0)
    if dtype is not None and dtype in FLOAT_DTYPES:  # served in another float dtype
        expert_fmt = dense_fmt = base = dtype
    else:
        online = dtype not in (None, "auto")  # vLLM --quantization fp8: at dtype auto too
        if online and not (cfg.get("dtype") or cfg.get("torch_dtype")
                           or cfg.get("quantization_config")):
            raise InputError(f"{name}: neither dtype nor torch_dtype: online {dtype} quantises the "
                             "weights but keeps the LM head and KV cache in the checkpoint's float "
                             "dtype, which it does not give; add torch_dtype to it, or give "
                             "--precision bf16 or fp16")
        expert_fmt, dense_fmt = storage_formats(cfg, name, auto=dtype is not None)
        base = checkpoint_dtype(cfg, name, auto=dtype is not None)
        if online:  # online quantisation of the weights (vLLM --quantization fp8)
            expert_fmt = dense_fmt = dtype
    _check_model_type(cfg, name)  # a file that names no model type: after its own errors
    return ModelDims(
        hidden=hidden, expert_intermediate=expert_inter, num_experts=num_experts, top_k=top_k,
        attention_params=sum(moe_attn) / len(moe_attn), shared_intermediate=_shared_width(r),
        num_layers=layers, dtype=expert_fmt, tp=int(tp), dense_dtype=dense_fmt,
        num_moe_layers=len(moe_attn),
        dense_layer_params=float(sum(dense_layers) + dense_ffn * len(dense_layers)),
        vocab_size=r.int("vocab_size", default=0, least=0), base_dtype=base,
        kv_dtype="fp8" if kv_cache_dtype(cfg, name=name) == "fp8" else None,
        **_attention_reads(r, hidden, mla, kinds, int(tp)))


def check_precision(cfg: dict | str | Path, precision: str | None) -> None:
    """A precision a user asks vLLM to serve this checkpoint in (`specmoe predict --precision`,
    `te --dtype`). A quantised checkpoint is served in its own format: vLLM refuses
    --quantization fp8 on one quantised otherwise ("Quantization method specified in the model
    config ... does not match", vllm.config.model), and a float dtype sets the activations only,
    the weights staying quantised, so pricing them in that dtype would be wrong."""
    cfg, name = load_config(cfg)
    method = str(quantization(cfg, name).get("quant_method") or "").lower()
    if precision in (None, "auto") or not method or (method == "fp8" and precision == "fp8"):
        return
    if precision in FLOAT_DTYPES:
        raise InputError(f"{name}: precision {precision} on a checkpoint quantised with {method}: "
                         f"vLLM keeps its {method} weights ({precision} would set the "
                         "activations only); use precision auto")
    raise InputError(f"{name}: precision {precision} on a checkpoint quantised with {method}: "
                     f"vLLM refuses --quantization {precision} where the config says {method}; "
                     "use precision auto")


def config_file(config_or_manifest) -> Path:
    """The config.json a model's `hf_config` names: a config.json (or its folder), or a download
    manifest (its snapshot's config.json)."""
    path = Path(config_or_manifest)
    if path.suffix == ".json" and path.name != "config.json":
        from ..sources.hub import snapshot_of

        path = snapshot_of(path) / "config.json"
    return path


def study_dims(config_or_manifest, precision: str = "auto", tp: int = 1) -> ModelDims:
    """A study model's dimensions from its config.json, given directly or as a download manifest
    (its snapshot's config.json); precision "auto" (or None) the checkpoint's own format as vLLM
    serves it at dtype auto on a GPU (auto_dtype), "fp8" vLLM's online fp8 of the whole model,
    "bf16", "fp16" or "fp32" the dtype it is served in, each refused on a quantised checkpoint
    (check_precision)."""
    path = config_file(config_or_manifest)
    check_precision(path, precision)
    return dims_from_config(path, dtype=precision or "auto", tp=int(tp))


EAGLE3_AUX_STATES = 3  # the target's hidden states an EAGLE-3 fc fuses where its config names none


def eagle3_extra_params(cfg: dict, layer: dict, qkv_one_input: int, tp: int) -> float:
    """Weights of an EAGLE-3 head beyond its decoder layers, as vLLM 0.32 builds them
    (model_executor/models/llama_eagle3.py, qwen3_eagle3.py), in weights split over TP: its first
    layer's q, k, v projection reads the token's embedding beside the hidden state (an input of
    2 x hidden: one more `qkv_one_input`), and its fc maps num_aux_hidden_states of the target's
    hidden states (target_hidden_size each) to its own width, a ReplicatedLinear that every GPU
    holds whole (so TP times its weights). No fc where eagle_config turns the auxiliary hidden
    states off. `cfg`: the config.json; `layer`: its decoder layer's settings (a speculators
    config's transformer_layer_config, else cfg)."""
    def get(key):  # vLLM's speculators reader lifts the EAGLE-3 keys onto the layer's config
        return cfg.get(key, layer.get(key))

    eagle = get("eagle_config") or {}
    fc = 0
    if eagle.get("use_aux_hidden_state", True):
        ids = eagle.get("eagle_aux_hidden_state_layer_ids") or \
            get("eagle_aux_hidden_state_layer_ids")
        states = int(get("num_aux_hidden_states") or (len(ids) if ids else EAGLE3_AUX_STATES))
        hidden = int(layer["hidden_size"])
        fc = int(get("target_hidden_size") or hidden) * states * hidden
    return float(qkv_one_input + fc * tp)


def dense_dims_from_config(cfg: dict | str | Path, tp: int = 1, auto: bool = False) -> ModelDims:
    """A dense model (a separate draft model, or an EAGLE/EAGLE-3 head's own config.json) as the
    step model reads it: every layer's FFN as one expert that every token uses, grouped-query
    attention. An EAGLE-3 head (a speculators config with `transformer_layer_config`, or a flat
    one with `draft_vocab_size`) reads its own LM head of `draft_vocab_size` rows, and the
    weights vLLM gives it beyond its layers (eagle3_extra_params) once per model, as the dense
    weights outside the layers (dense_layer_params). `auto`: its float weights as vLLM serves
    them at dtype auto on a GPU (checkpoint_dtype), else as stored."""
    cfg, name = load_config(cfg)
    layer_cfg = cfg.get("transformer_layer_config")
    inner = {**layer_cfg, **{k: cfg[k] for k in ("dtype", "torch_dtype") if k in cfg}} \
        if isinstance(layer_cfg, dict) else cfg
    r = _Reader(inner, name)
    hidden, layers = r.int("hidden_size"), r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    kv, dim = kv_heads(inner, name), head_dim(inner, name)
    _check_tp(r, int(tp))
    _, fmt = storage_formats(inner, name, auto)
    eagle3 = bool(cfg.get("draft_vocab_size") or inner.get("draft_vocab_size"))
    key = "draft_vocab_size" if eagle3 else "vocab_size"
    vocab = whole(cfg.get(key) or inner.get(key) or 0, f"{name}: {key}", 0)
    extra = (eagle3_extra_params(cfg, inner, hidden * (heads + 2 * kv) * dim, int(tp))
             if eagle3 else 0.0)
    return ModelDims(hidden=hidden, expert_intermediate=r.int("intermediate_size"), num_experts=1,
                     top_k=1, attention_params=_gqa(r, hidden), dense_layer_params=extra,
                     num_layers=layers, dtype=fmt, tp=tp, vocab_size=vocab,
                     kv_per_token=float(2 * kv * dim * layers),
                     kv_split=float(min(tp, kv)),
                     attn_flops_per_ctx=float(4 * heads * dim * layers))
