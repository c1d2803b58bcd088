"""The step model (specmoe.stepmodel, `specmoe predict`): calibrated honestly on the study's measured
TE and speedup shapes, the three-step correction as a special case, and the command's answers and
errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specmoe import published, stepmodel

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "src" / "specmoe" / "data" / "hf_configs"


@pytest.fixture(scope="module")
def rows():
    return stepmodel.calibration_rows()


def test_the_calibration_holds_every_table_10_configuration(rows):
    t10 = published.load("te_batch1_k3")
    goal = [r for r in rows if r["goal"]]
    assert len(goal) == len(t10) == 12 and {r["quantity"] for r in goal} == {stepmodel.TE}
    shares = [r for r in rows if r["quantity"] == stepmodel.MOE_SHARE]
    assert len(shares) == len(published.load("profiling_batch1"))
    assert all(r["dims"].tp == r["tp"] for r in rows)


def test_a_model_left_out_is_not_seen(rows):
    """Moving one model's published TE moves nobody's fitted parameters for that model's own
    prediction, and does move the others' (their fits see it)."""
    held = "Qwen3-235B"
    before = stepmodel.leave_one_model_out(rows)
    moved = [{**r, "published": 0.05} if r["model"] == held else r for r in rows]
    after = stepmodel.leave_one_model_out(moved)
    for b, a in zip(before, after):
        if b["model"] == held:
            assert a["predicted"] == b["predicted"]
    others = [abs(a["predicted"] - b["predicted"]) for b, a in zip(before, after)
              if b["model"] != held]
    assert max(others) > 1e-3


def test_leave_one_model_out_beats_the_weight_model(rows):
    lomo = [r for r in stepmodel.leave_one_model_out(rows) if r["goal"]]
    step = np.mean([abs(r["error"]) for r in lomo])
    weight = np.mean([abs(stepmodel.weight_model_te(r) - r["published"])
                      for r in rows if r["goal"]])
    assert step < weight / 2


def test_handed_the_profiled_shares_it_reproduces_the_three_step_correction():
    """The step model's TE from per-class times is the three-step correction's time-share form:
    given the study's profiled MoE share and time ratios it gives the published TE of each step."""
    pub = published.load("three_step_correction_qwen3_30b")
    for _, r in pub[pub["step"].isin(["1", "2", "3"])].iterrows():
        f = float(r["moe_time_share"])
        decode = {"moe": f, "rest": 1 - f}
        verify = {"moe": f * float(r["moe_time_ratio"]),
                  "rest": (1 - f) * float(r["dense_time_ratio"])}
        # the published inputs and TE carry 2-3 digits
        assert stepmodel.te_from_times(decode, verify) == pytest.approx(float(r["te"]), abs=2e-3)


@pytest.fixture(scope="module")
def shapes():
    return stepmodel.shape_rows()


def test_the_fit_gives_every_shape_the_study_shows(rows, shapes):
    """Batch-1 numbers alone leave a speedup curve with the wrong shape (they cannot tell the
    engine's work per sequence of a verification step from a work per step); the fit on the
    shapes too raises that work until every curve has its published shape, and no further."""
    alone = stepmodel.fit(rows)
    assert stepmodel.shapes_held(shapes, alone) < len(shapes)
    p = stepmodel.fit(rows, shapes)
    assert stepmodel.shapes_held(shapes, p) == len(shapes)
    assert p.verify_seq_us > alone.verify_seq_us
    less = stepmodel._fit(rows, p.verify_seq_us - 2 * stepmodel.SEQ_US_STEP, p)
    assert stepmodel.shapes_held(shapes, less) < len(shapes)


def test_a_shape_left_out_is_not_seen(rows, shapes):
    """Turning one model's published shape around changes the other models' fits, not the
    prediction of that model's own shape."""
    held = "Qwen3-235B"
    before = stepmodel.leave_one_model_out(rows, shapes)
    flipped = [{**r, "published": "concave"} if r["model"] == held else r for r in shapes]
    after = stepmodel.leave_one_model_out(rows, flipped)
    for b, a in zip(before, after):
        if b["model"] == held:
            assert a["predicted"] == b["predicted"]
    assert any(a["fit_verify_seq_us"] != b["fit_verify_seq_us"] for b, a in zip(before, after)
               if b["model"] != held)


