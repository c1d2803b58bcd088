"""The positions a model takes as vLLM derives them: the position keys times the RoPE factor of the
types that extend them (hfconfig.max_positions, rope_factor), as vLLM 0.32's
_get_and_verify_max_len (vllm/config/model.py) computes them, and what predict's context check
makes of them."""

from types import SimpleNamespace

import pytest

from specmoe.cost.hfconfig import max_positions
from specmoe.cost.predictor import check_positions
from specmoe.errors import InputError

QWEN = {"model_type": "qwen3_moe", "max_position_embeddings": 32768}
YARN = {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}
LINEAR = {"type": "linear", "factor": 4}
# (a config.json's own keys, the positions vLLM derives from them)
CASES = [
    ({**QWEN, "rope_scaling": YARN}, 32768),  # YaRN: max_position_embeddings already counts it
    ({**QWEN, "rope_scaling": LINEAR}, 131072),
    ({**QWEN, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, 65536),
    ({**QWEN, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 32768),
    ({**QWEN, "rope_scaling": {"type": "su", "factor": 4}}, 32768),  # legacy name of longrope
    ({**QWEN, "rope_scaling": {"rope_type": "default"}}, 32768),
    ({**QWEN, "rope_scaling": {"type": "linear", "factor": None}}, 32768),  # null: 1, as vLLM
    ({**QWEN, "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0},
                                  "sliding_attention": {"rope_type": "default"}}}, 65536),
    ({**QWEN, "model_type": "gemma3_text", "rope_scaling": LINEAR}, 32768),  # already scaled
    ({**QWEN, "rope_scaling": LINEAR, "rope_parameters": {"rope_type": "default"}}, 131072),
]


@pytest.mark.parametrize("cfg,positions", CASES)
def test_max_positions_apply_the_rope_factor_as_vllm_does(cfg, positions):
    assert max_positions(cfg)[0] == positions


def test_a_scaled_model_names_its_factor_and_an_unscaled_one_its_key():
    assert max_positions({**QWEN, "rope_scaling": LINEAR}) == (
        131072, "max_position_embeddings x linear rope factor 4")
    assert max_positions({**QWEN, "rope_scaling": YARN}) == (32768, "max_position_embeddings")


def test_a_rope_factor_that_is_not_a_number_is_refused():
    with pytest.raises(InputError, match=r"x\.json: rope factor = 'four' is not a number > 0"):
        max_positions({**QWEN, "rope_scaling": {"type": "linear", "factor": "four"}}, "x.json")


def test_the_rule_is_vllms():
    """Each case through vLLM's own _get_and_verify_max_len (its config reader has already
    patched the legacy rope names: rope_type, longrope), where vLLM is installed."""
    from specmoe.cost.hfconfig import ROPE_LAYER_TYPES

    model = pytest.importorskip("vllm.config.model")
    for cfg, _ in CASES:
        params = cfg.get("rope_scaling") or cfg.get("rope_parameters")

        def patched(rp):
            kind = rp.get("rope_type", rp.get("type", "default"))
            return {**{k: v for k, v in rp.items() if k != "type"},
                    "rope_type": {"su": "longrope"}.get(kind, kind)}

        if params and set(params) <= set(ROPE_LAYER_TYPES):
            params = {k: patched(v) for k, v in params.items()}
        elif params:
            params = patched(params)
        hf = SimpleNamespace(model_type=cfg["model_type"], rope_parameters=params)
        arch = SimpleNamespace(derived_max_model_len_and_key=(
            cfg["max_position_embeddings"], "max_position_embeddings"))
        # a max_model_len above the derived length is refused, at it accepted: vLLM's bound
        ours = max_positions(cfg)[0]
        assert model._get_and_verify_max_len(hf, arch, None, ours, False, None) == ours
        with pytest.raises(ValueError, match="greater than the derived max_model_len"):
            model._get_and_verify_max_len(hf, arch, None, ours + 1, False, None)


def test_the_rope_layer_types_are_transformers():
    from specmoe.cost.hfconfig import ROPE_LAYER_TYPES

    utils = pytest.importorskip("transformers.configuration_utils")
    assert ROPE_LAYER_TYPES == tuple(utils.ALLOWED_LAYER_TYPES)


def test_predict_takes_a_context_a_linear_factor_extends_to_and_refuses_it_past_a_yarn_model(
        tmp_path):
    import json

    linear, yarn = tmp_path / "linear.json", tmp_path / "yarn.json"
    linear.write_text(json.dumps({**QWEN, "rope_scaling": LINEAR}))
    yarn.write_text(json.dumps({**QWEN, "rope_scaling": YARN}))
    check_positions(linear, 100_000, 3)  # within 131,072
    with pytest.raises(InputError, match=r"--context 131,069 \+ K\+1 = 131,073 tokens exceed the "
                                         r"model's 131,072 positions"):
        check_positions(linear, 131_069, 3)
    with pytest.raises(InputError, match=r"exceed the model's 32,768 positions .*"
                                         r"max_position_embeddings\)"):
        check_positions(yarn, 100_000, 3)
