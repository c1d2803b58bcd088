"""Each rule's contract as one record (specmoe.contracts): its parameters from the resolved
configuration, its named inputs and outputs, and the one adapter every script runs."""

from __future__ import annotations

import json
from dataclasses import fields
from types import SimpleNamespace

import pytest

from specmoe.config import SWEEP_ANALYSIS_KEYS
from specmoe.contracts import Named, run_rule, snakemake_params, stage_args
from specmoe.contracts.analysis import SpeedupParams
from test_config import resolved


class Files(dict):
    """A stand-in for Snakemake's named files (items() and attribute access)."""

    def __getattr__(self, name):
        return self[name]


class Wildcards(dict):
    __getattr__ = dict.__getitem__


def job(rule, inputs, outputs, params, log):
    return SimpleNamespace(rule=rule, input=Files(inputs), output=Files(outputs),
                           params=SimpleNamespace(**params), log=[str(log)])


RUN = Wildcards(model="tiny-fine", drafter="tiny-drafter", k="3", dataset="tinybench")


def test_speedup_params_come_from_the_run_and_the_sweeps_analysis_keys():
    cfg = resolved(edit=lambda c: c["sweep"].update(shape_margin=0.07, timing="client"))
    p = SpeedupParams.from_config(cfg, RUN)
    assert p.run == {"model": "tiny-fine", "drafter": "tiny-drafter", "k": 3, "dataset": "tinybench"}
    assert (p.margin, p.timing) == (0.07, "client")
    assert p.engine_log_sd == cfg.raw["sweep"]["engine_log_sd"]
    # the keys the record reads are those the sweeps leave out (a change reruns no sweep)
    assert set(SWEEP_ANALYSIS_KEYS) == set(SpeedupParams.SWEEP_KEYS.values())
    assert not set(SWEEP_ANALYSIS_KEYS) & set(cfg.sweep_params("tiny-fine"))


def test_the_drafter_series_is_an_input_only_for_a_drafter_served_alone():
    cfg = resolved()
    tiny = SpeedupParams.drafter_series(cfg, RUN)
    # tiny-fine's SD series run in the sweep section's float32 at TP 1, and so does its drafter
    # alone
    assert tiny == ["results/sweeps/tiny-drafter/ar-float32-tp1.json"]
    cfg.drafters["eagle"] = SimpleNamespace(served_alone=False)
    assert SpeedupParams.drafter_series(cfg, Wildcards({**RUN, "drafter": "eagle"})) == []


def test_snakemake_params_are_the_records_fields_built_once_per_job():
    cfg = resolved()
    calls = []

    class Counted(SpeedupParams):
        @classmethod
        def from_config(cls, cfg, w):
            calls.append(dict(w))
            return SpeedupParams.from_config(cfg, w)

    params = snakemake_params(Counted, cfg)
    assert list(params) == [f.name for f in fields(SpeedupParams)]
    assert params["run"](RUN)["k"] == 3 and params["margin"](RUN) == cfg.sweep["shape_margin"]
    assert len(calls) == 1


def test_the_adapter_refuses_a_rule_that_names_other_files_than_its_record(tmp_path):
    p = {"run": dict(RUN), "margin": 0.05, "timing": "engine", "engine_log_sd": 0.04,
         "engine_log_sd_df": 6, "engine_log_sd_device": "cpu"}
    smk = job("speedup", {"sd": "a", "series": "b", "drafter": []}, {"json": "o"}, p,
              tmp_path / "log")
    with pytest.raises(ValueError, match="named sd, series, drafter; its record declares sd, "
                                         "drafter"):
        stage_args(smk, SpeedupParams)
    args = stage_args(job("speedup", {"sd": "a", "drafter": ["b"]}, {"json": "o"}, p,
                          tmp_path / "log"), SpeedupParams)
    assert args["inputs"].sd == "a" and args["inputs"].drafter == ["b"]
    assert args["params"].margin == 0.05
    with pytest.raises(AttributeError, match="no file named 'target'"):
        Named({"sd": "a"}).target


def point(batch, tpot, tau=None):
    p = {"batch": batch, "tpot_ms": {"mean": tpot, "median": tpot, "p99": tpot * 1.3, "std": 1.0},
         "output_throughput": batch * 1000.0 / tpot, "completed": 50}
    if tau is not None:
        p["sd"] = {"acceptance_length": tau, "per_position_acceptance": [0.8, 0.6]}
    return p


