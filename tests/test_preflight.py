"""The preflight of GPU jobs (specmoe.checks.preflight, specmoe.checks.vllmcheck) on the study's configuration and
on broken copies of it, and the GPU plan offline: config/paper.yaml passes, and a job that cannot
start (weights past the GPU's memory, TP that splits no heads, MTP on a model without MTP layers, an
engine argument vLLM does not know, an architecture it does not know) stops the dry run in one
line naming the job, the check and the numbers."""

from __future__ import annotations

import copy
import json
import math
import os
import re

import pytest
import yaml
from snakemake.utils import update_config

from hubfake import drafter_stand_in, lay_out_cache, lay_out_study_drafters
from specmoe.checks import preflight
from specmoe.config import Config
from wf import REPO, copy_workflow, snakemake

# The study's drafters read from stand-ins of their config.json (conftest.study_drafters).
pytestmark = pytest.mark.usefixtures("study_drafters")

PAPER = yaml.safe_load((REPO / "config/paper.yaml").read_text())
GIB = 2**30


def paper(edit=None) -> Config:
    """config/paper.yaml over config.yaml, as `--configfile` merges it, with an edit."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(cfg, copy.deepcopy(PAPER))
    if edit:
        edit(cfg)
    return Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")


def only(name, **kw):
    """An edit: the paper's model `name` alone, changed."""
    def edit(cfg):
        m = next(m for m in cfg["models"] if m["name"] == name)
        m.update(kw)
        cfg["models"] = [m]
    return edit


# --- the model's shape, against numbers published elsewhere -----------------------------------

@pytest.mark.parametrize("repo,billions", [
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7), ("Qwen/Qwen2-57B-A14B-Instruct", 57.4),
    ("Qwen/Qwen3-30B-A3B", 30.5), ("Qwen/Qwen3-235B-A22B-Instruct-2507", 235.0),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", 80.0),
])
def test_weights_are_the_model_cards_parameter_counts(repo, billions):
    """Every layer's experts, attention and dense weights plus embeddings and LM head, in bf16:
    the parameter counts the model cards give (within 2%: norms and routers are left out)."""
    params = preflight.weight_bytes(preflight.shipped_config(repo), "bf16", 1) / 2
    assert params / 1e9 == pytest.approx(billions, rel=0.02)


def test_kv_cache_per_token_as_vllm_splits_and_replicates_heads():
    qwen = preflight.shipped_config("Qwen/Qwen3-30B-A3B")       # 48 layers, 4 KV heads of 128
    assert preflight.kv_bytes_per_token(qwen, 1, 2)[0] == 48 * 2 * 4 * 128 * 2
    assert preflight.kv_bytes_per_token(qwen, 2, 2)[0] == 48 * 2 * 2 * 128 * 2
    assert preflight.kv_bytes_per_token(qwen, 8, 2)[0] == 48 * 2 * 1 * 128 * 2  # replicated
    glm = preflight.shipped_config("zai-org/GLM-4.7-Flash")     # MLA: one latent on every GPU
    assert preflight.kv_bytes_per_token(glm, 2, 2)[0] == 47 * (512 + 64) * 2
    oss = preflight.shipped_config("openai/gpt-oss-120b")       # half the layers a 128-window
    full, sliding, _ = preflight.kv_bytes_per_token(oss, 4, 2)
    assert full == sliding == 18 * 2 * 2 * 64 * 2
    nxt = preflight.shipped_config("Qwen/Qwen3-Next-80B-A3B-Instruct")  # linear attention: a state
    full, _, state = preflight.kv_bytes_per_token(nxt, 1, 2)
    assert full == 12 * 2 * 2 * 256 * 2 and state > 0


def engine(repo, tp, method=None, k=0, hardware="H100", **kw) -> preflight.Engine:
    """A GPU job of the shipped checkpoint `repo` on a shipped GPU, its engine as the study sets
    it (gpu_memory_utilization 0.9, the server), one 1,024-token sequence."""
    hw = paper().hardware[hardware]
    return preflight.Engine(**{
        "job": f"sweep_sd {repo}/K{k}", "model": repo, "entry": {"repo_id": repo},
        "hardware": hw, "hardware_name": hardware, "tp": tp, "precision": "auto",
        "method": method, "drafter": None, "k": k, "max_model_len": 1024, "batch": 1,
        "output_tokens": 0, "prompt_tokens": {}, "utilization": 0.9, "offline_server": False,
        **kw})


