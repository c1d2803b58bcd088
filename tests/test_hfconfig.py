"""Every study model's cost-model dimensions from its own config.json (fixtures in each model's real
shape under fixtures/hf_configs/), checked against hand-computed bytes."""

import json
import re
from pathlib import Path

import pytest

from specmoe.cost import costmodel as cm
from specmoe.errors import InputError
from specmoe.cost.hfconfig import dims_from_config, load_config

F = Path(__file__).parents[1] / "src" / "specmoe" / "data" / "hf_configs"
MIB = cm.MIB


def dims(name, **kw):
    return dims_from_config(F / f"{name}.json", **kw)


def test_fp8_block_scaled_qwen3_30b_matches_the_published_weight_table():
    d = dims("Qwen3-30B-A3B-FP8")
    assert (d.dtype, d.dense_dtype, d.num_experts, d.top_k) == ("fp8-b128", "fp8-b128", 128, 8)
    per_weight = 1 + 4 / 128**2  # one fp32 scale per 128x128 block
    assert d.c_expert == pytest.approx(3 * 2048 * 768 * per_weight)
    assert round(d.c_expert / MIB, 1) == 4.5 and round(d.c_dense / MIB, 1) == 18.0
    assert round(d.moe_weight_share, 3) == 0.667
    bf16 = dims("Qwen3-30B-A3B-FP8", dtype="bf16", tp=2)  # the published bf16 TP2 row
    assert (bf16.c_expert / MIB, bf16.c_dense / MIB) == (4.5, 18.0)


def test_mixtral_and_qwen3_235b_shares():
    assert round(dims("Mixtral-8x7B-Instruct-v0.1", tp=2).c_expert / MIB, 1) == 168.0
    assert round(dims("Mixtral-8x7B-Instruct-v0.1", tp=2).c_dense / MIB, 1) == 40.0
    assert round(dims("Qwen3-235B-A22B-Instruct-2507-FP8", tp=4).moe_weight_share, 3) == 0.679
    assert dims("Qwen3-235B-A22B-Instruct-2507").dtype == "bf16"


def test_mxfp4_experts_keep_bf16_attention_gpt_oss():
    d = dims("gpt-oss-120b", tp=4)
    assert (d.dtype, d.dense_dtype, d.num_experts, d.top_k, d.num_layers) == (
        "mxfp4", "bf16", 128, 4, 36)
    assert d.c_expert == pytest.approx(3 * 2880 * 2880 * (4 + 8 / 32) / 8 / 4)
    attn = 2880 * 64 * 64 * 2 + 2 * 2880 * 8 * 64  # q, o and k, v
    assert d.c_dense == pytest.approx(attn * 2 / 4)


def test_int4_group_scaled_experts_mla_and_a_dense_first_layer_kimi():
    d = dims("Kimi-K2.5")  # text_config of a multimodal wrapper
    assert (d.dtype, d.dense_dtype) == ("int4-g32", "bf16")
    assert (d.num_experts, d.top_k, d.num_layers, d.num_moe_layers) == (384, 8, 61, 60)
    assert d.c_expert == pytest.approx(3 * 7168 * 2048 * (4 + 16 / 32) / 8)
    q = 7168 * 1536 + 1536 * 64 * (128 + 64)
    kv = 7168 * (512 + 64) + 512 * 64 * (128 + 128)
    attn = q + kv + 64 * 128 * 7168
    assert d.attention_params == attn
    assert d.shared_intermediate == 2048  # one shared expert of the routed width
    assert d.dense_layer_params == attn + 3 * 7168 * 18432  # layer 0: attention + dense FFN
    assert d.c_dense_layers == pytest.approx(d.dense_layer_params * 2 / 60)


def test_glm_flash_mla_shared_expert_and_dense_layer():
    d = dims("GLM-4.7-Flash")
    assert (d.num_layers, d.num_moe_layers, d.shared_intermediate) == (47, 46, 1536)
    q = 2048 * 768 + 768 * 20 * 256
    kv = 2048 * (512 + 64) + 512 * 20 * (192 + 256)
    assert d.attention_params == q + kv + 20 * 256 * 2048


