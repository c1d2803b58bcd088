"""Same configuration, same machine: the same traces, analyses and non-timing tables, bit for bit.
Every provenance record held the time it was made (`created`), so two runs of one configuration
wrote files that differed in that one field: two `specmoe synth --out` runs, every trace's Parquet
metadata, every table's provenance line. Only a timing measurement's record (a sweep's series, a
profile, an SD check, a training) says when it was made now.

The clock is made to tick between the two runs of each test (provenance's `_dt`): within one
second the two times were the same, and the files too."""

from __future__ import annotations

import datetime
import json
from types import SimpleNamespace

import pytest

from specmoe import provenance as prov_mod
from specmoe.contracts import Named


@pytest.fixture
def ticking_clock(monkeypatch):
    """provenance's clock, a minute later at every reading."""
    readings = []

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            readings.append(None)
            return datetime.datetime(2026, 1, 1, tzinfo=tz) + datetime.timedelta(
                minutes=len(readings))

    monkeypatch.setattr(prov_mod, "_dt", SimpleNamespace(datetime=Clock,
                                                         timezone=datetime.timezone))
    return readings


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_two_synth_runs_write_the_same_bytes(tmp_path, ticking_clock):
    """`specmoe synth --out` twice with the same arguments: the same Parquet file."""
    from specmoe.cli import main

    args = ["synth", "--layers", "2", "--requests", "4", "--steps", "8", "--stickiness", "0.5"]
    for name in ("a", "b"):
        assert main([*args, "--out", str(tmp_path / f"{name}.parquet")]) == 0
    a, b = ((tmp_path / f"{n}.parquet").read_bytes() for n in "ab")
    assert a == b
    assert b"created" not in a


def test_a_synthetic_trace_and_its_analyses_twice_are_the_same_bytes(tmp_path, monkeypatch,
                                                                     ticking_clock):
    """The workflow's synth_trace, overlap and ipf stages, each run twice on one configuration
    (in two run folders, on the paths relative to them that a workflow's jobs are given): the
    trace, the overlap JSON and the IPF JSON of the second run are the first's, bit for bit; none
    of them is a timing and none says when it was made."""
    from specmoe.stages.analysis import ipf_stage, overlap_stage, synth_trace

    model = {"name": "s", "source": "synthetic", "synthetic": {
        "num_experts": 8, "top_k": 2, "num_layers": 2, "requests": 6, "steps": 8, "seed": 3,
        "stickiness": 0.4}}
    run = {"model": "s", "drafter": "synth", "k": 3, "dataset": "synth"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        synth_trace(model, run, "t.parquet")
        overlap_stage(Named({"trace": "t.parquet"}), Named({"json": "ov.json"}),
                      Named({"batch_sizes": [1, 4], "shuffle_null": True}))
        ipf_stage(Named({"overlap": "ov.json"}), Named({"json": "ipf.json"}),
                  Named({"batch_sizes": [1, 4]}))
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert sorted(a) == ["ipf.json", "ov.json", "t.parquet"]
    assert a == b, [n for n in a if a[n] != b[n]]
    for name in ("ov.json", "ipf.json"):
        rec = json.loads(a[name])["provenance"]
        assert "created" not in rec and "created" not in rec["measured"]


def test_a_non_timing_table_written_twice_is_the_same_bytes(tmp_path, ticking_clock):
    """Rule replay's tables (the study's model-derived tables from its published inputs) twice:
    each CSV, Markdown, LaTeX and HTML file the same, its provenance line included."""
    from specmoe.contracts.report import ReplayParams
    from specmoe.report import registry
    from specmoe.stages.report import replay_stage

    stems = registry.written_by("replay")
    for name in ("a", "b"):
        replay_stage(Named({}), Named({"tables": [tmp_path / name / f"{t}.csv" for t in stems]}),
                     ReplayParams())
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert len(a) >= 4 * len(stems) and a.keys() == b.keys()
    assert a == b, [n for n in a if a[n] != b[n]]
    assert all(v.startswith(b"# provenance: {") for n, v in a.items() if n.endswith(".csv"))


def test_a_timing_record_says_when_it_was_made_and_what_derives_from_it_keeps_that(
        ticking_clock):
    """A timing measurement's record carries its time (`timed`); a file derived from it keeps
    that time under `measured` (the measurement's), not as its own; one derived from an untimed
    source carries none, nor a captured trace's engine start (which every analysis of the trace
    copied, so that two runs' overlap JSONs of the same captured routing differed)."""
    from specmoe.provenance import derived, provenance

    series = provenance({"x": 1}, stage="sweep", engine="vllm 0.32.0 (cpu)", timed=True)
    assert series["created"] == "2026-01-01T00:01:00+00:00"
    speedup = derived(series, {"y": 2}, stage="speedup")
    assert "created" not in speedup and speedup["measured"]["created"] == series["created"]
    assert speedup["measured"]["engine"] == "vllm 0.32.0 (cpu)"
    trace = provenance({"x": 1}, stage="trace", engine="specmoe.routing.synth")
    assert "created" not in trace and "created" not in derived(trace, stage="overlap")["measured"]
    # a captured trace's engine start (its phases' seconds) is the capture's, not an analysis'
    captured = provenance({"x": 1}, stage="capture", engine="vllm 0.32.0 (cpu)",
                          engine_start={"phases_s": {"import": 8.2}}, drafter={"digest": "d"})
    overlap = derived(captured, {"y": 2}, stage="overlap")
    assert "engine_start" not in overlap and "engine_start" not in overlap["measured"]
    assert overlap["drafter"] == {"digest": "d"} and overlap["measured"]["stage"] == "capture"


def test_the_measuring_stages_records_say_when_they_were_made(tmp_path, monkeypatch,
                                                              ticking_clock):
    """A sweep's series, a profile and an SD check are timings: their records keep `created`
    (the engines are stand-ins that record what the stage hands them)."""
    from specmoe.contracts.engines import ProfileParams, SweepArParams
    from specmoe.contracts.models import SdCheckParams
    from specmoe.runtime import engine as engine_mod
    from specmoe.runtime import kernelprof, serving, tiny
    from specmoe.sources import prompts as prompt_table
    from specmoe.stages.measure import profile_stage, sweep_stage
    from specmoe.stages.models import sd_check_stage

    ckpt = tmp_path / "t"
    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 300, ckpt)
    (ckpt / "config.json").write_text("{}")
    kept = []

    class Stop(Exception):
        pass

    def series(engine, *a, **kw):  # run_series(engine, target, ..., key_base, prov, ...)
        kept.append(a[7])
        raise Stop

    monkeypatch.setattr(serving, "run_series", series)
    sweep = {"schedule": [{"batch": 1, "prompts": 2}], "output_len": 16, "warmups": 0,
             "repeats": 1, "startup_timeout_s": 10}
    with pytest.raises(Stop):
        sweep_stage(Named({"target": str(ckpt), "prompts": []}),
                    Named({"json": str(tmp_path / "s.json")}),
                    SweepArParams(job={"model": "t", "k": None, "datasets": ["tinybench"]},
                                  settings=sweep, method=None, gpu=False,
                                  prompts=prompt_table.DEFAULT_SOURCE,
                                  prompting={"draft_slack": 0}))
    assert kept[0]["stage"] == "sweep" and "created" in kept[0]

    monkeypatch.setattr(kernelprof, "profile_model", lambda *a, **kw: {"k": 3, "batches": []})
    profile_stage(Named({"target": str(ckpt), "drafter": str(ckpt), "prompts": []}),
                  Named({"json": str(tmp_path / "p.json"), "traces": str(tmp_path / "pt")}),
                  ProfileParams(job={"model": "t", "drafter": "d", "k": 3, "dataset": "tinybench"},
                                settings={"batch_sizes": [1], "max_tokens": 8, "engines": 2,
                                          "startup_timeout_s": 60},
                                method=None, gpu=False, prompts=prompt_table.DEFAULT_SOURCE,
                                prompting={}))
    rec = prov_mod.read_json(tmp_path / "p.json")["provenance"]
    assert rec["stage"] == "profile" and "created" in rec

    monkeypatch.setattr(engine_mod, "sd_check", lambda *a, **kw: {
        "sd_equals_plain": True, "spec": {}, "sd_startup_s": 1.0, "plain_startup_s": 1.0})
    monkeypatch.setattr(engine_mod, "check_inputs", lambda *a: None)
    sd_check_stage(Named({"target": str(ckpt), "drafter": str(ckpt), "prompts": []}),
                   Named({"json": str(tmp_path / "sd.json")}),
                   SdCheckParams(k=3, sd={"prompts": 2, "max_tokens": 8}, dataset="tinybench",
                                 prompts=prompt_table.DEFAULT_SOURCE))
    rec = prov_mod.read_json(tmp_path / "sd.json")["provenance"]
    assert rec["stage"] == "sd_check" and "created" in rec


