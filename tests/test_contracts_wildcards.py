"""The records of the sd_check, download and prompt-table rules (specmoe.contracts.models,
specmoe.contracts.study): a field that is a job's wildcard reaches the stage through the adapter
but is no Snakemake param, so these rules' params are what they were before their records (a
change of them would rerun a download, and every engine job after it)."""

from __future__ import annotations

from dataclasses import fields

from specmoe.names import repo_key
from specmoe.contracts import param_fields, run_rule, snakemake_params, stage_args
from specmoe.contracts.models import SdCheckParams
from specmoe.contracts.study import (DownloadDatasetParams, DownloadModelParams,
                                     PromptTableParams)
from test_config import resolved
from test_contracts import Wildcards, job


def test_a_wildcard_field_is_no_param_and_reaches_the_stage_from_the_jobs_wildcards(tmp_path):
    cfg = resolved()
    w = Wildcards(model="tiny-fine", drafter="tiny-drafter", k="3", dataset="tinybench")
    params = snakemake_params(SdCheckParams, cfg)
    assert list(params) == ["sd", "prompts"] == [f.name for f in param_fields(SdCheckParams)]
    assert params["sd"](w) == cfg.section("sd_check", tiny=True)
    assert [f.name for f in fields(SdCheckParams)] == ["sd", "prompts", "k", "dataset"]
    four = resolved(edit=lambda c: c["tiny"].update(sd_check={"prompts": 4}))
    sd = four.section("sd_check", tiny=True)  # the schema's defaults filled
    assert sd["prompts"] == 4
    smk = job("sd_check", {"target": "t", "drafter": "d"}, {"json": "o.json"},
              {"sd": sd, "prompts": "builtin:v1"}, tmp_path / "sd.log")
    smk.wildcards = w
    args = stage_args(smk, SdCheckParams)
    assert args["params"] == SdCheckParams(sd=sd, prompts="builtin:v1", k=3, dataset="tinybench")
    assert args["params"] == SdCheckParams.from_config(four, w)
    seen = {}
    run_rule(smk, lambda inputs, outputs, params, log=None: seen.update(
        k=params.k, target=inputs.target, out=outputs.json, log=log), SdCheckParams)
    assert seen == {"k": 3, "target": "t", "out": "o.json", "log": str(tmp_path / "sd.log")}


def test_a_downloads_record_names_its_repository_and_the_methods_of_the_eagle_heads_in_it():
    cfg = resolved("config/paper.yaml")
    eagle = repo_key(cfg.drafters["eagle-mixtral"].entry)
    p = DownloadModelParams.from_config(cfg, Wildcards(repo=eagle, mode="config"))
    assert p.repository == {"repo_id": "yuhuili/EAGLE-mixtral-instruct-8x7B", "revision": None,
                            "trust_remote_code": False}
    assert (p.repo, p.mode) == (eagle, "config")
    assert p.methods == {"eagle-mixtral": "eagle"}
    target = repo_key(cfg.entry("mixtral-8x7b-fp8-tp1"))
    assert DownloadModelParams.from_config(cfg, Wildcards(repo=target, mode="full")).methods == {}
    draft = repo_key(cfg.drafters["qwen2-0.5b"].entry)  # a draft model: no head to check
    assert DownloadModelParams.from_config(cfg, Wildcards(repo=draft, mode="full")).methods == {}
    assert list(snakemake_params(DownloadModelParams, cfg)) == ["repository", "methods",
                                                                "configured_revision",
                                                                "compare_with"]
    assert recorded(DownloadModelParams, cfg) == ["repository", "methods"]


def recorded(record, cfg) -> list[str]:
    """The params of a record that Snakemake records and compares (rerun keys): each but those
    it counts as derived from the job's files (a function taking `output`: untracked())."""
    from snakemake.rules import Rule

    return [k for k, v in snakemake_params(record, cfg).items()
            if not Rule._is_deriving_function(v)]


def test_a_downloads_configured_revision_reaches_the_stage_but_reruns_nothing():
    """The configured revision, which a download fetches where set, is a param of the job that
    Snakemake leaves out of its rerun keys (untracked): its tracked revision stands for it there,
    so pinning the commit a manifest recorded reruns nothing yet the pin is what a rerun
    downloads."""
    def pin(c):
        for m in c["models"]:
            if m.get("repo_id") == "Qwen/Qwen3-30B-A3B-FP8":
                m["revision"] = "c" * 40

    cfg = resolved("config/paper.yaml", pin)
    w = Wildcards(repo=repo_key(cfg.entry("qwen3-30b-fp8-tp1")), mode="full")
    value = snakemake_params(DownloadModelParams, cfg)["configured_revision"]
    assert value(w, output=["m.json"]) == "c" * 40
    assert DownloadModelParams.from_config(cfg, w).repository["revision"] == "c" * 40
    assert recorded(DownloadDatasetParams, cfg) == ["spec"]


def test_another_model_of_a_downloaded_repository_reruns_no_download():
    """The download's params hold the repository, not the names of the models served from it
    (their label only): a model added beside the others of its repository would rerun its
    download, and so every engine job of those models."""
    def one_model(c):
        c["models"] = [m for m in c["models"] if m["name"] == "qwen3-30b-fp8-tp1"]

    def and_another(c):
        one_model(c)
        c["models"].append({**c["models"][0], "name": "qwen3-30b-fp8-tp1-again", "ks": [5]})

    one, two = resolved("config/paper.yaml", one_model), resolved("config/paper.yaml",
                                                                  and_another)
    repo = repo_key(one.entry("qwen3-30b-fp8-tp1"))
    assert len(two.repos[repo]["names"]) == 2
    for mode in ("full", "config"):
        w = Wildcards(repo=repo, mode=mode)
        params = [{k: snakemake_params(DownloadModelParams, cfg)[k](w)
                   for k in recorded(DownloadModelParams, cfg)} for cfg in (one, two)]
        assert params[0] == params[1] and params[0]["methods"] == {}


def test_a_datasets_rules_depend_on_its_entry_and_take_its_name_from_the_job():
    cfg = resolved("config/paper.yaml")
    name = next(iter(cfg.datasets))
    entry = cfg.datasets[name]
    for record in (DownloadDatasetParams, PromptTableParams):
        p = record.from_config(cfg, Wildcards(dataset=name))
        assert (p.spec, p.dataset) == ({k: entry[k] for k in record.KEYS if k in entry}, name)
        assert recorded(record, cfg) == ["spec"]
    assert PromptTableParams.INPUTS == DownloadDatasetParams.OUTPUTS == ("manifest",)
