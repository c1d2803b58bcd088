"""Predict before you run: the time of one decode or verification step of an MoE on a GPU, per
kernel class, and from it target efficiency (TE) and the speedup of speculative decoding at every
batch size (docs/method.md, "Step model").

Every term is a named mechanism with the scaling physics gives it and the range physics allows it
(MECHANISMS: value, range, whether fitted, source). One forward pass of B sequences with t new
tokens each, per GPU (weights split over TP), costs the sum of:

- MoE experts: the unique experts u of the B t tokens, each read once, at the HBM bandwidth times
  ctas / (ctas + bandwidth / moe_cta_gbs) (Little's law: a faster memory needs more CTAs in
  flight; ctas = u times the tiles of one expert's gate/up projection over TP); their FLOPs
  (B t k tokens through the experts) add to that time on a smooth roofline, as public fused-MoE
  kernel tables show once tokens per expert B t k / N reach tens (MOE_ROOFLINE_P);
- dense weights: attention projections, shared experts, expert-free layers and the LM head (in
  the checkpoint's dtype) at dense_efficiency of the bandwidth;
- attention: the KV cache of CONTEXT tokens per sequence in the checkpoint's dtype, split over
  the GPUs that hold it (replicated where the KV heads are fewer than TP, and for MLA's latent),
  sliding-window layers at their window, read once per step however many query tokens, at the
  efficiency of the study's attention profiles (attn_seq_gbs per sequence in flight), at most a
  streaming read's (STREAMING_EFFICIENCY);
- a linear-attention (Gated DeltaNet) state read once and written after each new token;
- sampling: passes over the fp32 logits of every new token;
- kernel launches: each layer's kernels (KERNELS) times the latency of one kernel node (node_us),
  in every dtype; fp8 weights are otherwise priced by their bytes and FLOPs, their activation
  quantisation as a memory pass;
- two tensor-parallel all-reduces per layer (a latency plus the ring's bytes over NVLink);
- host work per sequence of every step (host_seq_us; assumed within its range: the CPU slopes
  of bench/host_overhead.py bound nothing tighter for a GPU server);
- each class at least its FLOPs over compute_efficiency of the peak, plus the hardware entry's
  fixed cost per pass.

TE(B) = T_decode(B) / (T_verify(B) + B verify_seq_us + L + n T_drafter(B, K+1)): a verification
step verifies K+1 tokens per sequence, costs the host verify_seq_us per sequence more, the
engine's SD loop L in microseconds per iteration (sd_loop_us, per engine: data/engine_overhead.csv)
and n passes of the drafter over the verified tokens priced by the drafter's own step (a draft
model without its config: verify_draft_model target decode steps). The draft cost c(B) is K
drafter passes over a target decode step, the drafter priced by the same step model; the speedup
is tau / (c + 1/TE). Kernels per layer follow the attention kind (data/kernels_per_layer.csv) and
the MoE kernel's efficiency is capped by public GEMM benchmarks and fused-MoE kernel times
(data/moe_gemm_bandwidth.csv, data/moe_kernel_times.csv).

The fitted mechanisms (FITTED: moe_cta_gbs, node_us, verify_draft_model, catchup_passes) are
fitted by bounded least squares, each inside its range, to what the study measured of a step at
batch 1 (`calibration_rows`: TE, the MoE share of the kernels' time, the three-step correction's
time ratios); one that ends on a bound is reported as a missing effect (missing_effects); the
study's published speedup shapes are scored, never fitted. `leave_one_model_out`
gives the honest error: each model predicted by parameters fitted without any of its rows.
`predict` draws every uncertain input (a leave-one-model-out fit, each unfitted mechanism within
its range around the value the fit used, overlaps, acceptance length, a TE error growing with the
batch and with the distance from the calibration, an engine factor) and reports 95% intervals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources

import numpy as np

from . import costmodel, steptables
from ..routing import ipf
from ..sources import published
from .costmodel import Hardware, ModelDims, dtype_bytes
from ..errors import InputError
from ..routing.unique import uniform_unique

TILE_N = 64                # output columns of one CTA's tile in the fused MoE kernel
# KV tokens per sequence of the calibration's rows: the study served its TE rows on MT-Bench's first
# turns with 256 output tokens, a decode step reading the prompt and half the output on average:
# 70 + 256 / 2 (config/paper.yaml's mt-bench prompt_tokens and sweep output_len; a test holds them
# equal, plan.decode_context)
CONTEXT = 198
# The contexts the calibration stands for: one within this factor of CONTEXT (99-396 tokens) counts
# as theirs (assumed: the study publishes no context lengths), a longer or shorter one as outside
CONTEXT_FACTOR = 2.0
MAX_CONTEXT = 1 << 20      # KV tokens per sequence that predict accepts (beyond any served model)
LOGIT_BYTES = 4            # the logits are kept in fp32 for sampling
FAMILIES = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle", "EAGLE": "eagle",
            "EAGLE-3": "eagle", "mtp": "mtp", "MTP": "mtp"}


@dataclass(frozen=True)
class Mechanism:
    """One term of the step model: its value, the range physics allows it, and where both come
    from. A fitted mechanism is fitted inside its range and never leaves it."""
    value: float
    low: float
    high: float
    unit: str
    fitted: bool
    source: str


def _attention_profile_gbs() -> tuple[float, float, float]:
    """HBM bandwidth one sequence's attention keeps in flight, from the study's attention
    profiles at batch 1 (profiling_batch1.csv: the share eta of the bandwidth attention reached):
    eta = a / (a + bandwidth) gives a = eta / (1 - eta) x bandwidth. (median, least, most)."""
    prof = published.load("profiling_batch1")
    hw = published.load("hardware").set_index("gpu")["hbm_bandwidth_gbs"]
    eta = (prof["attn_hbm_bw_pct_low"] + prof["attn_hbm_bw_pct_high"]) / 200.0
    a = eta / (1 - eta) * prof["gpu"].map(hw)
    return float(a.median()), float(a.min()), float(a.max())


_ATTN = _attention_profile_gbs()
# The engine's host work per sequence (value, least, most), in us: assumed, not measured.
# bench/host_overhead.py (vLLM on a 2-core CPU, tiny-fine, one engine kept up, batch 1..32) gives
# slopes of 57 us per sequence and step plain, 847 with SD (the tiny drafter, K = 3): the CPU's own
# compute of the tiny models per token is in both, so they bound nothing tighter than this range
# for a GPU server, whose host is faster and overlaps part of its work with the GPU's.
HOST_SEQ_US = (10.0, 0.0, 20.0)
SD_SEQ_US = (10.0, 0.0, 20.0)
# The most of the HBM bandwidth a streaming read reaches (a streaming copy reaches about 0.9):
# the dense weights' efficiency at its most, and the ceiling of attention's KV-cache read, which
# Little's law alone would take towards 1 as sequences in flight grow
STREAMING_EFFICIENCY = 0.9

MECHANISMS: dict[str, Mechanism] = {
    "moe_cta_gbs": Mechanism(
        60.0, 20.0, 200.0, "GB/s per CTA", True,
        "Little's law: the bytes one CTA of the fused MoE kernel keeps in flight (one to four "
        "pipeline stages of a 64-column tile, 8-64 KiB) over the HBM latency (0.3-0.8 us); the "
        "study's attention profiles give 57-78 GB/s per CTA"),
    "node_us": Mechanism(
        3.0, 1.0, 8.0, "us per kernel", True,
        "a kernel node of a CUDA graph: its launch (1-2 us) and the ramp-up and tail of a kernel "
        "of few CTAs; every layer runs the kernels KERNELS counts, in every dtype"),
    "verify_draft_model": Mechanism(
        0.5, 0.0, 1.5, "target decode steps", True,
        "a separate draft model's pass over the K+1 verified tokens (a prefill of K+1 tokens of "
        "the draft model) where its config.json is not given, so that its bytes and kernels "
        "cannot price it (the study's draft-model rows); the engine's own loop is sd_loop_us"),
    "catchup_passes": Mechanism(
        0.5, 0.0, 1.0, "drafter passes over the K+1 verified tokens", True,
        "the drafter's pass over the verified tokens beyond the K passes of the draft cost, "
        "priced by the drafter's own bytes and kernels (an MTP block: one of the target's "
        "layers and the LM head; an EAGLE head: its layer and LM head): 0 where the first "
        "draft step is that pass (vLLM's EAGLE/MTP proposer), 1 where the drafter runs over "
        "the verified tokens before drafting"),
    "sd_loop_us": Mechanism(
        steptables.engine_overheads()["vllm"].value, steptables.engine_overheads()["vllm"].low,
        steptables.engine_overheads()["vllm"].high, "us per SD iteration", False,
        "the engine's SD loop per iteration (the proposer's scaffolding, the rejection sampler's "
        "bookkeeping), in microseconds however large the model: vLLM's measured value and range "
        "from engine-level measurements on a dense model (data/engine_overhead.csv: 1.71 ms at "
        "a short context, 2.37 ms at 32k; each includes a drafter forward the draft cost counts "
        "again, so the range runs from 0); another engine draws its own range"),
    "moe_max_efficiency": Mechanism(
        steptables.moe_efficiency_bounds()[1], steptables.moe_efficiency_bounds()[0],
        steptables.moe_efficiency_bounds()[1], "of the HBM bandwidth", False,
        "the most of the HBM bandwidth the fused MoE kernel reaches at decoding shapes, whatever "
        "Little's law allows: public fp8 GEMMs of DeepSeek-V3 shapes at M <= 256 reach "
        "0.45-0.80 (data/moe_gemm_bandwidth.csv, DeepGEMM on H800), public fused-MoE kernel "
        "times at half a token per expert or more up to 0.88 (data/moe_kernel_times.csv: "
        "vLLM's bf16 fused_moe, Mixtral-8x7B TP 2 on H100 at M = 16): 0.45 to the most of "
        "either (steptables.moe_efficiency_bounds)"),
    "verify_seq_us": Mechanism(
        SD_SEQ_US[0], SD_SEQ_US[1], SD_SEQ_US[2], "us per sequence and verification", False,
        "the engine's host-side work per sequence that speculative decoding adds (draft tokens' "
        "bookkeeping, rejection results): bench/host_overhead.py, SD on minus off"),
    "host_seq_us": Mechanism(
        HOST_SEQ_US[0], HOST_SEQ_US[1], HOST_SEQ_US[2], "us per sequence and step", False,
        "the engine's host-side work per sequence of every step (scheduling, input preparation, "
        "output processing): bench/host_overhead.py; 0 where a GPU step hides it"),
    "dense_efficiency": Mechanism(
        0.8, 0.6, STREAMING_EFFICIENCY, "of the HBM bandwidth", False,
        "what a memory-bound GEMV or small-batch GEMM reaches of the datasheet bandwidth "
        "(a streaming copy reaches about 0.9)"),
    "compute_efficiency": Mechanism(
        0.48, 0.4, 0.7, "of the dense peak FLOP/s", False,
        "grouped and dense GEMMs of a few hundred rows: public fused-MoE kernels reach 0.44-0.52 "
        "of the dense peak at 96-384 tokens per expert (data/moe_kernel_times.csv: Mixtral-8x7B "
        "on H100, GLM-4.5-Air on A100; their median 0.48), DeepGEMM's fp8 GEMMs of M = 128 up "
        "to 0.65 (data/moe_gemm_bandwidth.csv); nothing the study publishes measures it"),
    "attn_seq_gbs": Mechanism(
        _ATTN[0], _ATTN[1], _ATTN[2], "GB/s per sequence", False,
        "the study's attention profiles at batch 1 (profiling_batch1.csv: attention's share of "
        "the bandwidth on H100 and B200): their median and range; B sequences keep B times as "
        "much in flight"),
    "allreduce_us": Mechanism(
        8.0, 4.0, 25.0, "us per all-reduce", False,
        "a tensor-parallel all-reduce of a small message over NVLink: vLLM's custom one-shot "
        "all-reduce 4-10 us, NCCL's ring up to about 25 us; two per layer"),
    "nvlink_efficiency": Mechanism(
        0.7, 0.5, 0.9, "of the NVLink bandwidth", False,
        "a ring all-reduce's bus bandwidth against the link's datasheet bandwidth"),
    "sampler_passes": Mechanism(
        3.0, 1.0, 6.0, "passes over the fp32 logits", False,
        "the logits written in fp32 and read by softmax and sampling (verifying: also by the "
        "rejection sampler)"),
}
FITTED = tuple(k for k, m in MECHANISMS.items() if m.fitted)

# Kernels per layer as vLLM runs a decoder layer (CUDA graphs), by block and attention kind, and
# by the class whose time they are (data/kernels_per_layer.csv, read from vLLM's model code):
# grouped-query attention (full or sliding window) 6, MLA 10, DSA's indexer 9 more, Gated
# DeltaNet 7; the MoE block 8, a shared expert 3, an expert-free FFN 4; dynamic fp8 activations
# one quantisation kernel before each GEMM; the LM head and the sampler 3.
KERNELS = steptables.kernels_per_layer()


def is_fp8(dtype: str) -> bool:
    """Weights whose GEMMs quantise their activations on the fly (online fp8, block fp8)."""
    return dtype.startswith("fp8")


@dataclass(frozen=True)
class StepParams:
    """The step model's parameters (MECHANISMS: each one's meaning, range and source). The first
    six, positionally: the MoE kernels' bandwidth per CTA, the latency of one kernel, a draft
    model's pass over the verified tokens where its config is not given (target decode steps),
    the drafter's passes over the verified tokens priced by its own step, the engine's SD loop per
    iteration (us), and the host work per sequence that SD adds to a verification."""
    moe_cta_gbs: float = MECHANISMS["moe_cta_gbs"].value
    node_us: float = MECHANISMS["node_us"].value
    verify_draft_model: float = MECHANISMS["verify_draft_model"].value
    catchup_passes: float = MECHANISMS["catchup_passes"].value
    sd_loop_us: float = MECHANISMS["sd_loop_us"].value
    verify_seq_us: float = MECHANISMS["verify_seq_us"].value
    host_seq_us: float = MECHANISMS["host_seq_us"].value
    dense_efficiency: float = MECHANISMS["dense_efficiency"].value
    compute_efficiency: float = MECHANISMS["compute_efficiency"].value
    attn_seq_gbs: float = MECHANISMS["attn_seq_gbs"].value
    allreduce_us: float = MECHANISMS["allreduce_us"].value
    nvlink_efficiency: float = MECHANISMS["nvlink_efficiency"].value
    sampler_passes: float = MECHANISMS["sampler_passes"].value
    moe_max_efficiency: float = MECHANISMS["moe_max_efficiency"].value

    def outside_ranges(self) -> list[str]:
        """The parameters outside their mechanism's physical range (none, for a fit)."""
        return [k for k, v in self.as_dict().items()
                if not MECHANISMS[k].low - 1e-9 <= v <= MECHANISMS[k].high + 1e-9]

    def as_dict(self) -> dict:
        return asdict(self)


