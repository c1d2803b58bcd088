"""A capture's provenance hashes what decides its trace: the capture settings, not the job's
runtime, which a SLURM retry doubles (the runtime still sets the engine's timeouts)."""

import pytest

from specmoe.contracts import Named
from specmoe.contracts.engines import CaptureParams
from specmoe.routing.trace import read_trace
from specmoe.sources import prompts as prompt_table


def test_a_longer_job_runtime_keeps_the_captures_config_hash(tmp_path, monkeypatch):
    """specmoe.stages.traces.capture_stage as its rule runs it, twice with the same settings under
    job runtimes of 60 and 120 minutes, once with another max_tokens; the engine's side (its child
    process and the shards' assembly) is replaced by recorders."""
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.runtime import capture, engine
    from specmoe.stages.traces import capture_stage

    timeouts = []

    def child(fn, rows, *a, timeout=None, **kw):  # the engine's process: what it was given
        timeouts.append(timeout)
        return {"rows": rows, "prompting": {}}

    def assemble(*a, **kw):
        tr = generate(SynthParams(num_experts=8, top_k=2, num_layers=1, k_draft=3, requests=2,
                                  steps=2, seed=0))
        tr.meta["capture"] = {"windows": 4, "short_windows": 0,
                              "accepted_crosscheck": {"mismatches": 0, "steps": 4}}
        return tr

    monkeypatch.setattr(engine, "run_in_child", child)
    monkeypatch.setattr(capture, "assemble", assemble)
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text("{}")
    run = {"model": "t", "drafter": "d", "k": 3, "dataset": "tinybench"}
    settings = {"prompts": 4, "max_tokens": 16, "max_num_seqs": 4}

    def config_hash(name, runtime, settings=settings):
        out = tmp_path / f"{name}.parquet"
        capture_stage(Named({"target": str(target), "prompts": []}), Named({"trace": str(out)}),
                      CaptureParams(job=run, settings=settings, method=None, gpu=False,
                                    prompts=prompt_table.DEFAULT_SOURCE, prompting=None),
                      runtime=runtime)
        return read_trace(out).meta["provenance"]["config_hash"]

    first, retry = config_hash("first", 60), config_hash("retry", 120)
    assert timeouts == [pytest.approx(60 * 60 * 0.95), pytest.approx(120 * 60 * 0.95)]
    assert first == retry
    assert config_hash("longer", 60, {**settings, "max_tokens": 32}) != first


def test_a_longer_job_runtime_keeps_the_controls_config_hash(tmp_path, monkeypatch):
    """specmoe.stages.traces.control_capture_stage likewise: the matched control's trace, read on
    a (synthetic) target's windows, under runtimes of 60 and 120 minutes; the engine's side
    replaced by recorders."""
    import numpy as np

    from specmoe.contracts.engines import CaptureControlParams
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace
    from specmoe.runtime import capture, engine
    from specmoe.stages.traces import control_capture_stage

    timeouts = []

    def child(fn, seqs, *a, timeout=None, **kw):
        timeouts.append(timeout)
        return {"seqs": seqs}

    def rows_of_sequences(res, seqs):
        return [np.tile(np.arange(2), (len(s), 1, 1)) for s in seqs], {"layers": [0],
                                                                    "num_experts": 8}

    monkeypatch.setattr(engine, "run_in_child", child)
    monkeypatch.setattr(capture, "rows_of_sequences", rows_of_sequences)
    tr = generate(SynthParams(num_experts=8, top_k=2, num_layers=1, k_draft=3, requests=2,
                              steps=2, seed=0))
    tr.meta["prompt_token_ids"] = [[1, 2], [3, 4]]
    write_trace(tmp_path / "target.parquet", tr, {})
    control = tmp_path / "t-random"
    control.mkdir()
    (control / "config.json").write_text("{}")
    run = {"model": "t-random", "drafter": "d", "k": 3, "dataset": "tinybench"}

    def config_hash(name, runtime):
        out = tmp_path / f"{name}.parquet"
        control_capture_stage(
            Named({"control": str(control), "trace": str(tmp_path / "target.parquet")}),
            Named({"trace": str(out)}),
            CaptureControlParams(run=run, settings={"max_num_seqs": 4}), runtime=runtime)
        return read_trace(out).meta["provenance"]["config_hash"]

    assert config_hash("first", 60) == config_hash("retry", 120)
    assert timeouts == [pytest.approx(60 * 60 * 0.95), pytest.approx(120 * 60 * 0.95)]