def test_linear_attention_state_with_mtp_as_vllms_shape_calculator():
    """Qwen3.5-35B at TP 2 with MTP K = 3: vLLM 0.32 keeps 1 + K states per linear-attention
    layer and sequence, each a page of vLLM's own shape calculator (conv state of kernel - 1 + K
    rows: 573,440 bytes), where the preflight once counted one state of kernel - 1 rows."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    repo = "Qwen/Qwen3.5-35B-A3B"
    c = preflight._text(preflight.shipped_config(repo))
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
        2, c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
        c["linear_value_head_dim"], c["linear_conv_kernel_dim"], num_spec=3)
    page = sum(math.prod(s) for s in shapes) * 2  # bf16
    assert page == 573_440
    m = preflight.memory(engine(repo, 2, "mtp", 3), preflight.shipped_config(repo), None)
    assert m.kv_per_seq >= 30 * (1 + 3) * page
    alone = preflight.memory(engine(repo, 2), preflight.shipped_config(repo), None)
    assert alone.kv_per_seq < 30 * 2 * page  # no SD: one state


def test_linear_attention_state_bytes_are_one_state_each_counted_once_by_memory():
    """kv_bytes_per_token multiplied the state by 1 + K and memory divided it back out before
    multiplying by its own count: the function gives one state per sequence of every
    linear-attention layer (a state of K's conv rows), memory alone counts the states (1 + K, 2 + K
    with prefix caching; test_linear_attention_state_with_mtp_as_vllms_shape_calculator holds
    memory to vLLM's count); one dtype-size rule (_dtype_bytes) for the weights, KV and
    states."""
    repo = "Qwen/Qwen3.5-35B-A3B"
    cfg = preflight.shipped_config(repo)
    c = preflight._text(cfg)
    _, _, linear = preflight.kv_bytes_per_token(cfg, 2, 2, 3)
    assert linear == 30 * preflight.state_page(c, 2, 3) == 30 * 573_440
    assert [preflight._dtype_bytes(n) for n in ("float32", "float", "bfloat16", "float16",
                                               "half", "fp8", "fp8_e4m3")] == [4, 4, 2, 2, 2, 1, 1]


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_logits_activation_does_not_shrink_with_tp(tp):
    """vLLM's LogitsProcessor all-gathers the logits: every GPU holds the fp32 logits (and their
    copy) of each sequence over the whole vocabulary, whatever the TP; the preflight once divided
    them by TP."""
    cfg = preflight.shipped_config("Qwen/Qwen3-235B-A22B-Instruct-2507")
    logits = preflight.activation_bytes(cfg, tp, 8192, 256) - \
        preflight.activation_bytes(cfg, tp, 8192, 0)
    assert logits == 256 * cfg["vocab_size"] * 4 * 2


def test_sliding_window_layers_hold_what_vllms_sliding_window_spec_reserves():
    """GPT-OSS-120B's TP 4 sweep (the server: max_num_batched_tokens 8192, two batches in flight
    under async scheduling): each of its 18 sliding-window layers holds, at start and per
    sequence, the blocks vLLM 0.32's SlidingWindowSpec reserves (the window plus 16,384 tokens in
    flight, up to max_model_len), where the preflight once counted the 128-token window alone;
    its layers in vLLM's two groups of 19 slots (test_gpt_oss_and_its_eagle3_head_pay_vllms_
    padding_slot), a full-attention layer's blocks whole."""
    import torch
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    c = paper(only("gpt-oss-120b-tp4"))
    job = next(j for j in c.gpu_jobs() if j.rule == "sweep_sd")
    e = c.engine_of(job)
    cfg = preflight.offline_config(e.entry)[0]
    spec = SlidingWindowSpec(block_size=16, num_kv_heads=8 // 4, head_size=64,
                             dtype=torch.bfloat16, sliding_window=128)
    blocks = spec.max_admission_blocks_per_request(max_in_flight_tokens=2 * 8192,
                                                   max_model_len=e.max_model_len)
    assert (e.max_model_len, blocks) == (36864, 16384 // 16 + 8 + 1)
    m = preflight.memory(e, cfg, preflight.offline_config(e.drafter)[0])
    page = 19 * spec.page_size_bytes  # a block of a group of 19 layer slots
    assert m.kv_start == page * (36864 // 16 + blocks)
    held = min(-(-m.seq_tokens // 16), blocks)
    assert m.kv_per_seq == page * (-(-m.seq_tokens // 16) + held)


@pytest.mark.parametrize("layout", ["LBHNC", "BLHNC"])
def test_gpt_oss_and_its_eagle3_head_pay_vllms_padding_slot(layout):
    """GPT-OSS-120B's TP 4 sweep with its EAGLE-3 head: 18 full-attention and 18 sliding-window
    layers, and the head's own full-attention layer (its config.json's KV heads), which vLLM 0.32
    registers beside the target's. vLLM's own get_kv_cache_groups, run on this CPU on those
    layers' KV-cache specs, makes a group of 19 full-attention layers and one of 18
    sliding-window layers padded to 19 slots; its startup check
    (_max_memory_usage_bytes_from_groups: every group's blocks at max_model_len, each a page of
    19 slots, in either layout) is the preflight's startup KV cache, and a sequence costs the
    same blocks. The preflight once counted 37 layers token by token (8.5 MB less at start) for
    every model but a hybrid one."""
    from types import SimpleNamespace

    import torch
    from vllm.config import CacheConfig
    from vllm.v1.core.kv_cache_utils import (_max_memory_usage_bytes_from_groups,
                                             _pool_bytes_per_block, get_kv_cache_groups)
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    c = paper(only("gpt-oss-120b-tp4"))
    e = c.engine_of(next(j for j in c.gpu_jobs() if j.rule == "sweep_sd"))
    cfg, head = preflight.offline_config(e.entry)[0], preflight.offline_config(e.drafter)[0]
    assert e.method == "eagle3" and head is not None

    def attention(c, **kw):
        return dict(block_size=preflight.BLOCK_TOKENS, num_kv_heads=c["num_key_value_heads"] // 4,
                    head_size=c["head_dim"], dtype=torch.bfloat16, **kw)

    specs = {f"model.layers.{i}.attn": SlidingWindowSpec(**attention(
        cfg, sliding_window=cfg["sliding_window"])) if kind == "sliding_attention" else
        FullAttentionSpec(**attention(cfg)) for i, kind in enumerate(cfg["layer_types"])}
    specs["draft.layers.0.attn"] = FullAttentionSpec(**attention(head))
    cache = CacheConfig()
    cache.kv_cache_layout = layout
    vllm_config = SimpleNamespace(
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False),
        cache_config=cache, speculative_config=None,
        attention_config=SimpleNamespace(hisparse_config=None),
        model_config=SimpleNamespace(max_model_len=e.max_model_len),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        max_in_flight_tokens=preflight.BATCHES_IN_FLIGHT * 8192)  # the server's batched tokens
    groups = get_kv_cache_groups(vllm_config, dict(specs))
    assert sorted((type(g.kv_cache_spec).__name__, len(g.layer_names)) for g in groups) == [
        ("FullAttentionSpec", 19), ("SlidingWindowSpec", 18)]
    block = _pool_bytes_per_block(vllm_config, groups)
    assert block == 19 * specs["draft.layers.0.attn"].page_size_bytes  # one slot padded

    m = preflight.memory(e, cfg, head)
    assert m.kv_start == _max_memory_usage_bytes_from_groups(vllm_config, groups)
    sliding = next(g.kv_cache_spec for g in groups if len(g.layer_names) == 18)
    cap = sliding.max_admission_blocks_per_request(vllm_config.max_in_flight_tokens,
                                                   e.max_model_len)
    blocks = -(-m.seq_tokens // 16)
    assert m.kv_per_seq == block * (blocks + min(blocks, cap))


def test_an_h100s_budget_is_the_memory_it_reports_to_cuda():
    """vLLM's gpu_memory_utilization takes its share of the memory the device reports (torch's
    total_memory; an H100 SXM's nvidia-smi shows 81,559 MiB), not the datasheet's 80 GB read as
    80 GiB (81,920 MiB), which the preflight once budgeted; the step model's memory_gib stays the
    datasheet's, and a configuration that sets its own memory_gib is budgeted by it."""
    repo = "Qwen/Qwen3-30B-A3B"
    m = preflight.memory(engine(repo, 1), preflight.shipped_config(repo), None)
    assert m.budget <= 81_559 * 2**20 * 0.9
    assert paper().hardware["H100"]["memory_gib"] == 80
    own = paper(lambda c: c["hardware"].update(H100={"memory_gib": 94})).hardware["H100"]
    assert preflight.capacity(own)[0] == 94 * GIB


@pytest.mark.parametrize("repo,tp,problem", [
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, None),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 3, "does not divide the 32 attention heads"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", 8, None),  # 4 KV heads replicated over 8 GPUs
    ("Qwen/Qwen3-30B-A3B-FP8", 2, None),
    ("Qwen/Qwen3-30B-A3B-FP8", 4, "768 / 4 = 192, is not a multiple of the fp8 weight block 128"),
    ("Qwen/Qwen3-30B-A3B", 4, None),  # the same width in bf16 has no block
    ("zai-org/GLM-4.7-Flash", 4, None),
    ("zai-org/GLM-4.7-Flash", 8, "does not divide the 20 attention heads"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", 32, "linear_num_key_heads = 16"),
])
def test_tensor_parallelism_as_vllm_splits_a_model(repo, tp, problem):
    found = "; ".join(preflight.tp_problems(preflight.shipped_config(repo), tp))
    assert (problem in found) if problem else found == ""


# --- config/paper.yaml and broken copies, offline ----------------------------------------------

def test_the_study_configuration_passes():
    """Every GPU job of config/paper.yaml whose config.json ships starts, and its KV cache holds
    the largest batch of each dataset it runs: SPEED-Bench's 32k prompts, swept up to their
    max_batch 32, fit Qwen3-30B's at TP 2 (about 35 of them, where batch 128 once queued)."""
    c = paper()
    report = c.preflight(with_vllm=False)
    assert report.fatal == []
    sized = {j.split()[1].split("/")[0] for j in report.memory}
    assert {"mixtral-8x7b-bf16-tp2", "qwen3-235b-bf16-tp8", "gpt-oss-120b-tp4",
            "glm-4.7-flash-bf16-tp1", "mixtral-8x7b-fp8-tp1-b200"} <= sized
    assert [f.line() for f in report.findings if f.check == "memory"] == []
    assert all(m.headroom > 0 for m in report.memory.values())
    tight = min(report.memory.values(), key=lambda m: m.headroom)
    assert (tight.dataset, tight.batch, tight.seq_tokens) == ("speed-bench-32k", 32, 33028)
    assert 32 <= tight.sequences < 64


def test_the_long_context_sets_max_batch_is_the_largest_batch_every_model_holds():
    """speed-bench-32k's max_batch in config/paper.yaml is the schedule's largest batch whose
    sequences the preflight's KV-cache estimate fits on every model that sweeps it (Qwen3-30B at
    TP 2 and GPT-OSS-120B at TP 4 on H100s), at each model's largest K."""
    import dataclasses

    ds = "speed-bench-32k"
    c = paper()
    held = {}
    for job in c.gpu_jobs():
        if job.rule != "sweep_sd" or ds not in c.models[job.model].datasets:
            continue
        e = c.engine_of(job)
        alone = dataclasses.replace(e, prompt_tokens={ds: e.prompt_tokens[ds]}, batches={})
        cfg = preflight.offline_config(e.entry)[0]
        m = preflight.memory(alone, cfg, preflight.offline_config(e.drafter)[0])
        held[job.model] = min(held.get(job.model, m.sequences), m.sequences)
    assert set(held) == {"qwen3-30b-fp8-tp2", "gpt-oss-120b-tp4"}
    assert held["qwen3-30b-fp8-tp2"] == 35 and held["gpt-oss-120b-tp4"] == 119
    fits = max(b for b, _ in c.sweep_schedule("mt-bench") if b <= min(held.values()))
    assert c.max_batch(ds) == fits == 32
    # the README and paper.yaml quote these estimates (the README said 180 for GPT-OSS-120B, an
    # estimate from before the KV cache's groups were counted as vLLM counts them)
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"about {held['qwen3-30b-fp8-tp2']} sequences do" in readme
    assert f"GPT-OSS-120B's cache would hold {held['gpt-oss-120b-tp4']})" in readme
    paper_text = (REPO / "config" / "paper.yaml").read_text()
    assert f"{held['gpt-oss-120b-tp4']} GPT-OSS-120B's at TP 4" in paper_text


def test_the_gpu_plan_sizes_a_pinned_model_from_its_download_and_says_so(tmp_path):
    """A planned study model that pins a revision is sized from its config-only download at
    that revision (contracts.report.plan_config asks for it though the package ships a copy),
    and the plan's provenance names where each model's config.json came from."""
    from types import SimpleNamespace

    from specmoe.contracts.report import PlanParams, plan_config
    from specmoe.stages.report import plan_stage

    name, repo, rev = "glm-4.7-flash-bf16-tp1", "zai-org/GLM-4.7-Flash", "0123456789" * 4
    assert plan_config(paper(only(name)), name) == []
    pinned = paper(only(name, revision=rev))
    assert plan_config(pinned, name) == ["results/downloads/zai-org--GLM-4.7-Flash.config.json"]
    snap = tmp_path / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(preflight.shipped_config(repo)))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"repo_id": repo, "mode": "config", "revision_requested": rev,
                                    "commit": rev, "snapshot_path": str(snap)}))

    def sources(cfg, tag):
        params = PlanParams.from_config(cfg)
        entries = [{**e, "manifest": str(manifest) if e["manifest"] else None}
                   for e in params.entries]
        out = SimpleNamespace(json=tmp_path / f"{tag}.json", md=tmp_path / f"{tag}.md")
        plan_stage(None, out, PlanParams(entries, params.config, params.unplanned,
                                         params.prompt_tokens))
        return json.loads(out.json.read_text())["provenance"]["config_sources"]

    assert sources(pinned, "pinned") == {name: "download"}
    assert sources(paper(only(name)), "shipped") == {name: "package"}


def test_the_gpu_plan_bills_a_capped_dataset_at_its_own_points(tmp_path):
    """The plan bills a series' dataset at the points it runs (up to its max_batch): without
    speed-bench-32k's cap, Qwen3-30B's TP 2 series would bill its 32k prompts at batches 64 and
    128 too (3,840 more requests per repeat and arm); the capture, on its own batch, and a
    series without the dataset are unchanged."""
    from types import SimpleNamespace

    from specmoe.contracts.report import PlanParams
    from specmoe.stages.report import plan_stage

    def bill(edit, name):
        params = PlanParams.from_config(paper(edit))
        entry = next(e for e in params.entries if e["name"] == "qwen3-30b-fp8-tp2")
        out = SimpleNamespace(json=tmp_path / f"{name}.json", md=tmp_path / f"{name}.md")
        plan_stage(None, out, params)
        return entry["schedules"], {(j["rule"], j["model"], j["k"], j["dataset"]): j["hours"]
                                    for j in json.loads(out.json.read_text())["jobs"]}

    (schedules, capped) = bill(None, "capped")
    (whole, every) = bill(lambda cfg: cfg["datasets"]["speed-bench-32k"].pop("max_batch"),
                          "every")
    assert [b for b, _ in schedules["speed-bench-32k"]] == [1, 2, 4, 8, 16, 32]
    assert schedules["mt-bench"] == whole["mt-bench"] == whole["speed-bench-32k"]
    series = ("sweep_sd", "qwen3-30b-fp8-tp2", 3, "")
    assert capped[series] < 0.6 * every[series]
    assert capped[("capture", "qwen3-30b-fp8-tp2", 3, "speed-bench-32k")] == \
        every[("capture", "qwen3-30b-fp8-tp2", 3, "speed-bench-32k")]
    mt_bench_only = ("sweep_sd", "qwen3-30b-fp8-tp1", 3, "")
    assert capped[mt_bench_only] == every[mt_bench_only]


def test_a_pinned_revision_reads_its_own_config_json_not_the_packages_copy(tmp_path, monkeypatch):
    """The package's config.json copies were made at commits nobody recorded
    (data/hf_configs/SOURCE.md): an entry that pins a revision reads its download at that
    revision (or the cache), as `specmoe predict --revision` does; one without reads the copy. A
    download of another revision is not read for it."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    repo, rev = "Qwen/Qwen3-30B-A3B-FP8", "0123456789abcdef0123456789abcdef01234567"
    snap = tmp_path / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(
        {**preflight.shipped_config(repo), "num_experts": 64, "num_experts_per_tok": 4}))
    manifest = tmp_path / "Qwen--Qwen3-30B-A3B-FP8.config.json"
    manifest.write_text(json.dumps({"repo_id": repo, "mode": "config", "revision_requested": rev,
                                    "commit": rev, "snapshot_path": str(snap)}))
    cfg, source = preflight.offline_config({"repo_id": repo, "revision": rev}, manifest)
    assert (source, cfg["num_experts"], cfg["num_experts_per_tok"]) == ("download", 64, 4)
    cfg, source = preflight.offline_config({"repo_id": repo}, manifest)
    assert (source, cfg["num_experts"], cfg["num_experts_per_tok"]) == ("package", 128, 8)
    assert preflight.offline_config({"repo_id": repo, "revision": "f" * 40}, manifest) == (
        None, preflight.MISSING)
    # an unpinned download whose recorded commit was then copied into the configuration
    manifest.write_text(json.dumps({"repo_id": repo, "mode": "config", "revision_requested": None,
                                    "commit": rev, "snapshot_path": str(snap)}))
    for pinned in (rev, rev[:12]):
        assert preflight.offline_config({"repo_id": repo, "revision": pinned}, manifest)[1] == \
            "download"


def test_a_pinned_shipped_model_without_its_download_stops_the_run(tmp_path, monkeypatch):
    """A study model that pins a revision is checked against that revision's config.json: the
    package's copy does not stand in for it, so without its download it is the fatal line."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    lines = paper(only("glm-4.7-flash-bf16-tp1", revision="0" * 40)).preflight(
        with_vllm=False).lines(True)
    assert len(lines) == 1 and lines[0].startswith(
        "preflight: no config.json for glm-4.7-flash-bf16-tp1 (zai-org/GLM-4.7-Flash)"), lines
    assert "--revision" in lines[0]


def test_a_drafter_without_its_config_json_stops_the_run(tmp_path, monkeypatch):
    """#42: a drafter whose config.json is neither shipped nor cached cannot be checked (vLLM's
    checks and the fit to its target): every such drafter in one fatal line that says how to
    fetch it, where the preflight once said "not checked" and passed."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    lines = paper().preflight(with_vllm=False).lines(True)
    assert len(lines) == 1, lines
    assert re.match(
        r"preflight: no config\.json for drafter qwen2-0\.5b \(Qwen/Qwen2-0\.5B-Instruct\), "
        r"drafter eagle3-qwen3-30b \(RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator\.eagle3\), "
        r"drafter eagle3-qwen3-235b \(.*\), drafter eagle3-gpt-oss-120b "
        r"\(nvidia/gpt-oss-120b-Eagle3-long-context\): neither shipped with the package nor in "
        r"the Hugging Face cache, so their checks \(vLLM's among them\) cannot run: fetch each "
        r"once, where the Hub is reachable, with `specmoe download REPO --mode config` .*then run "
        r"again$", lines[0])
    # a target of another repository (not shipped) is named the same way
    lines = paper(only("qwen3-30b-bf16-tp1", repo_id="example/Not-Shipped")).preflight(
        with_vllm=False).lines(True)
    assert len(lines) == 1 and lines[0].startswith(
        "preflight: no config.json for qwen3-30b-bf16-tp1 (example/Not-Shipped), drafter "
        "eagle3-qwen3-30b"), lines


@pytest.mark.parametrize("edit,pattern", [
    (only("mixtral-8x7b-bf16-tp2", tp=1),
     r"^preflight: capture mixtral-8x7b-bf16-tp2/mixtral-draft/K3/mt-bench \(and 2 more of its "
     r"jobs\): memory: weights 87\.0 GiB \+ reserve [\d.]+ GiB \+ KV cache of "
     r"one 4,096-token sequence [\d.]+ GiB = 9\d\.\d GiB per GPU > TP 1 x 79\.65 GiB \(81,559 MiB "
     r"as CUDA reports it\) x gpu_memory_utilization 0\.9 = 71\.7 GiB per GPU$"),
    (only("mixtral-8x7b-bf16-tp2", tp=3),
     r"tensor parallelism: TP 3 does not divide the 32 attention heads; TP 3 neither divides the "
     r"8 KV heads nor is a multiple of them .*; TP 3 does not divide the expert width 14336$"),
    (only("qwen3-30b-fp8-tp1", drafters=["mtp"]),
     r"speculative method: method mtp, but qwen3-30b-fp8-tp1's config.json has no MTP layers"),
    (only("qwen3-30b-fp8-tp2", engine_args={}),
     r"context: speed-bench-32k's prompts \(about 32,768 tokens\) \+ \d+ output tokens \+ K\+1 = "
     r"[\d,]+ exceed max_model_len 4,096"),
    (only("qwen3-235b-fp8-tp4", tp=8),
     r"1536 / 8 = 192, is not a multiple of the fp8 weight block 128"),
    (lambda c: c["gpu"].update(memory_utilization=0.5) or only("qwen3-30b-bf16-tp1")(c),
     r"memory: weights 56\.8 GiB .* > TP 1 x 79\.65 GiB \(81,559 MiB as CUDA reports it\) x "
     r"gpu_memory_utilization 0\.5 = 39\.8 GiB"),
])
def test_a_broken_copy_stops_in_one_line(edit, pattern):
    report = paper(edit).preflight(with_vllm=False)
    lines = report.lines(True)
    assert len(lines) == 1 and re.search(pattern, lines[0]), lines


@pytest.mark.parametrize("name,repo", [
    ("qwen3.5-35b-bf16-tp2", "Qwen/Qwen3.5-35B-A3B"),
    ("qwen3-next-80b-bf16-tp4", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    ("glm-4.7-flash-bf16-tp1", "zai-org/GLM-4.7-Flash"),
])
def test_an_mtp_target_the_shipped_table_maps_passes_without_vllm(name, repo):
    """Method mtp where vLLM is not asked (the SLURM launcher's environment): the shipped table
    is keyed by the target's top-level architecture (vllmcheck.drafter_table), which Qwen3.5's
    config.json names outside its text_config; read from the text_config it was "?", "not in the
    shipped table", and the paper's Qwen3.5 model was refused. Mixtral, which the table maps to
    no MTP module, is still refused."""
    report = paper(only(name, repo_id=repo)).preflight(with_vllm=False)
    assert report.fatal == [], report.lines(True)
    c = paper(only(name, repo_id=repo))
    (e, *_) = [c.engine_of(j) for j in c.gpu_jobs() if c.engine_of(j).method == "mtp"]
    assert preflight.drafter_support(e, preflight.shipped_config(repo), None, [], False) == []
    mixtral = preflight.shipped_config("mistralai/Mixtral-8x7B-Instruct-v0.1")
    (refused,) = preflight.drafter_support(e, mixtral, None, [], False)
    assert refused.fatal and "has no MTP module for MixtralForCausalLM" in refused.message


def test_a_config_json_the_checks_cannot_read_names_its_model_or_drafter(tmp_path, monkeypatch):
    """A config.json the model's reading refuses (4 KV heads that do not divide 30 attention
    heads; a draft model whose 14 heads TP 4 does not divide, served at its target's TP) is one
    fatal line per model naming the model or the drafter and its repository, every model
    checked: the error once stopped the preflight at the first such model as "config.json: 4
    key/value heads do not divide the 30 attention heads", naming neither, and the drafter's
    read like its target's. The drafter's own series, served alone at its target's TP, is one
    line of its own."""
    cache = lay_out_study_drafters(tmp_path / "hub")
    odd = {**preflight.shipped_config("Qwen/Qwen3-30B-A3B"), "num_attention_heads": 30}
    lay_out_cache(cache, "me/odd-moe", {"config.json": json.dumps(odd).encode()})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def edit(cfg):
        base = next(m for m in cfg["models"] if m["name"] == "qwen3-30b-bf16-tp1")
        big = next(m for m in cfg["models"] if m["name"] == "qwen3-235b-fp8-tp4")
        cfg["models"] = [{**base, "name": "odd", "repo_id": "me/odd-moe"},
                         {**big, "drafters": ["qwen2-0.5b"]}]
        cfg["models"][0].pop("overlaps", None)

    lines = paper(edit).preflight(with_vllm=False).lines(True)
    assert len(lines) == 3, lines
    assert re.search(r"^preflight: capture odd/.*: config\.json: model odd \(me/odd-moe\): 4 "
                     r"key/value heads do not divide the 30 attention heads$", lines[0]), lines
    assert re.search(r"^preflight: capture qwen3-235b-fp8-tp4/qwen2-0\.5b/.*: config\.json: "
                     r"drafter qwen2-0\.5b \(Qwen/Qwen2-0\.5B-Instruct\): TP 4 does not divide "
                     r"the 14 attention heads$", lines[1]), lines
    # the drafter's own series, served alone at the TP it drafts at (its target's)
    assert re.search(r"^preflight: sweep_ar qwen2-0\.5b/ar-auto-tp4: tensor parallelism: TP 4 "
                     r"does not divide the 14 attention heads$", lines[2]), lines


def test_a_config_without_vocab_size_is_refused_never_sized_without_its_lm_head(tmp_path,
                                                                              monkeypatch):
    """Qwen3-30B's config.json without vocab_size: its embeddings, LM head and logits were read
    as none (1.16 GiB of weights gone from its memory check) while `specmoe predict` refuses it;
    now each reading refuses it, and the preflight gives one fatal line naming the model."""
    from specmoe.errors import InputError

    cfg = {k: v for k, v in preflight.shipped_config("Qwen/Qwen3-30B-A3B").items()
           if k != "vocab_size"}
    lacks = r"^config.json: lacks any of vocab_size$"
    for read in (lambda: preflight.weight_bytes(cfg, "bf16", 1),
                 lambda: preflight.activation_bytes(cfg, 1, 8192, 8),
                 lambda: preflight.drafter_bytes(cfg, None, "eagle3", 1),
                 lambda: preflight.check(engine("Qwen/Qwen3-30B-A3B", 1), cfg, "package")):
        with pytest.raises(InputError, match=lacks):
            read()
    cache = lay_out_study_drafters(tmp_path / "hub")
    lay_out_cache(cache, "me/novocab", {"config.json": json.dumps(cfg).encode()})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def edit(c):
        base = next(m for m in c["models"] if m["name"] == "qwen3-30b-bf16-tp1")
        c["models"] = [{**base, "name": "novocab", "repo_id": "me/novocab"}]
        c["models"][0].pop("overlaps", None)

    lines = paper(edit).preflight(with_vllm=False).lines(True)
    assert len(lines) == 1 and re.search(r"^preflight: capture novocab/.*: config\.json: model "
                                         r"novocab \(me/novocab\): lacks any of vocab_size$",
                                         lines[0]), lines


EAGLE_30B = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"


def _no_hidden_size(repo):
    return json.dumps({k: v for k, v in (preflight.shipped_config(repo) or
                                         drafter_stand_in(repo)).items()
                       if k != "hidden_size"}).encode()


@pytest.mark.parametrize("repo, content, line", [
    ("me/odd-moe", b'{"architectures": ["Qwen3MoeForCausalLM"], "hidden_si',
     r"config\.json: model odd \(me/odd-moe\): \S+/config\.json: not valid JSON \("),
    ("me/odd-moe", b'["a", "list"]',
     r"config\.json: model odd \(me/odd-moe\): \S+/config\.json: a JSON object of settings, "
     r"not a list$"),
    ("me/odd-moe", _no_hidden_size("Qwen/Qwen3-30B-A3B"),
     r"config\.json: model odd \(me/odd-moe\): lacks any of hidden_size$"),
    (EAGLE_30B, _no_hidden_size(EAGLE_30B),
     r"config\.json: drafter eagle3-qwen3-30b \(RedHatAI/Qwen3-30B-A3B-Instruct-2507-"
     r"speculator\.eagle3\): lacks any of hidden_size$"),
])
def test_a_malformed_config_json_is_one_fatal_line_never_a_traceback(tmp_path, monkeypatch, repo,
                                                                     content, line):
    """A truncated snapshot's config.json, one that is no JSON object, a target without
    hidden_size beside its EAGLE-3 head and an EAGLE-3 head without it: one fatal line naming
    the model or drafter and its repository; they once stopped the preflight with a
    JSONDecodeError, a TypeError or a KeyError traceback, or (the head) passed unchecked."""
    cache = lay_out_study_drafters(tmp_path / "hub")
    lay_out_cache(cache, repo, {"config.json": content})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def edit(c):
        base = next(m for m in c["models"] if m["name"] == "qwen3-30b-bf16-tp1")
        c["models"] = [{**base, "name": "odd", "repo_id": "me/odd-moe"}
                       if repo == "me/odd-moe" else base]
        c["models"][0].pop("overlaps", None)

    cfg = paper(edit)
    lines = cfg.preflight(with_vllm=False).lines(True)
    assert len(lines) == 1 and re.search(r"^preflight: \S+ [^:]*: " + line, lines[0]), lines


def test_the_context_check_reads_the_positions_as_vllm_does():
    """DBRX gives its positions as max_seq_len (32,768): max_model_len 131,072 was let through,
    the check reading max_position_embeddings alone and skipping where it was absent. Now the
    smallest of vLLM's keys; none of them is a fatal finding (the check cannot run)."""
    dbrx = preflight._text(json.loads((REPO / "tests/fixtures/hf_configs/dbrx-instruct.json")
                                      .read_text()))
    e = engine("Qwen/Qwen3-30B-A3B", 1, max_model_len=131072)
    (found,) = preflight._context(e, dbrx)
    assert found.fatal and found.message == ("max_model_len 131,072 exceeds the model's 32,768 "
                                             "positions (max_seq_len)")
    qwen = preflight.shipped_config("Qwen/Qwen3-30B-A3B")  # 40,960 positions
    assert preflight._context(e, {**qwen, "seq_length": 8192})[0].message.endswith(
        "8,192 positions (seq_length)")
    assert not preflight._context(engine("Qwen/Qwen3-30B-A3B", 1, max_model_len=40960), qwen)
    (none,) = preflight._context(e, {k: v for k, v in qwen.items()
                                     if k != "max_position_embeddings"})
    assert none.fatal and re.match(r"config\.json gives none of max_position_embeddings, "
                                   r"n_positions, max_seq_len, .*: whether max_model_len 131,072 "
                                   r"fits the model's positions cannot be checked", none.message)


def test_the_position_keys_are_vllms():
    """POSITION_KEYS is vLLM's list (derive_max_model_len_and_key's possible_keys, read from its
    source), and the positions it derives from each mix of them are vLLM's."""
    import ast
    import inspect
    import textwrap
    from types import SimpleNamespace

    from specmoe.cost.hfconfig import POSITION_KEYS, max_positions

    pytest.importorskip("vllm.config")  # first: the convertor's module imports from it
    convertor = pytest.importorskip("vllm.transformers_utils.model_arch_config_convertor")
    derive = convertor.ModelArchConfigConvertorBase.derive_max_model_len_and_key
    tree = ast.parse(textwrap.dedent(inspect.getsource(derive)))
    (keys,) = [ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", "") == "possible_keys"]
    assert tuple(keys) == POSITION_KEYS
    for values in ({"max_position_embeddings": 4096}, {"max_seq_len": 32768},
                   {"max_position_embeddings": 40960, "seq_length": 8192},
                   {"n_positions": 2048, "seq_len": 2048},
                   {"max_position_embeddings": 2048, "model_max_length": 8192}):
        text = SimpleNamespace(**values)
        length, key = derive(SimpleNamespace(hf_text_config=text))
        assert max_positions(values) == (length, key), values


KIMI = "moonshotai/Kimi-K2.5"
FP8_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def _with_kv_scheme(scheme: dict) -> dict:
    """Kimi-K2.5's config.json (compressed-tensors) with quantization_config.kv_cache_scheme."""
    cfg = copy.deepcopy(preflight.shipped_config(KIMI))
    q = cfg.get("quantization_config") or cfg["text_config"]["quantization_config"]
    q["kv_cache_scheme"] = scheme
    return cfg


def test_a_checkpoints_fp8_kv_cache_scheme_is_sized_as_vllm_keeps_it():
    """vLLM 0.32 keeps a compressed-tensors checkpoint's KV cache in fp8 where its
    quantization_config declares a kv_cache_scheme and kv_cache_dtype is auto (attention.py):
    the preflight and the step model counted it in bf16, twice its bytes. An explicit
    kv_cache_dtype wins; a scheme vLLM refuses (4 bits) is refused."""
    from specmoe.cost.hfconfig import dims_from_config
    from specmoe.errors import InputError

    plain, fp8 = preflight.shipped_config(KIMI), _with_kv_scheme(FP8_KV)
    assert preflight._kv_dtype_bytes(fp8, {}) == 1.0 and preflight._kv_dtype_bytes(plain, {}) == 2
    assert preflight._kv_dtype_bytes(fp8, {"kv_cache_dtype": "bfloat16"}) == 2.0
    d, d8 = dims_from_config(plain, tp=8), dims_from_config(fp8, tp=8)
    assert (d8.kv_dtype, d.kv_dtype) == ("fp8", None)
    assert d8.kv_bytes(4096) == d.kv_bytes(4096) / 2 > 0
    assert d8.c_expert == d.c_expert and d8.c_dense == d.c_dense
    m, m8 = (preflight.memory(engine(KIMI, 8, hardware="H200", max_model_len=8192), c, None)
             for c in (plain, fp8))
    assert m8.kv_start == m.kv_start / 2 > 0 and m8.weights == m.weights
    with pytest.raises(InputError, match=r"^config.json: quantization_config.kv_cache_scheme = "
                                         r".*: vLLM keeps a compressed-tensors KV cache in 8-bit "
                                         r"float only$"):
        preflight._kv_dtype_bytes(_with_kv_scheme({**FP8_KV, "num_bits": 4}), {})


@pytest.mark.parametrize("kv, sized", [
    ("auto", 2.0), ("bfloat16", 2.0), ("float16", 2.0), ("fp8", 1.0), ("fp8_e5m2", 1.0),
    ("fp8_inc", 1.0),
    ("nvfp4", r"^kv_cache_dtype nvfp4: its pages pack values with their scales"),
    ("int8_per_token_head", r"^kv_cache_dtype int8_per_token_head: its pages pack"),
    ("turboquant_k8v4", r"^kv_cache_dtype turboquant_k8v4: its pages pack"),
    ("fp4", r"^kv_cache_dtype 'fp4' is not one of vLLM's \(auto, float16, "),
])
def test_every_kv_cache_dtype_is_sized_or_refused(kv, sized):
    """Each kv_cache_dtype vLLM takes is sized in its own bytes or refused in one line: only
    names starting with fp8 counted 1 byte, and nvfp4 or int4 caches were sized as bf16."""
    from specmoe.errors import InputError

    qwen = preflight.shipped_config("Qwen/Qwen3-30B-A3B")
    found, m = preflight.check(engine("Qwen/Qwen3-30B-A3B", 1, engine_args={"kv_cache_dtype": kv}),
                               qwen, "package")
    if isinstance(sized, float):
        assert preflight._kv_dtype_bytes(qwen, {"kv_cache_dtype": kv}) == sized
        assert m is not None and not found
    else:
        with pytest.raises(InputError, match=sized):
            preflight._kv_dtype_bytes(qwen, {"kv_cache_dtype": kv})
        (one,) = found  # the job's memory cannot be sized: fatal, one line
        assert m is None and one.fatal and one.check == "memory" and re.match(sized, one.message)


def test_the_kv_cache_dtypes_are_vllms():
    """KV_CACHE_DTYPE_BYTES and KV_CACHE_DTYPES_UNSIZED are vLLM's CacheDType, every name once,
    and each sized one's bytes the element size of the torch dtype vLLM stores it as."""
    from typing import get_args

    from specmoe.cost.hfconfig import KV_CACHE_DTYPE_BYTES, KV_CACHE_DTYPES_UNSIZED

    pytest.importorskip("vllm.config")
    from vllm.config.cache import CacheDType
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    assert not set(KV_CACHE_DTYPE_BYTES) & KV_CACHE_DTYPES_UNSIZED
    assert set(get_args(CacheDType)) == {"auto", *KV_CACHE_DTYPE_BYTES, *KV_CACHE_DTYPES_UNSIZED}
    for name, size in KV_CACHE_DTYPE_BYTES.items():
        assert STR_DTYPE_TO_TORCH_DTYPE[name].itemsize == size, name


def test_a_gpu_the_package_does_not_ship_needs_its_memory_to_be_sized():
    """Hardware outside the shipped GPUs without memory_gib or cuda_memory_mib: its jobs' memory
    cannot be checked, and a check that cannot run is no pass: one fatal line naming the
    hardware and what to give, where it was once a note and a job of any size passed (GLM at
    TP 1 fits; Qwen3-235B in bf16 on one GPU, about 438 GiB of weights, too). Given its memory,
    the job is sized against it; the shipped GPUs carry theirs."""
    def l40s(name, **memory):
        def edit(cfg):
            cfg["hardware"]["L40S"] = {"hbm_bandwidth_gbs": 864, "peak_tflops": {"bf16": 362},
                                       **memory}
            only(name, hardware="L40S", tp=1)(cfg)
        return edit

    for name in ("glm-4.7-flash-bf16-tp1", "qwen3-235b-bf16-tp8"):
        report = paper(l40s(name)).preflight(with_vllm=False)
        lines = report.lines(True)
        assert len(lines) == 1 and re.search(
            rf"^preflight: capture {re.escape(name)}/.*: memory: hardware L40S: give memory_gib "
            r"or cuda_memory_mib \(the memory of one GPU, which its jobs' weights and KV cache "
            r"are sized against\)$", lines[0]), lines
        assert report.memory == {}
    sized = paper(l40s("glm-4.7-flash-bf16-tp1", memory_gib=96)).preflight(with_vllm=False)
    assert sized.fatal == [] and sized.memory
    assert all(m.budget == 96 * GIB * 0.9 for m in sized.memory.values())
    too_big = paper(l40s("qwen3-235b-bf16-tp8", memory_gib=96)).preflight(with_vllm=False)
    assert re.search(r"memory: weights 43\d\.\d GiB", too_big.lines(True)[0]), too_big.lines(True)
    assert paper().hardware["H200"]["memory_gib"] == 141


def test_two_processes_keeping_one_answer_at_once_both_finish(tmp_path):
    """Two workflows parsed at once (the tests share one folder of answers, conftest.preflight_memo)
    keep the same answer: a second process writes it while the first is midway through its write,
    and neither fails or leaves a temporary file (the second removed the first's as a killed
    writer's, and the first's rename failed). A killed writer's temporary file in the folder is
    left alone (it cannot be told from a live one's) and read by nobody."""
    import subprocess
    import sys

    from specmoe.checks import memo
    from specmoe.provenance import atomic_path

    ask = (f"from specmoe.checks import memo; print(memo.cached({str(tmp_path)!r}, 'vllmcheck', "
           "'the question', lambda: ['an answer']))")
    assert memo.cached(tmp_path, "vllmcheck", "the question", lambda: ["an answer"]) == [
        "an answer"]
    (kept,) = tmp_path.glob("vllmcheck-*.json")
    kept.unlink()
    with atomic_path(kept, shared=True) as tmp:  # the first writer, midway, as memo writes
        tmp.write_text('["an answer"]')
        r = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == "['an answer']\n", r.stderr
    assert json.loads(kept.read_text()) == ["an answer"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    left = tmp_path / f".{kept.name}.killed.tmp"
    left.write_text("[")
    kept.unlink()
    assert memo.cached(tmp_path, "vllmcheck", "the question", lambda: ["again"]) == ["again"]
    assert memo.cached(tmp_path, "vllmcheck", "the question", lambda: ["other"]) == ["again"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [left.name]


# --- with vLLM's own checks -----------------------------------------------------------------

@pytest.mark.slow
def test_vllms_own_checks_pass_the_study_and_stop_a_broken_copy(tmp_path, monkeypatch):
    """One vLLM run over config/paper.yaml's models and three broken ones: vLLM's registry knows
    every study architecture, maps GLM onto its MTP module, and its parser takes every engine's
    arguments; it knows no Frobnicator, no MTP module for Qwen3-MoE, no --max-modle-len."""
    pytest.importorskip("vllm")
    cache = tmp_path / "hub"
    frob = {**preflight.shipped_config("Qwen/Qwen3-30B-A3B"),
            "architectures": ["FrobnicatorForCausalLM"], "model_type": "qwen3_moe"}
    lay_out_cache(cache, "specmoe-test/frobnicator", {"config.json": json.dumps(frob).encode()})
    lay_out_study_drafters(cache)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def broken(cfg):
        base = next(m for m in cfg["models"] if m["name"] == "qwen3-30b-fp8-tp1")
        cfg["models"] += [
            {**base, "name": "frob", "repo_id": "specmoe-test/frobnicator", "ks": [3],
             "datasets": ["mt-bench"], "overlaps": None},
            {**base, "name": "qwen-mtp", "drafters": ["mtp"], "ks": [3],
             "datasets": ["mt-bench"]},
            {**base, "name": "qwen-typo", "ks": [3], "datasets": ["mt-bench"],
             "engine_args": {"max_modle_len": 4096}},
        ]
        for m in cfg["models"][-3:]:
            m.pop("overlaps", None)

    report = paper(broken).preflight(cache_dir=tmp_path / "cache")
    assert report.vllm.startswith("checked with vLLM 0.32")
    by_model = {}
    for f in report.fatal:
        by_model.setdefault(f.model, set()).add((f.check, f.message))
    assert set(by_model) == {"frob", "qwen-mtp", "qwen-typo"}, by_model
    assert ("architecture", "vLLM 0.32.0 does not know FrobnicatorForCausalLM (its model "
            "registry)") in by_model["frob"]
    assert any("no MTP module for Qwen3MoeForCausalLM" in m for _, m in by_model["qwen-mtp"])
    assert ("engine arguments", "vLLM 0.32.0's parser: unrecognized arguments: --max-modle-len "
            "4096") in by_model["qwen-typo"]
    # the answer is kept: asking again runs no vLLM
    again = paper(broken).preflight(cache_dir=tmp_path / "cache")
    assert [f.line() for f in again.findings] == [f.line() for f in report.findings]


def _requests(c: Config) -> list[dict]:
    """What the preflight of `c` asks vLLM's checks (preflight.run's configs, offline)."""
    engines = [c.engine_of(j) for j in c.gpu_jobs()]
    configs: dict = {}
    for e in engines:
        preflight._cached(configs, e.entry, None)
        if e.drafter:
            preflight._cached(configs, e.drafter, None)
    return preflight.vllm_requests(engines, configs)


def test_an_eagle_head_without_a_repo_id_is_not_asked_of_vllm():
    """A drafter whose repo_id is still null (config/paper.yaml's state for a study drafter it
    names no repository for) is the configuration's warning, as for a target: vLLM's checks are
    not asked about its jobs, where the request once made them fail for every GPU job in one
    line naming nothing ("speculative method eagle3 needs a drafter checkpoint"). Its target's
    other jobs and the other models' are still asked."""
    def edit(cfg):
        next(d for d in cfg["drafters"] if d["name"] == "eagle3-qwen3-30b")["repo_id"] = None
        cfg["models"] = [m for m in cfg["models"]
                         if m["name"] in ("qwen3-30b-fp8-tp1", "glm-4.7-flash-bf16-tp1")]

    c = paper(edit)
    assert any("eagle3-qwen3-30b" in w for w in c.warnings())
    asked = _requests(c)
    assert [r for r in asked if r["method"] not in (None, "mtp") and not r["drafter_repo"]] == []
    assert {r["model"] for r in asked} == {"glm-4.7-flash-bf16-tp1"}
    whole = {r["model"] for r in _requests(paper(only("qwen3-30b-fp8-tp1")))}
    assert whole == {"qwen3-30b-fp8-tp1"}
    # a separate draft model without a repo_id (paper.yaml's Mixtral drafters) is still asked,
    # under the placeholder name its arguments parse with
    mixtral = [r for r in _requests(paper()) if r["model"].startswith("mixtral")]
    assert any(r["method"] == "draft_model" for r in mixtral)
    assert all(r["method"] == "draft_model" and not r["drafter_repo"]
                           for r in mixtral if r["method"])


@pytest.mark.slow
def test_an_engine_vllms_checks_cannot_be_put_to_is_its_own_jobs_finding():
    """vLLM's checks (in this process, as `python -m specmoe.checks.vllmcheck` runs them) of
    two engines, one of whose arguments cannot be made (an EAGLE-3 method with no drafter
    checkpoint): that engine's job has one finding naming its model and why, the other job
    none, where the InputError once ended the run and failed every job's checks."""
    pytest.importorskip("vllm")
    from specmoe.checks import vllmcheck

    def sweep(name):
        return next(r for r in _requests(paper(only(name)))
                    if r["job"].startswith("sweep_sd ") and not r["capture"])

    good, bad = sweep("glm-4.7-flash-bf16-tp1"), sweep("qwen3-30b-fp8-tp1")
    bad = {**bad, "drafter_repo": None, "drafter_config": None}
    found = vllmcheck.check([bad, good])
    assert found == [{"job": bad["job"], "check": "engine arguments",
                      "message": "qwen3-30b-fp8-tp1: speculative method eagle3 needs a drafter "
                                 "checkpoint"}], found


@pytest.mark.slow
def test_the_dry_run_stops_before_any_job(tmp_path):
    """Mixtral-8x7B in bf16 on one H100 through `snakemake -n`: status 1, the preflight's one line
    on stderr after Snakemake's own two, no traceback, no job."""
    cfg = copy.deepcopy(PAPER)
    m = next(m for m in cfg["models"] if m["name"] == "mixtral-8x7b-bf16-tp2")
    cfg["models"] = [{**m, "name": "mixtral-bf16-tp1", "tp": 1}]
    wd = copy_workflow(tmp_path / "wf", cfg, "broken.yaml")
    r = snakemake(wd, "-n", configfile="broken.yaml", check=False)
    assert r.returncode == 1
    ours = [ln for ln in r.stderr.splitlines() if not ln.startswith(("Using workflow",
                                                                    "Config file"))]
    assert len(ours) == 1 and ours[0].startswith(
        "preflight: capture mixtral-bf16-tp1/mixtral-draft/K3/mt-bench (and 2 more of its jobs): "
        "memory: weights 87.0 GiB"), r.stderr
    assert "Traceback" not in r.stdout + r.stderr and "Job stats" not in r.stdout


@pytest.mark.slow
def test_the_gpu_plan_is_offline(tmp_path, study_drafters, preflight_memo):
    """`snakemake -n results/plan.md --configfile config/paper.yaml` plans the plan alone: no model
    or dataset download, no prompt table; the plan then lists each GPU job's memory headroom. (The
    drafters' config.json, which the package does not ship, come from the Hugging Face cache.)"""
    wd = copy_workflow(tmp_path / "wf", memo=preflight_memo)
    r = snakemake(wd, "-n", "results/plan.md", configfile="config/paper.yaml")
    stats = re.search(r"Job stats:\n(.*?)\n\n", r.stdout + r.stderr, re.S)[1]
    assert re.findall(r"^(\w+)\s+\d+$", stats, re.M) == ["plan", "total"], stats
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "no-hf"),  # no model, no dataset
               HF_HUB_CACHE=str(study_drafters))  # the drafters' config.json alone
    snakemake(wd, "results/plan.md", cores=1, configfile="config/paper.yaml", env=env)
    plan = json.loads((wd / "results/plan.json").read_text())
    gpu_jobs = [j for j in plan["jobs"] if j["gpus"]]
    assert gpu_jobs and all(j["headroom_gib"] is not None for j in gpu_jobs)
    assert not (wd / "results" / "downloads").exists()
    assert not (wd / "results" / "prompts").exists()
    assert "headroom_gib" in (wd / "results/plan.md").read_text()


# --- hybrid models: vLLM's attention block for linear-attention states -------------------------

NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"  # 12 full-attention and 36 linear-attention layers


@pytest.mark.parametrize("tp,method,k,kv_cache_dtype,block", [
    (4, "mtp", 3, "auto", 288),   # the study's qwen3-next-80b-bf16-tp4
    (2, "mtp", 3, "auto", 560),
    (1, None, 0, "auto", 544),
    (4, None, 0, "fp8", 544),     # half the bytes per token, twice the tokens
])
def test_a_hybrid_models_attention_block_is_the_one_vllm_aligns(tp, method, k, kv_cache_dtype,
                                                                block):
    """Qwen3-Next's attention block, by the arithmetic of vLLM 0.32's
    Platform._align_hybrid_block_size: the smallest multiple of the CUDA kernel block (16
    tokens) whose page, one full-attention layer's KV of that many tokens (2 x max(1, 2 KV heads
    / TP) x 256 x the KV dtype's bytes), holds one linear-attention state (conv state of (2 x 16
    x 128 + 32 x 128) / TP channels x (kernel 4 - 1 + K) rows, recurrent state of 32 / TP x 128
    x 128, in bf16); the preflight once gave it vLLM's 16-token default."""
    c = preflight._text(preflight.shipped_config(NEXT))
    token = 2 * max(1, 2 // tp) * 256 * (1 if kv_cache_dtype == "fp8" else 2)
    state = ((2 * 16 * 128 + 32 * 128) // tp * (4 - 1 + k) + 32 // tp * 128 * 128) * 2
    assert preflight.state_page(c, tp, k) == state
    assert block == 16 * -(-state // (16 * token)) and block * token >= state
    e = engine(NEXT, tp, method, k, engine_args={"kv_cache_dtype": kv_cache_dtype})
    assert preflight.memory(e, preflight.shipped_config(NEXT), None).block == block


@pytest.mark.parametrize("tp,k,kv_cache_dtype", [(4, 3, "auto"), (1, 3, "auto"), (2, 0, "fp8")])
def test_the_hybrid_block_and_page_padding_are_vllms_own(tmp_path, tp, k, kv_cache_dtype):
    """vLLM 0.32's own Platform._align_hybrid_block_size, run on this CPU on the shipped
    Qwen3-Next config.json (and its MTP module for K > 0) with the backend an H100 runs
    (FlashAttentionBackend, whose kernel block there is the MultipleOf(16) it gives here): its
    block size is the preflight's, and the linear-attention state page it pads to
    (mamba_page_size_padded; None where the state fills the page exactly) is the preflight's
    attention page. The CPU platform's own choices (a 128-token block, an fp32 recurrent state
    for its GDN kernel) are undone first: they are not CUDA's."""
    from vllm.config import (CacheConfig, ModelConfig, ParallelConfig, SpeculativeConfig,
                             VllmConfig)
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    cfg = preflight.shipped_config(NEXT)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, max_model_len=4096)
    parallel = ParallelConfig(tensor_parallel_size=tp)
    spec = SpeculativeConfig(method="mtp", num_speculative_tokens=k, target_model_config=model,
                             target_parallel_config=parallel) if k else None
    vllm_config = VllmConfig(model_config=model, cache_config=CacheConfig(),
                             parallel_config=parallel, speculative_config=spec)
    cache = vllm_config.cache_config
    cache.block_size, cache.mamba_ssm_cache_dtype = preflight.BLOCK_TOKENS, "auto"
    cache.cache_dtype, cache.mamba_page_size_padded = kv_cache_dtype, None
    Platform._align_hybrid_block_size(vllm_config, FlashAttentionBackend)

    e = engine(NEXT, tp, "mtp" if k else None, k, engine_args={"kv_cache_dtype": kv_cache_dtype})
    m = preflight.memory(e, cfg, None)
    assert m.block == cache.block_size
    token = preflight.kv_bytes_per_token(cfg, tp, 1 if kv_cache_dtype == "fp8" else 2)[0] / 12
    state = preflight.state_page(preflight._text(cfg), tp, k)
    assert cache.mamba_page_size_padded == (None if m.block * token == state
                                            else m.block * token)


@pytest.mark.parametrize("layers", [[13, 0, 36], [12, 0, 36], [10, 0, 30], [19, 18, 0]])
def test_kv_cache_groups_are_vllms(layers):
    """The layers per KV-cache group and the groups of each kind (full attention, sliding
    window, linear attention), as vLLM 0.32's _get_kv_cache_groups_uniform_page_size makes them:
    Qwen3-Next with its MTP layer has 13 full-attention layers, so its 36 linear-attention
    layers take 3 groups of 13 slots (3 padded), the padding each sequence's states pay for."""
    import torch
    from vllm.v1.core.kv_cache_utils import _get_kv_cache_groups_uniform_page_size
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec

    kw = dict(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    specs = [FullAttentionSpec(**kw), SlidingWindowSpec(**kw, sliding_window=128),
             MambaSpec(block_size=16, shapes=((16, 16),), dtypes=(torch.float32,))]
    layers_spec = {f"{i}.{j}": spec for i, (n, spec) in enumerate(zip(layers, specs))
                   for j in range(n)}
    groups = _get_kv_cache_groups_uniform_page_size(layers_spec)
    size = max(len(g.layer_names) for g in groups)
    per_kind = [sum(type(g.kv_cache_spec) is type(s) for g in groups) for s in specs]
    assert preflight.kv_groups(layers) == (size, per_kind)


def test_a_batch_the_preflight_once_fitted_queues_in_vllms_hybrid_blocks():
    """Qwen3-Next at TP 4 with MTP K = 3 (qwen3-next-80b-bf16-tp4): an MT-Bench sequence of 330
    tokens takes two 288-token blocks of each of its 13 full-attention layers (its MTP layer's
    among them) and 1 + K state pages, padded to the 294,912-byte attention page, of each of
    3 groups of 13 linear-attention layer slots: 14 pages of 13 layers. The preflight once
    counted 330 tokens and the 36 unpadded states, so the batch it held is now refused a
    place in the KV cache (a warning: vLLM would queue the rest)."""
    cfg = preflight.shipped_config(NEXT)
    e = engine(NEXT, 4, "mtp", 3, prompt_tokens={"mt-bench": 70}, output_tokens=256,
               max_model_len=4096)
    m = preflight.memory(e, cfg, None)
    assert m.kv_per_seq == 13 * 288 * 1024 * (2 + 3 * (1 + 3))
    assert (m.seq_tokens, m.block) == (330, 288)
    once = 13 * 1024 * 330 + 36 * (1 + 3) * 286_720  # tokens and states, unrounded
    assert m.kv_per_seq > once * 1.15
    fitted = int(m.kv_free // once)
    found, sized = preflight.check(engine(NEXT, 4, "mtp", 3, prompt_tokens={"mt-bench": 70},
                                          output_tokens=256, max_model_len=4096, batch=fitted),
                                   cfg, "package")
    assert sized.sequences < fitted
    assert [f.message for f in found if f.check == "memory"] == [
        f"the KV cache ({sized.kv_free / GIB:.1f} GiB per GPU after the weights) holds "
        f"{sized.sequences} sequences of 330 tokens (in vLLM's 288-token blocks of a hybrid "
        f"model), fewer than the largest batch {fitted} (mt-bench's): vLLM would run "
        f"{sized.sequences} at a time and queue the rest (raise TP, use a larger GPU, or lower "
        "the batch: the dataset's max_batch)"]


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_prefix_caching_keeps_vllms_aligned_linear_attention_states(prefix_caching):
    """Qwen3-Next at TP 4 with MTP K = 3 and engine_args enable_prefix_caching: vLLM 0.32's
    hook for hybrid models (MambaModelConfig.verify_and_update_config) puts the
    linear-attention states in "align" mode, whose MambaSpec (the preflight's padded state
    page, K speculative blocks) holds 2 + K pages per sequence at start (max_memory_usage_bytes)
    where it holds 1 + K without: the preflight's startup KV cache and a sequence's count each
    page of its 3 groups of 13 linear-attention slots (it once counted 1 + K either way)."""
    from types import SimpleNamespace

    import torch
    from vllm.config import CacheConfig
    from vllm.model_executor.models.config import MambaModelConfig
    from vllm.v1.kv_cache_interface import MambaSpec

    cfg = preflight.shipped_config(NEXT)
    e = engine(NEXT, 4, "mtp", 3, prompt_tokens={"mt-bench": 70}, output_tokens=256,
               max_model_len=4096, engine_args={"enable_prefix_caching": prefix_caching})
    m = preflight.memory(e, cfg, None)
    page = 288 * 1024  # the attention page of one layer, the padded state page
    cache = CacheConfig(enable_prefix_caching=prefix_caching, block_size=m.block)
    vllm_config = SimpleNamespace(
        cache_config=cache, scheduler_config=SimpleNamespace(enable_chunked_prefill=True),
        model_config=SimpleNamespace(max_model_len=e.max_model_len, architecture="Qwen3Next"))
    MambaModelConfig.verify_and_update_config(vllm_config)
    assert cache.mamba_cache_mode == ("align" if prefix_caching else "none")
    c = preflight._text(cfg)
    state = MambaSpec(block_size=m.block, shapes=((int(preflight.state_page(c, 4, 3)) // 2,),),
                      dtypes=(torch.bfloat16,), page_size_padded=page,
                      mamba_cache_mode=cache.mamba_cache_mode, num_speculative_blocks=3)
    pages = state.max_memory_usage_bytes(vllm_config) // page
    assert pages == (5 if prefix_caching else 4)
    assert m.kv_start == 13 * page * (-(-4096 // 288) + 3 * pages)
    assert m.kv_per_seq == 13 * page * (2 + 3 * pages)


@pytest.mark.parametrize("repo", [r for r in preflight.SHIPPED if set(
    preflight.layer_kinds(preflight._text(preflight.shipped_config(r)))) == {"full"}])
def test_a_model_of_full_attention_alone_keeps_its_token_by_token_kv_cache(repo):
    """A model whose layers are all full attention is not aligned (vLLM runs
    _align_hybrid_block_size for hybrid models only) nor grouped (one KV-cache group, its
    EAGLE head's layer among them): its 16-token blocks, and a sequence's KV counted token by
    token, as the preflight counted it before hybrid models were aligned (its numbers
    unchanged, and 35 of SPEED-Bench's sequences for Qwen3-30B at TP 2 in
    test_the_long_context_sets_max_batch_is_the_largest_batch_every_model_holds). GPT-OSS's
    sliding-window layers are grouped: test_gpt_oss_and_its_eagle3_head_pay_vllms_padding_slot."""
    cfg = preflight.shipped_config(repo)
    tp = next(t for t in (8, 4, 2, 1) if not preflight.tp_problems(cfg, t))
    e = engine(repo, tp, "eagle3", 3, prompt_tokens={"mt-bench": 70}, output_tokens=256)
    m = preflight.memory(e, cfg, None)
    full, sliding, linear = preflight.kv_bytes_per_token(cfg, tp, 2)
    kinds = preflight.layer_kinds(preflight._text(cfg))
    head = full / kinds.count("full")
    assert linear == 0 and m.seq_tokens == 330
    assert sliding == 0 and m.kv_per_seq == (full + head) * 330
    assert m.block == preflight.BLOCK_TOKENS


@pytest.mark.parametrize("repo,mamba_ssm_dtype,engine_args,block", [
    ("Qwen/Qwen3.5-35B-A3B", None, {}, 560),
    ("Qwen/Qwen3.5-35B-A3B", "float32", {}, 1072),  # the config's fp32 recurrent state
    ("Qwen/Qwen3.5-35B-A3B", "float32", {"mamba_ssm_cache_dtype": "bfloat16"}, 560),
    (NEXT, "float32", {}, 560),  # Qwen3-Next's vLLM config does not read the key
    (NEXT, None, {"mamba_cache_dtype": "float32"}, 1120),
])
def test_linear_attention_states_are_typed_as_vllm_types_them(repo, mamba_ssm_dtype,
                                                              engine_args, block):
    """The states' dtypes (conv, recurrent), as vLLM 0.32 types them: its architecture's config
    hook (Qwen3.5's reads config.json's mamba_ssm_dtype where mamba_ssm_cache_dtype is left
    "auto") and MambaStateDtypeCalculator.gated_delta_net_state_dtype over a bf16 model; the
    state page, and so the attention block at TP 2 with MTP K = 3, grows with them (the
    preflight once typed every state as bf16)."""
    from types import SimpleNamespace

    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    cfg = copy.deepcopy(preflight.shipped_config(repo))
    if mamba_ssm_dtype:
        cfg.get("text_config", cfg)["mamba_ssm_dtype"] = mamba_ssm_dtype
    e = engine(repo, 2, "mtp", 3, engine_args=engine_args)
    assert preflight.memory(e, cfg, None).block == block
    cache = SimpleNamespace(mamba_cache_dtype=engine_args.get("mamba_cache_dtype", "auto"),
                            mamba_ssm_cache_dtype=engine_args.get("mamba_ssm_cache_dtype", "auto"))
    hook = MODELS_CONFIG_MAP.get(cfg["architectures"][0])
    if hook is not None:
        text = SimpleNamespace(**preflight._text(cfg))
        hook.verify_and_update_config(SimpleNamespace(
            cache_config=cache, model_config=SimpleNamespace(hf_text_config=text)))
    dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        torch.bfloat16, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)
    assert preflight.state_dtype_bytes(cfg, engine_args) == tuple(
        d.itemsize for d in dtypes)
