"""Target-efficiency cost model (docs/method.md, "Cost model").

TE = time of one target decode step / time of one verification step at the same batch size.
Weights per GPU are counted per MoE layer: C_expert (gate, up, down of one routed expert) and C_dense
(attention projections plus shared experts). Router, norms, embeddings and LM head are left out.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from ..errors import InputError
from ..measured.profiling import over_starts, share_over_starts
from ..routing.unique import check_nk

MIB = 2**20
GIB = 2**30

# Bytes per stored weight, scales included. "fp8-b128": fp8 with one fp32 scale per 128x128 block
# (DeepSeek/Qwen FP8 checkpoints); "fp8": per-tensor or per-channel scales (negligible bytes);
# "mxfp4": 4-bit values with one 8-bit (e8m0) scale per 32 (GPT-OSS); "int4-g32": 4-bit integers with
# one bf16 scale per group of 32 (compressed-tensors, symmetric, e.g. Kimi-K2.5).
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0}
FLOAT_DTYPES = ("bf16", "fp16", "fp32")  # what a checkpoint's torch dtype (and its KV cache) can be
_BLOCK_FP8 = re.compile(r"^fp8-b(\d+)$")
_GROUP_INT = re.compile(r"^int(4|8)-g(\d+)$")
# Peak FLOP/s key of the hardware entry each weight format computes in. Weight-only formats (mxfp4,
# int4/int8 groups) are dequantised and multiply in bf16.
_COMPUTE = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "mxfp4": "bf16"}


def dtype_bytes(dtype: str) -> float:
    """Bytes per weight of a storage format, scales included."""
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    if dtype == "mxfp4":
        return (4 + 8 / 32) / 8
    if m := _BLOCK_FP8.match(dtype):
        return 1.0 + 4.0 / int(m[1]) ** 2
    if m := _GROUP_INT.match(dtype):
        return (int(m[1]) + 16 / int(m[2])) / 8
    raise InputError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPE_BYTES)}, fp8-b<block>, "
                     "mxfp4, int4-g<group>, int8-g<group>)")


def compute_dtype(dtype: str) -> str:
    """The peak-FLOP/s class a weight format multiplies in."""
    dtype_bytes(dtype)
    if _BLOCK_FP8.match(dtype):
        return "fp8"
    if _GROUP_INT.match(dtype):
        return "bf16"
    return _COMPUTE[dtype]


@dataclass
class ModelDims:
    """What the cost model needs of a target, per MoE layer.

    attention_params: weights of one MoE layer's attention (the mean over MoE layers where layer types
    differ, as in hybrid linear-attention models). dtype: the routed experts' storage format;
    dense_dtype: attention and shared experts' format (default: dtype). dense_layer_params: all
    weights (attention and FFN) of layers without experts (e.g. DeepSeek's first_k_dense_replace),
    counted once per model and spread over the MoE layers.

    What a step reads besides weights (docs/method.md, "Step model"): kv_per_token, the KV-cache
    elements per token of the full-attention layers (whole model); kv_sliding_per_token those of
    sliding-window layers, which hold at most `sliding_window` tokens; kv_split, the GPUs the KV
    cache is split over (TP where the KV heads are at least TP; the KV heads where fewer, each GPU
    holding one; 1 for MLA's latent cache, which every GPU holds whole); state_per_seq, the
    recurrent state of linear-attention layers per sequence (elements, split over TP by heads);
    attn_flops_per_ctx (and attn_flops_sliding_per_ctx), attention FLOPs per query token per
    context token; base_dtype, the checkpoint's floating-point dtype, in which vLLM keeps the KV
    cache, the LM head and any recurrent state whatever the weights' format; kv_dtype, the KV
    cache's own where it is another (fp8: a checkpoint that declares an fp8 KV cache; None:
    base_dtype).
    """

    hidden: int
    expert_intermediate: int
    num_experts: int
    top_k: int
    attention_params: float
    shared_intermediate: int = 0
    num_layers: int = 1
    dtype: str = "bf16"
    tp: int = 1
    dense_dtype: str | None = None
    num_moe_layers: int | None = None
    dense_layer_params: float = 0.0
    vocab_size: int = 0
    kv_per_token: float = 0.0
    base_dtype: str | None = None
    kv_split: float | None = None
    kv_sliding_per_token: float = 0.0
    sliding_window: int = 0
    state_per_seq: float = 0.0
    attn_flops_per_ctx: float = 0.0
    attn_flops_sliding_per_ctx: float = 0.0
    attention_layers: int = 0  # layers with softmax attention (full or sliding); 0: every layer
    mla_layers: int = 0  # softmax-attention layers that are multi-head latent attention (MLA)
    dsa_layers: int = 0  # layers with DeepSeek's sparse-attention indexer (DSA)
    kv_dtype: str | None = None  # the KV cache's dtype where not base_dtype (fp8)

    def __post_init__(self) -> None:
        dtype_bytes(self.dtype)
        if self.dense_dtype is None:
            self.dense_dtype = self.dtype
        dtype_bytes(self.dense_dtype)
        if self.base_dtype is None:
            self.base_dtype = self.dense_dtype if self.dense_dtype in FLOAT_DTYPES else "bf16"
        if self.base_dtype not in FLOAT_DTYPES:
            raise InputError(f"base_dtype must be one of {', '.join(FLOAT_DTYPES)} (got "
                             f"{self.base_dtype})")
        if self.kv_split is None:
            self.kv_split = float(self.tp)
        if self.num_moe_layers is None:
            self.num_moe_layers = self.num_layers
        check_nk(self.num_experts, self.top_k)
        for name in ("hidden", "expert_intermediate", "attention_params", "num_layers", "tp",
                     "num_moe_layers"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.num_moe_layers > self.num_layers:
            raise InputError(f"num_moe_layers ({self.num_moe_layers}) exceeds num_layers "
                             f"({self.num_layers})")
        if not 1 <= self.kv_split <= self.tp:
            raise InputError(f"kv_split must lie within [1, tp = {self.tp}] (got {self.kv_split})")
        for name in ("shared_intermediate", "dense_layer_params", "vocab_size", "kv_per_token",
                     "kv_sliding_per_token", "sliding_window", "state_per_seq",
                     "attn_flops_per_ctx", "attn_flops_sliding_per_ctx", "attention_layers",
                     "mla_layers", "dsa_layers"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0 (got {getattr(self, name)})")
        for name in ("attention_layers", "mla_layers", "dsa_layers"):
            if getattr(self, name) > self.num_layers:
                raise InputError(f"{name} ({getattr(self, name)}) exceeds num_layers "
                                 f"({self.num_layers})")

    @staticmethod
    def gqa_attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
        """q, k, v, o projections of grouped-query attention."""
        for name, v in (("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)):
            if v < 1:
                raise InputError(f"{name} must be >= 1 (got {v})")
        return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2

    @classmethod
    def from_dims(cls, *, hidden, expert_intermediate, num_experts, top_k, heads, kv_heads,
                  head_dim, num_layers, shared_intermediate=0, dtype="bf16", tp=1,
                  dense_dtype=None, vocab_size=0) -> "ModelDims":
        """Grouped-query attention in every layer, every layer with experts."""
        attn = cls.gqa_attention_params(hidden, heads, kv_heads, head_dim)
        return cls(hidden=hidden, expert_intermediate=expert_intermediate, num_experts=num_experts,
                   top_k=top_k, attention_params=attn, shared_intermediate=shared_intermediate,
                   num_layers=num_layers, dtype=dtype, tp=tp, dense_dtype=dense_dtype,
                   vocab_size=vocab_size, kv_per_token=2 * kv_heads * head_dim * num_layers,
                   kv_split=float(min(tp, kv_heads)),
                   attn_flops_per_ctx=4.0 * heads * head_dim * num_layers)

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
        """Bytes of one MoE layer's attention and shared experts per GPU."""
        return self.dense_params * dtype_bytes(self.dense_dtype) / self.tp

    @property
    def c_dense_layers(self) -> float:
        """Bytes of the expert-free layers per GPU, per MoE layer (0 for most models)."""
        return (self.dense_layer_params * dtype_bytes(self.dense_dtype) / self.tp
                / self.num_moe_layers)

    @property
    def moe_weight_share(self) -> float:
        k_ce = self.top_k * self.c_expert
        return k_ce / (self.c_dense + self.c_dense_layers + k_ce)

    def te_weight(self, unique_sd: float, unique_decode: float | None = None) -> float:
        """Weight-model TE = (C_dense + k C_expert) / (C_dense + unique_sd C_expert), with the
        expert-free layers' bytes (read equally by both steps) added to C_dense."""
        if not unique_sd > 0:
            raise InputError(f"unique experts must be > 0 (got {unique_sd})")
        base = self.top_k if unique_decode is None else unique_decode
        dense = self.c_dense + self.c_dense_layers
        return (dense + base * self.c_expert) / (dense + unique_sd * self.c_expert)

    def kv_bytes(self, context: float) -> float:
        """KV-cache bytes one sequence of `context` tokens keeps on one GPU (read once per step)."""
        tokens = self.kv_per_token * context + (self.kv_sliding_per_token
                                                * min(context, self.sliding_window or context))
        return tokens * dtype_bytes(self.kv_dtype or self.base_dtype) / self.kv_split

    def attention_flops(self, context: float) -> float:
        """Attention FLOPs of one query token over `context` tokens, per GPU (heads split)."""
        window = min(context, self.sliding_window or context)
        return (self.attn_flops_per_ctx * context
                + self.attn_flops_sliding_per_ctx * window) / self.tp

    @property
    def state_bytes(self) -> float:
        """Recurrent-state bytes of one sequence on one GPU (linear-attention layers)."""
        return self.state_per_seq * dtype_bytes(self.base_dtype) / self.tp

    def summary(self, unique_sd: float | None = None) -> dict:
        out = {"c_expert_mib": self.c_expert / MIB, "c_dense_mib": self.c_dense / MIB,
               "c_dense_layers_mib": self.c_dense_layers / MIB,
               "moe_weight_share": self.moe_weight_share}
        if unique_sd is not None:
            out["te"] = self.te_weight(unique_sd)
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def te_time_share(f: float, s_moe: float, s_dense: float = 1.0) -> float:
    """TE = 1 / ((1 - f) S_dense + f S_moe)."""
    return 1.0 / ((1.0 - f) * s_dense + f * s_moe)


# The three-step correction's steps: the weight baseline, then f, S_moe and S_dense measured one
# at a time (step i has the first i of them measured, the rest are the weight model's)
CORRECTION_STEPS = ("weight baseline", "step 1: measured MoE time share",
                    "step 2: measured MoE kernel time ratio", "step 3: measured non-MoE time ratio")


def three_step_correction(moe_weight_share: float, unique_ratio: float, moe_time_share: float,
                          moe_time_ratio: float, dense_time_ratio: float,
                          measured: float | None = None) -> dict:
    """Weight baseline, then replace f, S_moe, S_dense by measured values one at a time."""
    for name, v in (("moe_weight_share", moe_weight_share), ("moe_time_share", moe_time_share)):
        if not 0.0 < v < 1.0:  # also rejects NaN: a share of 0 or 1 means nothing was measured
            raise InputError(f"{name} must lie strictly between 0 and 1 (got {v})")
    for name, v in (("unique_ratio", unique_ratio), ("moe_time_ratio", moe_time_ratio),
                    ("dense_time_ratio", dense_time_ratio)):
        if not v > 0:
            raise InputError(f"{name} must be > 0 (got {v})")
    baseline, step1, step2, step3 = CORRECTION_STEPS
    settings = [
        (baseline, moe_weight_share, unique_ratio, 1.0),
        (step1, moe_time_share, unique_ratio, 1.0),
        (step2, moe_time_share, moe_time_ratio, 1.0),
        (step3, moe_time_share, moe_time_ratio, dense_time_ratio),
    ]
    return _with_deltas([{"name": name, "f": f, "s_moe": s_moe, "s_dense": s_dense,
                          "te": te_time_share(f, s_moe, s_dense)}
                         for name, f, s_moe, s_dense in settings], measured)


def _with_deltas(steps: list[dict], measured: float | None) -> dict:
    """The correction of its steps (name, f, s_moe, s_dense, te and any more; the first the
    weight baseline): each step's delta (its TE less the step before's) and gap_closed (that
    delta's share of the gap from the baseline's TE to the measured one, None without a
    measured TE)."""
    base = prev = steps[0]["te"]
    gap = (measured - base) if measured is not None else None
    out_steps = []
    for i, s in enumerate(steps):
        delta = s["te"] - prev if i else None
        out_steps.append({**s, "delta": delta,
                          "gap_closed": None if (delta is None or not gap) else delta / gap})
        prev = s["te"]
    out = {"steps": out_steps, "measured": measured}
    if gap:
        out["total_gap_closed"] = (prev - base) / gap
    return out


def three_step_correction_over_starts(moe_weight_share: float, unique_ratio: float,
                                      moe_time_share: list[float], moe_time_ratio: list[float],
                                      dense_time_ratio: list[float],
                                      measured: float | None = None,
                                      measured_low: float | None = None,
                                      measured_high: float | None = None) -> dict:
    """three_step_correction of a profile measured once per engine start (f, S_moe, S_dense: one
    value per start, in the same order). A step's te is the starts' geometric mean of each
    start's TE at that step (three_step_correction of that start), with its 95% interval over
    the starts (te_low, te_high), both as profiling.over_starts gives them; its f, s_moe and
    s_dense are the starts' means of the values it takes measured (f's on the logit scale,
    profiling.share_over_starts, the ratios' geometric) (the weight
    model's where it does not), so te is not te_time_share of those columns (a mean of
    1 / ((1 - f) S_dense + f S_moe) is not that of the means). The weight baseline takes
    nothing measured: its TE is the weight model's, with no interval. delta and gap_closed
    are those of three_step_correction, from the steps' te, each with its 95% interval
    (delta_low, delta_high, gap_closed_low, gap_closed_high; None on the baseline): the starts
    are paired (one start's f, S_moe and S_dense give all its steps), so a delta's interval is
    that of the step's TE over the step before's, the starts' ratio summarised as a step's TE
    is (over_starts: its point is te / the step before's te, its sign decided by whether its
    interval includes 1), times the step before's te over that step's interval (interval
    arithmetic on the ends, conservative: the two are not independent); gap_closed's divides
    that by the gap over the measured TE's interval (measured_low, measured_high: the sweep's,
    independent of the profile), interval arithmetic on the ends again, unbounded (-inf, inf)
    where the gap's interval reaches 0 and NaN where the measured TE has none."""
    per = list(zip(moe_time_share, moe_time_ratio, dense_time_ratio))
    if not per or len({len(moe_time_share), len(moe_time_ratio), len(dense_time_ratio)}) > 1:
        raise InputError("the three-step correction over engine starts needs one f, S_moe and "
                         f"S_dense per start (got {len(moe_time_share)}, {len(moe_time_ratio)}, "
                         f"{len(dense_time_ratio)})")
    starts = [three_step_correction(moe_weight_share, unique_ratio, *p)["steps"] for p in per]
    mean = {"f": share_over_starts(moe_time_share)[0],  # as the profile's f (compare_starts)
            "s_moe": over_starts(moe_time_ratio)[0], "s_dense": over_starts(dense_time_ratio)[0]}
    base = starts[0][0]  # the weight baseline: the same in every start, nothing measured in it
    steps = [{**{k: base[k] for k in ("name", "f", "s_moe", "s_dense", "te")},
              "te_low": None, "te_high": None}]
    for j, s in enumerate(starts[0][1:], 1):
        te, low, high = over_starts([one[j]["te"] for one in starts])
        steps.append({"name": s["name"], "f": mean["f"],
                      "s_moe": mean["s_moe"] if j >= 2 else unique_ratio,
                      "s_dense": mean["s_dense"] if j >= 3 else 1.0, "te": te,
                      "te_low": low, "te_high": high})
    out = _with_deltas(steps, measured)
    nan = float("nan")
    gap = ((measured_low - base["te"], measured_high - base["te"])
           if measured is not None and measured_low is not None and measured_high is not None
           else (nan, nan))
    for j, s in enumerate(out["steps"]):
        if not j:
            s.update(delta_low=None, delta_high=None, gap_closed_low=None, gap_closed_high=None)
            continue
        ratio = over_starts([one[j]["te"] / one[j - 1]["te"] for one in starts])[1:]
        prev = out["steps"][j - 1]
        before = (prev["te"], prev["te"]) if prev["te_low"] is None else (prev["te_low"],
                                                                          prev["te_high"])
        delta = _product(before, tuple(r - 1 for r in ratio))
        s.update(delta_low=delta[0], delta_high=delta[1],
                 **dict(zip(("gap_closed_low", "gap_closed_high"), _quotient(delta, gap))))
    return out


def _product(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """The interval of x * y, x in a, y in b (interval arithmetic; NaN where an end is)."""
    ends = [x * y for x in a for y in b]
    return ((min(ends), max(ends)) if all(math.isfinite(x) for x in ends)
            else (float("nan"), float("nan")))


def _quotient(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """The interval of x / y, x in a, y in b (interval arithmetic): unbounded where b reaches
    0, NaN where an end is."""
    if not all(math.isfinite(x) for x in (*a, *b)):
        return float("nan"), float("nan")
    if b[0] <= 0 <= b[1]:
        return -float("inf"), float("inf")
    return _product(a, (1 / b[1], 1 / b[0]))


# the routing assumption of the measured verification windows (temporal overlap included): the
# cost model's TE beside the measured TE
MEASURED_ROUTING = "measured windows (temporal)"
DEFAULT_HARDWARE = "H100"  # a model's hardware when it names none (a variant's: its target's)
MAX_BATCH = 4096  # beyond any engine's max_num_seqs on one GPU (predict's and ipf's batch sizes)
# a known draft cost c (the K drafts' time per SD step over one decode step) lies in [0, this)
MAX_DRAFT_COST = 10.0


# The physical range (least, most) of each number of a hardware entry, by its device: a GPU's
# HBM and tensor cores, or a CPU's memory and vector units (config.yaml's CPU: 20 GB/s, 0.2
# TFLOP/s). Outside it a number is a unit slip (TB/s typed as GB/s, FLOP/s as TFLOP/s, seconds
# as microseconds) or a typo, never a GPU. workflow/schemas/config.schema.yaml bounds each key by
# the same numbers (every device's widest, and a GPU's least where the entry is not a CPU's):
# tests/test_costmodel.py checks that they agree.
# One device's memory: a GPU's from 1 GiB (the smallest that serves any model) to 4 TiB (well
# above the 192-288 GB of a B200 or B300); a CPU's up to 64 TiB (a large server's). A unit slip
# (MiB written as GiB, GB/s as TB/s) lands outside them.
HARDWARE_RANGES = {
    "gpu": {"hbm_bandwidth_gbs": (50.0, 100_000.0), "peak_tflops": (1.0, 100_000.0),
            "nvlink_gbs": (1.0, 10_000.0), "step_overhead_us": (0.0, 100_000.0),
            "memory_gib": (1.0, 4096.0), "cuda_memory_mib": (1024.0, 4096.0 * 1024)},
    "cpu": {"hbm_bandwidth_gbs": (1.0, 100_000.0), "peak_tflops": (0.01, 100_000.0),
            "nvlink_gbs": (1.0, 10_000.0), "step_overhead_us": (0.0, 100_000.0),
            "memory_gib": (1.0, 65536.0), "cuda_memory_mib": (1024.0, 65536.0 * 1024)},
}
# the compute dtypes a peak is given for (the schema's peak_tflops keys)
PEAK_DTYPES = ("bf16", "fp16", "fp8", "fp32")


def _positive(name: str, key: str, value, zero_ok: bool = False) -> float:
    """A hardware entry's number: finite and > 0 (>= 0 where zero_ok), else one line; true or
    false is not a number (YAML's `true` would read as 1)."""
    if isinstance(value, bool):
        raise InputError(f"hardware {name}: {key} must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"hardware {name}: {key} must be a number, got {value!r}") from None
    if not (v >= 0 if zero_ok else v > 0) or v == float("inf"):
        raise InputError(f"hardware {name}: {key} must be {'>=' if zero_ok else '>'} 0, got "
                         f"{value!r}")
    return v


def _in_range(name: str, key: str, value, device: str, base: str | None = None) -> float:
    """A hardware entry's number within its device's physical range (HARDWARE_RANGES; `base`:
    the key the range is listed under, for a peak_tflops.<dtype>), else one line."""
    low, high = HARDWARE_RANGES[device][base or key]
    v = _positive(name, key, value, zero_ok=low == 0)
    if not low <= v <= high:
        unit = {"hbm_bandwidth_gbs": "GB/s", "nvlink_gbs": "GB/s", "step_overhead_us": "us",
                "memory_gib": "GiB", "cuda_memory_mib": "MiB"}.get(base or key, "TFLOP/s")
        raise InputError(f"hardware {name}: {key} = {v:g} lies outside {low:g}-{high:g} "
                         f"{unit}, the range of a {device.upper()}'s (a unit slip?)")
    return v


def capacity(hardware: dict) -> tuple[float, str] | None:
    """(bytes, what they are) of one GPU that vLLM's gpu_memory_utilization takes its share of:
    the memory the device reports to CUDA (hardware cuda_memory_mib), else the datasheet's
    memory_gib read as GiB (more than a GPU reports); None: neither is given."""
    if hardware.get("cuda_memory_mib"):
        mib = float(hardware["cuda_memory_mib"])
        return mib * MIB, f"{mib * MIB / GIB:.2f} GiB ({mib:,.0f} MiB as CUDA reports it)"
    if hardware.get("memory_gib"):
        return float(hardware["memory_gib"]) * GIB, f"{float(hardware['memory_gib']):g} GiB"
    return None


# The keys of a hardware entry (workflow/schemas/config.schema.yaml's `hardware`, which must list
# the same: tests/test_costmodel.py checks it); a --hardware-file's entry with any other is refused
HARDWARE_KEYS = ("hbm_bandwidth_gbs", "peak_tflops", "nvlink_gbs", "step_overhead_us",
                 "gpu_model", "memory_gib", "cuda_memory_mib", "device")


@dataclass
class Hardware:
    name: str
    hbm_bandwidth: float     # bytes/s
    peak_flops: dict         # dtype -> FLOP/s (dense)
    step_overhead: float = 0.0  # s per forward pass (launches, scheduling), whatever it computes
    nvlink_bandwidth: float = 0.0  # bytes/s one GPU sends to the others (tensor parallelism)
    # one GPU's memory as `capacity` reads it (0: not given, nothing is checked against it)
    memory_bytes: float = 0.0

    @classmethod
    def from_config(cls, name: str, d: dict) -> "Hardware":
        """A hardware entry (a configuration's `hardware`, resolved over the shipped GPUs, or a
        --hardware-file): each number checked (one line, never a traceback); no NVLink bandwidth
        where the entry has none (tensor parallelism then cannot be priced)."""
        if not isinstance(d, dict):
            raise InputError(f"hardware {name}: expected a mapping of its numbers, got {d!r}")
        unknown = sorted(set(d) - set(HARDWARE_KEYS), key=str)
        if unknown:
            raise InputError(f"hardware {name}: unknown key {unknown[0]!r} (a hardware entry "
                             f"has {', '.join(HARDWARE_KEYS)})")
        device = d.get("device", "gpu")
        if device not in HARDWARE_RANGES:
            raise InputError(f"hardware {name}: device must be one of "
                             f"{', '.join(HARDWARE_RANGES)}, got {device!r}")
        bw = _in_range(name, "hbm_bandwidth_gbs", d.get("hbm_bandwidth_gbs"), device)
        peaks = d.get("peak_tflops")
        if not isinstance(peaks, dict) or not peaks:
            raise InputError(f"hardware {name}: peak_tflops must map dtypes to TFLOP/s "
                             f"(e.g. {{bf16: 989}}), got {peaks!r}")
        other = sorted(set(peaks) - set(PEAK_DTYPES), key=str)
        if other:
            raise InputError(f"hardware {name}: peak_tflops.{other[0]}: not a compute dtype "
                             f"the cost model prices (one of {', '.join(PEAK_DTYPES)})")
        peak = {k: _in_range(name, f"peak_tflops.{k}", v, device, "peak_tflops")
                for k, v in peaks.items()}
        if "fp8" in peak and "bf16" in peak and peak["fp8"] < peak["bf16"]:
            raise InputError(f"hardware {name}: peak_tflops.fp8 {peaks['fp8']!r} below bf16's "
                             f"{peaks['bf16']!r}: fp8 tensor cores run at least at bf16's rate")
        nvlink = d.get("nvlink_gbs")
        for key in ("memory_gib", "cuda_memory_mib"):
            if d.get(key) is not None:
                _in_range(name, key, d[key], device)
        memory = capacity(d)
        return cls(name=name, hbm_bandwidth=bw * 1e9,
                   peak_flops={k: v * 1e12 for k, v in peak.items()},
                   # a forward pass's fixed time: launches and scheduling cost time, never give it
                   step_overhead=_in_range(name, "step_overhead_us",
                                           d.get("step_overhead_us", 0), device) * 1e-6,
                   nvlink_bandwidth=(0.0 if nvlink is None else
                                     _in_range(name, "nvlink_gbs", nvlink, device) * 1e9),
                   memory_bytes=memory[0] if memory else 0.0)

    def flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for the class `dtype` computes in; a missing entry is an error."""
        key = compute_dtype(dtype)
        if key not in self.peak_flops:
            raise InputError(f"hardware {self.name} has no peak FLOP/s for {key} (weights {dtype}); "
                             f"add peak_tflops.{key} to its entry")
        return self.peak_flops[key]


def step_time(dims: ModelDims, hw: Hardware, tokens: float, unique: float) -> float:
    """Roofline time of one MoE layer: max(bytes / bandwidth, flops / peak), per GPU."""
    bytes_ = dims.c_dense + dims.c_dense_layers + unique * dims.c_expert
    dense_layers = dims.dense_layer_params / dims.num_moe_layers
    flops = 2.0 * tokens * (dims.dense_params + dense_layers
                            + dims.top_k * dims.expert_params) / dims.tp
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
                     "compute_bound": bool(t_ver > (dims.c_dense + dims.c_dense_layers
                                                    + u_v * dims.c_expert)
                                           / hw.hbm_bandwidth * (1 + 1e-12))})
    return rows


def speedup(tau: float, te: float, draft_cost: float) -> float:
    """SD speedup = tau / (c + 1/TE) (docs/method.md, "Serving sweeps")."""
    return tau / (draft_cost + 1.0 / te)


def te_from_sweep(tau: float, speedup_measured: float, draft_cost: float) -> float:
    """TE = 1 / (tau / speedup - c)."""
    denom = tau / speedup_measured - draft_cost
    return float("nan") if denom <= 0 else 1.0 / denom