def series(model, points):
    # each series records its engine's arguments (speedup_stage compares the drafter's with the
    # SD series')
    return {"series": {"model": model}, "engine": {"dtype": "float32"},
            "datasets": {"tinybench": {"points": points}},
            "provenance": {"model": {"name": model}, "engine": "vllm 0.32.0 (cpu)"}}


def test_speedup_runs_through_the_adapter_with_its_named_files(tmp_path):
    """The speedup stage as its script runs it: the series by name, the record's parameters, the
    output by name; the SD series' own no-SD points and the drafter's series give the draft
    cost."""
    sd = series("t", [point(1, 10.0, 2.5), point(8, 14.0, 2.5)])
    sd["datasets"]["tinybench"]["paired_no_sd"] = {"points": [point(1, 20.0), point(8, 21.0)]}
    sd["paired_no_sd"] = {"engine": {}, "arm_order": "interleaved"}
    files = {"sd": sd, "dr": series("d", [point(1, 2.0), point(8, 2.5)])}
    for name, body in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(body))
    p = SpeedupParams(run=dict(RUN, k=3), margin=0.05, timing="client", engine_log_sd=0.04,
                      engine_log_sd_df=6, engine_log_sd_device="cpu")
    out = tmp_path / "out" / "speedup.json"
    smk = job("speedup", {"sd": str(tmp_path / "sd.json"), "drafter": [str(tmp_path / "dr.json")]},
              {"json": str(out)},
              {f.name: getattr(p, f.name) for f in fields(p)}, tmp_path / "speedup.log")
    from specmoe.stages.analysis import speedup_stage

    run_rule(smk, speedup_stage, SpeedupParams)
    res = json.loads(out.read_text())
    assert res["run"]["k"] == 3
    assert [r["batch"] for r in res["rows"]] == [1, 8]
    assert res["rows"][0]["speedup"] == pytest.approx(2.0, rel=0.01)
    assert res["rows"][0]["draft_cost"] == pytest.approx(3 * 2.0 / 20.0)
    assert "stage speedup done" in (tmp_path / "speedup.log").read_text()
    # the GPU the series was measured on survives the analysis job (which ran elsewhere: it
    # wrote its own machine over it), and reaches the measured tables' provenance
    sd["provenance"] = {"hardware": {"gpus": ["NVIDIA H100 80GB HBM3"]}, "engine": "vllm (cuda)",
                        "packages": {"vllm": "0.32.0"}, "created": "then",
                        "model": {"name": "t", "revision": "abc"}}
    (tmp_path / "sd.json").write_text(json.dumps(sd))
    # the drafter's own series gives the draft cost: its measurement is named as well
    files["dr"]["provenance"] = {**sd["provenance"], "model": {"name": "d", "revision": "def"}}
    (tmp_path / "dr.json").write_text(json.dumps(files["dr"]))
    run_rule(smk, speedup_stage, SpeedupParams)
    prov = json.loads(out.read_text())["provenance"]
    assert prov["measured"]["hardware"]["gpus"] == ["NVIDIA H100 80GB HBM3"]
    assert prov["measured"]["packages"] == {"vllm": "0.32.0"} and prov["stage"] == "speedup"
    from specmoe.stages.report import measured_from

    assert measured_from([str(out)]) == ["d@def on NVIDIA H100 80GB HBM3 with vllm (cuda)",
                                         "t@abc on NVIDIA H100 80GB HBM3 with vllm (cuda)"]