def test_hybrid_linear_attention_layers_counted_as_what_they_are():
    nxt = dims("Qwen3-Next-80B-A3B-Instruct")  # every 4th layer full attention
    full = 2048 * 16 * 256 * 2 + 2 * 2048 * 2 * 256 + 16 * 256 * 2048  # gated q, k, v, o
    linear = 2048 * (2 * 16 * 128 + 2 * 32 * 128) + 2048 * 64 + (2 * 16 * 128 + 32 * 128) * 4 \
        + 32 * 128 * 2048
    assert nxt.attention_params == pytest.approx((12 * full + 36 * linear) / 48)
    assert (nxt.num_experts, nxt.top_k, nxt.shared_intermediate) == (512, 10, 512)
    q35 = dims("Qwen3.5-35B-A3B")  # layer_types list inside text_config
    assert q35.attention_params == pytest.approx((10 * full + 30 * linear) / 40)
    assert (q35.num_experts, q35.top_k, q35.num_layers) == (256, 8, 40)


def test_shared_expert_qwen2():
    d = dims("Qwen2-57B-A14B-Instruct", tp=2)
    assert d.shared_intermediate == 20480
    assert d.c_dense == pytest.approx(
        (cm.ModelDims.gqa_attention_params(3584, 28, 4, 128) + 3 * 3584 * 20480) * 2 / 2)


@pytest.mark.parametrize("change,msg", [
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "unknown quantization method"),
    ({"torch_dtype": "float8_e5m2"}, "unknown torch_dtype"),
    ({"torch_dtype": None, "quantization_config": None}, "neither dtype nor torch_dtype"),
    ({"num_experts": None}, "lacks any of num_experts"),
])
def test_unknown_formats_are_errors_not_bf16(change, msg):
    cfg, _ = load_config(F / "Qwen3-30B-A3B-FP8.json")
    cfg = {k: v for k, v in {**cfg, **change}.items() if v is not None}
    with pytest.raises(InputError, match=msg):
        dims_from_config(cfg)


def test_hardware_without_the_compute_dtype_is_an_error():
    hw = cm.Hardware.from_config("X", {"hbm_bandwidth_gbs": 1000, "peak_tflops": {"bf16": 100}})
    assert hw.flops("mxfp4") == 100e12 and hw.flops("int4-g32") == 100e12
    with pytest.raises(InputError, match="no peak FLOP/s for fp8"):
        hw.flops("fp8-b128")


FIX = Path(__file__).parent / "fixtures" / "hf_configs"


@pytest.mark.parametrize("path", sorted(FIX.glob("*.json")) + sorted(F.glob("*.json")),
                         ids=lambda p: p.stem)
def test_every_published_config_reads(path):
    """Each MoE family vLLM serves, its config.json as published (tests/fixtures/hf_configs/
    SOURCE.md says where each was read): dimensions in range, experts in some layer."""
    d = dims_from_config(path)
    assert d.num_moe_layers >= 1 and d.top_k <= d.num_experts and d.vocab_size > 0
    assert d.base_dtype in cm.FLOAT_DTYPES


def test_dtype_or_torch_dtype_else_the_quantisation_config():
    assert dims("GLM-4.7-Flash").base_dtype == "bf16"  # recent transformers: "dtype"
    g = dims("gpt-oss-120b", tp=4)  # no dtype at all: mxfp4 leaves the rest in bf16
    assert (g.dtype, g.dense_dtype, g.base_dtype) == ("mxfp4", "bf16", "bf16")


def test_online_fp8_keeps_the_lm_head_and_kv_cache_in_the_checkpoint_dtype():
    d = dims("Qwen3-30B-A3B-FP8", dtype="fp8")
    assert (d.dtype, d.base_dtype) == ("fp8", "bf16")
    assert d.kv_bytes(600) == 600 * 48 * 2 * 4 * 128 * 2  # bf16, one GPU


def test_kv_heads_fewer_than_tp_are_replicated_qwen3_235b():
    d8 = dims("Qwen3-235B-A22B-Instruct-2507", tp=8)  # 4 KV heads: each GPU holds one
    d4 = dims("Qwen3-235B-A22B-Instruct-2507", tp=4)
    assert (d8.kv_split, d4.kv_split) == (4, 4) and d8.kv_bytes(600) == d4.kv_bytes(600)


def test_mla_latent_cache_is_whole_on_every_gpu_glm():
    d1, d2 = dims("GLM-4.7-Flash"), dims("GLM-4.7-Flash", tp=2)
    assert d2.kv_split == 1 and d2.kv_bytes(600) == d1.kv_bytes(600)
    assert d1.kv_per_token == 47 * (512 + 64)


def test_gated_deltanet_state_is_read_and_written_qwen3_next():
    d = dims("Qwen3-Next-80B-A3B-Instruct")
    state = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3  # per linear layer, elements
    assert d.state_per_seq == 36 * state
    assert 39e6 < d.state_bytes < 40e6  # 37.7 MB of state and the conv windows, bf16
    assert d.kv_per_token == 12 * 2 * 2 * 256  # only the 12 full-attention layers keep KV