def moe_efficiency(dims: ModelDims, hw: Hardware, unique: float, p: StepParams) -> float:
    """The fused MoE kernel's share of the HBM bandwidth: Little's law over its CTAs in flight,
    at most what public GEMM benchmarks of decoding shapes reach (moe_max_efficiency)."""
    ctas = unique * max(1.0, 2 * dims.expert_intermediate / dims.tp / TILE_N)
    return min(ctas / (ctas + hw.hbm_bandwidth / (p.moe_cta_gbs * 1e9)), p.moe_max_efficiency)


def attention_efficiency(hw: Hardware, batch: int, p: StepParams) -> float:
    """Attention's share of the HBM bandwidth reading the KV cache: Little's law over B sequences
    keeping attn_seq_gbs each in flight, at most what a streaming read reaches
    (STREAMING_EFFICIENCY, as every other bandwidth term is capped: 0.994 uncapped at batch 512
    for Qwen3-30B on H100)."""
    in_flight = batch * p.attn_seq_gbs * 1e9
    return min(in_flight / (in_flight + hw.hbm_bandwidth), STREAMING_EFFICIENCY)


def kernels(dims: ModelDims) -> dict[str, float]:
    """Kernel launches of one forward pass per class (KERNELS): each softmax-attention layer's
    block by its kind (MLA or grouped-query, DSA's indexer on top), each linear-attention
    layer's, the MoE, shared-expert and expert-free FFN blocks, fp8's quantisation and the
    head."""
    n = {c: 0.0 for c in steptables.KERNEL_CLASSES}
    softmax = dims.attention_layers or dims.num_layers
    linear = dims.num_layers - dims.attention_layers if dims.attention_layers else 0
    fp8 = is_fp8(dims.dtype) or is_fp8(dims.dense_dtype)
    blocks = {"attention": softmax - dims.mla_layers, "attention_mla": dims.mla_layers,
              "dsa_indexer": dims.dsa_layers, "attention_linear": linear,
              "moe": dims.num_moe_layers,
              "shared": dims.num_moe_layers if dims.shared_intermediate else 0,
              "ffn": dims.num_layers - dims.num_moe_layers,
              "fp8": dims.num_layers - dims.mla_layers if fp8 else 0,
              "fp8_mla": dims.mla_layers if fp8 else 0,
              "head": 1 if dims.vocab_size else 0}
    for block, count in blocks.items():
        for cls, k in KERNELS[block].items():
            n[cls] += k * count
    return n


def _allreduce(dims: ModelDims, hw: Hardware, tokens: int, p: StepParams) -> float:
    """Two all-reduces of the hidden states per layer under tensor parallelism (ring)."""
    if dims.tp == 1:
        return 0.0
    if not hw.nvlink_bandwidth:
        raise InputError(f"hardware {hw.name} has no nvlink_gbs: TP {dims.tp} needs the "
                         "GPU-to-GPU bandwidth of its all-reduces")
    volume = 2 * (dims.tp - 1) / dims.tp * tokens * dims.hidden * dtype_bytes(dims.base_dtype)
    return 2 * dims.num_layers * (p.allreduce_us * 1e-6
                                  + volume / (hw.nvlink_bandwidth * p.nvlink_efficiency))


# The per-expert GEMMs' time from their bytes and their FLOPs: (T_bytes^p + T_flops^p)^(1/p), not
# the roofline's maximum (p -> infinity). Public fused-MoE kernel tables (data/moe_kernel_times.csv)
# show the tensor-core work adding to the weight stream well before it exceeds it: Mixtral-8x7B's
# layer on an H100 costs 537 us at 64 tokens per expert where its bytes take about 483 us and its
# FLOPs 91 us at the dense peak; GLM-4.5-Air's on an A100 930 us at 96 tokens per expert (bytes
# about 680 us, FLOPs 654 us at half the peak). p = 2 gives 516 and 943 us there, the maximum 483
# and 680 us; chosen from those tables (bench/moe_kernels.py), never from a score.
MOE_ROOFLINE_P = 2.0


def smooth_roofline(t_bytes: float, t_flops: float, p: float = MOE_ROOFLINE_P) -> float:
    return float((t_bytes ** p + t_flops ** p) ** (1.0 / p))


GPU_CLASSES = ("moe", "dense", "attention", "state", "sampling", "quant", "communication")


