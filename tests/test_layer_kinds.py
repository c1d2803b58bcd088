"""One reader of each decoder layer's attention kind ('full', 'sliding', 'linear'):
specmoe.cost.hfconfig.layer_kinds, which the step model (dims_from_config) and the GPU preflight
(kv_bytes_per_token, memory) both read. The preflight once had a looser reader of its own, which
read a model-level sliding_window without layer_types as full attention where the step model
priced it sliding (Mixtral's, Phi-MoE's, Qwen3-MoE's: vLLM 0.32 slides every layer of them)."""

import copy
import json

import pytest
import yaml
from hubfake import STUDY_DRAFTERS, drafter_stand_in
from snakemake.utils import update_config
from test_bad_inputs import DRAFTER_CONFIGS

from specmoe.checks import preflight
from specmoe.config import Config
from specmoe.cost import hfconfig
from specmoe.errors import InputError
from wf import REPO

SHIPPED = sorted((REPO / "src/specmoe/data/hf_configs").glob("*.json"))
MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"

# The window keys of published dense drafters' config.json (the rest as the stand-ins have it):
# Qwen2-0.5B-Instruct (config/paper.yaml's qwen2-0.5b) keeps a window it does not use
# (use_sliding_window false); Mistral-7B-v0.1 slides every layer over 4,096 tokens.
QWEN2_05B = {**drafter_stand_in("Qwen/Qwen2-0.5B-Instruct"), "sliding_window": 32768,
             "use_sliding_window": False, "max_window_layers": 24}
MISTRAL_7B = {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
              "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
              "max_position_embeddings": 32768, "sliding_window": 4096,
              "torch_dtype": "bfloat16"}


def _tiny_draft() -> dict:
    """The study-cpu case's tiny-draft config.json, as specmoe.runtime.tiny builds it (a
    transformers Qwen3Config, which writes use_sliding_window and layer_types)."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=512, hidden_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                       intermediate_size=128, max_position_embeddings=512).to_dict()


def drafters() -> dict[str, dict]:
    """Every drafter config.json reachable offline in the repository: the study's stand-ins
    (hubfake), the bad-input tests' drafters, tiny-draft, and the published window keys above."""
    out = {r: drafter_stand_in(r) for r in STUDY_DRAFTERS}
    out.update(DRAFTER_CONFIGS)
    out.update({"Qwen2-0.5B-Instruct (published keys)": QWEN2_05B,
                "Mistral-7B-v0.1 (published keys)": MISTRAL_7B,
                "specmoe-test/tiny-draft": _tiny_draft()})
    return out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_checkpoint_reads_alike_in_the_preflight_and_the_step_model(path):
    """Every shipped config.json: the preflight's KV cache has a sliding column (or a
    linear-attention state) exactly where the step model prices sliding (or linear) layers, and
    as many sliding layers per full one."""
    cfg = json.loads(path.read_text())
    full, sliding, linear = preflight.kv_bytes_per_token(cfg, 1, 2)
    kinds = hfconfig.attention_kinds(cfg)
    assert (sliding > 0) == ("sliding window" in kinds)
    assert (linear > 0) == ("linear attention" in kinds)
    dims = hfconfig.dims_from_config(cfg)
    assert sliding / full == dims.attn_flops_sliding_per_ctx / dims.attn_flops_per_ctx


@pytest.mark.parametrize("name", list(drafters()))
def test_every_drafter_reads_full_attention_as_before(name):
    """Every drafter config the repository reaches offline has full-attention layers alone, as
    the preflight's old reader read them: none lists sliding layer_types, and a draft model's
    own model-level window (Mistral-7B's 4,096) slides none of its layers in vLLM 0.32, which
    builds them with the target's CacheConfig (draft_model.py:81-100)."""
    c = preflight._text(drafters()[name])
    assert set(hfconfig.layer_kinds(c, draft=True)) == {"full"}
    assert preflight.kv_bytes_per_token(c, 1, 2, draft=True)[1:] == (0.0, 0.0)


def test_a_dense_model_served_alone_slides_as_vllm_does():
    """Served as the model, Mistral-7B's model-level window slides every layer (vLLM 0.32 sets
    CacheConfig.sliding_window from it, arg_utils.py:2248-2254, and LlamaAttention passes no
    per-layer one, llama.py:185-219); Qwen2-0.5B's unused one (use_sliding_window false) none,
    nor tiny-draft's."""
    assert set(hfconfig.layer_kinds(MISTRAL_7B)) == {"sliding"}
    assert set(hfconfig.layer_kinds(QWEN2_05B)) == {"full"}
    assert set(hfconfig.layer_kinds(_tiny_draft())) == {"full"}
    # transformers' MistralConfig defaults a window config.json leaves out to 4,096 tokens
    bare = {k: v for k, v in MISTRAL_7B.items() if k != "sliding_window"}
    assert set(hfconfig.layer_kinds(bare)) == {"sliding"}
    assert set(hfconfig.layer_kinds({**MISTRAL_7B, "sliding_window": None})) == {"full"}


def test_mixtral_with_a_short_model_level_window_sizes_a_sliding_kv_cache():
    """A Mixtral config.json with sliding_window 256 and no layer_types: vLLM 0.32 slides every
    layer, and the preflight sizes its KV cache in the sliding column, as the step model prices
    it (the preflight once counted every layer full)."""
    cfg = copy.deepcopy(preflight.shipped_config(MIXTRAL))
    cfg["sliding_window"] = 256
    full, sliding, linear = preflight.kv_bytes_per_token(cfg, 2, 2)
    assert full == 0 and linear == 0
    assert sliding == 32 * 2 * (8 // 2) * 128 * 2
    assert hfconfig.attention_kinds(cfg) == {"sliding window"}


def test_a_model_level_window_of_an_unknown_type_is_one_line_error():
    """A window without layer_types on a type whose sliding layers vLLM's code is not read for
    here is refused, in one line, by the preflight as by the step model."""
    cfg = {"model_type": "olmoe", "num_hidden_layers": 4, "sliding_window": 256,
           "max_position_embeddings": 4096, "hidden_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 64}
    with pytest.raises(InputError, match="sliding_window = 256") as exc:
        preflight.kv_bytes_per_token(cfg, 1, 2)
    assert "\n" not in str(exc.value)


def _paper() -> Config:
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((REPO / "config/paper.yaml").read_text()))
    return Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")


@pytest.mark.usefixtures("study_drafters")
def test_the_paper_configurations_gpu_preflight_is_unchanged(monkeypatch):
    """config/paper.yaml's GPU preflight finds and sizes the same with the one reader as with its
    model-level window rule left out (the old preflight's reading of a config without
    layer_types): none of its models and drafters slides by a model-level window."""
    def run():
        report = _paper().preflight(with_vllm=False)
        return sorted(f.line() for f in report.findings), dict(report.memory)

    now = run()
    monkeypatch.setattr(hfconfig, "_window_on_every_layer", lambda r: False)
    assert run() == now
    assert now[1]  # the memory of its GPU jobs was sized