def test_sliding_window_layers_priced_at_their_window_gpt_oss():
    d = dims("gpt-oss-120b")
    per_layer = 2 * 8 * 64
    assert (d.kv_per_token, d.kv_sliding_per_token, d.sliding_window) == (
        18 * per_layer, 18 * per_layer, 128)
    assert d.kv_bytes(600) == (600 + 128) * 18 * per_layer * 2


def test_llama4_interleaved_moe_layers_and_shared_expert():
    d = dims_from_config(FIX / "Llama-4-Maverick-17B-128E-Instruct.json")
    assert (d.num_layers, d.num_moe_layers, d.num_experts, d.top_k) == (48, 24, 128, 1)
    assert d.shared_intermediate == 8192 and d.expert_intermediate == 8192
    attn = 5120 * 40 * 128 * 2 + 2 * 5120 * 8 * 128
    assert d.dense_layer_params == 24 * (attn + 3 * 5120 * 16384)


def test_dbrx_nested_config():
    d = dims_from_config(FIX / "dbrx-instruct.json", tp=4)
    assert (d.hidden, d.num_layers, d.num_experts, d.top_k, d.expert_intermediate) == (
        6144, 40, 16, 4, 10752)
    assert d.kv_split == 4


@pytest.mark.parametrize("name, width", [("Qwen3-Next-80B-A3B-Instruct", 256),
                                         ("Qwen3.5-35B-A3B", 256), ("gpt-oss-120b", 64)])
def test_a_config_without_head_dim_has_its_model_types_heads(name, width):
    """Without head_dim, transformers' config classes of Qwen3-Next, Qwen3.5 and gpt-oss give
    heads of their own width (256, 256, 64; vLLM reads those classes), not hidden_size /
    num_attention_heads (2048 / 16 = 128, 2880 / 64 = 45): the dimensions of the file that
    states it, never heads priced at half or two thirds their width."""
    cfg, _ = load_config(F / f"{name}.json")
    assert cfg["head_dim"] == width != cfg["hidden_size"] // cfg["num_attention_heads"]
    without = {k: v for k, v in cfg.items() if k != "head_dim"}
    assert dims_from_config(without) == dims_from_config(cfg)


def test_heads_that_do_not_divide_the_hidden_size_need_head_dim():
    """2048 / 12 heads was read as heads 170 wide; refused unless head_dim says what they are
    (then read as given), where the model type has no width of its own (Qwen3-Next: 256), or
    for MLA (GLM-4.7-Flash's 20 heads of 2048, whose width is the rope and nope parts')."""
    from specmoe.cost.hfconfig import head_dim

    cfg = json.loads((FIX / "Qwen1.5-MoE-A2.7B.json").read_text())
    twelve = {**cfg, "num_attention_heads": 12, "num_key_value_heads": 12}
    with pytest.raises(InputError, match=r"^config.json: hidden_size 2048 is not a multiple of "
                                         r"num_attention_heads 12: head_dim must then be given"):
        dims_from_config(twelve)
    given = dims_from_config({**twelve, "head_dim": 128})
    assert given.attention_params == cm.ModelDims.gqa_attention_params(2048, 12, 12, 128)
    nxt, _ = load_config(F / "Qwen3-Next-80B-A3B-Instruct.json")
    nxt = {k: v for k, v in nxt.items() if k != "head_dim"}
    assert head_dim({**nxt, "num_attention_heads": 24}) == 256
    glm, _ = load_config(F / "GLM-4.7-Flash.json")
    assert "head_dim" not in glm and glm["hidden_size"] % glm["num_attention_heads"]
    assert head_dim(glm) == 2048 // 20


def test_the_head_dim_defaults_are_transformers():
    """HEAD_DIM_DEFAULT is what transformers' config class of each model type reads where a
    config.json has no head_dim; every other type this reads (but the MLA ones, whose head_dim
    is their rope part's, not read here) has no width of its own: hidden_size /
    num_attention_heads (None or absent: the modelling code's getattr falls back to it)."""
    transformers = pytest.importorskip("transformers")
    from specmoe.cost.hfconfig import HEAD_DIM_DEFAULT, KV_HEADS_DEFAULT, MODELLED_TYPES

    checked = set()
    for model_type in sorted(MODELLED_TYPES | set(KV_HEADS_DEFAULT) | set(HEAD_DIM_DEFAULT)):
        if model_type not in transformers.CONFIG_MAPPING:
            continue  # remote code (Bailing-MoE, DeepSeek-MoE): vLLM's head_dim or the quotient
        kw = {"n_heads": 32, "d_model": 3840} if model_type == "dbrx" else \
            {"num_attention_heads": 32, "hidden_size": 3840}  # 120 per head, no type's default
        c = transformers.CONFIG_MAPPING[model_type](**kw)
        text = getattr(c, "text_config", None) or c  # a multimodal wrapper: its language model's
        if getattr(text, "kv_lora_rank", None):
            continue
        got = getattr(text, "head_dim", None)
        assert got == HEAD_DIM_DEFAULT.get(model_type, got if got in (None, 120) else 120), \
            model_type
        checked.add(model_type)
    assert set(HEAD_DIM_DEFAULT) <= checked and len(checked) >= 20