def step_times(dims: ModelDims, hw: Hardware, batch: int, tokens_per_seq: int, unique: float,
               p: StepParams, context: float = CONTEXT) -> dict[str, float]:
    """Seconds of one forward pass of `batch` sequences with `tokens_per_seq` new tokens each,
    per class: GPU kernels (GPU_CLASSES), the engine's host work per sequence (host) and the
    hardware entry's fixed cost per pass (fixed). Each kernel class is its bytes over the
    bandwidth it reaches, at least its FLOPs over the compute floor, plus its kernels' launch
    latency (docs/method.md, "Step model")."""
    tokens = batch * tokens_per_seq
    bw = hw.hbm_bandwidth
    peak = p.compute_efficiency * hw.flops(dims.dtype)
    dense_peak = p.compute_efficiency * hw.flops(dims.dense_dtype)
    base_peak = p.compute_efficiency * hw.flops(dims.base_dtype)
    launch = {k: v * p.node_us * 1e-6 for k, v in kernels(dims).items()}
    moe = dims.num_moe_layers * smooth_roofline(
        unique * dims.c_expert / (bw * moe_efficiency(dims, hw, unique, p)),
        2.0 * tokens * dims.top_k * dims.expert_params / dims.tp / peak)
    dense_params = dims.num_moe_layers * dims.dense_params + dims.dense_layer_params
    dense = max(dims.num_moe_layers * (dims.c_dense + dims.c_dense_layers)
                / (bw * p.dense_efficiency), 2.0 * tokens * dense_params / dims.tp / dense_peak)
    head = dims.vocab_size * dims.hidden  # the LM head stays in the checkpoint's dtype
    dense += max(head * dtype_bytes(dims.base_dtype) / dims.tp / (bw * p.dense_efficiency),
                 2.0 * tokens * head / dims.tp / base_peak)
    attention = max(batch * dims.kv_bytes(context) / (bw * attention_efficiency(hw, batch, p)),
                    tokens * dims.attention_flops(context) / base_peak)
    # a linear-attention state is read once and written after each new token (verification
    # keeps one per position, to roll back to the last accepted one)
    state = batch * dims.state_bytes * (1 + tokens_per_seq) / (bw * p.dense_efficiency)
    sampling = p.sampler_passes * tokens * dims.vocab_size * LOGIT_BYTES / bw
    quant = 0.0
    if is_fp8(dims.dtype) or is_fp8(dims.dense_dtype):  # read bf16, write fp8: 3 bytes each
        quant = dims.num_layers * tokens * 4 * dims.hidden * 3 / bw
    return {"moe": moe + launch["moe"], "dense": dense + launch["dense"],
            "attention": attention + launch["attention"], "state": state + launch["state"],
            "sampling": sampling + launch["sampling"], "quant": quant,
            "communication": _allreduce(dims, hw, tokens, p),
            "host": batch * p.host_seq_us * 1e-6, "fixed": hw.step_overhead}


def step_time(*args, **kwargs) -> float:
    return sum(step_times(*args, **kwargs).values())


def gpu_time(times: dict[str, float]) -> float:
    """The kernels' time of a step (what a GPU profile adds up): no host work, no fixed cost."""
    return sum(v for k, v in times.items() if k in GPU_CLASSES)


def te_from_times(decode: dict[str, float], verify: dict[str, float],
                  verify_extra: float = 0.0) -> float:
    """TE from the time of each kernel class in a decode and a verification step (seconds, or
    shares of the decode step: the three-step correction's form), with the method's extra cost
    of a verification step in decode steps."""
    t_dec = sum(decode.values())
    return t_dec / (sum(verify.values()) + verify_extra * t_dec)


VERIFY_TERMS = ("verify_draft_model", "catchup_passes")


def verify_term(method: str, draft: ModelDims | None) -> str:
    """The fitted mechanism that prices the drafter's pass over the verified tokens: a draft model
    without its config.json, verify_draft_model target decode steps; any other drafter,
    catchup_passes of its own step."""
    family = FAMILIES.get(method)
    if family is None:
        raise InputError(f"unknown speculative method '{method}' (one of: "
                         f"{', '.join(sorted(set(FAMILIES)))})")
    return "verify_draft_model" if family == "draft_model" and draft is None else "catchup_passes"


def verify_extra_s(dims: ModelDims, hw: Hardware, k_draft: int, batch: int, method: str,
                   p: StepParams, draft: ModelDims | None = None,
                   context: float = CONTEXT) -> float:
    """Seconds a verification costs beyond the target's forward pass: the engine's SD loop
    (sd_loop_us per iteration, in microseconds whatever the model) and the drafter's pass(es)
    over the K+1 verified tokens (catchup_passes of the drafter's own step; a draft model without
    its config: verify_draft_model target decode steps). The drafter's K passes are the draft
    cost's, not this."""
    if verify_term(method, draft) == "verify_draft_model":
        catchup = p.verify_draft_model * step_time(dims, hw, batch, 1,
                                                   unique_decode(dims, batch), p, context)
    else:
        d = drafter_dims(dims, method, draft)
        t = step_times(d, hw, batch, k_draft + 1, unique_decode(d, batch * (k_draft + 1)), p,
                       context)
        catchup = p.catchup_passes * (sum(t.values()) - t["host"])
    return p.sd_loop_us * 1e-6 + catchup


def target_efficiency(dims: ModelDims, hw: Hardware, k_draft: int, batch: int, unique_verify: float,
                      unique_decode: float, method: str, p: StepParams,
                      draft: ModelDims | None = None, context: float = CONTEXT) -> float:
    """TE at `batch` with `context` KV tokens per sequence (the calibration's: CONTEXT)."""
    verify = step_times(dims, hw, batch, k_draft + 1, unique_verify, p, context)
    verify["sequences"] = batch * p.verify_seq_us * 1e-6
    verify["sd"] = verify_extra_s(dims, hw, k_draft, batch, method, p, draft, context)
    return te_from_times(step_times(dims, hw, batch, 1, unique_decode, p, context), verify)


# --- unique experts from overlaps ------------------------------------------------------------

FINE_GRAINED = 16  # N / k at or above which a model counts as fine-grained (the study's split)


def prior_overlaps(dims: ModelDims, k_draft: int) -> np.ndarray:
    """Overlap curves (steps 1..K) of the study's models of the same granularity (published,
    Table 17): rows are models; a model the study did not measure takes these as its prior."""
    ob = published.load("overlap_by_distance")
    ue = published.load("unique_experts_ipf").set_index("model")
    fine = dims.num_experts / dims.top_k >= FINE_GRAINED
    keep = [m for m in ob["model"] if m in ue.index
            and (ue.loc[m, "n"] / ue.loc[m, "k"] >= FINE_GRAINED) == fine]
    cols = [f"step{d}" for d in range(1, k_draft + 1)]
    if any(c not in ob for c in cols):
        raise InputError(f"the study publishes overlaps for steps 1..4 only (K = {k_draft}): give "
                         f"the overlaps for d = 1..{k_draft} (--overlaps)")
    return ob.set_index("model").loc[keep, cols].to_numpy(float)


def study_overlaps(dims: ModelDims, k_draft: int,
                   study_model: str | None = None) -> tuple[np.ndarray, str]:
    """The overlap curves of a model without a trace of its own, and where they come from: the
    study's published curve for its own models, else its models' curves of the same granularity
    as a prior."""
    pub = published_overlaps(study_model, k_draft) if study_model else None
    if pub is not None:
        return pub[None, :], f"published ({study_model})"
    prior = prior_overlaps(dims, k_draft)
    fine = dims.num_experts / dims.top_k >= FINE_GRAINED
    return prior, (f"prior: the study's {'fine' if fine else 'coarse'}-grained models' curves "
                   f"({len(prior)})")


def unique_verify(dims: ModelDims, overlaps, batch: int) -> float:
    """Unique experts of B windows of K + 1 tokens, from the uniform max-entropy IPF fit of an
    overlap curve (ipf.predict_uniform)."""
    return float(ipf.predict_uniform(dims.num_experts, dims.top_k, np.asarray(overlaps, float),
                                     batch=batch)["unique"])


def unique_decode(dims: ModelDims, batch: int) -> float:
    return uniform_unique(dims.num_experts, dims.top_k, batch)


# --- calibration on the study's measurements --------------------------------------------------

CALIBRATION_K = published.STUDY_K  # the draft length of every TE the study publishes

# The checkpoint (config.json, package data under data/hf_configs/) of each study model, and the
# format a precision serves it in: None, the checkpoint's own; else vLLM's online format.
CHECKPOINTS = {
    "Mixtral-8x7B": "Mixtral-8x7B-Instruct-v0.1.json", "Qwen2-57B": "Qwen2-57B-A14B-Instruct.json",
    "GLM-4.7-Flash": "GLM-4.7-Flash.json", "Qwen3-30B": "Qwen3-30B-A3B-FP8.json",
    "Qwen3-235B": "Qwen3-235B-A22B-Instruct-2507.json",
    "Qwen3-235B/fp8": "Qwen3-235B-A22B-Instruct-2507-FP8.json",
    "Qwen3-Next-80B": "Qwen3-Next-80B-A3B-Instruct.json", "Qwen3.5-35B": "Qwen3.5-35B-A3B.json",
    "GPT-OSS-120B": "gpt-oss-120b.json",
}


def config_path(name: str) -> str:
    """A packaged config.json of the study's checkpoints (data/hf_configs/<name>)."""
    p = resources.files("specmoe") / "data" / "hf_configs" / name
    if not p.is_file():
        raise InputError(f"no packaged config.json {name!r}")
    return str(p)


def study_checkpoint(model: str, precision: str) -> str:
    """The packaged config.json (its name) of the checkpoint the study served `model` from."""
    name = CHECKPOINTS.get(f"{model}/{precision}") or CHECKPOINTS.get(model)
    if name is None:
        raise InputError(f"no packaged checkpoint for study model {model!r}")
    return name


