"""Configurations that passed every parse-time check and failed only in their jobs: each is
refused when the configuration loads, in one line naming the entry and the value; and the
preflight's kept answers are asked again when specmoe's own check code changes."""

from __future__ import annotations

import copy
import json
import types

import pytest
import yaml
from snakemake.utils import update_config

from specmoe.config import Config, for_workflow
from specmoe.errors import InputError
from test_preflight import only
from wf import REPO

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
PAPER = yaml.safe_load((REPO / "config/paper.yaml").read_text())


def paper_raw(edit=None) -> dict:
    """config/paper.yaml over config.yaml, as `--configfile` merges it, with an edit."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(cfg, copy.deepcopy(PAPER))
    if edit:
        edit(cfg)
    return cfg


def refused(cfg: dict, **kw) -> str:
    with pytest.raises(InputError) as exc:
        for_workflow(cfg, SCHEMA, **kw) if kw else Config.load(cfg, SCHEMA)
    return str(exc.value)


# --- 1. method mtp is the target's own MTP layers: never a downloaded drafter ---

def test_a_downloaded_drafter_of_method_mtp_is_refused_when_the_configuration_loads():
    """A drafter {source: hf, method: mtp} passed the schema and the preflight (which checks no
    drafter for mtp), was downloaded, and every engine job then stopped in drafter_spec ("method
    mtp uses the target's own MTP layers: give it no drafter model")."""
    def edit(cfg):
        cfg["drafters"].append({"name": "hfmtp", "source": "hf", "method": "mtp",
                                "repo_id": "zai-org/GLM-4.7-Flash"})
        only("glm-4.7-flash-bf16-tp1", drafters=["hfmtp"])(cfg)
    msg = refused(paper_raw(edit))
    assert msg.count("\n") == 0, msg
    assert "config: drafter hfmtp: method mtp" in msg and "source self" in msg, msg


def test_the_targets_own_mtp_drafter_still_loads():
    Config.load(paper_raw(only("glm-4.7-flash-bf16-tp1", drafters=["mtp"])), SCHEMA)


# --- 2. the engines run with tensor parallelism only ---

@pytest.mark.parametrize("key", ["pipeline_parallel_size", "data_parallel_size",
                                 "decode_context_parallel_size", "prefill-context-parallel-size"])
def test_a_parallel_layout_other_than_tp_is_refused_in_engine_args(key):
    """pipeline, data or context parallelism above 1 was accepted by the configuration (its jobs
    ask SLURM for tp GPUs only) and refused by routing capture on the GPU node
    (runtime.capture.check_engine_layout)."""
    msg = refused(paper_raw(only("glm-4.7-flash-bf16-tp1", engine_args={key: 2})))
    assert msg.startswith(f"config: model glm-4.7-flash-bf16-tp1: engine_args.{key} 2: "), msg
    assert msg.count("\n") == 0, msg
    cfg = paper_raw()
    cfg["sweep"]["engine_args"] = {key: 2}
    assert f"config: sweep.engine_args.{key} 2: " in refused(cfg)


def test_one_rank_of_each_layout_is_accepted_and_capture_reads_the_same_names():
    from specmoe import kinds
    from specmoe.runtime import capture

    Config.load(paper_raw(only("glm-4.7-flash-bf16-tp1",
                               engine_args={k: 1 for k in kinds.ONE_RANK_SIZES})), SCHEMA)
    assert capture.ONE_RANK_SIZES is kinds.ONE_RANK_SIZES


# --- 5. a dataset's lists: none empty, none with a value twice ---

@pytest.mark.parametrize("dataset,key,value,line", [
    ("aya", "languages", ["Swahili", "Swahili"],
     "config: datasets.aya.languages: lists a value twice (got ['Swahili', 'Swahili']): give "
     "each once"),
    ("aya", "languages", [], "config: datasets.aya.languages: must have at least 1 item(s)"),
    ("mt-bench", "files", [], "config: datasets.mt-bench.files: must have at least 1 item(s)"),
    ("mt-bench", "files", ["question.jsonl", "question.jsonl"],
     "config: datasets.mt-bench.files: lists a value twice"),
])
def test_an_empty_or_repeated_dataset_list_is_refused(dataset, key, value, line):
    """Aya's [Swahili, Swahili] passed the prompt-count check (max_prompts x 2 languages) though
    the table holds one language's; [] kept every language, and files [] the format's default
    files, silently."""
    cfg = paper_raw()
    cfg["datasets"][dataset][key] = value
    msg = refused(cfg)
    assert msg.startswith(line) and msg.count("\n") == 0, msg


# --- 6. configured overlaps reach the largest K ---

def test_overlaps_shorter_than_the_largest_k_are_refused():
    """overlaps [0.6, 0.5] with ks (3, 5, 7): the weight-model table's IPF column was NaN at
    every K (cost.weights.weight_row fits ov(1..K)) and still labelled 'configured'."""
    cfg = paper_raw(only("qwen3-30b-fp8-tp1", overlaps=[0.6, 0.5]))
    msg = refused(cfg)
    assert "config: model qwen3-30b-fp8-tp1: overlaps has 2 distances, fewer than K=7" in msg, msg
    assert msg.count("\n") == 0, msg


def test_overlaps_of_every_distance_up_to_the_largest_k_load():
    from specmoe.cost.hfconfig import dims_from_config
    from specmoe.cost.weights import weight_row
    from specmoe.checks.preflight import shipped_config

    ov = [0.6, 0.5, 0.45, 0.42, 0.4, 0.39, 0.38]
    c = Config.load(paper_raw(only("qwen3-30b-fp8-tp1", overlaps=ov)), SCHEMA)
    m = c.model("qwen3-30b-fp8-tp1")
    dims = dims_from_config(shipped_config("Qwen/Qwen3-30B-A3B-FP8"), dtype="auto", tp=1)
    assert all(weight_row(dims, k, list(m.entry["overlaps"]))["te_ipf"] > 0 for k in m.ks)


# --- 7. the engines' default context is read from its one place ---

def test_the_tiny_context_check_reads_the_engines_default_context(monkeypatch):
    """_tiny_context_problems repeated kinds.ENGINE_DEFAULTS' max_model_len as a literal 1024:
    a changed default would start the engines at one context and check another."""
    from specmoe import kinds
    from specmoe.checks import configcheck
    from specmoe.runtime.tiny import MAX_POSITIONS

    cfg = Config.load(yaml.safe_load((REPO / "config.yaml").read_text()), SCHEMA).raw
    assert configcheck._tiny_context_problems(cfg) == []
    monkeypatch.setitem(kinds.ENGINE_DEFAULTS, "max_model_len", 2 * MAX_POSITIONS)
    found = configcheck._tiny_context_problems(cfg)
    assert f"tiny.capture.max_model_len {2 * MAX_POSITIONS} exceeds the tiny models' " \
        f"{MAX_POSITIONS} positions (vLLM refuses it)" in found, found


# --- 4. a kept answer of the checks is kept by specmoe's own code too ---

REQUEST = [{"job": "j", "model": "m", "repo": "r", "config": {"a": 1}, "method": None, "k": 0,
            "max_model_len": 1024, "batch": 1, "dtype": "auto", "engine_args": {},
            "capture": False, "gpu": "H100"}]


def test_vllms_kept_verdict_is_asked_again_when_specmoes_check_code_changes(tmp_path,
                                                                           monkeypatch):
    """The dry run kept vLLM's verdict by vLLM's version and the request only: after an update of
    specmoe's own code that builds the engines' arguments (runtime.engine.engine_kwargs, ...),
    it read back a pass that the new arguments might not get."""
    import subprocess

    from specmoe.checks import memo, preflight

    calls = []

    def fake_run(*a, **kw):
        calls.append(kw.get("input"))
        return types.SimpleNamespace(returncode=0, stdout="[]", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(memo, "source_digest", lambda *files: "code-1", raising=False)
    preflight.run_vllm(REQUEST, tmp_path)
    preflight.run_vllm(REQUEST, tmp_path)
    assert len(calls) == 1  # the same code and question: read back
    monkeypatch.setattr(memo, "source_digest", lambda *files: "code-2", raising=False)
    preflight.run_vllm(REQUEST, tmp_path)
    assert len(calls) == 2


def test_the_check_codes_digest_follows_its_files(tmp_path, monkeypatch):
    """The digest reads the files the answers depend on (each of them exists in the package)."""
    from specmoe.checks import contextfit, memo, preflight

    for files in (preflight.VLLM_CHECK_SOURCES, contextfit.PROMPT_LENGTH_SOURCES):
        assert len(memo.source_digest(*files)) == 64
    assert memo.source_digest("kinds.py") != memo.source_digest("kinds.py", "names.py")


def test_kept_prompt_lengths_are_asked_again_when_specmoes_rendering_code_changes(monkeypatch):
    from specmoe.checks import contextfit, memo

    def ask():
        return contextfit._question({"tokenizer.json": "x"}, ["a prompt"], True, False)

    monkeypatch.setattr(memo, "source_digest", lambda *files: "code-1", raising=False)
    first = ask()
    monkeypatch.setattr(memo, "source_digest", lambda *files: "code-2", raising=False)
    assert ask() != first


# --- 3. a study model's shape is checked wherever its engines run, and where it has none ---

@pytest.mark.usefixtures("study_drafters")
def test_a_study_model_on_cpu_hardware_gets_the_shape_checks():
    """qwen3-30b-fp8-tp1 at TP 3 and a 100,000-token context was refused on an H100 and loaded on
    hardware CPU (the .test/study-cpu route): the preflight ran only where there were GPU jobs.
    Its shape (TP, context) is checked on a CPU too; its memory is sized on a GPU only."""
    edit = only("qwen3-30b-fp8-tp1", hardware="CPU", tp=3, engine_args={"max_model_len": 100000})
    msg = refused(paper_raw(edit), with_vllm=False)
    assert "tensor parallelism: TP 3 does not divide the 32 attention heads" in msg, msg
    assert "context: max_model_len 100,000 exceeds the model's" in msg, msg
    assert "memory" not in msg, msg


@pytest.mark.usefixtures("study_drafters")
def test_a_study_model_on_cpu_hardware_that_fits_loads_unsized():
    c, notes = for_workflow(paper_raw(only("qwen3-30b-fp8-tp1", hardware="CPU")), SCHEMA,
                            with_vllm=False)
    assert c.gpu_jobs() == []
    report = c.preflight(with_vllm=False)
    assert report.fatal == [] and report.memory == {}
    jobs = len(c.engine_jobs("qwen3-30b-fp8-tp1")) + len(c.alone_jobs())
    assert f"preflight: 0 GPU jobs and {jobs} engine jobs on CPU hardware (their models' shape " \
        "only), 0 problem(s); vLLM's own checks: not checked: no GPU job" in notes, notes


def test_a_cost_only_models_tp_is_checked_against_its_config_json():
    """cost_only: true at TP 3 loaded, and the weight-model job then stopped: 'TP 3 does not
    divide the 32 attention heads' (a cost-only model has no engine job to preflight)."""
    def edit(cfg):
        only("qwen3-30b-fp8-tp1", tp=3, cost_only=True)(cfg)
        for key in ("drafters", "datasets"):
            cfg["models"][0].pop(key)
    msg = refused(paper_raw(edit))
    assert msg.startswith("config: model qwen3-30b-fp8-tp1: tp 3: TP 3 does not divide the 32 "
                          "attention heads; TP 3 neither divides the 4 KV heads"), msg
    assert msg.count("\n") == 0 and msg.endswith("(the weight-model table splits the model as "
                                                 "vLLM would)"), msg


# The study-cpu case's repositories, as its builder trains them (tests/study_cpu.py): config.json
# in the Hugging Face cache at each pinned revision.
def _study_cpu_cache(hub, cfg: dict) -> None:
    from hubfake import lay_out_cache

    attn = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 32, "num_hidden_layers": 2, "vocab_size": 512, "torch_dtype": "float32",
            "max_position_embeddings": 2048}
    moe = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
           "moe_intermediate_size": 16, "intermediate_size": 64, **attn}
    shapes = {"specmoe-test/tiny-fine-moe": {**moe, "num_experts": 16, "num_experts_per_tok": 4},
              "specmoe-test/tiny-coarse-moe": {**moe, "num_experts": 4,
                                               "num_experts_per_tok": 1},
              "specmoe-test/tiny-draft": {"model_type": "qwen3",
                                          "architectures": ["Qwen3ForCausalLM"],
                                          "intermediate_size": 128, **attn,
                                          "num_hidden_layers": 1}}
    for e in [*cfg["models"], *cfg["drafters"]]:
        lay_out_cache(hub, e["repo_id"], {"config.json": json.dumps(shapes[e["repo_id"]]).encode()},
                      commit=e["revision"])