def test_report_index_names_the_configuration_it_was_given_and_writes_its_named_outputs(
        tmp_path, monkeypatch):
    """The report's configuration hash is a declared parameter (a change of configuration reruns
    it), from the configuration the workflow resolved; its three outputs are where the rule names
    them."""
    import shutil

    from declared import report_inputs
    from specmoe.contracts.report import ReportIndexParams, report_tables
    from specmoe.files import Files as RunFiles
    from specmoe.provenance import config_hash
    from specmoe.stages.report import report_index_stage
    from test_report import FIXTURE

    cfg = resolved()
    p = ReportIndexParams.from_config(cfg, None, RunFiles(cfg))
    assert p.config_hash == config_hash(cfg.raw)
    other = resolved(edit=lambda c: c.update(shuffle_null=False))
    assert ReportIndexParams.from_config(other, None, RunFiles(other)).config_hash != p.config_hash
    declared = ReportIndexParams.inputs(cfg, RunFiles(cfg))
    assert [f.split("/")[-1] for f in declared["tables"]] == [f"{t}.csv"
                                                              for t in report_tables(cfg)]

    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURE, tmp_path / "tables")
    csvs, mds, figs = report_inputs(tmp_path / "tables", tmp_path / "figures")
    outs = {"md": str(tmp_path / "r" / "index.md"), "html": str(tmp_path / "r" / "page.html"),
            "summary": str(tmp_path / "r" / "end.txt")}
    smk = job("report_index", {"tables": list(csvs.values()), "markdown": list(mds.values()),
                               "figures": list(figs.values())}, outs,
              {"config_hash": p.config_hash, "benchmarks": p.benchmarks,
               "controls": p.controls}, tmp_path / "index.log")
    run_rule(smk, report_index_stage, ReportIndexParams)
    assert f"Configuration hash `{p.config_hash}`" in (tmp_path / "r" / "index.md").read_text()
    assert (tmp_path / "r" / "page.html").exists()
    assert str(tmp_path / "r" / "page.html") in (tmp_path / "r" / "end.txt").read_text()


def test_an_engine_jobs_record_follows_its_kind():
    """Capture serves its run's dataset with the tiny capture section; a series every swept
    dataset with the sweep settings; a kind without SD has no drafter, as input or in its job."""
    from specmoe.contracts.engines import (CaptureParams, EngineParams, ProfileParams,
                                           SweepArParams, SweepSdParams, engine_record)
    from specmoe.files import Files

    cfg = resolved()
    cap = CaptureParams.from_config(cfg, RUN)
    assert cap.job == {"model": "tiny-fine", "drafter": "tiny-drafter", "k": 3,
                       "dataset": "tinybench"}
    assert cap.settings == cfg.section("capture", tiny=True)
    assert (cap.method, cap.gpu, cap.prompts) == (None, False, cfg.prompts)
    assert cap.prompting == {"chat_template": cfg.prompting("tiny-fine",
                                                            ["tinybench"])["chat_template"]}
    sd = SweepSdParams.from_config(cfg, Wildcards(model="tiny-fine", drafter="tiny-drafter",
                                                  k="3"))
    assert sd.job["datasets"] == cfg.sweep_datasets("tiny-fine") and "dataset" not in sd.job
    assert sd.settings == cfg.sweep_params("tiny-fine") and sd.label == "sweep_sd of tiny-fine"
    ar_w = Wildcards(model="tiny-fine")
    ar = SweepArParams.from_config(cfg, ar_w)
    assert (ar.job["drafter"], ar.job["k"]) == (None, None)
    prof = ProfileParams.from_config(cfg, RUN)
    assert prof.settings == cfg.section("profiling")
    assert prof.job["dataset"] == cfg.models["tiny-fine"].datasets[0]  # its first
    files = Files(cfg)
    assert set(CaptureParams.inputs(cfg, files, RUN)) == set(EngineParams.INPUTS)
    assert "drafter" not in SweepArParams.inputs(cfg, files, ar_w)
    assert CaptureParams.inputs(cfg, files, RUN)["target"] == "results/models/tiny-fine"
    assert engine_record("sweep_ar") is SweepArParams
    with pytest.raises(ValueError, match="unknown engine job kind"):
        engine_record("serve")


def test_an_engine_job_takes_no_gpu_plan_only_the_config_its_runtime_is_estimated_from():
    """A GPU job's SLURM runtime is the GPU plan's estimate, computed when the job is submitted
    (workflow/rules/common.smk): its input is its model's config-only download where the package
    ships no config.json (none on a CPU, whose runtime is fixed), never results/plan.json, whose
    every change (an assumption, another model's entry) would rerun every measurement."""
    from test_preflight import only, paper

    from specmoe.contracts.engines import CaptureParams, EngineParams, SweepSdParams
    from specmoe.files import Files as RunFiles

    assert "plan" not in EngineParams.INPUTS and "config" in EngineParams.INPUTS
    name = "glm-4.7-flash-bf16-tp1"
    w = Wildcards(model=name, drafter="mtp", k="3", dataset="mt-bench")
    for repo_id, config in (("zai-org/GLM-4.7-Flash", []),  # shipped
                            ("example/unshipped-moe",
                             ["results/downloads/example--unshipped-moe.config.json"])):
        for gpu, want in ((True, config), (False, [])):
            def edit(c, repo_id=repo_id, gpu=gpu):
                only(name, repo_id=repo_id, hardware="H100" if gpu else "CPU")(c)
            cfg = paper(edit)
            assert cfg.on_gpu(name) == gpu
            for record in (CaptureParams, SweepSdParams):
                inputs = record.inputs(cfg, RunFiles(cfg), w)
                assert inputs["config"] == want, (repo_id, gpu)
                assert set(inputs) <= set(EngineParams.INPUTS)