@pytest.mark.parametrize("name, left_out", [
    ("DeepSeek-R1", ("first_k_dense_replace", "n_shared_experts", "q_lora_rank")),
    ("DeepSeek-V2.5", ("kv_lora_rank", "q_lora_rank", "n_shared_experts")),
    ("DeepSeek-V3.2", ("first_k_dense_replace", "index_topk", "q_lora_rank")),
    ("GLM-5.1", ("first_k_dense_replace", "q_lora_rank", "index_topk", "n_shared_experts")),
    ("Qwen1.5-MoE-A2.7B", ("shared_expert_intermediate_size",)),
    ("Llama-4-Maverick-17B-128E-Instruct", ("intermediate_size_mlp",)),
])
def test_layout_keys_left_out_read_as_the_model_types_defaults(name, left_out):
    """A layout key a config.json leaves out is its model type's default in transformers (which
    vLLM reads), never "none": DeepSeek-R1 without three keys was priced 708.8B parameters with
    42.5B active, not 670.9B and 37.4B; Qwen1.5-MoE without its shared expert's width 13.48B,
    not 14.31B; Llama-4-Maverick without intermediate_size_mlp 14.15B active, not 17.17B."""
    cfg = json.loads((FIX / f"{name}.json").read_text())
    text = cfg.get("text_config", cfg)
    assert all(text.get(k) for k in left_out)  # the file gives each (at the type's default)
    without = {k: v for k, v in text.items() if k not in left_out}
    for tp in (1, 4):
        assert dims_from_config(without, tp=tp) == dims_from_config(text, tp=tp)


def test_a_hybrid_model_without_its_layer_pattern_reads_transformers_pattern():
    """Qwen3-Next without full_attention_interval (and layer_types): every 4th layer full
    attention, as transformers' Qwen3NextConfig lays it out, not all 48 layers (whose KV cache
    was read as 49,152 elements per token, not 12,288)."""
    cfg, _ = load_config(F / "Qwen3-Next-80B-A3B-Instruct.json")
    assert cfg["full_attention_interval"] == 4 and "layer_types" not in cfg
    without = {k: v for k, v in cfg.items() if k != "full_attention_interval"}
    assert dims_from_config(without) == dims_from_config(cfg)
    assert dims_from_config(without).kv_per_token == 12 * 2 * 2 * 256


def test_a_key_vllm_reads_without_a_default_is_refused():
    """GLM-4.7-Flash without first_k_dense_replace: vLLM's glm4_moe_lite.py reads
    config.first_k_dense_replace, which transformers' class does not default: refused, never read
    as no dense layer."""
    cfg, _ = load_config(F / "GLM-4.7-Flash.json")
    del cfg["first_k_dense_replace"]
    with pytest.raises(InputError, match=r"^config.json: lacks first_k_dense_replace, which vLLM "
                                         r"reads from a glm4_moe_lite config"):
        dims_from_config(cfg)


def test_the_layout_defaults_are_transformers():
    """LAYOUT_DEFAULTS is what transformers' config class of each model type gives where a
    config.json leaves the key out (full_attention_interval: the period of the layer_types it
    lays out); a key it has no entry for is none in the class (None, 0, absent, or no
    linear-attention layers); REQUIRED where the class has no such attribute."""
    transformers = pytest.importorskip("transformers")
    from specmoe.cost.hfconfig import LAYOUT_DEFAULTS, LAYOUT_KEYS, MODELLED_TYPES, REQUIRED

    absent = object()
    checked = set()
    for model_type in sorted(MODELLED_TYPES | set(LAYOUT_DEFAULTS)):
        if model_type not in transformers.CONFIG_MAPPING:
            continue  # remote code (Bailing-MoE, DeepSeek-MoE, Kimi-K2)
        c = transformers.CONFIG_MAPPING[model_type]()
        text = getattr(c, "text_config", None) or c
        for key in LAYOUT_KEYS:
            got = getattr(text, key, absent)
            if key == "full_attention_interval":
                kinds = getattr(text, "layer_types", None) or []
                full = [i for i, t in enumerate(kinds) if t == "full_attention"]
                got = full[0] + 1 if "linear_attention" in kinds else None
                assert got is None or full == list(range(got - 1, len(kinds), got)), model_type
            want = LAYOUT_DEFAULTS.get(model_type, {}).get(key)
            if want == REQUIRED:
                assert got is absent, (model_type, key)
            elif want is None:
                assert got in (absent, None, 0), (model_type, key, got)
            else:
                assert got == want, (model_type, key, got)
        checked.add(model_type)
    assert set(LAYOUT_DEFAULTS) <= checked and len(checked) >= 20