def study_model_dims(model: str, precision: str, tp: int) -> ModelDims:
    """A study model's dimensions as the study served it (precision, TP)."""
    from .hfconfig import dims_from_config

    name = study_checkpoint(model, precision)
    native = dims_from_config(config_path(name), tp=tp)
    if native.dtype.startswith(precision):  # fp8 checkpoint served as fp8
        return native
    return dims_from_config(config_path(name), dtype=precision, tp=tp)


def published_overlaps(model: str, k_draft: int) -> np.ndarray | None:
    ob = published.load("overlap_by_distance").set_index("model")
    if model not in ob.index:
        return None
    cols = [f"step{d}" for d in range(1, k_draft + 1)]
    published_steps = [c for c in ob.columns if c.startswith("step")]
    if any(c not in published_steps for c in cols):
        raise InputError(f"the study publishes overlaps for steps 1..{len(published_steps)} only "
                         f"({model}, K = {k_draft}): give the overlaps for d = 1..{k_draft} (--overlaps)")
    return ob.loc[model, cols].to_numpy(float)


def study_hardware(gpu: str) -> Hardware:
    """A GPU the study measured on (published/hardware.csv, the GPUs the package ships)."""
    shipped = published.gpus()
    if gpu not in shipped:
        raise InputError(f"the study measured on {', '.join(shipped)}, not {gpu!r}")
    return Hardware.from_config(gpu, shipped[gpu])


TE = "TE at batch 1"
MOE_SHARE = "MoE share of decode time"
MOE_RATIO = "MoE verify/decode time ratio"
REST_RATIO = "non-MoE verify/decode time ratio"


def _row(quantity: str, model: str, precision: str, tp: int, gpu: str, published_value: float,
         method: str | None = None, goal: bool = False) -> dict:
    dims = study_model_dims(model, precision, tp)
    ov = published_overlaps(model, CALIBRATION_K)
    prior = ov is None
    ov = prior_overlaps(dims, CALIBRATION_K).mean(axis=0) if prior else ov
    return {"quantity": quantity, "model": model, "precision": precision, "tp": tp, "gpu": gpu,
            "method": method, "published": float(published_value), "goal": goal, "dims": dims,
            "hw": study_hardware(gpu), "unique": unique_verify(dims, ov, 1),
            "overlap_prior": prior}


def calibration_rows() -> list[dict]:
    """What the study measured of a step, each published number once: TE at batch 1, K = 3
    (Table 10, all twelve configurations as `goal`, and Table 1's other Qwen3-30B variants), the
    MoE share of decode time at batch 1 (Tables 5 and 12), and the three-step correction's measured
    MoE and non-MoE verify/decode time ratios (Table 11); each with its dimensions, the GPU it ran
    on and its unique experts (the published overlaps' IPF fit, or its granularity's prior)."""
    # the models the study lists without a GPU ran on its main one, the H100
    gpus = published.load("models").set_index("model")["gpu"].to_dict()
    gpu = lambda m: gpus.get(m, costmodel.DEFAULT_HARDWARE)  # noqa: E731
    t10 = published.load("te_batch1_k3")
    t1 = published.load("te_weight_model_batch1")
    seen = {(r.model, r.precision, int(r.tp)) for r in t10.itertuples()}
    rows = [_row(TE, r.model, r.precision, int(r.tp), gpu(r.model), r.target_efficiency,
                 r.sd_method, goal=True) for r in t10.itertuples()]
    rows += [_row(TE, r.model, r.dtype, int(r.tp), gpu(r.model), r.te_observed, "EAGLE-3")
             for r in t1.itertuples() if (r.model, r.dtype, int(r.tp)) not in seen]
    rows += [_row(MOE_SHARE, r.model, r.precision, int(r.tp), r.gpu, r.moe_time_share)
             for r in published.load("profiling_batch1").itertuples()]
    # the three-step correction's time ratios: its model profiled on the study's GPU for it
    step3 = published.load("three_step_correction_qwen3_30b").set_index("step").loc["3"]
    prof = published.load("profiling_batch1")
    m3 = published.THREE_STEP_MODEL
    q = prof[(prof["model"] == m3) & (prof["gpu"] == gpu(m3))].iloc[0]
    for quantity, col in ((MOE_RATIO, "moe_time_ratio"), (REST_RATIO, "dense_time_ratio")):
        rows.append(_row(quantity, m3, q["precision"], int(q["tp"]), q["gpu"], step3[col]))
    return rows


def predict_row(r: dict, p: StepParams) -> float:
    """The step model's value of a calibration row's quantity (shares and ratios of the kernels'
    time, as a profile measures them)."""
    dims, hw = r["dims"], r["hw"]
    if r["quantity"] == TE:
        return target_efficiency(dims, hw, CALIBRATION_K, 1, r["unique"], dims.top_k,
                                 r["method"], p)
    dec = step_times(dims, hw, 1, 1, dims.top_k, p)
    if r["quantity"] == MOE_SHARE:
        return dec["moe"] / gpu_time(dec)
    ver = step_times(dims, hw, 1, 4, r["unique"], p)
    if r["quantity"] == MOE_RATIO:
        return ver["moe"] / dec["moe"]
    return (gpu_time(ver) - ver["moe"]) / (gpu_time(dec) - dec["moe"])


def residuals(rows: list[dict], p: StepParams) -> list[float]:
    """Each row's error under `p`, relative to its published value's scale (a time ratio's over
    the ratio, a TE's or share's as it is): what `fit` minimises the squares of."""
    return [(predict_row(r, p) - r["published"]) / max(1.0, r["published"]) for r in rows]


# Where the fit starts, as shares of each fitted mechanism's range beside its stated value: the
# MoE kernel's efficiency cap (moe_max_efficiency) puts kinks in the objective where a
# configuration's efficiency reaches it, and a fit from the stated values alone stopped on one
# (moe_cta_gbs at 111.021 in 3 of 7 leave-one-model-out fits, at a higher cost than a fit from
# near either end of the ranges reaches).
FIT_STARTS = (0.1, 0.9)


def fit(rows: list[dict]) -> StepParams:
    """The fitted mechanisms (FITTED) by bounded least squares over `rows` (residuals), each
    inside its physical range; every other mechanism at its value. The fit starts from the
    stated values and from FIT_STARTS of every range, and keeps the lowest cost (the first on a
    tie): deterministic. The structure is fixed before any score: the study's speedup shapes
    have no way into a fit (leave_one_model_out scores them, never uses them to choose a
    value)."""
    from scipy.optimize import least_squares

    lo = np.array([MECHANISMS[k].low for k in FITTED])
    hi = np.array([MECHANISMS[k].high for k in FITTED])
    x0 = np.array([MECHANISMS[k].value for k in FITTED])

    def params(x) -> StepParams:
        return StepParams(**dict(zip(FITTED, map(float, x))))

    fits = [least_squares(lambda x: residuals(rows, params(x)), start, bounds=(lo, hi))
            for start in (x0, *(lo + f * (hi - lo) for f in FIT_STARTS))]
    return params(min(fits, key=lambda f: f.cost).x)


def leave_one_model_out(rows: list[dict], shapes: list[dict] = ()) -> list[dict]:
    """Each row and shape predicted by parameters fitted on the other models' rows only (rows,
    then shapes, in their order); a shape's `predicted` is a shape class. Beside each TE: the two
    baselines, fitted on the same other models (`baseline_mean`: the mean TE of their Table 10
    rows of the same method family and granularity, else the same family, else all; the weight
    model, which fits nothing)."""
    models = dict.fromkeys(r["model"] for r in [*rows, *shapes])
    fits = {m: fit([r for r in rows if r["model"] != m]) for m in models}
    out = []
    for r in [*rows, *shapes]:
        p = fits[r["model"]]
        shape = r["quantity"] == SHAPE
        pred = predict_shape(r, p) if shape else predict_row(r, p)
        base = mean_baseline(rows, r) if r["quantity"] == TE else None
        out.append({k: r[k] for k in ("quantity", "model", "precision", "tp", "gpu", "method",
                                      "published", "overlap_prior")}
                   | {"goal": r.get("goal", False), "predicted": pred,
                      "error": None if shape else pred - r["published"],
                      "baseline_mean": base,
                      "rule_made": r.get("rule_made", False),
                      **{f"fit_{k}": getattr(p, k) for k in FITTED}})
    return out


def granularity(dims: ModelDims) -> str:
    return "fine" if dims.num_experts / dims.top_k >= FINE_GRAINED else "coarse"


def mean_baseline(rows: list[dict], r: dict) -> float:
    """The plain baseline of a TE row: the mean published TE at batch 1 of the other models'
    Table 10 rows of its method family and granularity (else its family, else all of them)."""
    others = [o for o in rows if o["goal"] and o["model"] != r["model"]]
    fam = FAMILIES[r["method"]]
    for keep in (lambda o: FAMILIES[o["method"]] == fam
                 and granularity(o["dims"]) == granularity(r["dims"]),
                 lambda o: FAMILIES[o["method"]] == fam, lambda o: True):
        vals = [o["published"] for o in others if keep(o)]
        if vals:
            return float(np.mean(vals))
    return float("nan")


def weight_model_te(r: dict) -> float:
    """The study's weight model on the same dimensions and unique experts (for comparison)."""
    return r["dims"].te_weight(r["unique"])


@dataclass(frozen=True)
class Calibration:
    """The fit on every calibration row, the fits without each model, and the leave-one-model-
    out TE errors at batch 1 that size every prediction's own error."""
    params: StepParams
    lomo_fits: tuple[StepParams, ...]
    lomo: tuple[dict, ...]
    te_rmse: float