def test_an_engine_jobs_params_name_the_gpu_it_runs_on():
    """A study model moved from an H100 to a B200 reruns its captures, sweeps and profiles (its
    cost model and prediction did already, the measurements did not); a tiny model on this
    machine's cores names no hardware."""
    from specmoe.contracts.engines import ENGINE_RECORDS
    from test_preflight import only, paper

    model = "qwen3-30b-fp8-tp1"
    w = Wildcards(model=model, drafter="eagle3-qwen3-30b", k="3", dataset="mt-bench")
    h100, b200 = (paper(only(model, hardware=hw)) for hw in ("H100", "B200"))
    for record in ENGINE_RECORDS.values():
        on = [{name: value(w) for name, value in snakemake_params(record, cfg).items()}
              for cfg in (h100, b200)]
        assert on[0] != on[1], record.KIND
        assert (on[0]["hardware"], on[1]["hardware"]) == ("H100", "B200")
        assert snakemake_params(record, resolved())["hardware"](RUN) is None


def test_every_engine_kind_has_a_record_whose_stage_takes_its_contract():
    """The engine rules' script runs the stage its rule's record names: every kind of
    specmoe.kinds has a record, and each record's stage takes (inputs, outputs, params) and the
    job's log and runtime."""
    import inspect
    from importlib import import_module

    from specmoe.contracts.engines import ENGINE_RECORDS
    from specmoe.kinds import KINDS

    assert set(ENGINE_RECORDS) == set(KINDS)
    for name, record in ENGINE_RECORDS.items():
        assert record.KIND == name
        module, stage = record.STAGE.rsplit(".", 1)
        params = list(inspect.signature(getattr(import_module(module), stage)).parameters)
        assert params == ["inputs", "outputs", "params", "log", "runtime"], name


def test_the_analysis_records_read_only_what_their_rules_depend_on():
    """A cost model depends on its model's dimensions and its one hardware entry, not on its
    drafters or datasets; a synthetic trace on its generator; the step model's prediction of a
    synthetic model on the default method (it has no drafter entry)."""
    from specmoe.contracts.analysis import (COST_KEYS, CostmodelParams, PredictParams,
                                            SynthFitParams, SynthTraceParams)
    from specmoe.names import DEFAULT_METHOD

    cfg = resolved()
    synth = Wildcards(model="synth-fine", drafter=cfg.models["synth-fine"].drafters[0], k="3",
                      dataset=cfg.models["synth-fine"].datasets[0])
    st = SynthTraceParams.from_config(cfg, synth)
    assert set(st.model) == {"name", "source", "synthetic"} and st.run["k"] == 3
    # the process's fit: one per model, whatever its K, requests or seed
    fit = SynthFitParams.from_config(cfg, synth)
    assert set(fit.fit) == {"fit_to", "num_experts", "top_k"}
    assert SynthTraceParams.inputs(cfg, synth) == {"fit": "results/synth/synth-fine/fit.json"}

    def more_requests(c):
        next(m for m in c["models"] if m["name"] == "synth-fine")["synthetic"]["requests"] = 7

    assert SynthFitParams.from_config(resolved(edit=more_requests), synth) == fit
    cm = CostmodelParams.from_config(cfg, RUN)
    assert list(cm.hardware) == ["CPU"] and cm.hardware["CPU"] == cfg.hardware["CPU"]
    assert set(cm.model) <= set(COST_KEYS) and "drafters" not in cm.model
    assert cm.draft == cfg.draft_cost

    def other_datasets(c):
        next(m for m in c["models"] if m["name"] == "tiny-fine")["datasets"] = ["heldout-code"]

    assert CostmodelParams.from_config(resolved(edit=other_datasets), RUN) == cm
    from specmoe import paths as P
    from specmoe.files import Files as RunFiles
    from specmoe.runs import Run

    pr = PredictParams.from_config(cfg, synth, RunFiles(cfg))
    assert pr.batch_sizes == cfg.batch_sizes
    assert [(e["method"], e["k"]) for e in pr.predictions] == [(DEFAULT_METHOD, k)
                                                               for k in (3, 5, 7)]
    tiny = PredictParams.from_config(cfg, RUN, RunFiles(cfg)).predictions
    assert {e["method"] for e in tiny} == {cfg.drafters["tiny-drafter"].method}
    # the run each prediction names (the report sets it beside that run's sweep) is the one
    # whose trace it reads
    for e in tiny:
        run = Run.of(e["run"])
        assert e["files"]["overlap"] == run.fill(P.OVERLAP)
        assert run.fill(P.OVERLAP) in RunFiles(cfg).predict_inputs("tiny-fine")["overlap"]
        assert (run.model, run.k) == ("tiny-fine", e["k"])


