"""One precision and one context per run: a drafter's draft cost from its solo series in the
precision its SD engines give it, captures at the sweeps' context, a tiny target's precision in
every engine job of it, and a profile's traces folder written whole or not at all."""
from __future__ import annotations

import json

import pytest

from specmoe.errors import InputError


def _profile(tmp_path, traces):
    """profile_stage of a tokenizer-only checkpoint at K 3 on the tiny prompts (the engines are
    the caller's stand-ins)."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import ProfileParams
    from specmoe.runtime import tiny
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import profile_stage

    ckpt = tmp_path / "t"
    if not ckpt.exists():
        tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 300, ckpt)
        (ckpt / "config.json").write_text("{}")
    prof = {"batch_sizes": [1, 2], "max_tokens": 8, "engines": 2}
    profile_stage(Named({"target": str(ckpt), "drafter": str(ckpt), "prompts": []}),
                  Named({"json": str(traces.with_suffix(".json")), "traces": str(traces)}),
                  ProfileParams(job={"model": "t", "drafter": "d", "k": 3,
                                     "dataset": "tinybench"}, settings=prof, method=None,
                                gpu=False, prompts=prompt_table.DEFAULT_SOURCE, prompting={}))


def test_a_failed_profile_leaves_no_traces_folder(tmp_path, monkeypatch):
    """profile_stage profiled straight into outputs.traces: an engine start that failed after
    another had written its traces left a partly filled folder under its final name (Snakemake
    keeps a directory output it did not see complete only where it cleans up). The engine's
    stand-in writes a trace file, then fails: the folder does not exist afterwards."""
    from pathlib import Path

    from specmoe.runtime import engine

    class Stop(Exception):
        pass

    def run_each(fn, calls, **kw):
        first = Path(calls[0][3])
        (first / "trace.json.gz").write_bytes(b"partial")
        raise Stop

    monkeypatch.setattr(engine, "run_each", run_each)
    traces = tmp_path / "out" / "K3.traces"
    with pytest.raises(Stop):
        _profile(tmp_path, traces)
    assert not traces.exists()
    assert not list(traces.parent.glob(f".{traces.name}*"))  # no temporary folder left either


def test_a_profile_s_traces_folder_holds_its_provenance(tmp_path, monkeypatch):
    """A profile that completes: its traces under the folder's own name, with the provenance of
    the kernel table beside them."""
    from pathlib import Path

    from specmoe.runtime import kernelprof

    def profile_model(target, drafter, k, batches, texts, max_tokens, opts, trace_dir, **kw):
        (Path(trace_dir) / "decode").mkdir()
        (Path(trace_dir) / "decode" / "trace.json.gz").write_bytes(b"x")
        return {"k": k, "batches": []}

    monkeypatch.setattr(kernelprof, "profile_model", profile_model)
    traces = tmp_path / "out" / "K3.traces"
    _profile(tmp_path, traces)
    assert (traces / "decode" / "trace.json.gz").read_bytes() == b"x"
    kept = json.loads((traces / "provenance.json").read_text())
    table = json.loads(traces.with_suffix(".json").read_text())
    assert kept["run"]["model"] == "t" and kept["provenance"] == table["provenance"]
    assert kept["provenance"]["stage"] == "profile"


def resolved(path="config.yaml", edit=None):
    import yaml

    from specmoe.config import Config
    from wf import REPO

    cfg = yaml.safe_load((REPO / path).read_text())
    if edit:
        edit(cfg)
    return Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")


def test_a_tiny_targets_precision_is_every_engine_jobs_dtype():
    """`precision: bf16` on a tiny target changed its sweeps only: its capture and profile stayed
    in their sections' float32, and the measured tables joined an fp32 profile with a bf16
    sweep. Every engine job of it is now bf16, its untrained control's capture (teacher-forced
    through the target's capture settings) too; a target without one keeps its sections'."""
    from specmoe.contracts.engines import CaptureControlParams
    from specmoe.names import control_name

    def bf16(cfg):
        next(m for m in cfg["models"] if m["name"] == "tiny-coarse")["precision"] = "bf16"

    c = resolved(edit=bf16)
    for rule in ("capture", "sweep_sd", "profile"):
        assert c.job_settings(rule, "tiny-coarse")["dtype"] == "bfloat16", rule
        assert c.job_settings(rule, "tiny-fine")["dtype"] == "float32", rule
    for target in ("tiny-coarse", "tiny-fine"):
        w = {"model": control_name(target), "drafter": "tiny-drafter", "k": "3",
             "dataset": c.models[target].datasets[0]}
        control = CaptureControlParams.from_config(c, _Wildcards(w))
        assert control.settings == c.job_settings("capture", target)


class _Wildcards(dict):
    """Snakemake's wildcards: names as attributes."""

    __getattr__ = dict.__getitem__


