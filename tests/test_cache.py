"""The cache reruns only what a change touches: a finished run of the .test/cache case (tiny models
trained for two steps, two synthetic models on different hardware), then one config entry changed
at a time and the jobs that `snakemake -n` schedules compared with what the change can affect."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from budget import budget
from wf import REPO, copy_workflow, snakemake

CASE = yaml.safe_load((REPO / ".test" / "cache" / "config.yaml").read_text())
TARGETS = [*(f"results/models/{m}" for m in ("a", "b", "d", "a-random", "b-random")),
           "results/costmodel/synth-h100/synth/K3/synth.json",
           "results/costmodel/synth-cpu/synth/K3/synth.json"]
pytestmark = pytest.mark.slow


def run_case(wd, config: dict, *args) -> str:
    """`config` written as case.yaml, then Snakemake on TARGETS with it (status 0); its output."""
    (wd / "case.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    r = snakemake(wd, *TARGETS, *args, cores=2, configfile="case.yaml", timeout=900)
    return r.stdout + r.stderr


def scheduled(wd, config: dict) -> dict[str, int]:
    out = run_case(wd, config, "-n")
    if "Nothing to be done" in out:
        return {}
    stats = out[out.index("Job stats"):]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)
            if m[1] != "total"}


def jobs(wd, config: dict) -> set[str]:
    """The outputs that `snakemake -n` would (re)build."""
    out = run_case(wd, config, "-n")
    return set(re.findall(r"^\s+output: (\S+?),?$", out, re.M))


@pytest.fixture(scope="module")
@budget(1800)
def finished(tmp_path_factory):
    wd = copy_workflow(tmp_path_factory.mktemp("cache") / "wf")
    run_case(wd, CASE)
    assert scheduled(wd, CASE) == {}
    return wd


def change(**edits):
    cfg = copy.deepcopy(CASE)
    for path, value in edits.items():
        node = cfg
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return cfg


def test_equal_configs_in_another_key_order_rerun_nothing(finished):
    reordered = yaml.safe_load(yaml.safe_dump(CASE, sort_keys=True))
    assert list(reordered["models"][0]) != list(CASE["models"][0])
    assert scheduled(finished, reordered) == {}


def test_a_models_runs_do_not_retrain_it(finished):
    # a new K, another dataset and another hardware for model a: its weights stay
    cfg = change(models__0__ks=[3, 5], models__0__datasets=["tinybench", "heldout-code"],
                 models__0__hardware="H100")
    assert scheduled(finished, cfg) == {}


def test_a_training_budget_retrains_that_model_only(finished):
    assert jobs(finished, change(models__0__steps=3)) == {"results/models/a"}
    assert jobs(finished, change(models__0__seed=5)) == {"results/models/a",
                                                         "results/models/a-random"}


def test_training_settings_retrain_trained_models_not_controls(finished):
    assert jobs(finished, change(tiny__train__lr=0.002)) == {
        "results/models/a", "results/models/b", "results/models/d"}
    # the thread count fixes the order in which training adds, so the weights depend on it: it
    # retrains the trained models (not the untrained controls), whatever cores the job gets
    assert jobs(finished, change(tiny__train__threads=1)) == {
        "results/models/a", "results/models/b", "results/models/d"}


def test_one_hardware_constant_reruns_only_the_cost_models_on_it(finished):
    cfg = copy.deepcopy(CASE)
    cfg["hardware"] = {"H100": {"hbm_bandwidth_gbs": 3000, "peak_tflops": {"bf16": 989, "fp8": 1979}}}
    assert jobs(finished, cfg) == {"results/costmodel/synth-h100/synth/K3/synth.json"}


def test_tokenizer_settings_are_params_of_the_tokenizer(finished):
    got = jobs(finished, change(tiny__max_heldout_tokens=6000))
    assert "results/models/tokenizer" in got
