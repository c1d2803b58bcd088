"""The study's sources where they once failed silently or reran too much: a pinned revision, the
dataset readers' columns, a dataset download that fetches nothing, the packaged data files'
source notes and the three-step comparison's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hubfake import lay_out_cache
from wf import copy_workflow, planned_jobs, snakemake

MODEL_MANIFEST = "results/downloads/zai-org--GLM-4.7-Flash.full.json"
DATASET_MANIFEST = "results/downloads/datasets/mtb.json"
CAPTURE = "results/traces/glm-run/mtp/K3/tinybench.parquet"
PROMPTS = "results/prompts/mtb.csv"
MT = [{"question_id": 81, "category": "writing", "turns": ["Write a post.", "Shorter."]}]


@pytest.mark.slow
def test_pinning_the_recorded_commit_reruns_nothing_and_another_commit_reruns_the_download(
        tmp_path, preflight_memo):
    """The README's advice: run unpinned, then copy the recorded commit into the config to pin
    it. Pinning it changes no param, so neither the download nor the engine job that reads its
    manifest (nor the prompt table of a dataset so pinned) reruns; another commit reruns the
    download and so what reads it. Offline throughout: only dry runs after the downloads."""
    from test_study_workflow import CASE, offline_cache

    env = offline_cache(tmp_path)  # every repo of the study case at commit f*40, offline
    lay_out_cache(tmp_path / "hf" / "hub", "philschmid/mt-bench",
                  {"question.jsonl": "".join(json.dumps(r) + "\n" for r in MT).encode()},
                  commit="e" * 40, repo_type="dataset")
    case = yaml.safe_load(CASE.read_text())
    case["models"] = [m for m in case["models"] if m["name"] == "glm-run"]
    case["datasets"] = {"mtb": {"format": "mt-bench", "repo_id": "philschmid/mt-bench"}}
    wd = copy_workflow(tmp_path / "wf", memo=preflight_memo)

    def config(model_revision=None, dataset_revision=None) -> str:
        c = json.loads(json.dumps(case))
        if model_revision:
            c["models"][0]["revision"] = model_revision
        if dataset_revision:
            c["datasets"]["mtb"]["revision"] = dataset_revision
        name = f"case-{model_revision}-{dataset_revision}.yaml"
        (wd / name).write_text(yaml.safe_dump(c))
        return name

    unpinned = config()
    snakemake(wd, MODEL_MANIFEST, DATASET_MANIFEST, env=env, configfile=unpinned, cores=2)
    assert json.loads((wd / MODEL_MANIFEST).read_text())["commit"] == "f" * 40
    assert json.loads((wd / DATASET_MANIFEST).read_text())["commit"] == "e" * 40
    # what reads the manifests, as a finished run leaves it: newer than they are
    for out in (CAPTURE, PROMPTS):
        (wd / out).parent.mkdir(parents=True, exist_ok=True)
        (wd / out).write_text("x")

    def rules(configfile: str) -> set[str]:
        dry = snakemake(wd, "-n", CAPTURE, PROMPTS, env=env, configfile=configfile, cores=2)
        return {j["rule"] for j in planned_jobs(dry.stdout)}

    assert rules(unpinned) == set()
    assert rules(config("f" * 40, "e" * 40)) == set()  # the recorded commits, pinned
    assert rules(config("0" * 40)) == {"download_model", "capture"}
    assert rules(config(None, "1" * 40)) == {"download_dataset", "prompt_table"}
    assert rules(config("main")) == {"download_model", "capture"}  # a branch named anew


def test_the_download_param_is_the_revision_its_manifest_was_made_from(tmp_path):
    """tracked_revision in itself: a manifest made unpinned is named by the revision it was made
    from (unset, so as Snakemake recorded the job's param) whether the config leaves it unset or
    pins its commit; a manifest of another repository, or none, leaves the configured one."""
    from specmoe.contracts.study import tracked_revision

    man = tmp_path / "m.json"
    assert tracked_revision("a" * 40, str(man), "o/r") == "a" * 40  # no manifest yet
    man.write_text(json.dumps({"repo_id": "o/r", "revision_requested": None,
                               "commit": "c" * 40}))
    assert tracked_revision(None, str(man), "o/r") is None
    assert tracked_revision("c" * 40, str(man), "o/r") is None
    assert tracked_revision("d" * 40, str(man), "o/r") == "d" * 40
    assert tracked_revision("c" * 40, str(man), "o/other") == "c" * 40
    man.write_text(json.dumps({"repo_id": "o/r", "revision_requested": "c" * 40,
                               "commit": "c" * 40}))
    assert tracked_revision(None, str(man), "o/r") == "c" * 40  # a pin removed: kept
    man.write_text("{not json")
    assert tracked_revision("c" * 40, str(man), "o/r") == "c" * 40