def test_deepseek_v3_dense_layers_shared_expert_and_block_fp8():
    d = dims_from_config(FIX / "DeepSeek-R1.json", tp=8)
    assert (d.num_layers, d.num_moe_layers, d.shared_intermediate) == (61, 58, 2048)
    assert (d.dtype, d.base_dtype, d.kv_split) == ("fp8-b128", "bf16", 1)


@pytest.mark.parametrize("name, tp, msg", [
    ("Qwen3-30B-A3B-FP8", 3, "does not divide the 32 attention heads"),
    ("Qwen3-Next-80B-A3B-Instruct", 32, "does not divide"),
])
def test_tp_must_divide_the_heads(name, tp, msg):
    with pytest.raises(InputError, match=msg):
        dims(name, tp=tp)


def test_tp_must_split_the_tensor_parallel_allreduce_over_nvlink():
    """Two all-reduces per layer under TP: a hardware entry without NVLink cannot price them."""
    from specmoe.cost import stepmodel

    d = dims("Qwen3-30B-A3B-FP8", tp=2)
    bare = cm.Hardware.from_config("X", {"hbm_bandwidth_gbs": 3350, "peak_tflops": {"fp8": 1979,
                                                                                   "bf16": 989}})
    with pytest.raises(InputError, match="nvlink_gbs"):
        stepmodel.step_times(d, bare, 1, 1, 8, stepmodel.StepParams())
    h100 = stepmodel.study_hardware("H100")
    t = stepmodel.step_times(d, h100, 1, 1, 8, stepmodel.StepParams())
    assert t["communication"] == pytest.approx(2 * 48 * (8e-6 + 2048 * 2 / (450e9 * 0.7)))


# the EAGLE-3 head of the tests' Hugging Face cache (test_bad_inputs.EAGLE3_QWEN): Qwen3-30B's
# width, one layer, 32 heads of 64, 4 KV heads
EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 2048,
          "vocab_size": 151936, "draft_vocab_size": 32000, "num_hidden_layers": 1,
          "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 8192,
          "torch_dtype": "bfloat16"}

# vLLM's own EAGLE-3 model built on the meta device (no weights, no GPU) in a process of its own
# (it sets up vLLM's distributed state), once for each config.json given: one line each, each
# parameter's shape and its layer's class.
VLLM_EAGLE3 = r"""
import json, os, sys, tempfile
from types import SimpleNamespace
import torch
from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.models import llama_eagle3

with set_current_vllm_config(VllmConfig()):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tempfile.mkdtemp()}/dist")
    initialize_model_parallel(1, 1)
for config in sys.argv[1:]:
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "config.json"), "w") as fh:
        fh.write(config)
    mc = ModelConfig(model=folder, skip_tokenizer_init=True, dtype="bfloat16")
    vc = VllmConfig(model_config=mc)
    vc.speculative_config = SimpleNamespace(draft_model_config=mc, draft_load_config=None,
                                            parallel_drafting=False,
                                            enable_adaptive_verification=False)
    with set_current_vllm_config(vc), torch.device("meta"):
        model = llama_eagle3.LlamaModel(vllm_config=vc, prefix="model")
    modules = dict(model.named_modules())
    print("BUILT", json.dumps({n: [p.numel(), type(modules[n.rsplit(".", 1)[0]]).__name__]
                               for n, p in model.named_parameters()}))
"""


