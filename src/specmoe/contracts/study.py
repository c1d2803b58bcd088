"""The contracts of the study's download and prompt-table rules (workflow/rules/study.smk; their
stages: specmoe.stages.study). See specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from . import wildcard


@dataclass(frozen=True)
class DownloadModelParams:
    """Rule download_model: one Hugging Face repository into the HF cache
    (specmoe.stages.study.download_model_stage); no input, output manifest (where its snapshot
    lies). It depends on the repository as the configuration names it (Config.repos: repo id,
    revision, remote code, the models and drafters in it) and the speculative method of each
    drafter in it (an EAGLE head vLLM cannot load stops the job); its mode (full, or config.json
    only) is the job's wildcard."""

    INPUTS = ()
    OUTPUTS = ("manifest",)
    STAGE = "specmoe.stages.study.download_model_stage"

    repo: dict
    methods: dict
    mode: str = wildcard()

    @classmethod
    def from_config(cls, cfg, w) -> "DownloadModelParams":
        repo = cfg.repos[w.repo]
        return cls(repo=repo, methods={n: cfg.drafters[n].method for n in repo["names"]
                                       if n in cfg.drafters}, mode=w.mode)


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
    def from_config(cls, cfg, w) -> "DatasetParams":
        entry = cfg.datasets[w.dataset]
        return cls(spec={k: entry[k] for k in cls.KEYS if k in entry}, dataset=w.dataset)


@dataclass(frozen=True)
class DownloadDatasetParams(DatasetParams):
    """Rule download_dataset: a study dataset's files from its dataset repository into the HF
    cache (specmoe.stages.study.download_dataset_stage); no input, output manifest. It reads its
    repository, revision and files (the format's default files where none are named)."""

    INPUTS = ()
    OUTPUTS = ("manifest",)
    STAGE = "specmoe.stages.study.download_dataset_stage"
    KEYS = ("repo_id", "revision", "format", "files")


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
