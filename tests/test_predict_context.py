"""Rule predict prices each run it predicts at that run's own KV context: its dataset's mean
prompt plus half the output its engine generates (cost.plan.decode_context, the GPU plan's
formula too), recorded with its sources; a run that serves no prompts at the step model's
CONTEXT, with a caveat."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specmoe.contracts import Named
from specmoe.contracts.analysis import PredictParams
from specmoe.cost import stepmodel
from specmoe.cost.plan import CHARS_PER_TOKEN
from specmoe.files import Files
from specmoe.provenance import read_json
from specmoe.sources import prompts as prompt_table
from specmoe.sources import published
from test_config import resolved
from wf import REPO


def _params(cfg, model, dataset=None):
    """The entry of rule predict's params for `model`'s run on `dataset` (None: its first run;
    the model has one drafter and K here, so one run per dataset)."""
    entries = PredictParams.from_config(cfg, SimpleNamespace(model=model), Files(cfg)).predictions
    [entry] = [e for e in entries if e["run"]["dataset"] == dataset] if dataset else entries[:1]
    return SimpleNamespace(**entry)


def test_a_long_context_run_is_predicted_at_its_32k_prompt_and_a_short_one_at_its_own():
    """config/paper.yaml's TP2 model on SPEED-Bench's 32k set: 32,768 stated prompt tokens +
    half of the sweep's 256 output tokens; on MT-Bench: MT-Bench's 70 + 128. Both were priced
    at the step model's one CONTEXT before."""
    output = resolved("config/paper.yaml").sweep["output_len"]
    long = _params(resolved("config/paper.yaml"), "qwen3-30b-fp8-tp2", "speed-bench-32k")
    assert long.run["dataset"] == "speed-bench-32k"
    assert long.context == {"tokens": 32768 + output / 2, "prompt_tokens": 32768.0,
                            "prompt_source": "configured", "output_len": output,
                            "output_source": "sweep.output_len"}
    short = _params(resolved("config/paper.yaml"), "qwen3-30b-fp8-tp2", "mt-bench")
    assert short.run["dataset"] == "mt-bench"
    assert short.context["tokens"] == 70 + output / 2


def test_the_calibrations_context_is_the_studys_mt_bench_run_context():
    """The step model's CONTEXT stands for the study's TE rows, served on MT-Bench's first turns
    with 256 output tokens; it read 600 tokens (a 472-token prompt), while config/paper.yaml
    states MT-Bench's prompts at 70 tokens: the study's own MT-Bench runs then fell outside the
    calibration's window (distance 1 for every paper model rule predict prices). CONTEXT is
    that run's context, by the one formula (plan.decode_context)."""
    from specmoe.cost.plan import decode_context

    cfg = resolved("config/paper.yaml")
    assert stepmodel.CONTEXT == decode_context(cfg.datasets["mt-bench"]["prompt_tokens"],
                                               cfg.sweep["output_len"])
    p = _params(cfg, "qwen3-30b-fp8-tp2", "mt-bench")
    assert p.run["dataset"] == "mt-bench" and p.context["tokens"] == stepmodel.CONTEXT


def test_a_joined_prompt_table_set_is_the_sweeps_prompt_set_weighted_as_it_serves_it():
    """tiny-fine's run on the main set and two held-out sets: the sweep serves the schedule's
    smallest point's prompts, one of each slice (8 main categories, 2 held-out slices), not the
    table's 80 + 16 + 16 prompts in proportion."""
    cfg = resolved()
    p = _params(cfg, "tiny-fine")
    ds = p.run["dataset"]
    rows = prompt_table.load(cfg.prompts, [ds])
    slices = {}
    for r in rows:
        slices.setdefault((r.dataset, r.category), r)
    size = min(n for _, n in cfg.sweep_schedule(ds))
    assert size == len(slices)  # the configuration's: one prompt of each slice
    served = sum(len(r.text) for r in slices.values()) / len(slices) / CHARS_PER_TOKEN
    assert p.context["prompt_tokens"] == pytest.approx(served)
    assert p.context["prompt_source"] == "prompt table"
    assert (p.context["output_len"], p.context["output_source"]) == (
        cfg.sweep["output_len"], "sweep.output_len")
    assert p.context["tokens"] == pytest.approx(served + cfg.sweep["output_len"] / 2)
    whole = sum(len(r.text) for r in rows) / len(rows) / CHARS_PER_TOKEN
    assert abs(whole - served) > 0.5  # the weighting matters here