def test_an_eagle3_head_counts_the_weights_vllm_gives_it():
    """vLLM's EAGLE-3 head (llama_eagle3.py) reads 2 x hidden into its first layer's q, k, v (the
    token's embedding beside the hidden state) and fuses three of the target's hidden states in
    its fc: 27,262,976 weights of attention and fc at hidden 2048, where 9,437,184 were counted.
    The fc is replicated on every GPU, the attention split over TP."""
    from specmoe.cost.hfconfig import dense_dims_from_config

    h, heads, kv, hd = 2048, 32, 4, 64
    qkv, o, fc = 2 * h * (heads + 2 * kv) * hd, heads * hd * h, 3 * h * h
    d = dense_dims_from_config(EAGLE3)
    assert d.attention_params + d.dense_layer_params == qkv + o + fc == 27_262_976
    two = dense_dims_from_config(EAGLE3, tp=2)
    per_gpu = two.num_moe_layers * (two.c_dense + two.c_dense_layers) / 2  # bf16: 2 bytes
    assert per_gpu == (qkv + o) / 2 + fc
    # the hidden states it fuses: as many as the config names, of the target's width
    wide = dense_dims_from_config({**EAGLE3, "target_hidden_size": 4096,
                                   "eagle_aux_hidden_state_layer_ids": [1, 20, 40, 45]})
    assert wide.dense_layer_params - d.dense_layer_params == 4 * 4096 * h - fc