@lru_cache(maxsize=1)
def _calibration_rows() -> tuple[dict, ...]:
    """calibration_rows(), built once per process (read, never changed)."""
    return tuple(calibration_rows())


@lru_cache(maxsize=1)
def calibration() -> Calibration:
    """Computed once per process from the package's published tables (nothing else is read)."""
    rows = list(_calibration_rows())
    lomo = leave_one_model_out(rows, shape_rows())
    fits = {tuple(r[f"fit_{k}"] for k in FITTED) for r in lomo}
    return Calibration(fitted(), tuple(StepParams(**dict(zip(FITTED, f)))
                                       for f in sorted(fits)), tuple(lomo), lomo_rmse(lomo))


# What a fitted mechanism on its bound says is missing (the data want more, or less, than the
# mechanism's physical range allows): reported beside it, never accepted as a fit.
MISSING = {
    ("moe_cta_gbs", "high"): "the calibration wants the fused MoE kernel faster than 200 GB/s "
    "per CTA allows (its efficiency then sits at the public GEMM ceiling, moe_max_efficiency): "
    "the MoE share or the time ratios of the study's profiles are not explained by the "
    "experts' bytes at that efficiency. Public kernel tables bound the MoE kernel itself "
    "(moe_kernel_times.csv: the model's layer 0.86-1.17 of the public times), so the miss lies "
    "in what the share divides by or counts: the non-MoE kernels (the public batch-1 decode "
    "times, decode_batch1.csv, are 0.98-1.72 of the model's step and only bound it from above, "
    "so they cannot say) or which of the MoE block's 8 kernels per layer the study's profile "
    "counts as MoE (routing, alignment and fp8 quantisation are priced as MoE here)",
    ("node_us", "high"): "the steps are longer than every kernel's launch and ramp at 8 us "
    "explains: a fixed cost per step not in the kernel counts",
    ("verify_draft_model", "high"): "the draft-model rows cost more around a verification than "
    "a draft model's pass of up to 1.5 target decode steps and the engine's loop: the draft "
    "models' own config.json is not packaged, so their passes cannot be priced by their bytes; "
    "and vLLM's draft-model proposer is shown with disable_padded_drafter_batch (vllm-project/"
    "vllm pull request 24322), the path that prepares the drafter's unpadded inputs on the host "
    "once the accepted counts are known: a host cost per iteration the loop's engine-level "
    "measurements (EAGLE/MTP proposers) do not contain",
    ("catchup_passes", "high"): "verifications cost more than the engine's loop and one "
    "drafter pass over the verified tokens (priced by the drafter's bytes and kernels): the MTP "
    "rows' low TE is not explained by the MTP block's own bytes and kernels. Measured, not "
    "priced: speculative decoding downgrades vLLM's CUDA graphs from full to piecewise on "
    "attention backends whose full graphs support single-token decode only, so a "
    "verification launches its attention and Gated DeltaNet kernels outside the graph (28.6 "
    "ms per iteration against a 17.5 ms plain step on a 48-Gated-DeltaNet-layer hybrid, "
    "engine_overhead.csv role unpriced; the study's MTP rows Qwen3-Next-80B and Qwen3.5-35B "
    "are such hybrids), and the draft loop rebuilds attention metadata on the host between "
    "its graphed passes (vllm-project/vllm issues 49488, 31845)",
    ("sd_loop_us", "high"): "the SD loop costs more per iteration than the engine-level "
    "measurements bound",
}


def at_bound(p: StepParams) -> dict[str, str]:
    """The fitted mechanisms sitting on an end of their range ("low" or "high")."""
    out = {}
    for k in FITTED:
        m, v = MECHANISMS[k], getattr(p, k)
        tol = 1e-4 * (m.high - m.low)  # a fit stops near a bound, not on it (0.99999 of 1)
        if v >= m.high - tol:
            out[k] = "high"
        elif v <= m.low + tol:
            out[k] = "low"
    return out


def missing_effects(p: StepParams) -> dict[str, str]:
    """Each fitted mechanism on its bound, worded as the missing effect it is (MISSING; a lower
    bound: the data want less of it than physics allows)."""
    out = {}
    for k, side in at_bound(p).items():
        m = MECHANISMS[k]
        what = MISSING.get((k, side)) or ("the calibration wants less of it than its physical "
                                          "range allows" if side == "low" else
                                          "the calibration wants more of it than its physical "
                                          "range allows")
        out[k] = (f"{k} = {getattr(p, k):.4g} sits on its {side} bound ({m.low:g}-{m.high:g} "
                  f"{m.unit}): a missing effect, not accepted: {what}")
    return out


@lru_cache(maxsize=1)
def fitted() -> StepParams:
    """The parameters fitted on every calibration row (calibration().params), without the
    leave-one-model-out fits, which only a prediction's intervals need: a job that prices with
    the fit alone (costmodel, the report) pays one fit, not one per study model besides."""
    return fit(list(_calibration_rows()))


def lomo_rmse(lomo: list[dict]) -> float:
    """The model's own TE error on a configuration it has not seen: the root mean square of the
    leave-one-model-out errors of TE."""
    errs = [r["error"] for r in lomo if r["quantity"] == TE]
    return float(np.sqrt(np.mean(np.square(errs))))


# --- the speedup curves the study shows ---------------------------------------------------------

SHAPE = "speedup shape"
SHAPE_MARGIN = 0.05  # a curve's rise over its batch-1 value that counts (as `predict`'s default)


def draft_cost(dims: ModelDims, draft: ModelDims, hw: Hardware, batch: int, k_draft: int,
               p: StepParams, unique_target: float | None = None,
               context: float = CONTEXT) -> float:
    """c(B): K drafter passes over one target decode step, both priced by `step_times` (every
    layer, the LM head, the KV cache of `context` tokens per sequence, the kernels' launches, the
    fixed cost per pass). The drafter's passes run inside the engine's step, so they pay no host
    work per sequence of their own; the target's decode step does. The drafter's B tokens route
    independently; the target's unique experts are `unique_target`, else those of B independent
    tokens."""
    if min(dims.vocab_size, draft.vocab_size) < 1:
        raise InputError("the draft cost needs the vocabulary size (vocab_size) for the LM head")
    u = unique_decode(dims, batch) if unique_target is None else float(unique_target)
    passes = step_times(draft, hw, batch, 1, unique_decode(draft, batch), p, context)
    return (k_draft * (sum(passes.values()) - passes["host"])
            / step_time(dims, hw, batch, 1, u, p, context))


DENSE_DRAFTER = "dense drafter (one layer, the target's active FFN width)"
MOE_DRAFTER = "MoE drafter (one of the target's MoE layers, N = {n})"


def synthetic_drafters(target: ModelDims, moe_experts: int) -> dict[str, ModelDims]:
    """The one-layer drafters of the study's draft-cost figures (their drafters are not
    specified, so these are chosen), all on the target's LM head and one layer's KV cache: a
    dense one of the target's active width (Figure 11: an EAGLE head, the target's attention and
    its k experts' width as one FFN), and one of the target's MoE layers, k experts per token, with
    the target's own N (an MTP layer) and with `moe_experts` experts (Figure 12: N = 896, one
    Qwen3-30B layer extrapolated)."""
    moe = drafter_dims(target, "mtp", None)
    out = {DENSE_DRAFTER: drafter_dims(target, "eagle", None)}
    for n in dict.fromkeys((target.num_experts, int(moe_experts))):
        out[MOE_DRAFTER.format(n=n)] = ModelDims(**{**moe.to_dict(), "num_experts": n})
    return out


def draft_ratio_curve(dims: ModelDims, hw: Hardware, k_draft: int, batch_sizes, unique_target,
                      moe_experts: int, p: StepParams, context: float = CONTEXT) -> list[dict]:
    """c(B) of the synthetic drafters against the target's decode step at each batch size;
    unique_target(B): the target's unique experts per MoE layer at batch B. A drafter whose
    weights outweigh the target's (e.g. 896 Mixtral-width experts, 315 GB in one layer) is not a
    drafter: its ratio is NaN, the value kept as draft_cost_raw with the reason in `status`."""
    drafters = synthetic_drafters(dims, moe_experts)
    target_bytes = weight_bytes(dims)
    ridge = ridge_tokens(dims, hw)
    rows = []
    for b in batch_sizes:
        u = float(unique_target(b))
        t_target = step_time(dims, hw, b, 1, u, p, context)
        for name, d in drafters.items():
            raw = draft_cost(dims, d, hw, b, k_draft, p, u, context)
            heavy = weight_bytes(d) > target_bytes
            kind = ("dense" if name == DENSE_DRAFTER else "MoE, the target's N"
                    if d.num_experts == dims.num_experts else f"MoE, N = {d.num_experts}")
            rows.append({"batch": int(b), "target_experts": dims.num_experts,
                         "synthetic_drafter": name, "drafter_kind": kind,
                         "drafter_experts": d.num_experts if d.num_experts > 1 else 0,
                         "drafter_gib": weight_bytes(d) / 2**30,
                         "target_gib": target_bytes / 2**30,
                         "unique_drafter": unique_decode(d, b), "t_target_us": t_target * 1e6,
                         # tokens each weight of the drafter's FFN and of the target's experts
                         # sees in one pass, against the roofline's ridge
                         "drafter_tokens_per_weight": b * d.top_k / d.num_experts,
                         "target_tokens_per_expert": b * dims.top_k / dims.num_experts,
                         "ridge_tokens": ridge,
                         "draft_cost": float("nan") if heavy else raw, "draft_cost_raw": raw,
                         "status": OUTWEIGHS if heavy else "ok"})
    return rows