def _study_cpu() -> dict:
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((REPO / ".test/study-cpu/config.yaml").read_text()))
    return cfg


def test_the_study_cpu_case_passes_its_shape_checks_and_its_tp_is_checked(tmp_path, monkeypatch):
    """.test/study-cpu's stand-ins (2 attention heads) load with their config.json cached, as its
    builder leaves them; TP 3 on them is refused now, and without their config.json offline the
    checks that could not run are named, one line, not passed."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, notes = for_workflow(_study_cpu(), SCHEMA, with_vllm=False)
    unchecked = [n for n in notes if n.startswith("preflight: not checked: ")]
    assert len(unchecked) == 1 and "fine-cpu" in unchecked[0] and "coarse-cpu" in unchecked[0] \
        and "drafter tiny-draft" in unchecked[0], notes
    _study_cpu_cache(tmp_path, _study_cpu())
    _, notes = for_workflow(_study_cpu(), SCHEMA, with_vllm=False)
    assert not [n for n in notes if n.startswith("preflight: not checked")], notes
    cfg = _study_cpu()
    next(m for m in cfg["models"] if m["name"] == "fine-cpu")["tp"] = 3
    msg = refused(cfg, with_vllm=False)
    assert "fine-cpu" in msg and "TP 3 does not divide the 2 attention heads" in msg, msg