def test_the_papers_captures_run_at_their_sweeps_context():
    """paper.yaml set sweep.max_model_len 4096 and nothing for capture, whose engines started
    with 1024 tokens: prompts of about 760 to 3,830 tokens were left out of the captures and
    kept in the sweeps of the same runs. Each captured, swept model's capture context is now
    its sweeps' (engine_context, as the engine stages start them; a model's own engine_args
    raise both alike)."""
    from specmoe.kinds import engine_context

    c = resolved("config/paper.yaml")
    swept = [n for n in c.captured if n in c.hf_swept]
    assert swept
    by_job = {ctx.job: ctx.max_model_len for ctx in c.contexts()}
    for name in swept:
        capture = engine_context(c.job_settings("capture", name))
        assert capture == engine_context(c.job_settings("sweep_sd", name)), name
        assert capture >= 4096
        assert {v for j, v in by_job.items() if j.startswith(f"capture {name}/")} == {capture}


@pytest.mark.parametrize("path,where", [("config/paper.yaml", "capture"),
                                        ("config.yaml", "tiny.capture")])
def test_a_capture_context_below_its_sweeps_is_refused(path, where):
    """A captured model's capture engine with a shorter context than its sweeps' would capture
    fewer of the prompts its sweeps serve: refused in one line when the configuration loads."""
    def shorter(cfg):
        cfg.setdefault("sweep", {})["max_model_len"] = 1024
        node = cfg
        for key in where.split("."):
            node = node.setdefault(key, {})
        node["max_model_len"] = 512

    with pytest.raises(InputError, match=rf"{where}.max_model_len 512 is below") as got:
        resolved(path, shorter)
    assert all(line.startswith("config: ") for line in str(got.value).splitlines())


def _wildcards(pattern: str, path: str) -> dict:
    """A path's wildcards under a pattern of specmoe.paths (each wildcard one path segment's
    part, as the rules' constraints give them)."""
    import re

    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+?)", re.escape(pattern))
    found = re.fullmatch(regex, path)
    assert found, (pattern, path)
    return found.groupdict()


@pytest.mark.parametrize("path", ["config.yaml", "config/paper.yaml"])
def test_a_drafter_served_alone_is_timed_in_its_sd_series_dtype(path):
    """The draft cost c divides the drafter's solo TPOT by the target's: the solo series ran in the
    sweep section's dtype (float32 in the default config) while vLLM gives a separate draft model
    its target's dtype inside an SD engine (bfloat16 for tiny-fine-bf16: c and TE from the sweep
    took a float32 drafter time against bf16 target times). Each swept run's drafter series
    (rule speedup's input) is now the drafter served in its SD series' dtype, and no quantization
    of the target's (vLLM loads a separate draft model in its checkpoint's own format)."""
    from specmoe import paths as P
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.contracts.engines import SweepArParams, SweepSdParams

    c = resolved(path)
    checked = set()
    for r in c.sweep_runs():
        series = SpeedupParams.drafter_series(c, Named(r.as_dict()))
        if not c.drafters[r.drafter].served_alone:
            assert series == []
            continue
        (alone_path,) = series
        w = _wildcards(P.SWEEP_AR, alone_path)
        alone = SweepArParams.from_config(c, Named(w)).settings
        sd = SweepSdParams.from_config(c, Named({"model": r.model, "drafter": r.drafter,
                                                 "k": str(r.k)})).settings
        assert alone.get("dtype") == sd.get("dtype"), (r, alone_path)
        assert "quantization" not in alone.get("engine_args", {}), alone_path
        checked.add((r.model, alone_path))
    assert checked
    if path == "config.yaml":  # tiny-fine-bf16's drafter: its own series, in bfloat16
        assert ("tiny-fine-bf16", "results/sweeps/tiny-drafter/ar-bfloat16-tp1.json") in checked
        assert ("tiny-fine", "results/sweeps/tiny-drafter/ar-float32-tp1.json") in checked