# Shapes the study states through its rule "fine-grained models (N/k >= 16) peak at batch 1"
# rather than a curve it shows for that model (Figure 1 shows four representative models, one
# concave and three peaking; speedup_shapes.csv's source names the rule for these): they are
# scored apart, as what the rule claims, not as a shape the study measured for the model.
RULE_MADE_SHAPES = frozenset({"GLM-4.7-Flash", "GPT-OSS-120B"})


def nk_rule_shape(dims: ModelDims) -> str:
    """The study's N/k rule as a baseline of the shapes: a fine-grained model (N/k >=
    FINE_GRAINED) peaks at low batch, a coarse-grained one is concave (speedup_shapes.csv: the
    one concave curve of Figure 1 is its one coarse-grained model)."""
    return "peak at low batch" if granularity(dims) == "fine" else "concave"


# The plainest baseline of the shapes: every curve peaks at low batch, whatever the model.
CONSTANT_SHAPE = "peak at low batch"


def shape_rows() -> list[dict]:
    """The speedup curves the study shows with their published shapes (K = 3, each model on its
    configuration: published/speedup_shapes.csv), each with what no parameter changes: its
    dimensions, its drafter's, and its unique experts at each batch size of the study's schedule
    (from its published overlaps, or its granularity's prior); `rule_made`: the shape comes from
    the study's N/k rule, not from a curve of that model (RULE_MADE_SHAPES)."""
    batches = sorted(int(b) for b in published.load("schedule")["batch_size"])
    out = []
    for r in published.load("speedup_shapes").itertuples():
        dims = study_model_dims(r.model, r.precision, int(r.tp))
        overlaps, source = study_overlaps(dims, CALIBRATION_K, r.model)
        ov = overlaps.mean(axis=0)
        out.append({"quantity": SHAPE, "model": r.model, "precision": r.precision,
                    "tp": int(r.tp), "gpu": r.gpu, "method": r.sd_method,
                    "published": r.shape, "dims": dims, "hw": study_hardware(r.gpu),
                    "draft": drafter_dims(dims, r.sd_method, None), "batches": batches,
                    "overlap_prior": source.startswith("prior"),
                    "rule_made": r.model in RULE_MADE_SHAPES,
                    "unique": [(unique_verify(dims, ov, b), unique_decode(dims, b))
                               for b in batches]})
    return out


def shape_curve(r: dict, p: StepParams) -> list[float]:
    """A shape row's speedup over its acceptance length (which scales a curve, not its shape)."""
    k = CALIBRATION_K
    return [costmodel.speedup(1.0, target_efficiency(r["dims"], r["hw"], k, b, uv, ud,
                                                     r["method"], p),
                              draft_cost(r["dims"], r["draft"], r["hw"], b, k, p))
            for b, (uv, ud) in zip(r["batches"], r["unique"])]


def predict_shape(r: dict, p: StepParams) -> str:
    return curve_shape(shape_curve(r, p), SHAPE_MARGIN)


# --- predicting a curve -------------------------------------------------------------------------

TAU_PRIOR = (2.0, 3.2)  # acceptance length of K = 3 windows when nothing is known (1 to 2.2 drafts)


def acceptance_length(alpha: float, k_draft: int) -> float:
    """Committed tokens per verification when each of K drafts is accepted with probability
    `alpha` until the first rejection: 1 + alpha + ... + alpha^K."""
    return float(sum(alpha ** i for i in range(k_draft + 1)))


def _alpha_for(tau: float, k_draft: int) -> float:
    from scipy.optimize import brentq

    return float(brentq(lambda a: acceptance_length(a, k_draft) - tau, 0.0, 1.0))


# The prior as a per-draft acceptance probability, so that every K gets it in one form: the range
# that gives TAU_PRIOR at K = 3 (0.544 to 0.853), never 1 (every draft accepted).
ALPHA_PRIOR = tuple(_alpha_for(t, 3) for t in TAU_PRIOR)


def tau_prior(k_draft: int) -> tuple[float, float]:
    """The acceptance length's prior range for K drafts: ALPHA_PRIOR's per-draft acceptance through
    acceptance_length, to 4 decimals (K = 1: 1.5437 to 1.8527; K = 3: TAU_PRIOR exactly; K = 5:
    2.1349 to 4.1797)."""
    if k_draft < 1:
        raise InputError(f"K must be >= 1 (got {k_draft})")
    return tuple(round(acceptance_length(a, k_draft), 4) for a in ALPHA_PRIOR)


SHAPES = ("peak at low batch", "concave", "rising", "flat within the margin", "undecided")
CLIPPED = "TE at a clip bound"  # a drawn curve whose shape the clip gives (shape_shares)
NO_SHAPE = "no shape (one batch size)"
NO_SHAPE_INFORMATION = "no shape (information at fewer than two batch sizes)"
DRAWS = 400


def curve_shape(speedups: list[float], margin: float) -> str:
    """The shape of one speedup curve (its values by ascending batch size): curve_shapes of it
    alone."""
    return curve_shapes(np.asarray([speedups], float), margin)[0]


def curve_shapes(curves: np.ndarray, margin: float) -> list[str]:
    """The shapes of curves [curve, batch] (batch sizes ascending) by the rule that names the
    measured ones (specmoe.measured.sweep.shape_labels) on exact values, so that a predicted and a
    measured shape side by side mean the same: "concave" where an interior batch size exceeds
    both ends by the margin (an interior peak at batch 2 is concave, as the study defines it, not
    a low-batch peak), "peak at low batch" where the smallest batch exceeds the largest by it and
    no larger batch exceeds the smallest by it, "rising" the mirror without a dip below the
    smallest first, "flat within the margin", else "undecided"."""
    from ..measured.sweep import shape_labels

    lm = np.log(np.asarray(curves, float))
    return _shape_names(shape_labels(lm, np.zeros_like(lm), np.full(lm.shape, np.inf), margin))


def _shape_names(labels) -> list[str]:
    from ..measured.sweep import UNDECIDED

    return ["undecided" if x == UNDECIDED else str(x) for x in labels]


EAGLE3_DRAFT_VOCAB = 32000  # the draft vocabulary of published EAGLE-3 heads (draft_vocab_size)


def drafter_dims(target: ModelDims, method: str, draft: ModelDims | None) -> ModelDims:
    """The drafter's dimensions: a separate draft model's own (`draft`, also an EAGLE head's own
    config.json), else one layer on the target's hidden size: an EAGLE/EAGLE-3 head (the
    target's attention and its k experts' width as one dense FFN, in the target's checkpoint
    dtype: vLLM gives an EAGLE head its own quantisation, none for a bf16 head, whatever the
    target's, get_draft_quant_config; EAGLE-3's LM head has `draft_vocab_size` rows, 32,000
    where its config is not given, and its fc layer fuses three hidden states) or an MTP layer
    (one of the target's MoE layers, on the target's LM head, in the target's format: vLLM's MTP
    takes the target's quantisation).
    One layer of softmax attention: its KV cache and attention FLOPs are the mean of the
    target's attention layers (a sliding window or a recurrent state is not the drafter's)."""
    family = FAMILIES.get(method)
    if family is None:
        raise InputError(f"unknown speculative method '{method}' (one of: "
                         f"{', '.join(sorted(set(FAMILIES)))})")
    if draft is not None:
        return draft
    if family == "draft_model":
        raise InputError("a draft model's cost needs its config.json (--draft-config) or "
                         "--draft-cost")
    attn_layers = target.attention_layers or target.num_layers
    one = {"num_layers": 1, "num_moe_layers": 1, "dense_layer_params": 0.0,
           "kv_per_token": (target.kv_per_token + target.kv_sliding_per_token) / attn_layers,
           "kv_sliding_per_token": 0.0, "sliding_window": 0, "state_per_seq": 0.0,
           "attn_flops_per_ctx": (target.attn_flops_per_ctx + target.attn_flops_sliding_per_ctx)
           / attn_layers, "attn_flops_sliding_per_ctx": 0.0, "attention_layers": 1,
           "mla_layers": 0, "dsa_layers": 0}
    if family == "mtp":  # one of the target's layers: its attention kind too
        return ModelDims(**{**target.to_dict(), **one, "mla_layers": int(target.mla_layers > 0),
                            "dsa_layers": int(target.dsa_layers > 0)})
    if method in ("eagle3", "EAGLE-3"):
        one.update(vocab_size=min(target.vocab_size, EAGLE3_DRAFT_VOCAB),
                   attention_params=target.attention_params + 3 * target.hidden ** 2)
    return ModelDims(**{**target.to_dict(), **one, "num_experts": 1, "top_k": 1,
                        "dtype": target.base_dtype, "dense_dtype": target.base_dtype,
                        "shared_intermediate": 0,
                        "expert_intermediate": target.top_k * target.expert_intermediate
                        + target.shared_intermediate})


def check_inputs(k_draft: int, overlaps, tau: tuple[float, float]) -> np.ndarray:
    """Overlap curves of K steps, each within [0, 1], and an acceptance length within [1, K+1]."""
    overlaps = np.atleast_2d(np.asarray(overlaps, float))
    if overlaps.shape[1] != k_draft:
        raise InputError(f"{overlaps.shape[1]} overlaps for K = {k_draft}: give ov(d) for "
                         f"d = 1..{k_draft}")
    if np.any(overlaps < 0) or np.any(overlaps > 1):
        raise InputError("overlaps lie within [0, 1]")
    if not 1 <= tau[0] <= tau[1] <= k_draft + 1:
        raise InputError(f"acceptance length {tau} outside [1, K+1 = {k_draft + 1}]")
    return overlaps


