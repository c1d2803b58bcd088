"""The step model (specmoe.stepmodel, `specmoe predict`): calibrated honestly on the study's measured
TE, the three-step correction as a special case, and the command's answers and errors."""

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


def test_mixtral_is_concave_as_in_the_study(rows):
    """The study's coarse-grained model gains from batching before it loses (Figure 1)."""
    p = stepmodel.fit(rows)
    dims = stepmodel.study_model_dims("Mixtral-8x7B", "bf16", 2)
    res = stepmodel.predict(dims, stepmodel.study_hardware("H100"), 3, "eagle",
                            [1, 2, 4, 8, 16, 32, 64, 128], p, stepmodel.lomo_rmse(rows),
                            stepmodel.published_overlaps("Mixtral-8x7B", 3), (2.4, 2.8))
    assert res["shape"] == "concave"
    assert max(res["te_high"]) <= 1.0 and min(res["te_low"]) > 0


def predict(capsys, *args):
    """`specmoe predict` in this process (the command's own entry point)."""
    from specmoe.cli import main

    code = main(["predict", *args, "--hardware-file", str(REPO / "config.yaml")])
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_a_model_the_study_did_not_measure(capsys):
    """GPT-OSS-120B's config.json (mxfp4 experts): the prior of fine-grained curves, intervals
    around every point, physical bounds kept."""
    code, stdout, err = predict(capsys, str(CONFIGS / "gpt-oss-120b.json"), "--tp", "4", "--json")
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
