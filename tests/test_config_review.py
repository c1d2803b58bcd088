"""Configuration values the pipeline would read as something else than written: empty strings,
keys a model's source never reads, a check that could not run, a seed that changes nothing."""

from __future__ import annotations

import yaml
import pytest
from snakemake.utils import update_config

from specmoe.config import Config, for_workflow
from specmoe.errors import InputError
from wf import REPO

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def raw(*files: str) -> dict:
    cfg: dict = {}
    for f in ("config.yaml", *files):
        update_config(cfg, yaml.safe_load((REPO / f).read_text()))
    return cfg


def entry(cfg: dict, name: str, section: str = "models") -> dict:
    return next(e for e in cfg[section] if e["name"] == name)


def refused(cfg: dict) -> str:
    with pytest.raises(InputError) as exc:
        Config.load(cfg, SCHEMA)
    return str(exc.value)


# --- an empty string is not "left out": it was read as the default ---

@pytest.mark.parametrize("edit,where", [
    (lambda c: entry(c, "tiny-coarse").update(hardware=""), "hardware"),
    (lambda c: entry(c, "synth-fine").update(compare_with=""), "compare_with"),
    (lambda c: c["hardware"]["CPU"].update(gpu_model=""), "gpu_model"),
    (lambda c: entry(c, "synth-fine")["synthetic"].update(fit_to=""), "fit_to"),
])
def test_an_empty_string_is_refused_not_read_as_the_default(edit, where):
    cfg = raw()
    edit(cfg)
    msg = refused(cfg)
    assert where in msg and "must not be empty" in msg, msg


# --- compare_with's k-of-N check reads a download's config.json where it is offline ---

def _cached_config(hub, repo: str, revision: str, n: int, k: int) -> None:
    """A config.json in a Hugging Face cache's layout, as tests/study_cpu.py's builds leave it."""
    import json

    snap = hub / ("models--" + repo.replace("/", "--")) / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "num_hidden_layers": 2, "num_experts": n, "num_experts_per_tok": k,
        "moe_intermediate_size": 16, "intermediate_size": 64, "vocab_size": 512,
        "torch_dtype": "float32"}))


STAND_IN = {"name": "stand-in", "source": "hf", "repo_id": "specmoe-test/four-of-sixteen",
            "revision": "6c5b1bbe0f9c7ae29e8b1de5f7ce4c8bab6d7f95", "hardware": "CPU",
            "compare_with": "Qwen3-30B", "cost_only": True}


def test_compare_with_of_another_k_of_n_is_refused_from_the_cached_config_json(
        tmp_path, monkeypatch):
    """A downloaded model's k of N is read from its config.json in the HF cache (as the precision
    check reads it): 4 of 16 set beside Qwen3-30B's 8 of 128 was loaded silently (only the
    configs the package ships were read)."""
    _cached_config(tmp_path, STAND_IN["repo_id"], STAND_IN["revision"], 16, 4)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = raw()
    cfg["models"].append(dict(STAND_IN))
    with pytest.raises(InputError) as exc:
        for_workflow(cfg, SCHEMA, preflight=False)
    assert "model stand-in: compare_with 'Qwen3-30B' routes 8 of 128 experts, this model 4 of " \
        "16" in str(exc.value), str(exc.value)
    cfg["models"][-1]["compare_with"] = "GLM-4.7-Flash"  # 4 of 64: neither
    with pytest.raises(InputError):
        for_workflow(cfg, SCHEMA, preflight=False)
    del cfg["models"][-1]["compare_with"]  # compared with nothing: loads
    for_workflow(cfg, SCHEMA, preflight=False)


def test_the_study_cpu_case_compares_its_stand_ins_with_no_study_model_of_other_k_of_n(
        tmp_path, monkeypatch):
    """.test/study-cpu's models route 4 of 16 and 1 of 4 (tests/study_cpu.py trains them so):
    the study has no model of either, so nothing of theirs sits beside published numbers."""
    cfg = raw(".test/study-cpu/config.yaml")
    shapes = {"specmoe-test/tiny-fine-moe": (16, 4), "specmoe-test/tiny-coarse-moe": (4, 1)}
    for m in cfg["models"]:
        _cached_config(tmp_path, m["repo_id"], m["revision"], *shapes[m["repo_id"]])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for_workflow(cfg, SCHEMA, preflight=False)