# The prediction's own error beyond the parameters' (docs/method.md, "Step model"): TE's error at
# batch 1 is the leave-one-model-out RMS error; it grows by BATCH_GROWTH per doubling of the
# batch (the study publishes no TE beyond batch 1 to measure this: assumed) and by DISTANCE_STEP
# for each way the configuration lies outside the calibration (calibration_distance); the
# speedup carries a multiplicative engine term (ENGINE_LOG_SD: vLLM releases, other engines;
# assumed), never past tau. The public measurements (bench/public_coverage.py) are
# scored on these intervals and size nothing: four rows of three sources (docs/method.md), so
# predict keeps the assumed values.
BATCH_GROWTH = 0.25
DISTANCE_STEP = 0.5
ENGINE_LOG_SD = {"vllm": 0.05, "sglang": 0.15, "trtllm": 0.15, "other": 0.2}
if set(ENGINE_LOG_SD) != set(steptables.ENGINES):  # one factor per engine steptables knows
    raise ValueError(f"ENGINE_LOG_SD's engines {sorted(ENGINE_LOG_SD)} are not steptables."
                     f"ENGINES {sorted(steptables.ENGINES)}")
CALIBRATION_ENGINE = "vllm"  # the engine the study served every calibration row with
TE_FLOOR = 1e-3  # a drawn TE is clipped to [TE_FLOOR, 1], its physical range
TAIL = 0.025  # each tail of a 95% interval


def draw_around(rng, value: float, low: float, high: float) -> float:
    """A draw within [low, high] whose median is `value`: uniform over [low, value] or over
    [value, high], each with probability 1/2. The fit and the leave-one-model-out errors hold an
    unfitted term at its value; a plain uniform over a lopsided range would centre the draws
    elsewhere (attn_seq_gbs: 1143 GB/s, the median of a uniform draw 3235) and move every
    prediction off the calibrated model."""
    lo, hi = (low, value) if rng.uniform() < 0.5 else (value, high)
    return float(rng.uniform(lo, hi))


def draw_params(rng, fits: tuple[StepParams, ...]) -> StepParams:
    """One draw of every parameter: a leave-one-model-out fit (the fitted mechanisms' own
    uncertainty) and each unfitted mechanism within its physical range, its median the value
    the fit used (draw_around)."""
    base = fits[int(rng.integers(len(fits)))]
    free = {k: draw_around(rng, m.value, m.low, m.high)
            for k, m in MECHANISMS.items() if not m.fitted}
    return StepParams(**{**base.as_dict(), **free})


def te_sigma(te_error: float, batch: int, distance: float) -> float:
    return te_error * (1 + BATCH_GROWTH * np.log2(batch)) * (1 + DISTANCE_STEP * distance)


def predict(dims: ModelDims, hw: Hardware, k_draft: int, method: str, batch_sizes: list[int],
            params: StepParams, te_error: float, overlaps: np.ndarray, tau: tuple[float, float],
            draft: ModelDims | None = None, known_cost: float | None = None,
            margin: float = SHAPE_MARGIN, seed: int = 0, *,
            fits: tuple[StepParams, ...] | None = None, distance: float = 0.0,
            engine: str = "vllm", draws: int = DRAWS, extra_log_sd: float = 0.0,
            context: float = CONTEXT) -> dict:
    """TE and speedup at each batch size with 95% intervals over everything uncertain.

    Each of DRAWS draws takes: the parameters (draw_params over `fits`, the leave-one-model-out
    fits, each unfitted mechanism and the engine's SD loop drawn around its value: draw_around;
    `params` alone where none are given, the unfitted mechanisms then at their values); an
    overlap curve (rows of `overlaps`: one a known curve, several a prior, each draw mixing two);
    the acceptance length within `tau`; the model's TE error, normal with te_sigma (growing with
    the batch and the `distance` from the calibration); and the engine's factor on the speedup
    (log-normal, ENGINE_LOG_SD; `extra_log_sd` adds in quadrature an error sized outside the step
    model: bench/public_coverage.py's leave-one-source-out analysis, never predict's default),
    at most tau: an SD iteration costs at least the one decode step its verification does.
    known_cost: a known c (else c(B) from the drafter's step time); the speedup is then at most
    tau / (1 + c), the iteration costing at least its known drafts and one decode step. Each
    draw gives a whole curve, the shape read from the draws' ratios between batch sizes
    (draw_shape); `draws` of them (DRAWS unless a quick check asks for fewer).
    `context`: KV tokens per sequence that attention reads (the calibration's: CONTEXT)."""
    overlaps = check_inputs(k_draft, overlaps, tau)
    batches = sorted({int(b) for b in batch_sizes})
    if batches[0] < 1:
        raise InputError(f"batch sizes must be >= 1 (got {batches[0]})")
    if known_cost is not None and not known_cost >= 0:
        raise InputError(f"a draft cost is >= 0 (got {known_cost})")
    if engine not in steptables.ENGINES:
        raise InputError(f"unknown engine {engine!r} (one of {', '.join(steptables.ENGINES)})")
    d_dims = None if known_cost is not None else drafter_dims(dims, method, draft)
    rng = np.random.default_rng(seed)
    te = np.empty((draws, len(batches)))
    spd, cost = np.empty_like(te), np.empty_like(te)
    uniq: dict[tuple, tuple[float, float]] = {}
    loop = steptables.engine_overheads()[engine]
    floor = 1.0 + (known_cost or 0.0)  # an SD iteration's least cost in decode steps
    for i in range(draws):
        p = draw_params(rng, fits) if fits else params
        # the engine's own SD loop: its measured range around its value (vLLM's is the
        # calibration's)
        p = replace(p, sd_loop_us=draw_around(rng, loop.value, loop.low, loop.high) if fits
                    else loop.value)
        a, b = rng.integers(len(overlaps), size=2)
        w = rng.uniform()
        ov = np.round(w * overlaps[a] + (1 - w) * overlaps[b], 3)
        t = rng.uniform(*tau)
        z, eng = rng.normal(), np.exp(rng.normal(0.0, np.hypot(ENGINE_LOG_SD[engine],
                                                                 extra_log_sd)))
        for j, bs in enumerate(batches):
            key = (tuple(ov), bs)
            if key not in uniq:
                uniq[key] = (unique_verify(dims, ov, bs), unique_decode(dims, bs))
            model = target_efficiency(dims, hw, k_draft, bs, *uniq[key], method, p, draft,
                                      context)
            te[i, j] = min(max(model + z * te_sigma(te_error, bs, distance), TE_FLOOR), 1.0)
            cost[i, j] = (known_cost if known_cost is not None else
                          draft_cost(dims, d_dims, hw, bs, k_draft, p, context=context))
            # the engine's factor scales the SD iteration's cost over a decode step (its drafts
            # and its verification alike), never below its floor: however an engine runs it,
            # verifying K + 1 tokens costs at least one decode step (TE <= 1) and drafting costs
            # no less than nothing, so the speedup is at most tau <= K + 1; a draft cost given
            # (known_cost) is the drafts' measured time, not the model's price the factor may
            # correct, so the iteration costs at least 1 + c decode steps
            spd[i, j] = min(eng * costmodel.speedup(t, te[i, j], cost[i, j]), t / floor)
    res = summarise(batches, te, spd, cost, margin)
    if known_cost is not None:  # given, not drawn: no interval
        res["draft_cost_low"] = res["draft_cost_high"] = None
    return res


def draw_shape(spd: np.ndarray, te: np.ndarray, margin: float, level: float = 1 - 2 * TAIL
               ) -> str:
    """The shape of drawn speedup curves [draw, batch] (batch sizes ascending, at least two) as
    far as their intervals decide it, by the rule that names the measured shapes
    (specmoe.measured.sweep: pair_decisions and shapes_from_pairs) on each pair of batch sizes'
    interval of log(s_i / s_j) over the draws: its point the draws' median, its ends their
    percentiles at that rule's Bonferroni-adjusted level (sweep.pair_tail). A share of the draws
    decides nothing (80% of them 'flat' named a shape whose pair intervals reached past the
    margin). A draw whose TE (`te`, [draw, batch]) sits at a clip bound says nothing beyond it, as
    the speedup's end drawn from it reads "no information above" (TE at 1) or "below" (TE at
    TE_FLOOR): where TE_i is at 1 or TE_j at the floor, log(s_i / s_j) could lie higher than
    drawn, and the draw stands at +inf for the interval's upper end; where TE_i is at the floor
    or TE_j at 1, at -inf for its lower end. A pair is decided only where it holds whatever lies
    beyond the clips (draws clipped at 1 at both batch sizes agree by the clip alone: they made
    'flat')."""
    from ..measured.sweep import pair_decisions, pair_tail, shapes_from_pairs

    ls = np.log(np.asarray(spd, float))
    high, low = np.asarray(te) >= 1.0, np.asarray(te) <= TE_FLOOR
    diff = ls[:, :, None] - ls[:, None, :]                          # [draw, i, j]: log(s_i / s_j)
    up = high[:, :, None] | low[:, None, :]     # log(s_i / s_j) could lie higher than drawn
    down = low[:, :, None] | high[:, None, :]   # or lower
    tail = 100 * pair_tail(ls.shape[1], level)
    with np.errstate(invalid="ignore"):  # an end interpolated between a clipped draw's inf and
        # a finite one is NaN: it lies past every finite draw, at that inf
        lo = np.percentile(np.where(down, -np.inf, diff), tail, axis=0)
        hi = np.percentile(np.where(up, np.inf, diff), 100 - tail, axis=0)
    lo, hi = np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi)
    point = np.median(diff, axis=0)
    pairs = pair_decisions(point[None], lo[None], hi[None], np.ones((1, *point.shape), bool),
                           margin)
    return _shape_names(shapes_from_pairs(*pairs, margin))[0]