def test_a_model_that_is_not_swept_is_priced_at_its_captures_output_and_prompts():
    def unswept(c):
        next(m for m in c["models"] if m["name"] == "tiny-coarse")["sweep"] = False
        c["tiny"]["capture"]["max_tokens"] = 40

    cfg = resolved(edit=unswept)
    p = _params(cfg, "tiny-coarse")
    rows = prompt_table.load(cfg.prompts, [p.run["dataset"]])
    assert cfg.section("capture", tiny=True)["prompts"] >= len(rows)  # each prompt once
    mean = sum(len(r.text) for r in rows) / len(rows) / CHARS_PER_TOKEN
    assert p.context == {"tokens": pytest.approx(mean + 20), "prompt_tokens": pytest.approx(mean),
                         "prompt_source": "prompt table", "output_len": 40,
                         "output_source": "capture.max_tokens"}


def test_a_synthetic_run_serves_no_prompts():
    assert _params(resolved(), "synth-fine").context is None


def _qwen(snapshot, context):
    """Rule predict's parameters for Qwen3-30B fp8 (a snapshot of its config.json) on an H100,
    EAGLE-3 at K = 3, batch 1, predicting a run on SPEED-Bench's 32k set at `context`."""
    if not snapshot.exists():
        snapshot.mkdir()
        (snapshot / "config.json").write_bytes(
            (REPO / "src/specmoe/data/hf_configs/Qwen3-30B-A3B-FP8.json").read_bytes())
    cfg = {"name": "qwen3-30b", "source": "hf", "precision": "auto", "tp": 1, "hardware": "H100",
           "hf_config": str(snapshot)}
    run = {"model": "qwen3-30b", "drafter": "eagle3", "k": 3, "dataset": "speed-bench-32k"}
    return PredictParams(model=cfg, hardware={"H100": published.gpus()["H100"]},
                         batch_sizes=[1], study=None,
                         predictions=[{"run": run, "k": 3, "method": "eagle3",
                                       "context": context}])


def test_the_context_reaches_the_prediction_and_its_record(tmp_path):
    """Qwen3-30B fp8 on an H100 at batch 1: its 32,896-token run reads 55 times the KV cache of
    600 tokens, so attention weighs on TE differently; the JSON states the context and where
    it comes from. None: the step model's CONTEXT, with a caveat."""
    from specmoe.stages.analysis import predict_stage

    long = {"tokens": 32896.0, "prompt_tokens": 32768.0, "prompt_source": "configured",
            "output_len": 256, "output_source": "sweep.output_len"}
    out = {}
    for name, ctx in (("long", long), ("short", {**long, "tokens": 600.0,
                                                 "prompt_tokens": 472.0}), ("none", None)):
        predict_stage(Named({}), Named({"json": tmp_path / f"{name}.json"}),
                      _qwen(tmp_path / "qwen", ctx))
        [out[name]] = read_json(tmp_path / f"{name}.json")["predictions"]
    assert out["long"]["context"] == 32896 and out["short"]["context"] == 600
    assert out["long"]["te"] != out["short"]["te"]
    assert out["long"]["context_source"]["source"] == \
        "configured mean prompt of speed-bench-32k + half of sweep.output_len"
    assert out["long"]["context_source"]["prompt_tokens"] == 32768.0
    assert out["none"]["context"] == stepmodel.CONTEXT
    assert out["none"]["te"] != out["short"]["te"]  # CONTEXT is not 600
    caveat = f"context: the step model's {stepmodel.CONTEXT} KV tokens per sequence"
    assert any(c.startswith(caveat) and
               c.endswith("qwen3-30b's run serves no prompts") for c in out["none"]["caveats"])
    assert not any(c.startswith("context: the step model's") for c in out["long"]["caveats"])