def test_a_download_of_another_k_of_n_than_its_compare_with_stops_its_job(tmp_path):
    """Where the config.json is not offline when the workflow is parsed, the download job (which
    fetches it first) refuses a compare_with of another k of N: one line, no manifest. In a fresh
    process, as the rule runs it (huggingface_hub reads HF_* when imported)."""
    import json
    import os
    import subprocess
    import sys

    from hubfake import lay_out_cache

    cache = tmp_path / "hf" / "hub"
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
           "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
           "num_hidden_layers": 2, "num_experts": 16, "num_experts_per_tok": 4,
           "moe_intermediate_size": 16, "intermediate_size": 64, "vocab_size": 512,
           "torch_dtype": "float32"}
    lay_out_cache(cache, "specmoe-test/four-of-sixteen", {"config.json": json.dumps(cfg).encode()})
    out = tmp_path / "m.json"
    script = ("import sys\nfrom specmoe.errors import InputError\n"
              "from specmoe.contracts import Named\n"
              "from specmoe.contracts.study import DownloadModelParams\n"
              "from specmoe.stages.study import download_model_stage\n"
              "repo = {'repo_id': 'specmoe-test/four-of-sixteen', 'revision': None, "
              "'trust_remote_code': False}\n"
              "compare = {'stand-in': sys.argv[1]} if sys.argv[1] else {}\n"
              "try:\n    download_model_stage(Named({}), Named({'manifest': "
              f"{str(out)!r}}}), DownloadModelParams(repository=repo, methods={{}}, "
              "configured_revision=None, repo='specmoe-test--four-of-sixteen', mode='config', "
              "compare_with=compare))\n"
              "except InputError as exc:\n    sys.exit(str(exc))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(REPO / "src"))

    def run(study: str):
        return subprocess.run([sys.executable, "-c", script, study], capture_output=True,
                              text=True, env=env, timeout=120)

    r = run("Qwen3-30B")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "model stand-in: compare_with 'Qwen3-30B' routes 8 of 128 experts, this model 4 of 16: "
        "compare it with a study model of its own k of N (the study has none)"), r.stderr
    assert not out.exists()
    r = run("")  # compared with nothing: downloaded
    assert r.returncode == 0, r.stderr
    assert out.exists()


# --- a key the entry's source never reads is refused, not silently ignored ---

@pytest.mark.parametrize("edit,line", [
    (lambda c: entry(c, "qwen3-30b-fp8-tp1").update(hf_config="/my/config.json"),
     "model qwen3-30b-fp8-tp1: hf_config is not read for source hf (its download's config.json "
     "is)"),
    (lambda c: entry(c, "qwen3-30b-fp8-tp1").update(steps=5),
     "model qwen3-30b-fp8-tp1: steps is not read for source hf"),
    (lambda c: entry(c, "qwen3-30b-fp8-tp1").update(dims={"hidden": 3}),
     "model qwen3-30b-fp8-tp1: dims is not read for source hf"),
    (lambda c: entry(c, "tiny-fine").update(hf_config="/my/config.json"),
     "model tiny-fine: hf_config is not read for source tiny"),
    (lambda c: entry(c, "tiny-fine").update(gpu={"mem_mb": 2000}),
     "model tiny-fine: gpu is not read for source tiny"),
    (lambda c: entry(c, "synth-fine").update(gpu={"mem_mb": 2000}),
     "model synth-fine: gpu is not read for source synthetic"),
    (lambda c: entry(c, "tiny-fine").update(overlaps=[0.9]),
     "model tiny-fine: overlaps is not read for source tiny"),
    (lambda c: entry(c, "tiny-fine").update(repo_id="a/b"),
     "model tiny-fine: repo_id is not read for source tiny"),
    (lambda c: entry(c, "tiny-fine").update(trust_remote_code=True),
     "model tiny-fine: trust_remote_code is not read for source tiny"),
    (lambda c: entry(c, "qwen2-0.5b", "drafters").update(steps=3),
     "drafter qwen2-0.5b: steps is not read for source hf"),
    (lambda c: entry(c, "mtp", "drafters").update(seed=2),
     "drafter mtp: seed is not read for source self"),
    (lambda c: entry(c, "tiny-drafter", "drafters").update(repo_id="a/b"),
     "drafter tiny-drafter: repo_id is not read for source tiny"),
    (lambda c: c["datasets"]["mt-bench"].update(languages=["English"]),
     "datasets.mt-bench: languages is not read for format mt-bench"),
])
def test_a_key_its_source_never_reads_is_refused(edit, line):
    cfg = raw("config/paper.yaml") if "qwen" in line or "mtp" in line or "datasets" in line \
        else raw()
    edit(cfg)
    msg = refused(cfg)
    assert line in msg, msg


