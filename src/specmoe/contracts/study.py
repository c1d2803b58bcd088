"""The contracts of the study's download and prompt-table rules (workflow/rules/study.smk; their
stages: specmoe.stages.study). See specmoe.contracts for what a record holds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import paths as P
from . import untracked, wildcard


def tracked_revision(configured: str | None, manifest: str, repo_id) -> str | None:
    """The revision a download job depends on (its param): the configured one, except where the
    download's manifest (a results/ file, read when the job graph is built) already holds what
    it names: where the configured revision is unset, is the one the manifest was made from,
    or is the commit it resolved to, the param is the revision the manifest was made from (its
    `revision_requested`: the download's param of that run, which Snakemake recorded). So
    copying a recorded commit into the config to pin the run, or leaving it unset, changes no
    param: neither the download nor the engine jobs that read its manifest rerun; another
    revision (a new commit, branch or tag) reruns the download, and so everything after it.
    Without a readable manifest of the same repository: the configured revision. The param is
    the job's rerun key alone: a job that reruns for another reason (--forcerun, a new
    trust_remote_code) downloads the configured revision where one is set (download_revision),
    and its manifest keeps the param as `revision_param` (where the manifest has none, as one
    written before, its `revision_requested`), so the next run's param is the same again."""
    try:
        man = json.loads(Path(manifest).read_text())
    except (OSError, ValueError):
        return configured
    if not isinstance(man, dict) or man.get("repo_id") != repo_id:
        return configured
    made_from = man.get("revision_param", man.get("revision_requested"))
    if configured is None or configured in (made_from, man.get("commit")):
        return made_from
    return configured


def download_revision(configured: str | None, param: str | None) -> str | None:
    """The revision a download job fetches: the configured one where set (a commit copied into
    the config pins the download even where its param, tracked_revision, stayed unset), else its
    param."""
    return param if configured is None else configured


@dataclass(frozen=True)
class DownloadModelParams:
    """Rule download_model: one Hugging Face repository into the HF cache
    (specmoe.stages.study.download_model_stage); no input, output manifest (where its snapshot
    lies). It depends on the repository as the configuration names it (Config.repos: repo id,
    revision, remote code; REPO_KEYS) and the speculative method of each EAGLE head in it (one
    vLLM cannot load stops the job), not on the names of the models that serve it: another
    model of a repository already downloaded reruns neither its download nor so the engine jobs
    of the repository's other models. Its file name (owner--name, names.repo_key: the
    download's label) and mode (full, or config.json only) are the job's wildcards. Its revision
    is the one its manifest already holds where the configured one names it (tracked_revision:
    the manifest is read when the job graph is built), so pinning the recorded commit reruns
    nothing; the configured revision (configured_revision, untracked: no rerun key) is what the
    job downloads where set (download_revision). compare_with (untracked: keyed by model name,
    so no rerun key): the study model each model of it
    with a compare_with sits beside (by model name): its k of N is checked on the downloaded
    config.json (the configuration's check reads it only where it is offline when the workflow
    is parsed)."""

    INPUTS = ()
    OUTPUTS = ("manifest",)
    STAGE = "specmoe.stages.study.download_model_stage"
    REPO_KEYS = ("repo_id", "revision", "trust_remote_code")

    repository: dict
    methods: dict
    configured_revision: str | None = untracked()
    repo: str = wildcard()
    mode: str = wildcard()
    compare_with: dict = untracked(default_factory=dict)

    @classmethod
    def from_config(cls, cfg, w) -> "DownloadModelParams":
        from ..checks.drafters import EAGLE_METHODS

        repo = cfg.repos[w.repo]
        methods = {n: cfg.drafters[n].method for n in repo["names"] if n in cfg.drafters}
        repository = {k: repo[k] for k in cls.REPO_KEYS}
        repository["revision"] = tracked_revision(repo["revision"], P.download(w.repo, w.mode),
                                                  repo["repo_id"])
        return cls(repository=repository,
                   methods={n: m for n, m in methods.items() if m in EAGLE_METHODS},
                   configured_revision=repo["revision"], repo=w.repo, mode=w.mode,
                   compare_with={m["name"]: m["compare_with"] for m in cfg.raw["models"]
                                 if m["name"] in repo["names"] and m.get("compare_with")})


@dataclass(frozen=True)
class DatasetParams:
    """A study dataset's rules (DownloadDatasetParams, PromptTableParams): each depends on the
    keys of the dataset's entry (`datasets.<name>`) that its stage reads (its KEYS), no others:
    the keys that only later jobs read (prompt_tokens: the GPU plan's; heldout: the acceptance
    statistics'; max_batch and chat_template: the engine jobs') reach those jobs through their
    own params, and a change to one reruns neither the download nor the prompt table, nor so
    every engine job on the dataset. Its name is the job's wildcard."""

    KEYS = ()  # the keys of the dataset's entry that the stage reads

    spec: dict
    dataset: str = wildcard()

    @classmethod
    def spec_of(cls, cfg, w) -> dict:
        """The keys of the job's dataset entry that the stage reads (KEYS), where given."""
        entry = cfg.datasets[w.dataset]
        return {k: entry[k] for k in cls.KEYS if k in entry}

    @classmethod
    def from_config(cls, cfg, w) -> "DatasetParams":
        return cls(spec=cls.spec_of(cfg, w), dataset=w.dataset)


@dataclass(frozen=True)
class DownloadDatasetParams(DatasetParams):
    """Rule download_dataset: a study dataset's files from its dataset repository into the HF
    cache (specmoe.stages.study.download_dataset_stage); no input, output manifest. It reads its
    repository, revision and files (the format's default files where none are named). Its
    revision is the one its manifest already holds where the configured one names it
    (tracked_revision: the manifest is read when the job graph is built), so pinning the
    recorded commit reruns neither the prompt table nor the engine jobs on it; the configured
    revision (configured_revision, untracked: no rerun key) is what the job downloads where set
    (download_revision)."""

    INPUTS = ()
    OUTPUTS = ("manifest",)
    STAGE = "specmoe.stages.study.download_dataset_stage"
    KEYS = ("repo_id", "revision", "format", "files")

    configured_revision: str | None = untracked()

    @classmethod
    def from_config(cls, cfg, w) -> "DownloadDatasetParams":
        spec = {k: v for k, v in cls.spec_of(cfg, w).items() if k != "revision"}
        entry = cfg.datasets[w.dataset]
        revision = tracked_revision(entry.get("revision"),
                                    P.DATASET_DOWNLOAD.format(dataset=w.dataset),
                                    entry.get("repo_id"))
        if revision is not None:  # unset stays absent, as the configuration leaves it
            spec["revision"] = revision
        return cls(spec=spec, dataset=w.dataset, configured_revision=entry.get("revision"))


@dataclass(frozen=True)
class PromptTableParams(DatasetParams):
    """Rule prompt_table: a downloaded study dataset (input manifest: its repository and commit)
    normalised into a prompt table (specmoe.stages.study.prompt_table_stage; vLLM's loaders
    where it has them); output csv. It reads the format, the files, Aya's languages and the
    most prompts it keeps (specmoe.sources.studydata.normalise)."""

    INPUTS = ("manifest",)
    OUTPUTS = ("csv",)
    STAGE = "specmoe.stages.study.prompt_table_stage"
    KEYS = ("format", "files", "languages", "max_prompts")