@pytest.mark.parametrize("model, precision, tp, method, shape", [
    ("Mixtral-8x7B", "bf16", 2, "eagle", "concave"),
    ("Qwen3-235B", "fp8", 4, "eagle3", "peak at low batch"),
])
def test_predicted_shapes_as_in_the_study(rows, shapes, model, precision, tp, method, shape):
    """The study's coarse-grained model gains from batching before it loses, its fine-grained
    ones peak at batch 1 (Figure 1): the prediction with its intervals says so, each from
    parameters fitted without that model's rows and shape."""
    p = stepmodel.fit([r for r in rows if r["model"] != model],
                      [r for r in shapes if r["model"] != model])
    dims = stepmodel.study_model_dims(model, precision, tp)
    res = stepmodel.predict(dims, stepmodel.study_hardware("H100"), 3, method,
                            [1, 2, 4, 8, 16, 32, 64, 128], p, stepmodel.lomo_rmse(
                                stepmodel.leave_one_model_out(rows)),
                            stepmodel.published_overlaps(model, 3), (2.4, 2.8))
    assert res["shape"] == shape
    assert max(res["te_high"]) <= 1.0 and min(res["te_low"]) > 0


def predict(capsys, *args):
    """`specmoe predict` in this process (the command's own entry point)."""
    from specmoe.cli import main

    code = main(["predict", *args, "--hardware-file", str(REPO / "config.yaml")])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("config, tp", [
    (CONFIGS / "gpt-oss-120b.json", "4"),  # mxfp4 experts; its curve's shape only is published
    (REPO / "tests" / "fixtures" / "unmeasured" / "OLMoE-1B-7B-0924.json", "1"),  # not studied
])
def test_predict_a_model_without_published_overlaps(capsys, config, tp):
    """A config.json the study published no overlaps or TE for: the prior of its granularity's
    curves, intervals around every point, physical bounds kept."""
    code, stdout, err = predict(capsys, str(config), "--tp", tp, "--json")
    assert code == 0, err
    out = json.loads(stdout)
    for key in ("batch_sizes", "te", "te_low", "te_high", "speedup", "speedup_low",
                "speedup_high", "shape"):
        assert key in out
    te, lo, hi = (np.array(out[k]) for k in ("te", "te_low", "te_high"))
    assert np.all(lo <= te) and np.all(te <= hi) and np.all(hi <= 1.0) and np.all(lo > 0)
    s, sl, sh = (np.array(out[k]) for k in ("speedup", "speedup_low", "speedup_high"))
    assert np.all(sl < s) and np.all(s < sh)
    assert out["overlaps"].startswith("prior")


@pytest.mark.parametrize("args, message", [
    (["--k", "0"], "--tp and --k must be >= 1"),
    (["--hardware", "TPU"], "--hardware TPU: not in"),
    (["--acceptance-length", "9"], "acceptance length"),
    (["--overlaps", "0.3,0.2"], "2 overlaps for K = 3"),
])
def test_predict_rejects_contradicting_inputs(capsys, args, message):
    code, _, err = predict(capsys, str(CONFIGS / "Qwen3-30B-A3B-FP8.json"), *args)
    assert code == 2 and message in err, err


def test_predict_a_study_repo_through_the_download_stage_offline(tmp_path):
    """A repo id: its config.json from the Hugging Face cache as the download stage's config
    mode takes it (offline, a cache laid out by hand); a study checkpoint brings its published
    overlaps, and a fixed acceptance length narrows the interval to the model's own error."""
    import os

    from hubfake import lay_out_cache

    lay_out_cache(tmp_path / "hf" / "hub", "Qwen/Qwen3-30B-A3B-FP8",
                  {"config.json": (CONFIGS / "Qwen3-30B-A3B-FP8.json").read_bytes(),
                   "tokenizer.json": b'{"version": "1.0"}'}, commit="e" * 40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(tmp_path / "hf" / "hub"),
               HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "specmoe", "predict", "Qwen/Qwen3-30B-A3B-FP8",
                        "--revision", "e" * 40, "--tp", "2", "--acceptance-length", "2.6",
                        "--hardware-file", str(REPO / "config.yaml"), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["overlaps"] == "published (Qwen3-30B)" and out["acceptance_length"] == [2.6, 2.6]
    assert out["precision"] == "fp8-b128" and out["tp"] == 2
