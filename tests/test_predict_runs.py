"""Rule predict predicts every run of a predicted model (issue #41): one job per model whose JSON
holds one prediction per run, each at its run's K, its drafter's method, its KV context and (a
model with a trace of its own) its run's overlaps and acceptance length. It predicted the first
run alone, so config/paper.yaml's 32k runs (never a model's first) and every other K, drafter and
dataset had no prediction beside their sweeps."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from declared import tables_in
from specmoe import paths as P
from specmoe.contracts import Named
from specmoe.contracts.analysis import PredictParams
from specmoe.cost import stepmodel
from specmoe.errors import InputError
from specmoe.files import Files
from specmoe.provenance import read_json, write_json
from specmoe.report import prose, tables
from specmoe.runs import Run
from specmoe.sources import published
from test_config import resolved
from wf import REPO

QWEN = "qwen3-30b-fp8-tp2"  # MT-Bench first, SPEED-Bench's 32k set second


def _params(cfg, model) -> PredictParams:
    return PredictParams.from_config(cfg, SimpleNamespace(model=model), Files(cfg))


def _runs(params) -> list[Run]:
    return [Run.of(e["run"]) for e in params.predictions]


def _two_ks(c):
    """config/paper.yaml with the TP2 model at K = 3 and 5 (4 runs) and two batch sizes."""
    next(m for m in c["models"] if m["name"] == QWEN)["ks"] = [3, 5]
    c["batch_sizes"] = [1, 8]


def test_the_predict_inputs_list_every_runs_overlap_and_acceptance():
    """tiny-fine has 4 runs (K = 3, 5 on two datasets): the job read the first run's overlaps
    and acceptance length alone. It reads every run's, once each, and each prediction's files
    are among them."""
    files = Files(resolved())
    runs = files.cfg.models["tiny-fine"].runs()
    assert len(runs) == 4 and len({r.k for r in runs}) == 2 and len({r.dataset for r in runs}) == 2
    got = files.predict_inputs("tiny-fine")
    assert got["overlap"] == [r.fill(P.OVERLAP) for r in runs]
    assert got["acceptance"] == [r.fill(P.ACCEPTANCE) for r in runs]
    assert got["checkpoint"] == ["results/models/tiny-fine"]
    # the drafter (tiny-drafter: a separate draft model) is read once, not once per run
    assert got["draft"] == ["results/models/tiny-drafter"]
    for e in _params(files.cfg, "tiny-fine").predictions:
        run = Run.of(e["run"])
        assert e["files"] == {"overlap": run.fill(P.OVERLAP),
                              "acceptance": run.fill(P.ACCEPTANCE),
                              "draft": "results/models/tiny-drafter"}
    # a study model reads its config.json, and at a K past the study's overlap curves (steps
    # 1..4) each such run's captured overlaps (neither its published curve nor the prior
    # reaches K = 5, 7)
    paper = Files(resolved("config/paper.yaml"))
    study = paper.predict_inputs("qwen3-30b-fp8-tp1")
    runs = paper.cfg.models["qwen3-30b-fp8-tp1"].runs()
    assert {r.k for r in runs} == {3, 5, 7} and published.overlap_steps() == 4
    assert study == {"config": "results/downloads/Qwen--Qwen3-30B-A3B-FP8.config.json",
                     "overlap": [r.fill(P.OVERLAP) for r in runs if r.k > 4]}
    assert paper.predict_inputs("qwen3-30b-fp8-tp2") == {
        "config": "results/downloads/Qwen--Qwen3-30B-A3B-FP8.config.json"}  # K = 3 alone


def test_every_run_of_the_papers_models_is_predicted_the_32k_ones_at_their_context():
    """config/paper.yaml: every run (57 of 19 models) has its prediction, each at its own K,
    method and KV context; the 32k runs at SPEED-Bench's 32,768 stated prompt tokens + half of
    the sweep's output, the MT-Bench runs beside them at MT-Bench's own."""
    cfg = resolved("config/paper.yaml")
    output = cfg.sweep["output_len"]
    predicted = []
    for model in cfg.predicted:
        p = _params(cfg, model)
        assert _runs(p) == cfg.models[model].runs()
        for e in p.predictions:
            run = Run.of(e["run"])
            assert e["k"] == run.k
            assert e["method"] == cfg.drafters[run.drafter].method
            assert e["context"] == PredictParams.context_of(cfg, run)
            assert e["files"] == Files(cfg).predict_run_inputs(run)
            assert ("overlap" in e["files"]) == (run.k > published.overlap_steps())
        predicted += _runs(p)
    assert sorted(map(str, predicted)) == sorted(map(str, cfg.runs()))
    long = [e for m in cfg.predicted for e in _params(cfg, m).predictions
            if e["run"]["dataset"] == "speed-bench-32k"]
    assert {e["run"]["model"] for e in long} == {QWEN, "gpt-oss-120b-tp4"}
    assert len(long) == 1 + 3  # the TP2 model at K = 3, GPT-OSS-120B at K = 3, 5, 7
    assert all(e["context"]["tokens"] == 32768 + output / 2 for e in long)
    short = next(e for e in _params(cfg, QWEN).predictions if e["run"]["dataset"] == "mt-bench")
    assert short["context"]["tokens"] == 70 + output / 2


@pytest.fixture(scope="module")
def qwen_predicted(tmp_path_factory):
    """The predict stage for the TP2 model at K = 3, 5 on its two datasets (a snapshot of its
    config.json standing in for the download; the K = 5 runs' captured overlaps, past the
    study's curves): its params and its JSON."""
    from specmoe.stages.analysis import predict_stage

    tmp = tmp_path_factory.mktemp("qwen")
    (tmp / "snapshot").mkdir()
    (tmp / "snapshot" / "config.json").write_bytes(
        (REPO / "src/specmoe/data/hf_configs/Qwen3-30B-A3B-FP8.json").read_bytes())
    cfg = resolved("config/paper.yaml", _two_ks)
    params = _params(cfg, QWEN)
    params = dataclasses.replace(params, model={**params.model,
                                                "hf_config": str(tmp / "snapshot")})
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)  # the params name the runs' files as the workflow does, under results/
        for run in _runs(params):
            if run.k == 5:
                _trace_files(run, (2.9, 3.4), [0.40, 0.36, 0.33, 0.31, 0.30])
        predict_stage(Named(Files(cfg).predict_inputs(QWEN)), Named({"json": tmp / "p.json"}),
                      params)
    return params, read_json(tmp / "p.json"), tmp


