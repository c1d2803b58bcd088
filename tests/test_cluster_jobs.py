"""What the SLURM profile's jobs ask for: the two profiles as Snakemake reads them together, and
dry runs of a study model on 8 GPUs, planned as the SLURM executor plans each job
(wf.cluster_dry_run) or as a local run does."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from specmoe.kinds import KINDS
from wf import (REPO, cluster_dry_run, copy_workflow, failure, launcher, paper_config,
                planned_jobs, snakemake)

# The study's model on 8 GPUs and its drafter, nothing else of config/paper.yaml's models
TP8 = "qwen3-235b-bf16-tp8"


def profiles_as_read(*profiles: str) -> dict:
    """The settings Snakemake takes from these profiles, later ones over earlier ones as with
    `--profile profiles/slurm` and the workflow profile (profiles/default), read in the
    launcher's environment (the one with the SLURM executor)."""
    script = f"""
import json
from pathlib import Path
from pathlib import Path
from snakemake.cli import get_argument_parser
args = get_argument_parser(profiles=[Path(p) for p in {list(profiles)!r}]).parse_args([])
print(json.dumps({{"retries": args.retries, "executor": args.executor}}))
"""
    r = subprocess.run([str(launcher()), "-c", script], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, failure(r)
    return json.loads(r.stdout)


@pytest.mark.slow  # Snakemake dry runs
def test_the_workflow_profile_keeps_the_slurm_profiles_retry():
    """A workflow profile's settings win over --profile's: profiles/default sets no retries, so
    every cluster job is retried once, and a local run retries only the engine rules (theirs)."""
    assert profiles_as_read("profiles/slurm", "profiles/default") == {"retries": 1,
                                                                      "executor": "slurm"}
    assert profiles_as_read("profiles/default")["retries"] == 0


@pytest.fixture(scope="module")
def tp8(tmp_path_factory, study_drafters_cache) -> dict[str, list[dict]]:
    """The engine jobs of config/paper.yaml with only TP8 and its drafter (offline: the study's
    drafters' stand-ins), planned as the SLURM executor plans them and as a local run does."""
    wd = copy_workflow(tmp_path_factory.mktemp("tp8") / "wf", paper_config(TP8))
    env = {**os.environ, "HF_HUB_CACHE": str(study_drafters_cache), "HF_HUB_OFFLINE": "1"}
    local = snakemake(wd, "-n", configfile="case.yaml", env=env).stdout
    return {"slurm": engine_jobs(cluster_dry_run(wd, configfile="case.yaml", env=env)),
            "local": engine_jobs(local)}


def engine_jobs(dry_run: str) -> list[dict]:
    jobs = [j for j in planned_jobs(dry_run) if j["rule"] in KINDS]
    assert {j["rule"] for j in jobs} == {"capture", "sweep_sd", "profile"}, dry_run[-3000:]
    return jobs


def slurm_cpus(job: dict) -> int:
    """A job's --cpus-per-task as snakemake-executor-plugin-slurm sets it: its resource
    cpus_per_task, else its threads (a dry run lists threads above 1 only)."""
    return int(job["resources"].get("cpus_per_task") or job.get("threads", 1))


@pytest.mark.slow  # Snakemake plans the SLURM run (15-20 s)
def test_engine_jobs_claim_an_engine_slot_on_one_machine_and_none_on_a_cluster(tp8):
    """The workflow profile's `engine=2` is a global resource, which Snakemake counts for
    cluster jobs too: claimed there, it would run two GPU jobs at a time."""
    assert {j["resources"]["engine"] for j in tp8["slurm"]} == {"0"}
    assert {j["resources"]["engine"] for j in tp8["local"]} == {"1"}


@pytest.mark.slow  # Snakemake plans the SLURM run (15-20 s)
def test_a_gpu_job_on_a_cluster_asks_for_cpus_that_follow_its_tp(tp8):
    """vLLM's 8 TP workers busy-poll their broadcast queue and its engine core loops, a core
    each; a sweep's API server and bench client time on theirs (paper.yaml: client timing). The
    SLURM executor asks for cpus_per_task where a job has it, else for its threads, which
    Snakemake caps at the launcher's cores (2 here). A local run asks for its threads."""
    assert {j["rule"]: slurm_cpus(j) for j in tp8["slurm"]} == {"sweep_sd": 18, "profile": 18,
                                                                "capture": 10}
    assert all(slurm_cpus(j) == int(j.get("threads", 1)) for j in tp8["local"])


def test_gpu_cpus_of_the_configuration_replace_the_default():
    from test_preflight import only, paper

    cfg = paper(only(TP8, gpu={"cpus": 32}))
    assert (cfg.gpu_cpus(TP8, timed=True), cfg.gpu_cpus(TP8, timed=False)) == (32, 32)
    assert paper().gpu_cpus("qwen3-30b-fp8-tp1", timed=True) == 8  # TP 1: at least 8