def _tp(settings: dict) -> int:
    return int((settings.get("engine_args") or {}).get("tensor_parallel_size", 1))


@pytest.mark.parametrize("path", ["config.yaml", "config/paper.yaml"])
def test_a_drafter_served_alone_runs_at_its_sd_series_tp(path):
    """Inside an SD engine vLLM sets a separate draft model's TP to its target's
    (SpeculativeConfig._verify_and_get_draft_tp; V1's draft-model runner refuses another), but
    the drafter served alone ran at TP 1: paper.yaml's qwen2-0.5b drafts sharded over
    qwen2-57b-bf16-tp2's two GPUs while its solo series ran on one, and c divided a one-GPU
    drafter time by two-GPU target times. For every swept run with a drafter served alone, its
    solo series (rule speedup's input) runs at its SD series' TP, asks for as many GPUs, and the
    preflight and the GPU plan see that TP."""
    from specmoe import paths as P
    from specmoe.config import Job
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.contracts.engines import SweepArParams, SweepSdParams

    c = resolved(path)
    tps = set()
    for r in c.sweep_runs():
        if not c.drafters[r.drafter].served_alone:
            continue
        (alone_path,) = SpeedupParams.drafter_series(c, Named(r.as_dict()))
        w = _wildcards(P.SWEEP_AR, alone_path)
        alone = SweepArParams.from_config(c, Named(w)).settings
        sd = SweepSdParams.from_config(c, Named({"model": r.model, "drafter": r.drafter,
                                                 "k": str(r.k)})).settings
        assert _tp(alone) == _tp(sd), (r, alone_path)
        job = Job("sweep_ar", r.drafter, dtype=w["dtype"], tp=int(w["tp"]))
        assert job in c.alone_jobs(), job
        if c.on_gpu(r.drafter):
            assert c.gpus(r.drafter, w["tp"]) == _tp(sd) == c.engine_of(job).tp, job
        tps.add(_tp(sd))
    assert tps
    if path == "config/paper.yaml":  # TP-2 targets among them
        assert tps == {1, 2}


def test_the_default_runs_serve_the_drafter_alone_once_per_dtype():
    """The default configuration's tiny-drafter drafts in float32 (tiny-fine, tiny-coarse) and
    bfloat16 (tiny-fine-bf16) series: two solo series, each among the run's outputs and GPU-plan
    jobs, and a dtype it drafts in no series of is refused."""
    from specmoe import paths as P
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepArParams
    from specmoe.files import Files

    c = resolved()
    assert [j.label for j in c.alone_jobs()] == ["sweep_ar tiny-drafter/ar-bfloat16-tp1",
                                                 "sweep_ar tiny-drafter/ar-float32-tp1"]
    assert [(j.model, j.dtype, j.tp) for j in c.alone_jobs()] == [
        ("tiny-drafter", "bfloat16", 1), ("tiny-drafter", "float32", 1)]
    made = Files(c).benchmarks()
    for dtype in ("bfloat16", "float32"):
        assert P.benchmark_of(P.SWEEP_AR.format(model="tiny-drafter", dtype=dtype, tp=1)) in made
    assert c.job_settings("sweep_ar", "tiny-drafter", "bfloat16", 1)["dtype"] == "bfloat16"
    # each series serves the datasets of the runs it drafts for in its dtype only
    datasets = {t: SweepArParams.from_config(c, Named({"model": "tiny-drafter", "dtype": t,
                                                      "tp": "1"}))
                .job["datasets"] for t in ("bfloat16", "float32")}
    assert datasets == {"bfloat16": list(c.variants["tiny-fine-bf16"].datasets),
                        "float32": sorted({*c.models["tiny-fine"].datasets,
                                           *c.models["tiny-coarse"].datasets})}
    with pytest.raises(InputError, match="drafts in no SD series of dtype float16 at TP 1"):
        c.job_settings("sweep_ar", "tiny-drafter", "float16", 1)
    with pytest.raises(InputError, match="drafts in no SD series of dtype float32 at TP 2"):
        c.job_settings("sweep_ar", "tiny-drafter", "float32", 2)


