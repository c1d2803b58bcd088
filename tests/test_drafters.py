"""Drafters checked before anything queues, without vLLM (specmoe.checks.drafters): the shipped
table of what vLLM 0.32's drafters can be is vLLM's own; the Mixtral EAGLE-1 head, which vLLM 0.32
makes EagleMixtralForCausalLM, is refused in one line naming what works instead, from the engines'
environment and from the SLURM launcher's (.venv-slurm, which has no vLLM); the study's EAGLE-3
heads and MTP targets pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specmoe.checks import drafters, preflight
from test_preflight import paper
from wf import LAUNCHER, REPO

MIXTRAL_LINE = (
    "preflight: capture mixtral-8x7b-fp8-tp1/eagle-mixtral/K3/mt-bench (and 2 more of its jobs): "
    "drafter: vLLM 0.32.0 cannot load eagle-mixtral (yuhuili/EAGLE-mixtral-instruct-8x7B, method "
    "eagle): it becomes EagleMixtralForCausalLM, which its registry lacks (its eagle heads: "
    "EagleCohereForCausalLM, EagleDeepSeekMTPModel, EagleLlama4ForCausalLM, "
    "EagleLlamaForCausalLM, EagleMiniCPMForCausalLM, EagleMistralForCausalLM, "
    "EagleMistralLarge3ForCausalLM); use a separate draft model with the target's tokenizer "
    "(method draft_model) or an EAGLE-3 head vLLM has")


# The study's drafters read from stand-ins of their config.json (conftest.study_drafters).
pytestmark = pytest.mark.usefixtures("study_drafters")

def mixtral_with_eagle(cfg: dict) -> None:
    m = next(m for m in cfg["models"] if m["name"] == "mixtral-8x7b-fp8-tp1")
    cfg["models"] = [{**m, "drafters": ["eagle-mixtral"]}]


@pytest.mark.slow
def test_the_shipped_drafter_table_is_vllm_032s_own():
    """Generated from the installed vLLM (its registry, its speculators reader, its MTP mapping
    over the study's checkpoints), the table equals the one the package ships."""
    pytest.importorskip("vllm")
    from specmoe.checks import vllmcheck

    made = vllmcheck.drafter_table([preflight.shipped_config(r) for r in preflight.SHIPPED])
    assert made == drafters.table()
    assert made["vllm"] == "0.32.0"
    assert "EagleMixtralForCausalLM" not in made["drafters"]


def test_the_mixtral_eagle_head_is_refused_before_its_download_in_one_line():
    """No download, no vLLM: the head's architecture (as its repository declares it) becomes
    EagleMixtralForCausalLM, which vLLM 0.32 lacks; the line names what works instead."""
    report = paper(mixtral_with_eagle).preflight(with_vllm=False)
    assert report.lines(True) == [MIXTRAL_LINE]


def test_the_dry_run_refuses_it_from_the_slurm_launchers_environment(tmp_path):
    """The same line from .venv-slurm's python (no vLLM there), as the launcher parses the
    workflow."""
    if not LAUNCHER.exists():
        pytest.skip(f"no launcher environment at {LAUNCHER}")
    script = f"""
import copy, yaml
from importlib.util import find_spec
from snakemake.utils import update_config
from specmoe.config import Config
assert find_spec("vllm") is None, "vLLM in the launcher's environment"
cfg = yaml.safe_load(open("config.yaml"))
update_config(cfg, yaml.safe_load(open("config/paper.yaml")))
m = next(m for m in cfg["models"] if m["name"] == "mixtral-8x7b-fp8-tp1")
cfg["models"] = [{{**m, "drafters": ["eagle-mixtral"]}}]
schema = "workflow/schemas/config.schema.yaml"
report = Config.load(cfg, schema).preflight(cache_dir={str(tmp_path)!r})
print(report.vllm)
print("\\n".join(report.lines(True)))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([str(LAUNCHER), "-c", script], cwd=REPO, capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    vllm_note, *lines = r.stdout.splitlines()
    assert vllm_note == "not checked: vLLM is not installed in this environment"
    assert lines == [MIXTRAL_LINE]


def test_the_studys_drafters_pass_without_vllm():
    """config/paper.yaml as it is: its EAGLE-3 heads (read after their download) and its MTP
    targets (GLM-4.7-Flash, Qwen3-Next, Qwen3.5 by the table) raise nothing."""
    assert paper().preflight(with_vllm=False).fatal == []


@pytest.mark.parametrize("head,method,arch", [
    ({"architectures": ["LlamaForCausalLM"]}, "eagle", "EagleLlamaForCausalLM"),
    ({"architectures": ["LlamaForCausalLMEagle3"]}, "eagle3", "LlamaForCausalLMEagle3"),
    ({"model_type": "eagle", "architectures": ["EAGLEModel"],
      "model": {"architectures": ["LlamaForCausalLM"]}}, "eagle", "EagleLlamaForCausalLM"),
    ({"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
      "speculators_config": {"algorithm": "eagle3"},
      "transformer_layer_config": {"model_type": "qwen3"}}, "eagle3", "Eagle3Qwen3ForCausalLM"),
    ({"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
      "speculators_config": {"algorithm": "eagle3"},
      "transformer_layer_config": {"model_type": "llama"}}, "eagle3", "Eagle3LlamaForCausalLM"),
])
def test_heads_vllm_loads_pass(head, method, arch):
    """As vLLM's EAGLEConfig and speculators reader name them, and in its registry."""
    assert drafters.head_architectures(method, head) == [arch]
    assert drafters.eagle_problem("h", "r", method, head) is None


@pytest.mark.slow
@pytest.mark.parametrize("head,method", [
    ({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral"}, "eagle"),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, "eagle"),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, "eagle3"),
    ({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}, "eagle3"),
    ({"model_type": "eagle", "architectures": ["EAGLEModel"],
      "model": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}}, "eagle"),
])
def test_heads_are_named_as_vllms_eagleconfig_names_them(head, method):
    """vLLM 0.32's own reader and EAGLEConfig on each config.json (as specmoe.checks.vllmcheck
    reads a head) give the architectures the offline rule gives."""
    pytest.importorskip("vllm")
    from vllm.transformers_utils.configs.eagle import EAGLEConfig

    from specmoe.checks.vllmcheck import _hf_config

    cfg = {"hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 1, **head}
    hf = _hf_config(cfg, False)
    if getattr(hf, "model_type", "") != "eagle":
        hf = EAGLEConfig(hf, method=method)
    assert list(hf.architectures) == drafters.head_architectures(method, cfg)


def test_an_mtp_target_the_table_does_not_know_needs_vllm():
    """Without vLLM, an MTP target outside the table is a problem (the check cannot run); a
    target the table maps passes, one it maps to nothing is refused."""
    glm = preflight.shipped_config("zai-org/GLM-4.7-Flash")
    assert drafters.mtp_problem("glm", glm, False) is None
    assert "has no MTP module for MixtralForCausalLM" in drafters.mtp_problem(
        "m", {"architectures": ["MixtralForCausalLM"]}, False)
    unknown = {"architectures": ["FrobnicatorForCausalLM"]}
    assert "not in the shipped table" in drafters.mtp_problem("f", unknown, False)
    assert drafters.mtp_problem("f", unknown, True) is None  # vllmcheck asks vLLM itself
    json.dumps(drafters.table())  # plain data


def test_a_downloaded_head_vllm_cannot_load_stops_its_download_job(tmp_path):
    """The download rule (run where the workflow is launched) checks an EAGLE head's downloaded
    config.json: one line, no manifest, so no engine job that serves it queues. huggingface_hub
    offline against a cache laid out by hand, in a fresh process as the rule runs it."""
    from hubfake import lay_out_cache

    cache = tmp_path / "hf" / "hub"
    head = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "hidden_size": 4096, "vocab_size": 32000}
    lay_out_cache(cache, "specmoe-test/eagle-head", {"config.json": json.dumps(head).encode(),
                                                     "pytorch_model.bin": b"\0" * 64})
    out = tmp_path / "m.json"
    script = ("import sys\nfrom specmoe.errors import InputError\n"
              "from specmoe.contracts import Named\n"
              "from specmoe.contracts.study import DownloadModelParams\n"
              "from specmoe.stages.study import download_model_stage\n"
              "repo = {'repo_id': 'specmoe-test/eagle-head', 'revision': None, "
              "'trust_remote_code': False}\n"
              "try:\n    download_model_stage(Named({}), Named({'manifest': "
              f"{str(out)!r}}}), DownloadModelParams(repository=repo, methods={{'h': 'eagle'}}, "
              "configured_revision=None, repo='specmoe-test--eagle-head', mode='full'))\n"
              "except InputError as exc:\n    sys.exit(str(exc))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(REPO / "src"))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
        "drafter h: vLLM 0.32.0 cannot load h (specmoe-test/eagle-head, method eagle): it becomes "
        "EagleMixtralForCausalLM"), r.stderr
    assert not out.exists()
