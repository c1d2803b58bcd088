import numpy as np
import pytest

from specmoe.synth import SynthParams, generate


@pytest.fixture(scope="session")
def small_trace():
    """A synthetic trace with stickiness, skew and acceptance tied to overlap."""
    return generate(SynthParams(num_experts=32, top_k=4, num_layers=3, k_draft=3, skew=0.7,
                                stickiness=0.4, requests=40, steps=30, accept_prob=0.7,
                                accept_overlap_tie=2.0, categories=["a", "b"], seed=7))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """A tokenizer, a briefly trained tiny MoE target and dense drafter (about 30 s on 2 cores)."""
    pytest.importorskip("torch")
    from specmoe.stages import models as modelstages

    root = tmp_path_factory.mktemp("models")
    tiny_cfg = {"vocab_size": 512, "max_train_tokens": 300_000, "max_heldout_tokens": 20_000,
                "train": {"seq_len": 64, "batch_size": 16, "lr": 0.004, "warmup": 10,
                          "eval_batches": 2, "threads": 2}}
    modelstages.tokenizer_stage(tiny_cfg, root / "tokenizer")
    target = {"name": "t", "arch": {"kind": "moe", "hidden": 64, "layers": 2, "heads": 2,
                                    "kv_heads": 1, "head_dim": 32, "num_experts": 16,
                                    "top_k": 4, "expert_intermediate": 16}, "steps": 150}
    drafter = {"name": "d", "arch": {"kind": "dense", "hidden": 64, "layers": 1, "heads": 2,
                                     "kv_heads": 1, "head_dim": 32, "intermediate": 128},
               "steps": 150}
    modelstages.train_stage(target, tiny_cfg, root / "tokenizer", root / "t", progress=False)
    modelstages.train_stage(drafter, tiny_cfg, root / "tokenizer", root / "d", progress=False)
    return root