def test_only_an_untrained_control_reads_its_targets_trace():
    from specmoe.contracts.analysis import AcceptanceParams, IpfParams, OverlapParams

    cfg = resolved()
    assert OverlapParams.target_trace(cfg, RUN) == []
    control = Wildcards({**RUN, "model": "tiny-fine-random"})
    assert OverlapParams.target_trace(cfg, control) == [
        "results/traces/tiny-fine/tiny-drafter/K3/tinybench.parquet"]
    assert OverlapParams.from_config(cfg).shuffle_null is cfg.shuffle_null is True
    assert IpfParams.from_config(cfg).batch_sizes == cfg.batch_sizes
    assert AcceptanceParams.from_config(cfg).heldout == []  # the default downloads none


def test_the_adapter_gives_the_jobs_threads_to_a_stage_that_takes_them(tmp_path):
    seen = {}

    def stage(inputs, outputs, params, threads=None):
        seen.update(o=inputs.overlap, json=outputs.json, threads=threads, b=params.batch_sizes)

    from specmoe.contracts.analysis import IpfParams

    smk = job("ipf", {"overlap": "o.json"}, {"json": "i.json"}, {"batch_sizes": [1, 8]},
              tmp_path / "ipf.log")
    smk.threads = 3
    run_rule(smk, lambda inputs, outputs, params: seen.update(o=inputs.overlap), IpfParams)
    assert seen == {"o": "o.json"}
    run_rule(smk, stage, IpfParams)
    assert seen == {"o": "o.json", "json": "i.json", "threads": 3, "b": [1, 8]}
    smk.input = Files(trace="t.parquet")
    with pytest.raises(ValueError, match="named trace; its record declares overlap"):
        run_rule(smk, stage, IpfParams)


def test_a_tiny_models_weights_depend_on_its_recipe_and_a_controls_on_its_evaluation_only():
    from specmoe.contracts.models import EVAL_KEYS, TOKENIZER_KEYS, TokenizerParams, TrainParams
    from specmoe.runtime.tiny import TrainSpec

    cfg = resolved()
    w = Wildcards(tiny="tiny-fine")
    trained, control = TrainParams.from_config(cfg, w), TrainParams.from_config(cfg, w, False)
    assert trained.trained and not control.trained
    assert trained.model["steps"] == cfg.entry("tiny-fine")["steps"] and "steps" not in control.model
    assert "datasets" not in trained.model and "drafters" not in trained.model
    assert set(control.tiny["train"]) <= set(EVAL_KEYS) < set(trained.tiny["train"]) | set(EVAL_KEYS)
    assert TrainParams.threads(cfg) == cfg.raw["tiny"]["train"].get("threads", TrainSpec.threads)
    assert set(TokenizerParams.from_config(cfg).tiny) <= set(TOKENIZER_KEYS)


def test_a_control_reads_its_targets_trace_through_its_own_checkpoint(tmp_path):
    from specmoe.contracts import job_facts
    from specmoe.contracts.engines import CaptureControlParams

    cfg = resolved()
    w = Wildcards({**RUN, "model": "tiny-fine-random"})
    assert CaptureControlParams.inputs(cfg, w) == {
        "trace": "results/traces/tiny-fine/tiny-drafter/K3/tinybench.parquet",
        "control": "results/models/tiny-fine-random"}
    p = CaptureControlParams.from_config(cfg, w)
    assert p.settings == cfg.section("capture", tiny=True) and p.run["model"] == "tiny-fine-random"
    smk = job("capture_control", {}, {}, {}, tmp_path / "c.log")
    smk.resources, smk.threads = {"runtime": 30}, 2

    def engine_stage(inputs, outputs, params, log=None, runtime=None):
        pass

    assert job_facts(smk, engine_stage) == {"log": str(tmp_path / "c.log"), "runtime": 30}


