"""A capture's provenance hashes what decides its trace: the capture settings and the drafter's
checkpoint (a control's: its target trace's own hash), not the job's runtime, which a SLURM retry
doubles (the runtime still sets the engine's timeouts)."""

import pytest

from specmoe.contracts import Named
from specmoe.contracts.engines import CaptureParams
from specmoe.routing.trace import read_trace
from specmoe.sources import prompts as prompt_table


def test_a_longer_job_runtime_keeps_the_captures_config_hash(tmp_path, monkeypatch):
    """specmoe.stages.traces.capture_stage as its rule runs it, twice with the same settings under
    job runtimes of 60 and 120 minutes, once with another max_tokens; the engine's side (its child
    process and the shards' assembly) is replaced by recorders."""
    from specmoe.stages.traces import capture_stage

    timeouts = []

    def child(fn, rows, *a, timeout=None, **kw):  # the engine's process: what it was given
        timeouts.append(timeout)
        return {"rows": rows, "prompting": {}}

    _stub_engine(monkeypatch, child)
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


def test_a_captures_config_hash_tells_its_chat_template_setting(tmp_path, monkeypatch):
    """A dataset's chat_template setting changes the tokens its prompts become, and with them
    every window: two captures that differ only there have two config hashes (their hash left
    prompting out, so a control's target_config_hash could not tell them apart)."""
    from specmoe.stages.traces import capture_stage

    sent = []

    def child(fn, rows, engine, prompting, *a, **kw):  # the engine's process: what it was given
        sent.append(prompting)
        return {"rows": rows, "prompting": prompting}

    _stub_engine(monkeypatch, child)
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text("{}")
    run = {"model": "t", "drafter": "d", "k": 3, "dataset": "tinybench"}
    settings = {"prompts": 4, "max_tokens": 16, "max_num_seqs": 4}
    hashes = {}
    for on in (False, True):
        out = tmp_path / f"{on}.parquet"
        capture_stage(Named({"target": str(target), "prompts": []}), Named({"trace": str(out)}),
                      CaptureParams(job=run, settings=settings, method=None, gpu=False,
                                    prompts=prompt_table.DEFAULT_SOURCE,
                                    prompting={"chat_template": {"tinybench": on}}), runtime=60)
        meta = read_trace(out).meta
        assert meta["prompting"] == {"chat_template": {"tinybench": on}}
        hashes[on] = meta["provenance"]["config_hash"]
    assert sent == [{"chat_template": {"tinybench": False}}, {"chat_template": {"tinybench": True}}]
    assert hashes[False] != hashes[True]


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
        return [np.tile(np.arange(2), (len(s), 1, 1)) for s in seqs], {
            "layers": [0], "bound_layers": [0], "num_experts": 8}

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


def _stub_engine(monkeypatch, child=None):
    """The engine's side of capture_stage replaced: its child process (`child`, else one that
    returns the prompts it was given), and the shards' assembly one fixed (synthetic) trace."""
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.runtime import capture, engine

    def assemble(*a, **kw):
        tr = generate(SynthParams(num_experts=8, top_k=2, num_layers=1, k_draft=3, requests=2,
                                  steps=2, seed=0))
        tr.meta["capture"] = {"windows": 4, "short_windows": 0,
                              "accepted_crosscheck": {"mismatches": 0, "steps": 4}}
        return tr

    monkeypatch.setattr(engine, "run_in_child",
                        child or (lambda fn, rows, *a, **kw: {"rows": rows, "prompting": {}}))
    monkeypatch.setattr(capture, "assemble", assemble)


def _checkpoint(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}, "merges": []}}')
    return path


@pytest.mark.parametrize("method", [None, "eagle3"])
def test_a_capture_records_its_drafters_checkpoint_and_hashes_it(tmp_path, monkeypatch, method):
    """Two captures of one run whose drafters are two revisions (Hugging Face snapshots) of one
    repository: each trace's record names its drafter's revision and the method, and their config
    hashes differ (the windows' acceptance is the drafter's); the traces' content is the same."""
    import numpy as np

    from specmoe.stages.traces import capture_stage

    _stub_engine(monkeypatch)
    target = _checkpoint(tmp_path / "t")
    snapshots = tmp_path / "hub" / "models--org--drafter" / "snapshots"
    run = {"model": "t", "drafter": "d", "k": 3, "dataset": "tinybench"}
    settings = {"prompts": 4, "max_tokens": 16, "max_num_seqs": 4}
    traces = {}
    for rev in ("1111aaaa", "2222bbbb"):
        out = tmp_path / f"{rev}.parquet"
        capture_stage(Named({"target": str(target), "drafter": str(_checkpoint(snapshots / rev)),
                             "prompts": []}),
                      Named({"trace": str(out)}),
                      CaptureParams(job=run, settings=settings, method=method, gpu=False,
                                    prompts=prompt_table.DEFAULT_SOURCE, prompting=None))
        traces[rev] = read_trace(out)
    records = {rev: tr.meta["provenance"] for rev, tr in traces.items()}
    for rev, rec in records.items():
        assert rec["drafter"]["name"] == "models--org--drafter"
        assert rec["drafter"]["revision"] == rev
        assert rec["method"] == method
        assert rec["model"]["name"] == "t"
    assert records["1111aaaa"]["config_hash"] != records["2222bbbb"]["config_hash"]
    first, second = traces.values()
    assert np.array_equal(first.experts, second.experts)
    assert first.columns.keys() == second.columns.keys()
    assert all(np.array_equal(first.columns[c], second.columns[c]) for c in first.columns)


def test_a_control_records_its_targets_config_hash(tmp_path, monkeypatch):
    """The matched control's trace names its target's trace by path and by that trace's config
    hash: a target captured again (another drafter) at the same path gives another control
    hash."""
    import numpy as np

    from specmoe.contracts.engines import CaptureControlParams
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace
    from specmoe.runtime import capture, engine
    from specmoe.stages.traces import control_capture_stage

    monkeypatch.setattr(engine, "run_in_child", lambda fn, seqs, *a, **kw: {})
    monkeypatch.setattr(capture, "rows_of_sequences", lambda res, seqs: (
        [np.tile(np.arange(2), (len(s), 1, 1)) for s in seqs],
        {"layers": [0], "bound_layers": [0], "num_experts": 8}))
    tr = generate(SynthParams(num_experts=8, top_k=2, num_layers=1, k_draft=3, requests=2,
                              steps=2, seed=0))
    tr.meta["prompt_token_ids"] = [[1, 2], [3, 4]]
    control = _checkpoint(tmp_path / "t-random")
    run = {"model": "t-random", "drafter": "d", "k": 3, "dataset": "tinybench"}
    target = tmp_path / "target.parquet"
    records = []
    for target_hash in ("aaaa", "bbbb"):
        write_trace(target, tr, {"config_hash": target_hash})
        out = tmp_path / f"control-{target_hash}.parquet"
        control_capture_stage(Named({"control": str(control), "trace": str(target)}),
                              Named({"trace": str(out)}),
                              CaptureControlParams(run=run, settings={"max_num_seqs": 4}))
        meta = read_trace(out).meta
        assert meta["capture"]["teacher_forced"]["target_config_hash"] == target_hash
        assert meta["capture"]["bound_layers"] == [0]  # the control's MoE layers, as bound
        records.append(meta["provenance"])
    assert records[0]["config_hash"] != records[1]["config_hash"]
