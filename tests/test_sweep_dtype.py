"""The dtype each model of a serving series ran in: vLLM gives the draft inside an SD engine the
target's resolved dtype, while a drafter served alone with dtype "auto" resolves its own
checkpoint's. Each series records them (resolved_dtype, draft_resolved_dtype), resolved by
vLLM's own function on this platform (runtime.engine.resolved_dtypes)."""

import json
import shutil

import pytest

from specmoe.contracts import Named
from specmoe.provenance import read_json

pytest.importorskip("vllm")

DS = "tinybench"
# a config.json of the tiny models' kind (a dense Qwen3), in the dtype its checkpoint was saved in
CONFIG = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 300,
          "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 128,
          "max_position_embeddings": 1024}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Checkpoints sharing one tokenizer (trained in seconds), each a config.json saved in
    another dtype (bf16: a study target's; fp16; fp32: the tiny models'); no engine reads
    their weights here."""
    from specmoe.runtime import tiny

    root = tmp_path_factory.mktemp("dtypes")
    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 300, root / "tok")
    out = {}
    for dtype in ("bfloat16", "float16", "float32"):
        shutil.copytree(root / "tok", root / dtype)
        (root / dtype / "config.json").write_text(json.dumps({**CONFIG, "torch_dtype": dtype}))
        out[dtype] = root / dtype
    return out


def test_the_draft_inside_sd_runs_in_the_targets_resolved_dtype(checkpoints):
    """What the series record is vLLM's own answer: the dtype its ModelConfig resolves for the
    target and the one its SpeculativeConfig gives the draft model (the target's, whatever the
    draft's checkpoint says), on this platform. With "auto", a bf16 target drafts with an fp16
    drafter in bfloat16, while the drafter served alone runs in float16; an fp32 checkpoint is
    served in the platform's first half type (bfloat16 on an x86 CPU)."""
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    from specmoe.runtime.engine import engine_kwargs, resolved_dtypes

    def vllms(target, drafter, dtype):
        """(target's dtype, draft's) by vLLM's own configs, as an engine builds them."""
        t = ModelConfig(model=str(target), tokenizer=str(target), dtype=dtype,
                        skip_tokenizer_init=True)
        if drafter is None:
            return str(t.dtype).removeprefix("torch."), None
        s = SpeculativeConfig(model=str(drafter), method="draft_model", num_speculative_tokens=3,
                              target_model_config=t, target_parallel_config=ParallelConfig())
        return tuple(str(m.dtype).removeprefix("torch.") for m in (t, s.draft_model_config))

    bf16, fp16, fp32 = checkpoints["bfloat16"], checkpoints["float16"], checkpoints["float32"]
    seen = {}
    for target, drafter, dtype in ((bf16, fp16, "auto"), (fp16, None, "auto"),
                                   (fp32, None, "auto"), (bf16, fp32, "float32")):
        got = resolved_dtypes(engine_kwargs(target, drafter, 3 if drafter else None, dtype=dtype))
        assert (got["target"], got["draft"]) == vllms(target, drafter, dtype), (target, drafter)
        seen[(target.name, drafter.name if drafter else None, dtype)] = got
    # the draft takes the target's resolved dtype; alone, "auto" resolves the drafter's own
    assert seen[("bfloat16", "float16", "auto")] == {"target": "bfloat16", "draft": "bfloat16"}
    assert seen[("float16", None, "auto")] == {"target": "float16", "draft": None}
    assert seen[("bfloat16", "float32", "float32")] == {"target": "float32", "draft": "float32"}
    # "auto" serves an fp32 checkpoint in the platform's first supported type, a half type
    from vllm.platforms import current_platform

    first = str(current_platform.supported_dtypes[0]).removeprefix("torch.")
    assert seen[("float32", None, "auto")]["target"] == first != "float32"


def test_auto_resolves_on_the_platform_the_engine_runs_on(checkpoints, monkeypatch):
    """The same checkpoints and "auto" on a GPU that has no bfloat16 (vLLM's platform answers
    float16 and float32): a bf16 target and its draft run in float16 there, and an fp32 drafter
    alone in float16 too; the resolution is the platform's, not the checkpoint's alone."""
    import torch
    import vllm.config.model as vllm_model

    from specmoe.runtime.engine import engine_kwargs, resolved_dtypes

    class OlderGpu:
        supported_dtypes = [torch.float16, torch.float32]

        def is_cpu(self):
            return False

        def get_device_name(self):
            return "a GPU without bfloat16"

        def get_device_capability(self):
            return None

    monkeypatch.setattr(vllm_model, "current_platform", OlderGpu())
    bf16, fp32 = checkpoints["bfloat16"], checkpoints["float32"]
    assert resolved_dtypes(engine_kwargs(bf16, fp32, 3, dtype="auto")) == {
        "target": "float16", "draft": "float16"}
    assert resolved_dtypes(engine_kwargs(fp32, dtype="auto"))["target"] == "float16"


def _sweep(checkpoints, tmp_path, monkeypatch, target: str, drafter: str | None,
           dtype: str) -> str:
    """A series written by the sweep stage (rule sweep_sd with a drafter, else sweep_ar) of
    checkpoint `target` in `dtype`, its engine stood in for by points as a CPU measures them
    (the stage's own code records what each model ran in); its path."""
    from specmoe.contracts.engines import SweepArParams, SweepSdParams
    from specmoe.runtime import serving
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import sweep_stage
    from test_sweep import point

    def reps(tpots, tau=None):
        return [point(b, t * f, tau=tau, per_pos=[0.5])
                | {"repeat": r, "reused": True,
                   "engine": {"request_time_per_output_token_ms": t * f}}
                for b, t in tpots for r, f in enumerate((1.0, 1.01, 0.995))]

    def series(engine, *a, paired=None, **kw):
        if paired:
            return ({DS: reps([(1, 8.0), (2, 9.0)], tau=2.0)},
                    {DS: reps([(1, 10.0), (2, 11.0)])})
        return {DS: reps([(1, 1.0), (2, 1.1)])}

    monkeypatch.setattr(serving, "run_series", series)
    sweep = {"schedule": [{"batch": b, "prompts": 4} for b in (1, 2)], "output_len": 16,
             "warmups": 0, "repeats": 3, "startup_timeout_s": 10, "dtype": dtype}
    name = f"{target}-{drafter}-{dtype}.json"
    if drafter:
        params = SweepSdParams(job={"model": "t", "drafter": "d", "k": 3, "datasets": [DS]},
                               settings=sweep, method=None, gpu=False,
                               prompts=prompt_table.DEFAULT_SOURCE, prompting={"draft_slack": 4})
        inputs = {"drafter": str(checkpoints[drafter])}
    else:
        params = SweepArParams(job={"model": "d", "k": None, "datasets": [DS]}, settings=sweep,
                               method=None, gpu=False, prompts=prompt_table.DEFAULT_SOURCE,
                               prompting={"draft_slack": 0})
        inputs = {}
    sweep_stage(Named({"target": str(checkpoints[target]), **inputs, "prompts": []}),
                Named({"json": str(tmp_path / name)}), params)
    return str(tmp_path / name)


def test_a_series_records_the_dtype_each_model_ran_in(checkpoints, tmp_path, monkeypatch):
    """A bf16 target drafting with an fp16 checkpoint, both series configured "auto": the series
    recorded "auto" alone, which says nothing of either. The SD series now records its target's
    resolved dtype, its draft's (the target's) and its no-SD engine's; the drafter served alone
    its own checkpoint's, and no draft."""
    sd = read_json(_sweep(checkpoints, tmp_path, monkeypatch, "bfloat16", "float16", "auto"))
    dr = read_json(_sweep(checkpoints, tmp_path, monkeypatch, "float16", None, "auto"))
    assert sd["engine"]["dtype"] == dr["engine"]["dtype"] == "auto"
    assert (sd["resolved_dtype"], sd["draft_resolved_dtype"],
            sd["paired_no_sd"]["resolved_dtype"]) == ("bfloat16",) * 3
    assert (dr["resolved_dtype"], dr["draft_resolved_dtype"]) == ("float16", None)
    # configured explicitly, every model runs in that dtype, whatever its checkpoint's
    sd = read_json(_sweep(checkpoints, tmp_path, monkeypatch, "bfloat16", "float16", "float32"))
    assert (sd["resolved_dtype"], sd["draft_resolved_dtype"]) == ("float32", "float32")
