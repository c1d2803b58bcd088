"""What reruns a finished job and what does not, from dry runs: a new GPU plan (a study model's
capture whose inputs are laid out as a finished run leaves them), the order of the
configuration's keys (every job's params as Snakemake records them), a prompt table of the
user's (every job that reads it declares it)."""

from __future__ import annotations

import os
import shutil
import time
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from wf import copy_workflow, job_params, paper_config, planned_jobs, snakemake

MODEL = "qwen3-30b-fp8-tp1"  # its config.json is shipped: the plan reads no download
TRACE = f"results/traces/{MODEL}/eagle3-qwen3-30b/K3/mt-bench.parquet"
# the rules that make the capture's inputs and the capture, in the order they run
CHAIN = ("download_model", "download_dataset", "prompt_table", "plan", "capture")
ON_CASE = {"configfile": "case.yaml", "cores": 1}


def rules_to_run(wd: Path, *args: str) -> set[str]:
    return {j["rule"] for j in planned_jobs(snakemake(wd, TRACE, "-n", *args, **ON_CASE).stdout)}


@pytest.fixture
def finished(tmp_path, study_drafters) -> Path:
    """A workflow whose capture of MODEL is done: every output of CHAIN's jobs, each rule's newer
    than the ones before (a JSON file an empty plan: the GPU jobs' runtimes read it)."""
    wd = copy_workflow(tmp_path / "wf", paper_config(MODEL))
    jobs = planned_jobs(snakemake(wd, TRACE, "-n", **ON_CASE).stdout)
    assert {j["rule"] for j in jobs} == set(CHAIN)
    t = time.time()  # newer than the workflow's scripts too
    for rule in CHAIN:
        for job in (j for j in jobs if j["rule"] == rule):
            for out in job["output"].split(", "):
                path = wd / out
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text('{"jobs": []}' if out.endswith(".json") else "x")
                os.utime(path, (t, t))
        t += 1
    assert rules_to_run(wd) == set()
    return wd


@pytest.mark.slow  # two Snakemake dry runs of a laid-out capture (about 20 s)
def test_a_new_gpu_plan_reruns_no_measurement(finished):
    """The plan is read for the GPU jobs' runtimes alone: its assumptions and the datasets'
    prompt tokens (which config/paper.yaml asks the user to fill in) change no measurement."""
    assert rules_to_run(finished, "--forcerun", "plan") == {"plan"}
    # a first run still waits for the plan
    (finished / "results" / "plan.json").unlink()
    (finished / TRACE).unlink()
    assert rules_to_run(finished) == {"plan", "capture"}


def reversed_keys(obj):
    """A configuration value with every mapping's keys in reverse order (lists as they are)."""
    if isinstance(obj, dict):
        return {k: reversed_keys(obj[k]) for k in reversed(obj)}
    if isinstance(obj, list):
        return [reversed_keys(v) for v in obj]
    return obj


def test_the_order_of_the_configurations_keys_reruns_nothing(tmp_path):
    """Snakemake compares a job's params by their repr, which holds a mapping's keys in the
    order the configuration file wrote them: every job's params are the same whatever it is."""
    as_written = copy_workflow(tmp_path / "a")
    reordered = copy_workflow(tmp_path / "b")
    cfg = yaml.safe_load((reordered / "config.yaml").read_text())
    (reordered / "config.yaml").write_text(yaml.safe_dump(reversed_keys(cfg), sort_keys=False))
    params = job_params(as_written, "--forceall")
    assert len(params) > 50 and params == job_params(reordered, "--forceall")


def test_a_prompt_table_of_the_users_is_an_input_of_every_job_that_reads_it(tmp_path):
    """tiny.prompts naming a file: every engine job and SD check declares it, so that new prompt
    texts rerun them, and reads it from its inputs."""
    from specmoe.contracts import Named
    from specmoe.kinds import KINDS
    from specmoe.sources.prompts import DEFAULT_SOURCE

    wd = copy_workflow(tmp_path / "wf", {"tiny": {"prompts": "mine.csv"}})
    with resources.as_file(resources.files("specmoe.data") / "prompts_v1.csv") as table:
        shutil.copy(table, wd / "mine.csv")
    jobs = planned_jobs(snakemake(wd, "-n", "--forceall", configfile="case.yaml").stdout)
    readers = [j for j in jobs if j["rule"] in (*KINDS, "sd_check")]
    assert {j["rule"] for j in readers} == {*KINDS, "sd_check"}
    assert [j["rule"] for j in readers if "mine.csv" not in j["input"].split(", ")] == []
    from specmoe.stages.engines import prompt_tables, tiny_prompts

    inputs = Named({"prompts": [], "tiny_prompts": ["mine.csv"]})
    params = SimpleNamespace(prompts="mine.csv")
    assert prompt_tables(inputs, params, ["tinybench"]) == {"tinybench": "mine.csv"}
    assert tiny_prompts(Named({}), SimpleNamespace(prompts=DEFAULT_SOURCE)) == DEFAULT_SOURCE
