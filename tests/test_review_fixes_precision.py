"""Review fixes: one meaning of precision "auto" (vLLM's dtype auto on a GPU) and one sliding
window across the cost model and the GPU preflight; the schema's defaults copied into a
configuration; the tiny models' held-out split and training threads read from one place."""
from __future__ import annotations

import json
from importlib import resources

import pytest

from specmoe import cli
from specmoe.checks import preflight
from specmoe.cost import admission
from specmoe.cost.hfconfig import study_dims
from specmoe.stages.analysis import model_dims

QWEN = resources.files("specmoe") / "data" / "hf_configs" / "Qwen3-30B-A3B.json"


@pytest.fixture
def float32_qwen(tmp_path):
    """Qwen3-30B-A3B's config.json stored in float32 (as some checkpoints are published)."""
    cfg = json.loads(QWEN.read_text())
    cfg["torch_dtype"] = "float32"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path, cfg


def test_admission_prices_auto_as_the_gpu_preflight_does(float32_qwen):
    """The admission rule's weights at "auto" are those the GPU preflight (and predict) price at
    "auto": vLLM's dtype auto serves a float32 checkpoint in bf16 on a GPU."""
    path, cfg = float32_qwen
    gb = admission.weight_gb(path, "auto")
    assert gb == pytest.approx(preflight.weight_bytes(cfg, "auto", 1) / 1e9)
    assert gb == pytest.approx(admission.weight_gb(path, "bf16"))
    assert gb == pytest.approx(admission.weight_gb(QWEN, "auto"))  # the bf16 checkpoint's


def test_a_gpu_cost_of_a_float32_checkpoint_is_vllms_dtype_auto(float32_qwen, capsys):
    """`specmoe te --config` without --dtype and a synthetic model's hf_config without dims.dtype
    price a checkpoint as vLLM's dtype auto serves it on a GPU; a tiny model's config.json keeps
    its own float32 (its CPU engines run it so)."""
    path, _ = float32_qwen
    answers = []
    for argv in (["--config", str(path)], ["--config", str(path), "--dtype", "bf16"]):
        assert cli.main(["te", *argv, "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0] == answers[1]
    assert answers[0]["dtype"] == "bf16"
    auto = study_dims(path, "auto")
    synthetic = model_dims({"name": "s", "source": "synthetic", "hf_config": str(path)}, 128, 8)
    assert synthetic == auto and synthetic.base_dtype == "bf16"
    tiny = model_dims({"name": "t", "source": "tiny", "hf_config": str(path)}, 128, 8)
    assert tiny.base_dtype == tiny.dtype == "fp32"


# A Mistral-7B-like dense model (a draft model served alone): transformers' MistralConfig
# defaults sliding_window to 4096 where config.json leaves the key out
MISTRAL = {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
           "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def test_the_preflight_sizes_sliding_layers_with_the_window_layer_kinds_reads():
    """Every layer of a Mistral config without sliding_window slides (layer_kinds, transformers'
    default window of 4096), and the preflight holds each sequence's blocks up to that window,
    as with the key stated, not up to a window of 0."""
    from specmoe.cost.hfconfig import layer_kinds, sliding_window

    stated = {**MISTRAL, "sliding_window": 4096}
    assert layer_kinds(MISTRAL) == layer_kinds(stated) == ["sliding"] * 32
    assert sliding_window(MISTRAL) == sliding_window(stated) == 4096
    e = preflight.Engine(
        job="serve mistral", model="mistral", entry={}, hardware={"memory_gib": 80},
        hardware_name="H100", tp=1, precision="auto", method=None, drafter=None, k=0,
        max_model_len=32768, batch=1, output_tokens=0, prompt_tokens={}, utilization=0.9,
        offline_server=False)
    without, with_ = (preflight.memory(e, c, None) for c in (MISTRAL, stated))
    assert without.kv_start == with_.kv_start
    assert without.kv_per_seq == with_.kv_per_seq


def test_the_held_out_split_and_training_threads_have_the_schemas_default_only():
    """tiny.corpus_files takes the held-out split from its caller (tiny.heldout_every, whose
    default is the schema's), with none of its own; a training job's threads are the validated
    configuration's tiny.train.threads, the schema's default filled in."""
    import inspect

    import yaml
    from wf import REPO

    from specmoe.checks.schema import load_schema
    from specmoe.config import Config
    from specmoe.contracts.models import TrainParams
    from specmoe.runtime import tiny

    every = inspect.signature(tiny.corpus_files).parameters["heldout_every"]
    assert every.default is inspect.Parameter.empty
    schema = REPO / "workflow/schemas/config.schema.yaml"
    default = load_schema(schema)["properties"]["tiny"]["properties"]["train"]["properties"][
        "threads"]["default"]
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw.get("tiny", {}).get("train", {}).pop("threads", None)
    assert TrainParams.threads(Config.load(raw, schema)) == default
    raw.setdefault("tiny", {}).setdefault("train", {})["threads"] = default + 1
    assert TrainParams.threads(Config.load(raw, schema)) == default + 1


def test_a_filled_default_is_the_configurations_own_copy():
    """Two configurations validated against one schema each get their own copy of a default
    mapping (tiny.train), filled in their own; the schema's default stays as it is written."""
    import copy

    import yaml
    from wf import REPO

    from specmoe.checks.schema import load_schema, validate

    schema = load_schema(REPO / "workflow/schemas/config.schema.yaml")
    written = copy.deepcopy(schema)
    default = schema["properties"]["tiny"]["properties"]["train"]["default"]
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["tiny"].pop("train", None)
    c1, c2 = copy.deepcopy(raw), copy.deepcopy(raw)
    assert validate(c1, schema) == [] and validate(c2, schema) == []
    assert c1["tiny"]["train"] is not default and c2["tiny"]["train"] is not c1["tiny"]["train"]
    assert c1["tiny"]["train"] == c2["tiny"]["train"] and c1["tiny"]["train"]["threads"]
    c1["tiny"]["train"]["threads"] += 1
    assert c2["tiny"]["train"]["threads"] == c1["tiny"]["train"]["threads"] - 1
    assert schema == written