def test_the_stage_writes_one_prediction_per_run_at_its_own_k_and_context(qwen_predicted):
    params, out, _ = qwen_predicted
    runs = _runs(params)
    assert len(runs) == 4 and {(r.k, r.dataset) for r in runs} == {
        (k, ds) for k in (3, 5) for ds in ("mt-bench", "speed-bench-32k")}
    preds = out["predictions"]
    assert [Run.of(p["run"]) for p in preds] == runs
    for p, e in zip(preds, params.predictions):
        assert p["model"] == QWEN and p["k"] == e["k"] and p["method"] == "eagle3"
        assert p["context"] == round(e["context"]["tokens"])
        assert p["context_source"]["prompt_tokens"] == e["context"]["prompt_tokens"]
        assert p["batch_sizes"] == [1, 8]
    by = {(Run.of(p["run"]).k, p["run"]["dataset"]): p for p in preds}
    # the 32k run's attention reads 166 times the KV cache: another TE at each K
    for k in (3, 5):
        assert by[(k, "speed-bench-32k")]["context"] == 32768 + 128
        assert by[(k, "mt-bench")]["context"] == 70 + 128
        assert by[(k, "speed-bench-32k")]["te"] != by[(k, "mt-bench")]["te"]
    # each K its own acceptance prior (a study model's: its capture's is not read)
    for k in (3, 5):
        assert tuple(by[(k, "mt-bench")]["acceptance_length"]) == stepmodel.tau_prior(k)
    # K = 3: the study's published curve; K = 5, past it (neither the curve nor the prior of its
    # granularity reaches d = 5): the run's captured overlaps, said
    dims = stepmodel.study_model_dims("Qwen3-30B", "fp8", 2)
    for study in ("Qwen3-30B", None):
        with pytest.raises(InputError, match=r"steps 1\.\.4 only"):
            stepmodel.study_overlaps(dims, 5, study)
    assert by[(3, "mt-bench")]["overlaps"] == "published (Qwen3-30B)"
    assert by[(5, "mt-bench")]["overlaps"] == "measured"
    assert any(c.startswith("overlaps: this run's capture's") and c.endswith("short of K = 5")
               for c in by[(5, "mt-bench")]["caveats"])
    assert not any(c.startswith("overlaps: this run's capture's")
                   for c in by[(3, "mt-bench")]["caveats"])
    assert out["model"] == QWEN and "params" in out