def test_a_trainings_manifest_says_when_and_two_trainings_of_one_model_are_one_checkpoint(
        tmp_path, ticking_clock):
    """A training is timed (its wall time): its manifest's record says when it ran; a random
    control's (nothing timed) does not, and two of them write the same manifest. Two trainings of
    one configuration are one checkpoint for the measurements keyed on it (model_identity; it
    held the manifest's time, so a drafter's identity, in every trace captured with it and in
    that capture's config hash, differed between two runs); other weights are another."""
    pytest.importorskip("torch")
    from test_tiny import token_folder

    from specmoe.contracts.models import TrainParams
    from specmoe.stages.engines import model_identity
    from specmoe.stages.models import train_stage

    tok = token_folder(tmp_path, 5_000, 1_000)
    cfg = {"name": "m", "steps": 2, "arch": {"kind": "dense", "hidden": 32, "layers": 1,
                                             "heads": 2, "kv_heads": 1, "head_dim": 32,
                                             "intermediate": 32}}
    tiny_cfg = {"vocab_size": 300, "train": {"seq_len": 16, "batch_size": 2, "warmup": 1,
                                             "eval_batches": 1, "threads": 1}}

    def train(run, trained=True, config=cfg):  # into run/m: one model's folder in two runs
        train_stage(Named({"tokenizer": tok}), Named({"dir": tmp_path / run / "m"}),
                    TrainParams(config, tiny_cfg, trained), progress=False)
        return tmp_path / run / "m"

    a, b = train("a"), train("b")
    times = [json.loads((m / "manifest.json").read_text())["provenance"].get("created")
             for m in (a, b)]
    assert all(times) and times[0] != times[1]
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert model_identity(a) == model_identity(b)
    assert model_identity(train("c", config={**cfg, "seed": 1})) != model_identity(a)
    r1, r2 = train("r1", False), train("r2", False)
    m1 = (r1 / "manifest.json").read_bytes()
    assert b"created" not in m1 and m1 == (r2 / "manifest.json").read_bytes()
