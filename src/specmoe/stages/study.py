"""Stages of the study's own path: model and dataset downloads (the only networked stages).

Each writes its outputs atomically with provenance; on failure nothing is written under a final
name, and earlier results stay.
"""

from __future__ import annotations

import logging

from ..contracts.study import download_revision
from ..sources import hub, studydata
from ..errors import InputError
from ..provenance import provenance, write_csv, write_json

logger = logging.getLogger("specmoe")


def download_model_stage(inputs, outputs, params) -> dict:
    """Rule download_model (its contract: specmoe.contracts.study.DownloadModelParams): one
    repository (params.repository, shared by the model variants and drafters of it) into the HF
    cache, its manifest into outputs.manifest, named by its file name (params.repo: owner--name
    of its repo id, unset--<model> where none is set), not by the models that serve it: another
    one reruns nothing. params.methods: the speculative method of each EAGLE head in it: one that
    vLLM cannot load stops the download job (it runs where the workflow is launched), before
    any engine job that serves it queues."""
    repo, mode, out = params.repository, params.mode, outputs.manifest
    repo_id = repo["repo_id"]
    revision = download_revision(params.configured_revision, repo["revision"])
    label = params.repo
    man = hub.download(label, repo_id, revision, mode=mode,
                       trust_remote_code=repo["trust_remote_code"])
    man["revision_param"] = repo["revision"]  # the job's rerun key (tracked_revision)
    check_drafters(man, repo_id, params.methods or {})
    check_compare_with(man, params.compare_with or {})
    logger.info("%s (%s): %s@%s, %d files, %.1f GiB in %s", label, mode, repo_id,
                man["commit"][:12], len(man["files"]), man["total_bytes"] / 2**30,
                man["snapshot_path"])
    write_json(out, man, provenance({"repo_id": repo_id, "revision": revision, "mode": mode},
                                    model={"name": label, "source": "hf",
                                           "revision": man["commit"]}, stage="download"))
    return man


def download_dataset_stage(inputs, outputs, params) -> dict:
    """Rule download_dataset (its contract: specmoe.contracts.study.DownloadDatasetParams): a
    study dataset's files from its dataset repo into the HF cache (its manifest,
    outputs.manifest, says where)."""
    name, spec, out_manifest = params.dataset, params.spec, outputs.manifest
    if spec.get("repo_id") is None:
        raise InputError(f"dataset {name}: no repo_id: name the dataset repo in the config")
    patterns = spec.get("files") or studydata.DEFAULT_FILES[spec["format"]]
    revision = download_revision(params.configured_revision, spec.get("revision"))
    man = hub.download(f"dataset {name}", spec["repo_id"], revision,
                       repo_type="dataset", allow_patterns=patterns)
    man["revision_param"] = spec.get("revision")  # the job's rerun key (tracked_revision)
    logger.info("dataset %s: %s@%s, %d files", name, spec["repo_id"], man["commit"][:12],
                len(man["files"]))
    downloaded = {**spec, "revision": revision} if revision is not None else spec
    write_json(out_manifest, man, provenance(downloaded, stage="download_dataset",
                                             dataset={"repo_id": spec["repo_id"],
                                                      "revision": man["commit"]}))
    return man


def prompt_table_stage(inputs, outputs, params) -> dict:
    """Rule prompt_table (its contract: specmoe.contracts.study.PromptTableParams): a downloaded
    dataset (inputs.manifest) normalised into a prompt table (outputs.csv; vLLM's loaders where
    it has them)."""
    from ..provenance import read_json

    name, spec, manifest, out_csv = params.dataset, params.spec, inputs.manifest, outputs.csv
    man = read_json(manifest)
    rows = studydata.normalise(name, spec, man["snapshot_path"])
    info = studydata.summary(rows)
    logger.info("dataset %s: %d prompts in %d categories", name, info["prompts"],
                len(info["categories"]))
    write_csv(out_csv, studydata.to_csv(rows),
              provenance(spec, stage="prompt_table", dataset={"repo_id": man["repo_id"],
                                                              "revision": man["commit"]}))
    return info


def check_drafters(manifest: dict, repo_id, methods: dict) -> None:
    """The offline drafter check (specmoe.checks.drafters) on a downloaded EAGLE head's
    config.json: InputError in one line where vLLM cannot load it. methods: the speculative
    method of each EAGLE head the repository is (by drafter name; DownloadModelParams keeps
    those alone)."""
    import json
    from pathlib import Path

    from ..checks import drafters

    if not methods:
        return
    cfg = json.loads((Path(manifest["snapshot_path"]) / "config.json").read_text())
    for name, method in methods.items():
        problem = drafters.eagle_problem(name, repo_id, method, cfg)
        if problem:
            raise InputError(f"drafter {name}: {problem}")


def check_compare_with(manifest: dict, compare_with: dict) -> None:
    """Each model's compare_with (model name -> study model) against the k of N of the downloaded
    config.json (specmoe.checks.configcheck.granularity_problems; the configuration's check
    reads it where it is offline at parse time): InputError in one line where they differ, so
    that no result of it is set beside numbers of another routing granularity."""
    import json
    from pathlib import Path

    from ..checks.configcheck import config_experts, granularity_problems

    if not compare_with:
        return
    own = config_experts(json.loads((Path(manifest["snapshot_path"]) / "config.json").read_text()))
    if own is None:  # a config.json the cost model cannot read: its later stages refuse it
        return
    for name, study in compare_with.items():
        for problem in granularity_problems(study, own):
            raise InputError(f"model {name}: {problem}")