def test_a_study_runs_capture_too_short_for_an_interval_past_the_curves_is_refused(tmp_path):
    """A study model's run at K = 5 whose capture gives its overlaps no interval has no curve to
    fall back on (the prior stops at d = 4): one line says so, not the command's --overlaps."""
    from specmoe.stages.analysis import predict_stage

    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "config.json").write_bytes(
        (REPO / "src/specmoe/data/hf_configs/Qwen3-30B-A3B-FP8.json").read_bytes())
    cfg = resolved("config/paper.yaml", _two_ks)
    params = _params(cfg, QWEN)
    [five] = [e for e in params.predictions
              if e["k"] == 5 and e["run"]["dataset"] == "mt-bench"]
    params = dataclasses.replace(params, predictions=[five], model={
        **params.model, "hf_config": str(tmp_path / "snapshot")})
    run = Run.of(five["run"])
    nan = float("nan")
    write_json(tmp_path / run.fill(P.OVERLAP), {"run": run.as_dict(), "summary": {
        "num_experts": 128, "top_k": 8, "overlap_by_distance": [0.4] * 5,
        "window_low": [nan] * 5, "window_high": [nan] * 5, "window_requests": 2}})
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        with pytest.raises(InputError, match=r"its 2 requests give the overlaps no interval, "
                           r"and the study's curves .* reach d = 1\.\.4 only, short of K = 5: "
                           r"capture more prompts$"):
            predict_stage(Named(Files(cfg).predict_inputs(QWEN)),
                          Named({"json": tmp_path / "p.json"}), params)


def _trace_files(run: Run, tau: tuple[float, float], ov_low: list[float]) -> None:
    """A run's overlap summary (8 of 128 experts, a 95% interval over 40 requests) and its
    acceptance length with its interval, where rule overlap and rule acceptance write them."""
    k = run.k
    low = ov_low[:k]
    write_json(run.fill(P.OVERLAP), {"run": run.as_dict(), "summary": {
        "num_experts": 128, "top_k": 8, "overlap_by_distance": [x + 0.02 for x in low],
        "window_low": low, "window_high": [x + 0.04 for x in low], "window_requests": 40}})
    write_json(run.fill(P.ACCEPTANCE), {"run": run.as_dict(), "acceptance_length": {
        "tau": sum(tau) / 2, "tau_low": tau[0], "tau_high": tau[1], "requests": 40}})