def test_gpu_settings_of_a_model_on_cpu_hardware_are_refused():
    """common.smk reads a model's gpu entry only where its engines run on a GPU."""
    cfg = raw(".test/study-cpu/config.yaml")
    entry(cfg, "fine-cpu")["gpu"] = {"mem_mb": 2000}
    msg = refused(cfg)
    assert "model fine-cpu: gpu is not read on hardware CPU, whose device is cpu" in msg, msg


# --- the shuffle null is exact: a switch, not a seed ---

def test_the_former_shuffle_seed_is_refused_with_its_replacement():
    cfg = raw()
    cfg["shuffle_seed"] = 7
    assert "config: shuffle_seed: replaced by shuffle_null (true or false)" in refused(cfg)


def test_shuffle_null_switches_the_overlap_jobs_null_on_and_off():
    """OverlapParams carries the switch (the default: on); the statistic has the null only where
    it is on, and a change of it is the only change its jobs see."""
    from specmoe.contracts.analysis import OverlapParams
    from specmoe.routing import overlap, synth

    on = Config.load(raw(), SCHEMA)
    off_cfg = raw()
    off_cfg["shuffle_null"] = False
    off = Config.load(off_cfg, SCHEMA)
    p_on, p_off = OverlapParams.from_config(on), OverlapParams.from_config(off)
    assert (p_on.shuffle_null, p_off.shuffle_null) == (True, False)
    tr = synth.generate(synth.SynthParams(num_experts=16, top_k=2, num_layers=2, requests=4,
                                          steps=6, seed=1))
    assert overlap.window_stats(tr, shuffle_null=p_on.shuffle_null).shuffle is not None
    assert overlap.window_stats(tr, shuffle_null=p_off.shuffle_null).shuffle is None


# --- a dataset's max_prompts is what its jobs read, no more ---

def test_no_paper_dataset_keeps_prompts_that_no_job_reads():
    """sharegpt's and instructcoder's max_prompts 2560 changed no measurement: every job reads at
    most 80 of their prompts (a capture's prompts, a series' prompt set: its schedule's smallest
    point, which its larger points cycle through; a profile's engines x largest batch). Every
    paper.yaml dataset's max_prompts is at most what its jobs read, and a larger one is warned
    about when the configuration loads."""
    c = Config.load(raw("config/paper.yaml"), SCHEMA)
    for name, spec in c.datasets.items():
        if spec.get("max_prompts") and spec["format"] != "aya":  # Aya's: per language
            assert spec["max_prompts"] <= c.prompts_read(name), name
    assert c.max_prompts_unread() == []
    read = c.prompts_read("sharegpt")  # what paper.yaml's jobs read, not a number written here
    assert read > 0
    cfg = raw("config/paper.yaml")
    cfg["datasets"]["sharegpt"]["max_prompts"] = read + 1
    assert f"config: datasets.sharegpt.max_prompts {read + 1}: its jobs read at most {read} of " \
        "its prompts" in " ".join(Config.load(cfg, SCHEMA).warnings())
    cfg = raw("config/paper.yaml")
    cfg["capture"]["prompts"] = read + 1  # a capture of read + 1 reads up to read + 1 of them
    cfg["datasets"]["sharegpt"]["max_prompts"] = read + 1
    assert Config.load(cfg, SCHEMA).max_prompts_unread() == []
