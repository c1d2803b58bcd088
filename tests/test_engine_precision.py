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
