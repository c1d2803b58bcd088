"""What the SLURM profile's jobs ask for: the two profiles as Snakemake reads them together, and
dry runs of a study model on 8 GPUs, planned as the SLURM executor plans each job
(wf.cluster_dry_run) or as a local run does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

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


def test_the_workflow_profile_keeps_the_slurm_profiles_retry():
    """A workflow profile's settings win over --profile's: profiles/default sets no retries, so
    every cluster job is retried once, and a local run retries only the engine rules (theirs)."""
    assert profiles_as_read("profiles/slurm", "profiles/default") == {"retries": 1,
                                                                      "executor": "slurm"}
    assert profiles_as_read("profiles/default")["retries"] == 0


@pytest.fixture
def tp8(tmp_path, study_drafters) -> Path:
    """A copy of the workflow whose case.yaml is config/paper.yaml with only TP8 and its
    drafter (offline: study_drafters)."""
    return copy_workflow(tmp_path / "wf", paper_config(TP8))


def engine_jobs(dry_run: str) -> list[dict]:
    jobs = [j for j in planned_jobs(dry_run) if j["rule"] in KINDS]
    assert {j["rule"] for j in jobs} == {"capture", "sweep_sd", "profile"}, dry_run[-3000:]
    return jobs


def test_engine_jobs_claim_an_engine_slot_on_one_machine_and_none_on_a_cluster(tp8):
    """The workflow profile's `engine=2` is a global resource, which Snakemake counts for
    cluster jobs too: claimed there, it would run two GPU jobs at a time."""
    on_slurm = engine_jobs(cluster_dry_run(tp8, configfile="case.yaml"))
    assert {j["resources"]["engine"] for j in on_slurm} == {"0"}
    local = snakemake(tp8, "-n", configfile="case.yaml")
    assert {j["resources"]["engine"] for j in engine_jobs(local.stdout)} == {"1"}
