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
