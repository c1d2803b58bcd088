"""What reruns a finished job and what does not, from dry runs: the order of the configuration's
keys (every job's params as Snakemake records them), a prompt table of the user's (every job that
reads it declares it)."""

from __future__ import annotations

import shutil
from importlib import resources
from types import SimpleNamespace

import pytest
import yaml

from wf import copy_workflow, job_params, planned_jobs, snakemake


def reversed_keys(obj):
    """A configuration value with every mapping's keys in reverse order (lists as they are)."""
    if isinstance(obj, dict):
        return {k: reversed_keys(obj[k]) for k in reversed(obj)}
    if isinstance(obj, list):
        return [reversed_keys(v) for v in obj]
    return obj


@pytest.mark.slow  # two Snakemake dry runs of every job
def test_the_order_of_the_configurations_keys_reruns_nothing(tmp_path):
    """Snakemake compares a job's params by their repr, which holds a mapping's keys in the
    order the configuration file wrote them: every job's params are the same whatever it is."""
    as_written = copy_workflow(tmp_path / "a")
    reordered = copy_workflow(tmp_path / "b")
    cfg = yaml.safe_load((reordered / "config.yaml").read_text())
    (reordered / "config.yaml").write_text(yaml.safe_dump(reversed_keys(cfg), sort_keys=False))
    params = job_params(as_written, "--forceall")
    assert len(params) > 50 and params == job_params(reordered, "--forceall")


@pytest.mark.slow  # a Snakemake dry run
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