@pytest.mark.slow  # builds the heads in vLLM (about 20 s)
def test_an_eagle3_head_weighs_what_vllm_builds_of_it():
    """The same count against vLLM's own module, built from the config (tests the reading of
    vllm/model_executor/models/llama_eagle3.py above, not a copy of it)."""
    import json
    import subprocess
    import sys

    from specmoe.cost.hfconfig import dense_dims_from_config

    pytest.importorskip("vllm")
    configs = (EAGLE3, {**EAGLE3, "target_hidden_size": 4096, "num_aux_hidden_states": 4})
    r = subprocess.run([sys.executable, "-c", VLLM_EAGLE3, *map(json.dumps, configs)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # vLLM logs to stdout too: the heads are the lines marked BUILT, one per config, in order
    lines = [ln.removeprefix("BUILT ") for ln in r.stdout.splitlines() if ln.startswith("BUILT ")]
    for cfg, built in zip(configs, map(json.loads, lines), strict=True):
        linear = {n: size for n, (size, _) in built.items()
                  if n.endswith((".qkv_proj.weight", ".o_proj.weight", "fc.weight"))}
        assert built["fc.weight"][1] == "ReplicatedLinear"
        d = dense_dims_from_config(cfg)
        assert d.attention_params + d.dense_layer_params == sum(linear.values())
        ffn = sum(size for n, (size, _) in built.items() if ".mlp." in n)
        assert d.expert_params == ffn


# inclusionAI/Ling-flash-2.0's config.json (Bailing-MoE V2), the fields the reader reads
LING_FLASH = {"architectures": ["BailingMoeV2ForCausalLM"], "model_type": "bailing_moe",
              "hidden_size": 4096, "intermediate_size": 9216, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
              "vocab_size": 157184, "num_experts": 256, "num_shared_experts": 1,
              "num_experts_per_tok": 8, "moe_intermediate_size": 1024,
              "first_k_dense_replace": 1, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16"}


def test_a_bailing_moe_shared_expert_is_counted_ling_flash():
    """vLLM's Bailing-MoE (bailing_moe.py) gives each MoE layer num_shared_experts shared experts
    of moe_shared_expert_intermediate_size, else moe_intermediate_size: Ling-flash-2.0's 100B,
    6.1B active."""
    d = dims_from_config(LING_FLASH)
    assert d.shared_intermediate == 1024 and d.num_moe_layers == 31
    emb = 2 * 157184 * 4096
    active = d.num_moe_layers * (d.top_k * d.expert_params + d.dense_params) \
        + d.dense_layer_params + emb
    assert round(active / 1e9, 1) == 6.1
    wide = dims_from_config({**LING_FLASH, "num_shared_experts": 2,
                             "moe_shared_expert_intermediate_size": 2048})
    assert wide.shared_intermediate == 2 * 2048


def test_moe_layers_every_moe_layer_freq_th_layer_deepseek_v2():
    """vLLM's DeepSeek-V2 (deepseek_v2.py) puts experts in layer i where i >= first_k_dense_replace
    and i % moe_layer_freq == 0: DeepSeek-V2.5's 60 layers with a frequency of 2 have 29."""
    import json

    cfg = json.loads((FIX / "DeepSeek-V2.5.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["first_k_dense_replace"]) == (60, 1)
    vllm_rule = [i for i in range(60) if i >= 1 and i % 2 == 0]
    d = dims_from_config({**cfg, "moe_layer_freq": 2})
    assert d.num_moe_layers == len(vllm_rule) == 29
    assert dims_from_config(cfg).num_moe_layers == 59


@pytest.mark.parametrize("key,value,what", [
    ("moe_layer_freq", [0, 1, 1, 1], "MoE layers listed one by one"),
    ("num_dense_layers", 2, "layers without experts counted by num_dense_layers"),
    ("mlp_layer_types", ["dense", "sparse", "sparse", "sparse"], "dense and sparse layers"),
])
def test_layer_layouts_the_reader_does_not_model_are_refused(key, value, what):
    """Read as every layer a MoE layer, these would be priced wrong without a word."""
    cfg = {"model_type": "x", "hidden_size": 256, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 8,
           "num_experts_per_tok": 2, "moe_intermediate_size": 64, "vocab_size": 1000,
           "torch_dtype": "bfloat16", key: value}
    with pytest.raises(InputError, match=rf"^config.json: {what}.* \({key}\) are not modelled"):
        dims_from_config(cfg)


# Snowflake/snowflake-arctic-instruct's config.json (a reviewer's copy): beside its 128 experts
# every layer holds a dense residual MLP of intermediate_size (use_residual,
# parallel_attn_mlp_res), 5.4B of its ~17B active weights that a MoE-only reading leaves out
ARCTIC = {"architectures": ["ArcticForCausalLM"], "hidden_act": "silu", "hidden_size": 7168,
          "intermediate_size": 4864, "max_position_embeddings": 4096, "model_type": "arctic",
          "moe_layer_frequency": 1, "num_attention_heads": 56, "num_experts_per_tok": 2,
          "num_hidden_layers": 35, "num_key_value_heads": 8, "num_local_experts": 128,
          "parallel_attn_mlp_res": True, "tie_word_embeddings": False,
          "torch_dtype": "bfloat16", "use_residual": True, "vocab_size": 32000}
ARCTIC_KEYS = ("use_residual", "parallel_attn_mlp_res", "moe_layer_frequency")


@pytest.mark.parametrize("key", ARCTIC_KEYS)
def test_arctic_s_dense_residual_layout_is_refused_by_its_keys(key):
    cfg = {k: v for k, v in ARCTIC.items() if k not in ARCTIC_KEYS or k == key}
    with pytest.raises(InputError, match=rf"^config.json: .*\({key}\) are not modelled"):
        dims_from_config(cfg)


@pytest.mark.parametrize("kind", ["arctic", "jetmoe", "foo_moe", None])
def test_a_model_type_whose_layout_is_not_modelled_is_refused(kind):
    """Only the types whose layout the reader models are priced: any other (Arctic without its
    residual keys, JetMoE's attention experts, a type never seen) is refused, never read as
    attention and MoE in every layer."""
    cfg, _ = load_config(FIX / "Qwen1.5-MoE-A2.7B.json")
    assert dims_from_config(cfg).num_moe_layers == 24  # the same dimensions as a modelled type
    other = {**cfg, "model_type": kind} if kind else {k: v for k, v in cfg.items()
                                                      if k != "model_type"}
    with pytest.raises(InputError, match=rf"^config.json: model_type {kind!r} is not one whose "
                                         "layer layout is modelled here"):
        dims_from_config(other)
    no_residual = {k: v for k, v in ARCTIC.items() if k not in ARCTIC_KEYS}
    with pytest.raises(InputError, match="model_type 'arctic' is not one"):
        dims_from_config(no_residual)


def test_a_multimodal_wrapper_s_model_type_stands_for_a_text_config_without_one():
    cfg, _ = load_config(F / "Qwen3.5-35B-A3B.json")
    raw = json.loads((F / "Qwen3.5-35B-A3B.json").read_text())
    text = {k: v for k, v in raw["text_config"].items() if k != "model_type"}
    assert load_config({**raw, "text_config": text})[0]["model_type"] == raw["model_type"]
    assert dims_from_config({**raw, "text_config": text}).num_moe_layers == \
        dims_from_config(cfg).num_moe_layers


def _ct(weights) -> dict:
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": weights}}


# Malformed values of a config.json, each with the refusal that names its key. The first five
# stopped the reader with a Python error (KeyError, AttributeError, ValueError: "internal error",
# exit 1); the others were read quietly as something else (a string of layer indices or a
# fraction ignored, a sparse step of 0 read as 1, a fractional vocabulary or a width in a string
# taken as a number).
MALFORMED = [
    ({"quantization_config": "fp8"}, "quantization_config = 'fp8' is not a JSON object"),
    ({"decoder_sparse_step": "two"}, "decoder_sparse_step = 'two' is not a whole number"),
    ({"quantization_config": _ct({"weights": {"num_bits": 4, "type": "int",
                                              "strategy": "group"}})},
     "quantization_config.config_groups.group_0.weights: int4 groups without group_size"),
    ({"quantization_config": _ct(5)},
     "quantization_config.config_groups.group_0 = 5 is not a JSON object"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": ["g"]}},
     "quantization_config.config_groups = ['g'] is not a JSON object"),
    ({"mlp_only_layers": "0,1"}, "mlp_only_layers = '0,1' is not a list of layer indices"),
    ({"mlp_only_layers": [0.5]}, "mlp_only_layers entry = 0.5 is not a whole number"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step = 0 must be >= 1"),
    ({"vocab_size": 151936.5}, "vocab_size = 151936.5 is not a whole number"),
    ({"shared_expert_intermediate_size": "5632"},
     "shared_expert_intermediate_size = '5632' is not a whole number"),
    ({"shared_expert_intermediate_size": -5632},
     "shared_expert_intermediate_size = -5632 must be >= 1"),
    ({"first_k_dense_replace": -1}, "first_k_dense_replace = -1 must be >= 0"),
    ({"layer_types": "full_attention"}, "layer_types = 'full_attention' is not a list"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": 128}},
     "quantization_config.weight_block_size = 128 is not a list"),
    ({"text_config": [1, 2]}, "text_config = [1, 2] is not a JSON object"),
    ({"num_attention_heads": 12, "num_key_value_heads": 12},
     "hidden_size 2048 is not a multiple of num_attention_heads 12: head_dim must then be given"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": []}},
     "quantization_config.weight_block_size = [] is not two block sides"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}},
     "quantization_config.weight_block_size = [128] is not two block sides"),
]


# weight_block_size as vLLM's Fp8Config takes it: (the value, the storage format read, or the
# refusal); [] and one or three sides were read as per-tensor scales or as the first side's blocks
FP8_BLOCKS = [
    (None, "fp8"), ([128, 128], "fp8-b128"),
    ([], "quantization_config.weight_block_size = [] is not two block sides (vLLM's fp8 takes "
         "[rows, columns], or null for per-tensor scales)"),
    ([128], "quantization_config.weight_block_size = [128] is not two block sides"),
    ([128, 128, 128], "quantization_config.weight_block_size = [128, 128, 128] is not two"),
    ([0, 128], "quantization_config.weight_block_size entry = 0 must be >= 1"),
    ([128, -128], "quantization_config.weight_block_size entry = -128 must be >= 1"),
]


@pytest.mark.parametrize("block, want", FP8_BLOCKS, ids=[str(b) for b, _ in FP8_BLOCKS])
def test_fp8_weight_blocks_are_two_sides_or_none(block, want):
    """null (or no key): per-tensor scales; else two sides of at least 1, in one line."""
    cfg = json.loads((FIX / "Qwen1.5-MoE-A2.7B.json").read_text())
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": block}
    for quant in (q, {k: v for k, v in q.items() if v is not None}):
        if not want.startswith("fp8"):
            with pytest.raises(InputError, match="^" + re.escape(f"config.json: {want}")):
                dims_from_config({**cfg, "quantization_config": quant})
            continue
        assert dims_from_config({**cfg, "quantization_config": quant}).dtype == want


@pytest.mark.slow  # imports vLLM (about 30 s)
def test_the_fp8_block_rule_is_vllms():
    """vLLM's Fp8Config accepts a weight_block_size exactly where the reader does, but for the
    sides' values, which it does not check (a side of 0 or less is no block)."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    for block, want in FP8_BLOCKS:
        q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": block}
        try:
            got = Fp8Config.from_config(q).weight_block_size
        except ValueError:
            got = "refused"
        if "entry" not in want:
            assert (got == "refused") == (not want.startswith("fp8")), block
            assert got == "refused" or got == block


@pytest.mark.parametrize("change, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_values_are_refused_naming_the_file_and_key(tmp_path, change, message):
    cfg = json.loads((FIX / "Qwen1.5-MoE-A2.7B.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, **change}))
    with pytest.raises(InputError, match="^" + re.escape(f"{path}: {message}")):
        dims_from_config(path)


def test_well_formed_values_beside_the_malformed_read_as_before():
    """What the checks let through: layer indices from 0, a zero shared width (none), a sparse
    step of 2 (experts in every second layer), block sides as a list."""
    cfg = json.loads((FIX / "Qwen1.5-MoE-A2.7B.json").read_text())
    assert dims_from_config({**cfg, "mlp_only_layers": [0, 1]}).num_moe_layers == 22
    assert dims_from_config({**cfg, "shared_expert_intermediate_size": 0}) \
        .shared_intermediate == 0
    assert dims_from_config({**cfg, "decoder_sparse_step": 2}).num_moe_layers == 12
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert dims_from_config({**cfg, "quantization_config": fp8}).dtype == "fp8-b128"
