"""Hugging Face configs as `specmoe predict` and the preflight read them where they leave the
study's own families: a float32 checkpoint (served in bf16 by vLLM's dtype auto), families the
reader cannot price and dense models (refused for what they are), a model-level sliding window,
layer indices past the model's layers, and a malformed DBRX section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmoe.checks import preflight
from specmoe.cost.hfconfig import dims_from_config, study_dims
from specmoe.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
GIB = 1024**3


def olmoe(**edit) -> dict:
    """OLMoE-1B-7B's published config.json (bf16), edited."""
    return {**json.loads((FIXTURES / "OLMoE-1B-7B-0924.json").read_text()), **edit}


def written(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_a_float32_checkpoint_at_precision_auto_is_priced_as_vllm_serves_it_in_bf16(tmp_path):
    """vLLM's dtype auto downcasts a float32 checkpoint to bf16 on a GPU (_resolve_auto_dtype):
    its weights, LM head and KV cache are bf16, so predict and the preflight price it as the
    same checkpoint stored in bf16; the checkpoint's own dtype (None: what the tiny models'
    CPU engines, told float32, run) stays fp32."""
    f32, b16 = olmoe(torch_dtype="float32"), olmoe()
    d = dims_from_config(f32, dtype="auto")
    assert (d.dtype, d.dense_dtype, d.base_dtype) == ("bf16", "bf16", "bf16")
    assert d == dims_from_config(b16, dtype="auto") == dims_from_config(b16)
    assert study_dims(written(tmp_path, f32), "auto") == d
    online = dims_from_config(f32, dtype="fp8")  # online fp8 keeps the LM head and KV in bf16
    assert (online.dtype, online.base_dtype) == ("fp8", "bf16")
    own = dims_from_config(f32)
    assert (own.dtype, own.dense_dtype, own.base_dtype) == ("fp32", "fp32", "fp32")

    def job(dtype):
        return preflight.Engine(
            job="j", model="m", entry={}, hardware={}, hardware_name="H100", tp=1,
            precision="auto", method=None, drafter=None, k=0, max_model_len=1024, batch=1,
            output_tokens=0, prompt_tokens={}, utilization=0.9, offline_server=False,
            dtype=dtype)

    auto32 = preflight.memory(job("auto"), f32, None, total=80 * GIB)
    auto16 = preflight.memory(job("auto"), b16, None, total=80 * GIB)
    assert (auto32.weights, auto32.kv_per_seq) == (auto16.weights, auto16.kv_per_seq)
    told32 = preflight.memory(job("float32"), b16, None, total=80 * GIB)  # the engine says fp32
    assert told32.weights == pytest.approx(2 * auto16.weights)
    assert told32.kv_per_seq == pytest.approx(2 * auto16.kv_per_seq)


def test_predict_prices_a_float32_checkpoint_as_its_bf16_copy(tmp_path, capsys):
    from specmoe.cli import main

    out = {}
    for name, cfg in (("f32", olmoe(torch_dtype="float32")), ("b16", olmoe())):
        path = written(tmp_path, cfg, f"{name}.json")
        assert main(["predict", str(path), "--json", "--batch-sizes", "1,8"]) == 0
        out[name] = json.loads(capsys.readouterr().out)
        out[name].pop("model")
    assert out["f32"] == out["b16"]


QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "torch_dtype": "bfloat16"}
# baidu/ERNIE-4.5-21B-A3B-PT's layout keys: its experts under names of its own
ERNIE = {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
         "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536,
         "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
         "head_dim": 128, "moe_num_experts": 64, "moe_k": 6, "moe_num_shared_experts": 2,
         "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
         "vocab_size": 103424, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
MIXTRAL = json.loads((Path(__file__).parents[1] / "src" / "specmoe" / "data" / "hf_configs"
                      / "Mixtral-8x7B-Instruct-v0.1.json").read_text())


def test_a_family_it_cannot_price_is_refused_by_its_model_type_not_by_a_missing_key():
    """ERNIE-4.5 names its experts moe_num_experts / moe_k: refused as a model type whose layout
    is not modelled, never as a file that lacks num_experts (adding one would not price it)."""
    with pytest.raises(InputError, match=r"^config.json: model_type 'ernie4_5_moe' is not one "
                                         "whose layer layout is modelled"):
        dims_from_config(ERNIE)
    # Hunyuan-A13B lists its top-k per layer: the type, not 'moe_topk is not a whole number'
    hunyuan = {**ERNIE, "model_type": "hunyuan_v1_moe", "num_experts": 64,
               "moe_topk": [8] * 28}
    with pytest.raises(InputError, match=r"model_type 'hunyuan_v1_moe' is not one"):
        dims_from_config(hunyuan)


@pytest.mark.parametrize("cfg", [
    QWEN3_8B,
    {**QWEN3_8B, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    # a dense model dressed as Mixtral: one expert that every token uses
    {**MIXTRAL, "num_local_experts": 1, "num_experts_per_tok": 1},
    # every token using every expert: a dense FFN in effect
    {**MIXTRAL, "num_experts_per_tok": 8},
], ids=["qwen3-8b", "llama", "one-expert", "k-equals-n"])
def test_a_dense_model_is_refused_as_dense(cfg):
    with pytest.raises(InputError, match=r"dense model.*: speculative decoding on an MoE does "
                                         "not apply"):
        dims_from_config(cfg)


def test_layer_indices_past_the_last_layer_are_refused():
    """mlp_only_layers [100, 200] on a 62-layer model names no layer: it priced every layer MoE
    without a word."""
    qwen = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "hidden_size": 6144, "intermediate_size": 8192, "moe_intermediate_size": 2560,
            "num_experts": 160, "num_experts_per_tok": 8, "num_hidden_layers": 62,
            "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
            "decoder_sparse_step": 1, "vocab_size": 151936, "torch_dtype": "bfloat16"}
    assert dims_from_config({**qwen, "mlp_only_layers": [0, 61]}).num_moe_layers == 60
    with pytest.raises(InputError, match=r"^config.json: mlp_only_layers names layer 100, which "
                                         r"a model of 62 layers \(0 to 61\) does not have"):
        dims_from_config({**qwen, "mlp_only_layers": [100, 200]})
    with pytest.raises(InputError, match=r"mlp_only_layers entry = -1 must be >= 0"):
        dims_from_config({**qwen, "mlp_only_layers": [-1]})


@pytest.mark.parametrize("key", ["attn_config", "ffn_config"])
def test_a_dbrx_section_that_is_not_an_object_is_refused(key):
    dbrx = json.loads((FIXTURES / "dbrx-instruct.json").read_text())
    assert dims_from_config(dbrx).num_experts == 16
    with pytest.raises(InputError, match=rf"^config.json: {key} = 'x' is not a JSON object"):
        dims_from_config({**dbrx, key: "x"})


def test_a_model_level_sliding_window_slides_every_layer_where_vllm_applies_it():
    """With no layer_types vLLM sets the model-level sliding_window on every layer (CacheConfig's
    window, which each Attention without one of its own takes): a Mixtral with a 256-token
    window has no full-attention KV cache; a window that covers every position changes
    nothing; Qwen2-MoE's is never applied (transformers lists its layer_types itself), and a
    type whose layers are not known to take it is refused."""
    swa = {**MIXTRAL, "sliding_window": 256, "max_position_embeddings": 65536}
    d = dims_from_config(swa)
    assert d.kv_per_token == 0 and d.sliding_window == 256
    assert d.kv_sliding_per_token == dims_from_config(MIXTRAL).kv_per_token > 0
    assert dims_from_config({**swa, "sliding_window": 65536}).kv_sliding_per_token == 0
    qwen2 = json.loads((FIXTURES / "Qwen1.5-MoE-A2.7B.json").read_text())
    on = {**qwen2, "use_sliding_window": True, "sliding_window": 256}
    assert dims_from_config(on).kv_sliding_per_token == 0
    olmoe_swa = olmoe(sliding_window=256)
    with pytest.raises(InputError, match=r"sliding_window = 256 without layer_types: which "
                                         "layers of a 'olmoe' model"):
        dims_from_config(olmoe_swa)
