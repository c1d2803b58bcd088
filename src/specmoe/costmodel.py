"""Target-efficiency cost model (SPEC.md, "Cost model").

TE = time of one target decode step / time of one verification step at the same batch size.
Weights per GPU are counted per MoE layer: C_expert (gate, up, down of one routed expert) and C_dense
(attention projections plus shared experts). Router, norms, embeddings and LM head are left out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import InputError
from .unique import check_nk

MIB = 2**20
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16",
                 "float": "fp32"}


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPE_BYTES)})")
    return DTYPE_BYTES[dtype]


@dataclass
class ModelDims:
    """What the cost model needs of a target. attention_params: weights of one layer's attention."""

    hidden: int
    expert_intermediate: int
    num_experts: int
    top_k: int
    attention_params: int
    shared_intermediate: int = 0
    num_layers: int = 1
    dtype: str = "bf16"
    tp: int = 1

    def __post_init__(self) -> None:
        dtype_bytes(self.dtype)
        check_nk(self.num_experts, self.top_k)
        for name in ("hidden", "expert_intermediate", "attention_params", "num_layers", "tp"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.shared_intermediate < 0:
            raise InputError(f"shared_intermediate must be >= 0 (got {self.shared_intermediate})")

    @staticmethod
    def gqa_attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
        """q, k, v, o projections of grouped-query attention."""
        for name, v in (("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)):
            if v < 1:
                raise InputError(f"{name} must be >= 1 (got {v})")
        return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2

    @classmethod
    def from_dims(cls, *, hidden, expert_intermediate, num_experts, top_k, heads, kv_heads,
                  head_dim, shared_intermediate=0, num_layers=1, dtype="bf16", tp=1) -> "ModelDims":
        attn = cls.gqa_attention_params(hidden, heads, kv_heads, head_dim)
        return cls(hidden=hidden, expert_intermediate=expert_intermediate, num_experts=num_experts,
                   top_k=top_k, attention_params=attn, shared_intermediate=shared_intermediate,
                   num_layers=num_layers, dtype=dtype, tp=tp)

    @classmethod
    def from_hf_config(cls, cfg: dict | str | Path, dtype: str | None = None,
                       tp: int = 1) -> "ModelDims":
        """Read dimensions from a Hugging Face config.json (Qwen2/3-MoE, Mixtral, DeepSeek/GLM MLA,
        GPT-OSS style). dtype defaults to the config's quantization or torch_dtype."""
        if not isinstance(cfg, dict):
            path = Path(cfg)
            if not path.exists():
                raise InputError(f"{path}: no such config file")
            try:
                cfg = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: not valid JSON ({exc.msg})") from None
        cfg = cfg.get("text_config", cfg)

        def pick(*names, default=None):
            for n in names:
                if cfg.get(n) is not None:
                    return cfg[n]
            if default is not None:
                return default
            raise InputError(f"config.json lacks any of {', '.join(names)}")

        hidden = int(pick("hidden_size"))
        num_experts = int(pick("num_experts", "num_local_experts", "n_routed_experts"))
        top_k = int(pick("num_experts_per_tok", "moe_topk", "top_k"))
        expert_inter = int(pick("moe_intermediate_size", "expert_intermediate_size",
                                "intermediate_size"))
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        if not shared and cfg.get("n_shared_experts"):
            shared = int(cfg["n_shared_experts"]) * expert_inter
        heads = int(pick("num_attention_heads"))
        if cfg.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3, GLM-4.x MoE)
            qk = int(cfg.get("qk_nope_head_dim", 0)) + int(cfg.get("qk_rope_head_dim", 0))
            v_dim = int(pick("v_head_dim"))
            q_rank = cfg.get("q_lora_rank")
            q = hidden * q_rank + q_rank * heads * qk if q_rank else hidden * heads * qk
            kv = hidden * (cfg["kv_lora_rank"] + int(cfg.get("qk_rope_head_dim", 0))) \
                + cfg["kv_lora_rank"] * heads * (int(cfg.get("qk_nope_head_dim", 0)) + v_dim)
            attn = q + kv + heads * v_dim * hidden
        else:
            kv_heads = int(pick("num_key_value_heads", default=heads))
            head_dim = int(cfg.get("head_dim") or hidden // heads)
            attn = cls.gqa_attention_params(hidden, heads, kv_heads, head_dim)
        if dtype is None:
            quant = (cfg.get("quantization_config") or {})
            if "fp8" in json.dumps(quant).lower():
                dtype = "fp8"
            else:
                raw = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
                dtype = _TORCH_DTYPES.get(raw, raw)
        layers = int(pick("num_hidden_layers", default=1))
        return cls(hidden=hidden, expert_intermediate=expert_inter, num_experts=num_experts,
                   top_k=top_k, attention_params=attn, shared_intermediate=shared,
                   num_layers=layers, dtype=dtype, tp=tp)

    # --- bytes per GPU per layer ---
    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.expert_intermediate

    @property
    def dense_params(self) -> int:
        return self.attention_params + 3 * self.hidden * self.shared_intermediate

    @property
    def c_expert(self) -> float:
        """Bytes of one routed expert per GPU."""
        return self.expert_params * dtype_bytes(self.dtype) / self.tp

    @property
    def c_dense(self) -> float:
        return self.dense_params * dtype_bytes(self.dtype) / self.tp

    @property
    def moe_weight_share(self) -> float:
        k_ce = self.top_k * self.c_expert
        return k_ce / (self.c_dense + k_ce)

    def te_weight(self, unique_sd: float, unique_decode: float | None = None) -> float:
        """Weight-model TE = (C_dense + k C_expert) / (C_dense + unique_sd C_expert)."""
        if unique_sd <= 0:
            raise InputError(f"unique experts must be > 0 (got {unique_sd})")
        base = self.top_k if unique_decode is None else unique_decode
        return (self.c_dense + base * self.c_expert) / (self.c_dense + unique_sd * self.c_expert)

    def summary(self, unique_sd: float | None = None) -> dict:
        out = {"c_expert_mib": self.c_expert / MIB, "c_dense_mib": self.c_dense / MIB,
               "moe_weight_share": self.moe_weight_share}
        if unique_sd is not None:
            out["te"] = self.te_weight(unique_sd)
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def te_time_share(f: float, s_moe: float, s_dense: float = 1.0) -> float:
    """TE = 1 / ((1 - f) S_dense + f S_moe)."""
    return 1.0 / ((1.0 - f) * s_dense + f * s_moe)


def three_step_correction(moe_weight_share: float, unique_ratio: float, moe_time_share: float,
                          moe_time_ratio: float, dense_time_ratio: float,
                          measured: float | None = None) -> dict:
    """Weight baseline, then replace f, S_moe, S_dense by measured values one at a time."""
    for name, v in (("moe_weight_share", moe_weight_share), ("moe_time_share", moe_time_share)):
        if not 0.0 <= v <= 1.0:
            raise InputError(f"{name} must lie in [0, 1] (got {v})")
    for name, v in (("unique_ratio", unique_ratio), ("moe_time_ratio", moe_time_ratio),
                    ("dense_time_ratio", dense_time_ratio)):
        if v <= 0:
            raise InputError(f"{name} must be > 0 (got {v})")
    settings = [
        ("weight baseline", moe_weight_share, unique_ratio, 1.0),
        ("step 1: measured MoE time share", moe_time_share, unique_ratio, 1.0),
        ("step 2: measured MoE kernel time ratio", moe_time_share, moe_time_ratio, 1.0),
        ("step 3: measured non-MoE time ratio", moe_time_share, moe_time_ratio, dense_time_ratio),
    ]
    steps, prev = [], None
    base = te_time_share(moe_weight_share, unique_ratio, 1.0)
    gap = (measured - base) if measured is not None else None
    for name, f, s_moe, s_dense in settings:
        te = te_time_share(f, s_moe, s_dense)
        delta = None if prev is None else te - prev
        closed = None if (delta is None or not gap) else delta / gap
        steps.append({"name": name, "f": f, "s_moe": s_moe, "s_dense": s_dense, "te": te,
                      "delta": delta, "gap_closed": closed})
        prev = te
    out = {"steps": steps, "measured": measured}
    if gap:
        out["total_gap_closed"] = (prev - base) / gap
    return out


@dataclass
class Hardware:
    name: str
    hbm_bandwidth: float     # bytes/s
    peak_flops: dict         # dtype -> FLOP/s (dense)
    l2_bytes: float = 0.0
    sm_count: int = 0

    @classmethod
    def from_config(cls, name: str, d: dict) -> "Hardware":
        return cls(name=name, hbm_bandwidth=float(d["hbm_bandwidth_gbs"]) * 1e9,
                   peak_flops={k: float(v) * 1e12 for k, v in d["peak_tflops"].items()},
                   l2_bytes=float(d.get("l2_mib", 0)) * MIB, sm_count=int(d.get("sm_count", 0)))

    def flops(self, dtype: str) -> float:
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        if "bf16" in self.peak_flops:
            return self.peak_flops["bf16"]
        raise InputError(f"hardware {self.name} has no peak FLOP/s for {dtype}")


def step_time(dims: ModelDims, hw: Hardware, tokens: float, unique: float) -> float:
    """Roofline time of one MoE layer: max(bytes / bandwidth, flops / peak), per GPU."""
    bytes_ = dims.c_dense + unique * dims.c_expert
    flops = 2.0 * tokens * (dims.dense_params + dims.top_k * dims.expert_params) / dims.tp
    return max(bytes_ / hw.hbm_bandwidth, flops / hw.flops(dims.dtype))


def te_curve(dims: ModelDims, hw: Hardware, k_draft: int, batch_sizes,
             unique_verify, unique_decode) -> list[dict]:
    """TE vs batch size with a compute-bound floor.

    unique_verify(B) and unique_decode(B) return unique experts per layer for a verify step (B
    windows of K+1 tokens) and a decode step (B tokens).
    """
    rows = []
    for b in batch_sizes:
        u_v, u_d = float(unique_verify(b)), float(unique_decode(b))
        t_dec = step_time(dims, hw, b, u_d)
        t_ver = step_time(dims, hw, b * (k_draft + 1), u_v)
        rows.append({"batch": int(b), "unique_verify": u_v, "unique_decode": u_d,
                     "t_decode_us": t_dec * 1e6, "t_verify_us": t_ver * 1e6, "te": t_dec / t_ver,
                     "compute_bound": bool(t_ver > (dims.c_dense + u_v * dims.c_expert)
                                           / hw.hbm_bandwidth * (1 + 1e-12))})
    return rows


def speedup(tau: float, te: float, draft_cost: float) -> float:
    """SD speedup = tau / (c + 1/TE) (SPEC.md, "Serving sweeps")."""
    return tau / (draft_cost + 1.0 / te)


def te_from_sweep(tau: float, speedup_measured: float, draft_cost: float) -> float:
    """TE = 1 / (tau / speedup - c)."""
    denom = tau / speedup_measured - draft_cost
    return float("nan") if denom <= 0 else 1.0 / denom