def test_every_record_names_its_stage_and_the_script_runs_that_stage():
    """A record's STAGE is a stage that takes the job's (inputs, outputs, params) by name, and a
    script that runs a record runs the stage the record names (a script is the contract's reader
    the maintainer does not open)."""
    import importlib
    import inspect
    import re
    from dataclasses import is_dataclass

    from wf import REPO

    records = {}
    for name in ("analysis", "engines", "models", "report", "study"):
        mod = importlib.import_module(f"specmoe.contracts.{name}")
        records.update({k: v for k, v in vars(mod).items() if isinstance(v, type)
                        and is_dataclass(v) and v.__module__ == mod.__name__})
    assert {"TablesParams", "FiguresParams", "ComparisonParams", "PlanParams"} <= set(records)
    for rec in records.values():
        if not hasattr(rec, "STAGE"):  # a base the engine rules' records extend (EngineParams)
            assert rec.__subclasses__(), rec.__name__
            continue
        module, fn = rec.STAGE.rsplit(".", 1)
        stage = getattr(importlib.import_module(module), fn)
        assert list(inspect.signature(stage).parameters)[:3] == ["inputs", "outputs", "params"]
    runs = 0
    for script in sorted((REPO / "workflow" / "scripts").glob("*.py")):
        for stage, rec in re.findall(r"run_rule\(snakemake, (\w+), (\w+)\)", script.read_text()):
            assert records[rec].STAGE.rsplit(".", 1)[1] == stage, script.name
            runs += 1
    assert runs >= 20


def test_a_datasets_download_and_prompt_table_depend_only_on_the_keys_their_stages_read():
    """The download reads a dataset's repository, revision and files (format: the default files);
    the prompt table its format, files, languages and most prompts. prompt_tokens (which
    config/paper.yaml tells the user to replace), heldout, max_batch and chat_template reach the
    jobs that read them through their own params: a change to one reruns neither the download nor
    the prompt table, nor so every capture, sweep and profile on the dataset."""
    from test_preflight import paper

    from specmoe.contracts.analysis import AcceptanceParams
    from specmoe.contracts.engines import CaptureParams, SweepSdParams
    from specmoe.contracts.report import PlanParams
    from specmoe.contracts.study import DownloadDatasetParams, PromptTableParams

    def with_entry(**kw):
        return paper(lambda c: c["datasets"]["mt-bench"].update(kw))

    def records(cfg, name="mt-bench"):
        w = Wildcards(dataset=name)
        return DownloadDatasetParams.from_config(cfg, w), PromptTableParams.from_config(cfg, w)

    base = paper()
    download, table = records(base)
    assert download.spec == {"repo_id": "philschmid/mt-bench", "format": "mt-bench",
                             "files": ["question.jsonl"]}
    assert table.spec == {"format": "mt-bench", "files": ["question.jsonl"], "max_prompts": 80}
    assert records(base, "aya")[1].spec["languages"] == base.datasets["aya"]["languages"]
    model, run = "qwen3-30b-fp8-tp1", dict(drafter="eagle3-qwen3-30b", k="3")
    later = {"prompt_tokens": (80, lambda c: PlanParams.from_config(c).prompt_tokens),
             "heldout": (True, lambda c: AcceptanceParams.from_config(c).heldout),
             "chat_template": (False, lambda c: CaptureParams.from_config(
                 c, Wildcards(model=model, dataset="mt-bench", **run)).prompting),
             "max_batch": (64, lambda c: SweepSdParams.from_config(
                 c, Wildcards(model=model, **run)).settings)}
    for key, (value, read) in later.items():
        edited = with_entry(**{key: value})
        assert records(edited) == (download, table), key
        assert read(edited) != read(base), key  # the job that reads it reruns
    assert records(with_entry(revision="a" * 40)) == (
        DownloadDatasetParams(spec={**download.spec, "revision": "a" * 40}, dataset="mt-bench",
                              configured_revision="a" * 40),
        table)  # a new download reruns the table: its input
    assert records(with_entry(max_prompts=60)) == (
        download, PromptTableParams(spec={**table.spec, "max_prompts": 60}, dataset="mt-bench"))


