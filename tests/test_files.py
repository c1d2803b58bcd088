"""What each job reads and what a run makes (specmoe.files), on the shipped configurations."""

from __future__ import annotations

import pytest
import yaml

from specmoe.config import Config
from specmoe.files import Files
from wf import REPO


def files(path: str) -> Files:
    cfg = yaml.safe_load((REPO / path).read_text())
    return Files(Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml"))


def test_the_default_makes_the_report_the_tiny_models_their_controls_and_sd_checks():
    out = files("config.yaml").targets()
    assert out[0] == "results/report/index.md"
    assert "results/models/tiny-fine" in out and "results/models/tiny-fine-random" in out
    assert "results/models/tiny-drafter" in out
    assert "results/sd_check/tiny-fine/tiny-drafter/K3/tinybench.json" in out


def test_a_tiny_model_predicts_from_its_runs_a_study_model_from_its_config():
    default, paper = files("config.yaml"), files("config/paper.yaml")
    tiny = default.predict_inputs("tiny-fine")
    assert tiny["overlap"] == [f"results/overlap/tiny-fine/{r.drafter}/K{r.k}/{r.dataset}.json"
                               for r in default.cfg.models["tiny-fine"].runs()]
    assert tiny["checkpoint"] == ["results/models/tiny-fine"]
    study = paper.predict_inputs("qwen3-30b-fp8-tp2")  # K = 3: the study's curves reach it
    assert set(study) == {"config"}
    assert study["config"] == "results/downloads/Qwen--Qwen3-30B-A3B-FP8.config.json"


def test_engines_serve_downloads_or_checkpoints_and_mtp_needs_no_drafter_file():
    default, paper = files("config.yaml"), files("config/paper.yaml")
    assert default.engine_target("tiny-fine") == "results/models/tiny-fine"
    assert default.engine_target("tiny-fine-bf16") == "results/models/tiny-fine"  # a variant
    assert default.engine_drafter("tiny-fine", "tiny-drafter") == ["results/models/tiny-drafter"]
    assert paper.engine_drafter("glm-4.7-flash-bf16-tp1", "mtp") == []
    assert paper.engine_target("glm-4.7-flash-bf16-tp1").endswith(".full.json")


def test_a_study_models_config_only_download_is_read_for_the_plan_where_not_shipped():
    """The GPU plan (and each GPU job's runtime, which is its estimate) sizes a study model from
    the package's config.json, else from the model's config-only download."""
    from test_preflight import only, paper

    from specmoe.contracts.report import plan_config

    assert plan_config(paper(), "glm-4.7-flash-bf16-tp1") == []
    unshipped = paper(only("glm-4.7-flash-bf16-tp1", repo_id="example/unshipped-moe"))
    assert plan_config(unshipped, "glm-4.7-flash-bf16-tp1") == [
        "results/downloads/example--unshipped-moe.config.json"]
    assert plan_config(files("config.yaml").cfg, "tiny-fine") == []  # not planned


def test_the_gpu_plans_entries_name_the_config_only_download_exactly_where_it_reads_one():
    """Whether a planned model's size comes from its config-only download is decided once
    (contracts.report.plan_config): the plan's entries named it for every study model, shipped
    ones included, and the plan decided again whether to read it."""
    from test_preflight import only, paper

    from specmoe.contracts.report import PlanParams

    study = paper()  # every study model's config.json ships with the package: none read
    entries = PlanParams.from_config(study).entries
    assert sum(e["name"] in study.hf for e in entries) > 5
    assert [e["name"] for e in entries if e["manifest"] is not None] == []
    entries = PlanParams.from_config(
        paper(only("glm-4.7-flash-bf16-tp1", repo_id="example/unshipped-moe"))).entries
    assert [e["manifest"] for e in entries] == [
        "results/downloads/example--unshipped-moe.config.json"]


def test_the_gpu_plan_reads_only_the_config_files_the_package_does_not_ship():
    paper = files("config/paper.yaml")
    from specmoe.checks.preflight import shipped_config
    from specmoe.contracts.report import PlanParams

    wanted = PlanParams.inputs(paper.cfg)["manifests"]
    for n in paper.cfg.planned:
        e = paper.cfg.entry(n)
        shipped = shipped_config(e["repo_id"], e.get("revision")) is not None
        # a draft model served alone is read from the Hugging Face cache, as the preflight reads it
        assert (paper.download(n, "config") in wanted) == (not shipped and n in paper.cfg.hf), n


@pytest.mark.slow  # a Snakemake dry run
def test_dag_jobs_lists_every_job_of_the_default_with_what_it_reads_and_writes(tmp_path):
    """bench/dag_jobs.py (the README's check that a change to the rules changes nothing that runs)
    on a copy of the workflow: one line per job of the dry run, the engine rules among them."""
    import json
    import subprocess
    import sys

    from wf import copy_workflow

    wd = copy_workflow(tmp_path / "wf")
    r = subprocess.run([sys.executable, str(REPO / "bench/dag_jobs.py")], cwd=wd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = [json.loads(line) for line in r.stdout.splitlines()]
    rules = {j["rule"] for j in jobs}
    assert {"capture", "sweep_sd", "sweep_ar", "profile", "report_index", "all"} <= rules
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet", "rules"], cwd=wd,
                         capture_output=True, text=True, timeout=300)
    counts = {line.split()[0]: int(line.split()[1]) for line in dry.stdout.splitlines()
              if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert len(jobs) == counts["total"]
    sweep = next(j for j in jobs if j["rule"] == "sweep_sd")
    assert sweep["params"]["job"]["k"] == int(sweep["wildcards"]["k"])
    # no target has a series without SD of its own (its SD series measure their no-SD points):
    # the series without SD are the drafter's, served alone for the draft cost, once in each
    # dtype and TP of the SD series it drafts in (tiny-fine-bf16's bfloat16, the others' float32,
    # all at TP 1)
    alone = sorted((j["wildcards"]["model"], j["wildcards"]["dtype"], j["wildcards"]["tp"],
                    j["params"]["settings"]["dtype"]) for j in jobs if j["rule"] == "sweep_ar")
    assert alone == [("tiny-drafter", "bfloat16", "1", "bfloat16"),
                     ("tiny-drafter", "float32", "1", "float32")]
    # a training claims one of the two cores and trains on the configuration's two threads
    train = [j for j in jobs if j["rule"] in ("train_model", "random_model")]
    assert len(train) == 5 and {j["threads"] for j in train} == {1}
    assert {j["params"]["tiny"]["train"]["threads"] for j in train
            if j["rule"] == "train_model"} == {2}
    # jobs whose numbers do not follow their claim claim one core (their engines and numba
    # passes run two threads), so that they run beside a training; timed ones take both
    claims = {}
    for j in jobs:
        claims.setdefault(j["rule"], set()).add(j["threads"])
    for rule in ("capture", "capture_control", "sd_check", "overlap", "acceptance"):
        assert claims[rule] == {1}, rule
    for rule in ("sweep_sd", "sweep_ar", "profile"):
        assert claims[rule] == {2}, rule
    # the drafter trains first, then the target whose checkpoint more runs serve (tiny-fine:
    # its variant, its control and two K by two datasets), all before anything that could wait
    prio = {j["wildcards"]["tiny"]: j["priority"] for j in train if j["rule"] == "train_model"}
    assert prio["tiny-drafter"] > prio["tiny-fine"] > prio["tiny-coarse"] > max(
        j["priority"] for j in jobs if j["rule"] not in ("train_model", "random_model"))
    # then the engine jobs, before the jobs that can run beside them: each takes one of the
    # workflow profile's two engine slots, so that two untimed ones (one core each) run side by
    # side while a timed one takes both cores and runs alone
    engine_rules = {"capture", "capture_control", "sd_check", "sweep_sd", "sweep_ar", "profile"}
    assert {j["resources"]["engine"] for j in jobs if j["rule"] in engine_rules} == {1}
    profile = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert "engine=2" in profile["resources"]
    engine = {j["priority"] for j in jobs if j["rule"] in engine_rules}
    rest = {j["priority"] for j in jobs if j["rule"] not in engine_rules | {
        "train_model", "random_model", "tokenizer"}}
    assert len(engine) == 1 and min(engine) > max(rest)
    assert sweep["log"] == [f"logs/sweeps/{sweep['wildcards']['model']}/"
                            f"{sweep['wildcards']['drafter']}/K{sweep['wildcards']['k']}.log"]


def test_the_captured_models_and_the_jobs_benchmarks_are_those_of_the_capture_rule():
    """The models the engine captures (Config.captured: the capture rule's wildcard constraint,
    workflow/rules/traces.smk) are the tiny and study models but the controls, and
    Files.benchmarks lists their captures' downloads and no report rule's benchmark (the GPU
    plan's is the report's, ReportIndexParams')."""
    from specmoe import paths as P
    from specmoe.contracts.report import ReportIndexParams

    from snakemake.utils import update_config

    default = files("config.yaml")
    raw = yaml.safe_load((REPO / "config.yaml").read_text())  # --configfile extends the default
    update_config(raw, yaml.safe_load((REPO / ".test/study-cpu/config.yaml").read_text()))
    study = Files(Config.load(raw, REPO / "workflow/schemas/config.schema.yaml"))
    assert default.cfg.captured == [n for n in default.cfg.names("tiny")
                                    if not default.cfg.models[n].control_of]
    assert "tiny-fine" in default.cfg.captured and "tiny-fine-random" not in default.cfg.captured
    assert (REPO / "workflow/rules/traces.smk").read_text().count("one_of(CFG.captured)") == 1
    assert study.cfg.planned and set(study.cfg.hf) <= set(study.cfg.captured)
    assert not [b for b in study.benchmarks() if b.startswith("benchmarks/report/")]
    assert P.report_benchmark("plan") in ReportIndexParams.from_config(study.cfg, None,
                                                                       study).benchmarks


@pytest.mark.slow  # Snakemake dry runs of every job
@pytest.mark.parametrize("case", [None, ".test/study-cpu/config.yaml"])
def test_the_reports_benchmarks_are_those_of_every_job_of_the_dry_run_but_its_own(tmp_path,
                                                                                  case):
    """The report's time breakdown counts the benchmark files of the jobs its configuration
    declares (ReportIndexParams.benchmarks: Files.benchmarks and the report rules'): exactly
    those of the dry run's jobs (bench/dag_jobs.py), the report index's own excepted, on the
    default and on the study's path on a CPU (downloads, prompt tables, the GPU plan, the weight
    model)."""
    import json
    import subprocess
    import sys

    from snakemake.utils import update_config

    from specmoe import paths as P
    from specmoe.contracts.report import ReportIndexParams
    from wf import copy_workflow

    wd = copy_workflow(tmp_path / "wf")
    r = subprocess.run([sys.executable, str(REPO / "bench/dag_jobs.py"),
                        *(["--configfile", case] if case else [])], cwd=wd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    dag = {j["benchmark"] for j in map(json.loads, r.stdout.splitlines()) if j["benchmark"]}
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    if case:  # --configfile extends the default as Snakemake does
        update_config(cfg, yaml.safe_load((REPO / case).read_text()))
    cfg = Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")
    params = ReportIndexParams.from_config(cfg, None, Files(cfg))
    assert P.report_benchmark("index") in dag and len(dag) > 40
    assert set(params.benchmarks) == dag - {P.report_benchmark("index")}


@pytest.mark.slow  # Snakemake dry runs
def test_a_synthetic_models_hf_config_is_an_input_of_its_cost_model_and_prediction(
        tmp_path, monkeypatch):
    """A synthetic model's dimensions read from the config.json its `hf_config` names (instead
    of `dims`): its cost models and its prediction declare it, so that a new one reruns them
    (a dry run after it changed lists them); without one they read no file of the model."""
    import os
    import shutil
    import time
    from pathlib import Path

    from specmoe import paths as P
    from specmoe.cost.stepmodel import config_path
    from wf import copy_workflow, planned_jobs, snakemake

    assert files("config.yaml").checkpoint("synth-fine") == []
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    synth = next(m for m in raw["models"] if m["name"] == "synth-fine")
    del synth["dims"]
    synth["hf_config"] = "synth-config.json"  # Qwen3-30B-A3B's: 8 of 128 experts, as its trace
    case = {"models": [synth]}
    raw["models"] = [synth]
    monkeypatch.chdir(tmp_path)  # the path is read from the workflow's folder: the file is there
    shutil.copy(config_path("Qwen3-30B-A3B.json"), tmp_path / "synth-config.json")
    cfg = Files(Config.load(raw, REPO / "workflow/schemas/config.schema.yaml"))
    assert cfg.checkpoint("synth-fine") == ["synth-config.json"]
    assert cfg.predict_inputs("synth-fine")["checkpoint"] == ["synth-config.json"]

    wd = copy_workflow(tmp_path / "wf", case)
    shutil.copy(config_path("Qwen3-30B-A3B.json"), wd / "synth-config.json")
    targets = [*cfg.of_runs(P.COSTMODEL), P.PREDICT.format(model="synth-fine")]

    def to_run() -> list[dict]:
        return planned_jobs(snakemake(wd, "-n", *targets, configfile="case.yaml").stdout)

    chain = to_run()
    assert {"costmodel", "predict"} <= {j["rule"] for j in chain}
    # the chain's outputs as a finished run leaves them, newer than the config.json
    t = time.time()
    os.utime(wd / "synth-config.json", (t - 100, t - 100))
    for job in chain:
        for out in map(Path, job["output"].split(", ")):
            (wd / out).parent.mkdir(parents=True, exist_ok=True)
            (wd / out).write_text("{}")
            os.utime(wd / out, (t, t))
    assert to_run() == []
    os.utime(wd / "synth-config.json", (t + 100, t + 100))  # a new config.json
    rerun = to_run()
    assert {j["rule"] for j in rerun} == {"costmodel", "predict"}
    assert len([j for j in rerun if j["rule"] == "costmodel"]) == len(cfg.of_runs(P.COSTMODEL))


@pytest.mark.slow  # Snakemake dry runs of every job
@pytest.mark.parametrize("case", [None, ".test/study-cpu/config.yaml"])
def test_the_report_waits_for_every_job_whose_files_its_time_breakdown_reads(tmp_path, case):
    """The report's time breakdown reads the benchmark files of ReportIndexParams.benchmarks and
    the engine starts their outputs record (timing.record_of): every such job is in the dry-run
    DAG of results/report/index.md (the SD checks, which no table reads, and the GPU plan
    included), so that its files are this run's when the report reads them, and every record it
    reads is an input of its own."""
    import json
    import subprocess
    import sys

    from snakemake.utils import update_config

    from specmoe import paths as P
    from specmoe.contracts.report import ReportIndexParams
    from specmoe.report.timing import record_of
    from wf import copy_workflow

    wd = copy_workflow(tmp_path / "wf")
    r = subprocess.run([sys.executable, str(REPO / "bench/dag_jobs.py"), P.REPORT_MD,
                        *(["--configfile", case] if case else [])], cwd=wd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = [json.loads(line) for line in r.stdout.splitlines()]
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    if case:  # --configfile extends the default as Snakemake does
        update_config(cfg, yaml.safe_load((REPO / case).read_text()))
    cfg = Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")
    run_files = Files(cfg)
    params = ReportIndexParams.from_config(cfg, None, run_files)
    upstream = {j["benchmark"] for j in jobs if j["rule"] != "report_index"}
    assert {"sd_check", "capture"} <= {j["rule"] for j in jobs} or not cfg.tiny_targets
    assert set(params.benchmarks) <= upstream
    records = {rec for b in params.benchmarks if (rec := record_of(b))}
    assert records == set(ReportIndexParams.inputs(cfg, run_files)["records"])
    assert any(rec.startswith("results/sd_check/") for rec in records) or not cfg.tiny_targets
    index = next(j for j in jobs if j["rule"] == "report_index")
    assert records <= set(index["input"])
    assert (P.PLAN_MD in index["input"]) == bool(cfg.planned)