def summarise(batches: list[int], te: np.ndarray, spd: np.ndarray, cost: np.ndarray,
              margin: float) -> dict:
    """Medians and 95% intervals per batch size (TE, speedup and the draft cost, drawn with the
    parameters); each end of TE's interval held at its clip
    bound (te_low_clipped at TE_FLOOR, te_high_clipped at 1: at least a tail's share of the draws
    there); where the model says nothing (both ends clipped: TE's interval spans its whole
    physical range, "no information"); the shape over the batch sizes with information as their
    pair intervals decide it (draw_shape; fewer than two have none: NO_SHAPE), beside each exact
    shape's share of the drawn curves, those with a TE at a clip bound there counted as CLIPPED
    (`shape_shares`; `shape_probability` the stated shape's); where SD pays, per
    batch size "yes" (lower bound above 1), "no" (upper bound at most 1: a speedup capped at
    tau = 1 can equal 1, never exceed it) or "undecided"; and the verdict in words."""
    te_lo, te_hi = np.percentile(te, [100 * TAIL, 100 * (1 - TAIL)], axis=0)
    # An end of TE's interval is clipped where its tail holds draws clipped to that bound of
    # [TE_FLOOR, 1]: the bound is the clip's, not the model's, and says nothing beyond it. Counted,
    # not read off the interpolated percentiles, which fall a hair inside a bound that holds just
    # the tail's share of the draws. Both ends clipped: the interval spans TE's whole physical
    # range, no information at that batch size
    low_clipped = [bool(f >= TAIL) for f in (te <= TE_FLOOR).mean(axis=0)]
    high_clipped = [bool(o >= TAIL) for o in (te >= 1.0).mean(axis=0)]
    blind = [lo_ and hi_ for lo_, hi_ in zip(low_clipped, high_clipped)]
    keep = [j for j, n in enumerate(blind) if not n]
    counts = {}
    if len(keep) < 2:  # one point has no shape
        shape = NO_SHAPE if len(batches) < 2 else NO_SHAPE_INFORMATION
    else:
        shape = draw_shape(spd[:, keep], te[:, keep], margin)
        # the drawn curves' shares of each exact shape, as information; a draw with a TE at a
        # clip bound has the shape the clip gives it and counts toward none (CLIPPED)
        clipped = ((te[:, keep] <= TE_FLOOR) | (te[:, keep] >= 1.0)).any(axis=1)
        shapes = np.where(clipped, CLIPPED, np.array(curve_shapes(spd[:, keep], margin), object))
        counts = {s: float(np.mean(shapes == s)) for s in (*SHAPES, CLIPPED)
                  if (shapes == s).any()}
    lo, hi = np.percentile(spd, [100 * TAIL, 100 * (1 - TAIL)], axis=0)
    cost_lo, cost_hi = np.percentile(cost, [100 * TAIL, 100 * (1 - TAIL)], axis=0)
    pays = ["yes" if x > 1 else "no" if h <= 1 else "undecided" for x, h in zip(lo, hi)]
    median = np.median(spd, axis=0)
    p_above = (spd > 1).mean(axis=0)
    return {"batch_sizes": batches,
            "te": np.median(te, axis=0).tolist(), "te_low": te_lo.tolist(),
            "te_high": te_hi.tolist(), "te_low_clipped": low_clipped,
            "te_high_clipped": high_clipped, "no_information": blind,
            "speedup": median.tolist(), "speedup_low": lo.tolist(),
            "speedup_high": hi.tolist(), "p_pays": p_above.tolist(),
            "draft_cost": np.median(cost, axis=0).tolist(),
            "draft_cost_low": cost_lo.tolist(), "draft_cost_high": cost_hi.tolist(),
            "shape": shape,
            "shape_probability": counts.get(shape) if shape in SHAPES[:-1] else None,
            "shape_shares": counts,
            "shape_batch_sizes": [batches[j] for j in keep], "pays": pays,
            "verdict": verdict(batches, pays, p_above.tolist(), blind)}


def _batches(bs: list[int]) -> str:
    return ", ".join(map(str, bs))


def verdict(batches: list[int], pays: list[str], p_above: list[float],
            no_information: list[bool] | None = None) -> str:
    """Where SD pays, in words, over the batch sizes with information: what the 95% intervals
    decide, then where the speedup crosses 1, each crossing between two batch sizes whose
    intervals decide opposite sides of 1 (pays "yes" on one, "no" on the other, whatever lies
    undecided between them), with the probability (share of draws, P(SD pays)) that SD pays on
    either side; where no two batch sizes are so decided no crossing and no side is named, only
    P(SD pays) at each batch size (a side read from a share of the draws named crossings between
    batch sizes whose intervals both included 1); last the batch sizes without information."""
    blind = list(no_information or [False] * len(batches))
    keep = [i for i, n in enumerate(blind) if not n]
    none = ([f"no information at batch {_batches([b for b, n in zip(batches, blind) if n])} "
             "(TE's 95% interval spans its whole range)"] if any(blind) else [])
    if not keep:
        return ("no information at any batch size shown (TE's 95% interval spans its whole range "
                "at each)")
    shown = "shown" if not none else "with information"
    batches = [batches[i] for i in keep]
    pays, p_above = ([x[i] for i in keep] for x in (pays, p_above))
    if all(x == "yes" for x in pays):
        decided = f"SD pays at every batch size {shown}"
    elif all(x == "no" for x in pays):
        decided = f"SD does not pay at any batch size {shown}"
    else:
        no = [i for i, x in enumerate(pays) if x == "no"]
        if no and all(x == "no" for x in pays[no[0]:]) and no[0] > 0 and \
                all(x == "yes" for x in pays[:no[0]]):
            decided = f"SD stops paying above batch {batches[no[0] - 1]}"
        else:
            by = {w: [b for b, x in zip(batches, pays) if x == w] for w in ("yes", "no",
                                                                             "undecided")}
            decided = "; ".join(
                [f"SD pays at batch {_batches(by['yes'])}"] * bool(by["yes"])
                + [f"does not pay at batch {_batches(by['no'])}"] * bool(by["no"])
                + [f"undecided at batch {_batches(by['undecided'])} (the 95% interval "
                   "includes 1)"] * bool(by["undecided"]))
    p = lambda i: f"P(SD pays) {p_above[i]:.2f} at batch {batches[i]}"  # noqa: E731
    # the side of 1 each batch size's interval decides (None: undecided); a crossing lies between
    # two batch sizes decided on opposite sides, whatever lies undecided between them
    side = [True if x == "yes" else False if x == "no" else None for x in pays]
    sided = [j for j, x in enumerate(side) if x is not None]
    crossings = [(i, j) for i, j in zip(sided, sided[1:]) if side[i] != side[j]]
    if crossings:
        where = "the speedup crosses 1 " + ", and again ".join(
            f"between batch {batches[i]} and {batches[j]} ({p(i)}, {p(j)})"
            for i, j in crossings)
    else:  # the intervals decide no crossing: the draws' shares say the rest, without a side
        listed = ", ".join(map(p, range(len(batches))))
        alike = len(sided) == len(side)  # every batch size decided on one side: no crossing
        where = listed if len(batches) == 1 or alike else f"no crossing of 1 is decided ({listed})"
    return "; ".join([decided, where, *none])


def lomo_coverage(draws: int = 200, seed: int = 0) -> list[dict]:
    """Leave-one-model-out 95% intervals of TE at batch 1 for the study's Table 10: each row's
    interval from the fit without its model (unfitted mechanisms drawn within their ranges
    around their values: draw_params) and a normal error of the other models' leave-one-model-out
    RMS error; whether the published TE falls inside, and the half-width over the prediction."""
    cal = calibration()
    rows = calibration_rows()
    rng = np.random.default_rng(seed)
    out = []
    for r, lo in zip(rows, cal.lomo):
        if not r["goal"]:
            continue
        fit_p = StepParams(**{k: lo[f"fit_{k}"] for k in FITTED})
        sigma = float(np.sqrt(np.mean([x["error"] ** 2 for x in cal.lomo
                                       if x["quantity"] == TE and x["model"] != r["model"]])))
        te = np.array([predict_row(r, draw_params(rng, (fit_p,))) for _ in range(draws)])
        te = np.clip(te + rng.normal(0, sigma, draws), TE_FLOOR, 1.0)
        low, mid, high = np.percentile(te, [2.5, 50, 97.5])
        out.append({"model": r["model"], "precision": r["precision"], "tp": r["tp"],
                    "method": r["method"], "published": r["published"], "te": float(mid),
                    "te_low": float(low), "te_high": float(high),
                    "inside": bool(low <= r["published"] <= high),
                    "half_width_rel": float((high - low) / 2 / mid)})
    return out


# --- the draft ratio's physics (the study's Figures 11 and 12) -------------------------------

OUTWEIGHS = "drafter outweighs the target: not a drafter"


def weight_bytes(dims: ModelDims) -> float:
    """Bytes of a model's weights per GPU as the step model reads them: every MoE layer's
    attention, shared experts and all N experts, the expert-free layers and the LM head."""
    layers = dims.num_moe_layers * (dims.c_dense + dims.c_dense_layers
                                    + dims.num_experts * dims.c_expert)
    head = dims.vocab_size * dims.hidden * dtype_bytes(dims.base_dtype) / dims.tp
    return float(layers + head)


def ridge_tokens(dims: ModelDims, hw: Hardware) -> float:
    """The roofline's ridge in tokens per weight: a weight read once serves `tokens` tokens at 2
    FLOPs each, so a GEMM turns compute-bound at peak FLOP/s / bandwidth x bytes per weight / 2
    tokens (about 295 on an H100 in bf16). A dense layer sees every token of the batch; an
    expert of N, B k / N of them."""
    return hw.flops(dims.dtype) / hw.hbm_bandwidth * dtype_bytes(dims.dtype) / 2