def test_the_sweeps_analysis_only_settings_rerun_no_sweep_of_a_study_model_or_a_tiny_one():
    """engine_log_sd (config/paper.yaml tells the user to set it), its degrees of freedom and
    device, the shape's margin and the timing are read by rule speedup alone (a series measures
    both the client's and the engine's TPOT, whichever `timing` names): a change reruns no
    serving series, of a study model (its section through Config.engine_settings) or of a tiny
    one (Config.sweep_params)."""
    from test_preflight import paper

    from specmoe.contracts.engines import SweepArParams, SweepSdParams

    analysis = {"engine_log_sd": 0.05, "engine_log_sd_df": 4, "engine_log_sd_device": "cpu",
                "shape_margin": 0.1, "timing": "engine"}
    assert set(analysis) == set(SWEEP_ANALYSIS_KEYS)
    study = Wildcards(model="qwen3-30b-fp8-tp1", drafter="eagle3-qwen3-30b", k="3")
    alone = Wildcards(model="qwen2-0.5b")  # a draft model served alone
    tiny = Wildcards(model="tiny-fine", drafter="tiny-drafter", k="3")
    for load, jobs in ((paper, ((SweepSdParams, study), (SweepArParams, alone))),
                       (lambda edit=None: resolved(edit=edit), ((SweepSdParams, tiny),))):
        base, edited = load(), load(lambda c: c["sweep"].update(analysis))
        for record, w in jobs:
            settings = record.from_config(base, w).settings
            assert not set(SWEEP_ANALYSIS_KEYS) & set(settings), (record.KIND, w)
            assert "schedule" in settings and "output_len" in settings
            assert record.from_config(edited, w) == record.from_config(base, w), (record.KIND, w)
        assert SpeedupParams.from_config(edited, RUN) != SpeedupParams.from_config(base, RUN)


def test_the_plan_reruns_for_the_settings_its_bill_reads_alone():
    """Rule plan's params, as the Snakefile builds them, carry only what the bill reads of the
    configuration (specmoe.cost.plan.ENGINE_KEYS of the engine sections, `plan`, the planned
    models' hardware; each GPU job's engine, for the preflight's memory headroom, is its entries'):
    the sweep's analysis-only settings (engine_log_sd: config/paper.yaml tells the user to set
    it), its servers' start-up timeout or a hardware no planned model runs on rerun no plan (they
    did: the whole sections were params); a setting the bill reads does, through its `config`."""
    from test_preflight import paper

    from specmoe.contracts.report import PlanParams
    from specmoe.cost.plan import ENGINE_KEYS

    def params(edit=None):
        return {name: value(Wildcards())
                for name, value in snakemake_params(PlanParams, paper(edit)).items()}

    base = params()
    assert base["entries"] and {e["hardware"] for e in base["entries"]} == {"H100", "B200"}
    unread = {"sweep.engine_log_sd": lambda c: c["sweep"].update(engine_log_sd=0.05),
              "the sweep's analysis": lambda c: c["sweep"].update(
                  shape_margin=0.1, timing="engine", engine_log_sd_df=4),
              "sweep.startup_timeout_s": lambda c: c["sweep"].update(startup_timeout_s=7200),
              "hardware CPU": lambda c: c["hardware"]["CPU"].update(hbm_bandwidth_gbs=40)}
    for what, edit in unread.items():
        assert params(edit) == base, what
    read = {f"{section}.{key}": (section, key, base["config"][section][key])
            for section, keys in ENGINE_KEYS.items() for key in keys}
    for what, (section, key, was) in read.items():
        # a list (profiling's batch sizes) loses its largest: a larger one would need more
        # distinct prompts than MT-Bench has (Config.profile_problems)
        now = [b for b in was if b != max(was)] if isinstance(was, list) else was + 1
        assert params(lambda c: c[section].update({key: now}))["config"] != base["config"], what
    assert params(lambda c: c["plan"].update(safety=3.0))["config"] != base["config"]
    assert params(lambda c: c["hardware"]["H100"].update(hbm_bandwidth_gbs=4000))["config"] != (
        base["config"])