def test_a_study_draft_model_is_a_gpu_job_in_each_dtype_it_drafts_in():
    """A draft model drafting for a target served in its checkpoint's dtype (auto) and for one
    served in bf16: two solo GPU jobs, each one the preflight checks and the GPU plan bills, in
    its dtype."""
    def second(cfg):
        base = next(m for m in cfg["models"] if m["name"] == "qwen2-57b-bf16-tp2")
        cfg["models"].append({**base, "name": "qwen2-57b-bf16-tp2-cast", "precision": "bf16"})

    c = resolved("config/paper.yaml", second)
    alone = [j for j in c.gpu_jobs() if j.model == "qwen2-0.5b"]
    assert [j.label for j in alone] == ["sweep_ar qwen2-0.5b/ar-auto-tp2",
                                        "sweep_ar qwen2-0.5b/ar-bfloat16-tp2"]
    assert [c.engine_of(j).dtype for j in alone] == ["auto", "bfloat16"]


@pytest.mark.parametrize("drafter_engine,why", [
    ({"dtype": "bfloat16"}, "ran alone in bfloat16 at TP 1, but drafts in bfloat16 at TP 2"),
    ({"dtype": "float32", "tensor_parallel_size": 2},
     "ran alone in float32 at TP 2, but drafts in bfloat16 at TP 2")])
def test_a_drafter_series_of_another_tp_or_dtype_is_refused(tmp_path, drafter_engine, why):
    """Rule speedup divides the drafter's solo TPOT by its SD series' target's: a solo series
    that ran on one GPU (or in another dtype) beside an SD series whose drafter ran at the
    target's TP 2 gave a c and TE of two setups without a word. Each series records its engine's
    arguments; speedup_stage now refuses such a pair in one line."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import SpeedupParams
    from specmoe.provenance import write_json
    from specmoe.stages.analysis import speedup_stage
    from test_sweep import point

    c, ds = resolved(), "tinybench"
    reps = lambda tpots, tau=None: [
        point(b, t * f, tau=tau, per_pos=[0.5])
        | {"repeat": r, "engine": {"request_time_per_output_token_ms": t * f}}
        for b, t in tpots for r, f in enumerate((1.0, 1.01, 0.995))]
    sd_engine = {"dtype": "bfloat16", "tensor_parallel_size": 2}
    sd = {"engine": sd_engine,
          "datasets": {ds: {"points": reps([(1, 8.0), (2, 9.0), (4, 10.0)], tau=2.0),
                            "paired_no_sd": {"points": reps([(1, 10.0), (2, 11.0), (4, 12.0)])}}},
          "paired_no_sd": {"engine": sd_engine, "arm_order": "interleaved"}}
    dr = {"engine": drafter_engine,
          "datasets": {ds: {"points": reps([(1, 1.0), (2, 1.1), (4, 1.2)])}}}
    prov = {"engine": "vllm 0.32.0 (cpu)"}
    write_json(tmp_path / "sd.json", sd, prov)
    write_json(tmp_path / "dr.json", dr, prov)
    run = Named({"model": "tiny-fine", "drafter": "tiny-drafter", "k": "3", "dataset": ds})
    job = (Named({"sd": tmp_path / "sd.json", "drafter": [tmp_path / "dr.json"]}),
           Named({"json": tmp_path / "out.json"}), SpeedupParams.from_config(c, run))
    with pytest.raises(InputError, match=why):
        speedup_stage(*job)
    assert not (tmp_path / "out.json").exists()
    write_json(tmp_path / "dr.json", {**dr, "engine": sd_engine}, prov)  # the same setup: done
    speedup_stage(*job)
    assert (tmp_path / "out.json").exists()