def test_a_traced_model_predicts_each_run_from_its_own_trace(tmp_path, monkeypatch):
    """synth-fine runs at K = 3, 5, 7: each prediction draws its run's own acceptance length and
    overlaps (the job reads every run's files), not the first run's."""
    from specmoe.stages.analysis import predict_stage

    cfg = resolved(edit=lambda c: c.update(batch_sizes=[1, 8]))
    files = Files(cfg)
    runs = cfg.models["synth-fine"].runs()
    assert [r.k for r in runs] == [3, 5, 7]
    monkeypatch.chdir(tmp_path)
    taus = {3: (2.2, 2.6), 5: (2.9, 3.4), 7: (3.3, 4.1)}
    curves = {3: [0.50, 0.45, 0.42], 5: [0.40, 0.36, 0.33, 0.31, 0.30],
              7: [0.45, 0.41, 0.38, 0.36, 0.35, 0.34, 0.33]}
    for r in runs:
        _trace_files(r, taus[r.k], curves[r.k])
    params = _params(cfg, "synth-fine")
    predict_stage(Named(files.predict_inputs("synth-fine")), Named({"json": "p.json"}), params)
    preds = read_json("p.json")["predictions"]
    assert [Run.of(p["run"]) for p in preds] == runs
    for p in preds:
        assert p["acceptance_length"] == list(taus[p["k"]])
        assert p["overlaps"] == "measured"
    assert len({tuple(p["te"]) for p in preds}) == 3
    # a prediction whose file is not among the job's inputs is refused, not read behind the DAG
    first = files.predict_run_inputs(runs[0])
    with pytest.raises(ValueError, match="not among the job's inputs"):
        predict_stage(Named(first), Named({"json": "q.json"}), params)


def test_every_swept_run_stands_beside_its_own_prediction(qwen_predicted):
    """The prediction table had one prediction per model, so a model's other swept runs had
    none beside them: each run's sweep now stands beside its run's prediction, one row per run
    and batch size, and the text gives one line per swept run."""
    from specmoe.report.predicted import prediction_table

    params, out, tmp = qwen_predicted
    runs = _runs(params)
    sweeps = []
    for i, run in enumerate(runs[:3]):  # three of the four runs swept
        sweeps.append(tmp / f"sp{i}.json")
        sweeps[-1].write_text(json.dumps({"run": run.as_dict(), "shape": f"shape {i}", "rows": [
            {"batch": b, "speedup": 1.0 + i / 10 + b / 100, "tau": 2.0 + i / 10}
            for b in (1, 8)]}))
    table = prediction_table([tmp / "p.json"], sweeps)
    assert len(table) == len(runs) * 2
    for i, run in enumerate(runs):
        rows = table[(table["k"] == run.k) & (table["dataset"] == run.dataset)
                     & (table["drafter"] == run.drafter)]
        assert rows["batch"].tolist() == [1, 8]
        pred = out["predictions"][i]
        assert rows["te_predicted"].tolist() == pred["te"]
        if i < 3:
            assert rows["speedup_measured"].tolist() == [1.0 + i / 10 + b / 100 for b in (1, 8)]
            assert set(rows["shape_measured"]) == {f"shape {i}"}
        else:
            assert rows["speedup_measured"].isna().all()
    tables.write_table(table, tmp / "step_model", {"config_hash": "x"})
    lines = prose.prediction_findings(tables_in(tmp))
    assert len(lines) == 3
    for i, run in enumerate(runs[:3]):
        [line] = [s for s in lines if s.startswith(
            f"{QWEN} (step model for {run.label} with {run.drafter}, ")]
        assert line.endswith(f"the measured one shape {i}")
    # a predict JSON of one prediction (written before every run was) is refused
    (tmp / "old.json").write_text(json.dumps(out["predictions"][0]))
    with pytest.raises(InputError, match="not one per run of its model"):
        prediction_table([tmp / "old.json"], sweeps)
    assert np.isfinite(table["te_predicted"]).all()


@pytest.mark.slow  # a Snakemake dry run of the default configuration
def test_the_dry_run_plans_one_predict_job_per_model_reading_every_run(tmp_path):
    """The DAG's predict job of tiny-fine (4 runs) lists each run's overlaps and acceptance
    length; it listed the first run's alone. One job per model, not per run."""
    from wf import copy_workflow, planned_jobs, snakemake

    wd = copy_workflow(tmp_path / "wf")
    runs = resolved().models["tiny-fine"].runs()
    jobs = planned_jobs(snakemake(wd, "-n", P.PREDICT.format(model="tiny-fine")).stdout)
    [job] = [j for j in jobs if j["rule"] == "predict"]
    listed = job["input"].split(", ")
    for run in runs:
        assert run.fill(P.OVERLAP) in listed and run.fill(P.ACCEPTANCE) in listed
    assert job["wildcards"] == {"model": "tiny-fine"}