def test_the_tokens_kept_free_for_drafts_are_a_series_param_alone():
    """draft_slack (K+1 at the model's largest swept K) is read by the serving series alone: a K
    added to a model reruns its series, whose prompts it changes, and not its captures and
    profiles at the other Ks (each keeps its own K+1 free)."""
    from test_preflight import paper

    from specmoe.contracts.engines import (CaptureParams, ProfileParams, SweepArParams,
                                           SweepSdParams)

    model = "qwen3-30b-fp8-tp1"

    def ks(*values):
        return paper(lambda c: next(m for m in c["models"] if m["name"] == model).update(
            ks=list(values)))

    fewer, more = ks(3, 5), ks(3, 5, 7)
    run = dict(model=model, drafter="eagle3-qwen3-30b")
    for k in ("3", "5"):
        for ds in fewer.models[model].datasets:
            w = Wildcards(**run, k=k, dataset=ds)
            assert "draft_slack" not in CaptureParams.from_config(more, w).prompting
            assert CaptureParams.from_config(fewer, w) == CaptureParams.from_config(more, w)
    w = Wildcards(**run, k="3", dataset=fewer.models[model].datasets[0])
    assert ProfileParams.from_config(fewer, w) == ProfileParams.from_config(more, w)
    sd = [SweepSdParams.from_config(cfg, Wildcards(**run, k="3")).prompting
          for cfg in (fewer, more)]
    assert [p["draft_slack"] for p in sd] == [6, 8]
    # a drafter served alone keeps the slack of the largest K it drafts at
    assert SweepArParams.from_config(more, Wildcards(model="qwen2-0.5b")).prompting[
        "draft_slack"] > 0


def test_only_an_engine_job_that_serves_a_dataset_of_the_tiny_table_depends_on_it(tmp_path):
    """The tiny models' prompt table (tiny.prompts: its name a param, a file of the user's an
    input) is read by an engine job only where one of its datasets is not downloaded: a new
    one reruns no study model's job that serves downloaded datasets alone."""
    from test_preflight import paper

    from specmoe.contracts.engines import ENGINE_RECORDS
    from specmoe.files import Files as RunFiles

    model = "qwen3-30b-fp8-tp1"
    w = Wildcards(model=model, drafter="eagle3-qwen3-30b", k="3", dataset="mt-bench")
    tiny_w = Wildcards(model="tiny-fine", drafter="tiny-drafter", k="3", dataset="tinybench")
    builtin = paper()
    mine = paper(lambda c: c["tiny"].update(prompts="mine.csv"))
    tiny = resolved(edit=lambda c: c["tiny"].update(prompts="mine.csv"))
    for record in ENGINE_RECORDS.values():
        study = Wildcards(model="qwen2-0.5b") if record.KIND == "sweep_ar" else w  # served alone
        params = [record.from_config(cfg, study) for cfg in (builtin, mine)]
        assert params[0] == params[1] and params[0].prompts is None, record.KIND
        assert record.inputs(mine, RunFiles(mine), study)["tiny_prompts"] == [], record.KIND
        small = Wildcards(model="tiny-drafter") if record.KIND == "sweep_ar" else tiny_w
        assert record.from_config(tiny, small).prompts == "mine.csv", record.KIND
        assert record.inputs(tiny, RunFiles(tiny), small)["tiny_prompts"] == ["mine.csv"]
    # a study model that serves a dataset of the tiny table reads it
    import shutil
    from importlib import resources

    table = str(tmp_path / "mine.csv")
    with resources.as_file(resources.files("specmoe.data") / "prompts_v1.csv") as builtin_csv:
        shutil.copy(builtin_csv, table)
    import copy

    import yaml
    from snakemake.utils import update_config
    from test_preflight import PAPER

    from specmoe.config import Config, table_datasets
    from wf import REPO

    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(raw, copy.deepcopy(PAPER))
    raw["tiny"]["prompts"] = table
    next(m for m in raw["models"] if m["name"] == model)["datasets"] = ["mt-bench", "tinybench"]
    # the workflow's check: a study model may name a dataset of the tiny table
    both = Config.load(raw, REPO / "workflow/schemas/config.schema.yaml", table_datasets(raw))
    cap = ENGINE_RECORDS["capture"]
    assert cap.from_config(both, Wildcards({**w, "dataset": "tinybench"})).prompts == table
    assert cap.from_config(both, w).prompts is None
    sd = Wildcards(model=model, drafter="eagle3-qwen3-30b", k="3")
    assert ENGINE_RECORDS["sweep_sd"].inputs(both, RunFiles(both), sd)["tiny_prompts"] == [table]
