import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "specmoe", *args], capture_output=True, text=True)


def test_ipf_json():
    r = run("ipf", "--experts-per-token", "8", "--n", "128", "--overlaps", "0.0625,0.0625,0.0625", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["window"] == 4
    assert out["unique"] == pytest.approx(out["uniform"])


def test_ipf_with_loads_and_batch(tmp_path):
    loads = tmp_path / "loads.txt"
    loads.write_text("\n".join(["1"] * 128))
    r = run("ipf", "--experts-per-token", "8", "--n", "128", "--overlaps", "0.43,0.36,0.33", "--loads", str(loads),
            "--batch", "2", "--json")
    assert r.returncode == 0, r.stderr
    uni = json.loads(run("ipf", "--experts-per-token", "8", "--n", "128", "--overlaps", "0.43,0.36,0.33",
                         "--batch", "2", "--json").stdout)
    assert json.loads(r.stdout)["unique"] == pytest.approx(uni["unique"])


def test_te_json():
    r = run("te", "--hidden", "2048", "--expert-intermediate", "768", "--heads", "32",
            "--kv-heads", "4", "--head-dim", "128", "--layers", "48", "--experts-per-token", "8", "--n", "128",
            "--dtype", "bf16", "--tp", "1",
            "--unique", "19.49", "--json")
    out = json.loads(r.stdout)
    assert out["c_expert_mib"] == 9.0 and out["c_dense_mib"] == 36.0
    assert out["te"] == pytest.approx(108 / (36 + 19.49 * 9))


def test_te_from_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 2048,
                               "moe_intermediate_size": 768,
                               "num_experts": 128, "num_experts_per_tok": 8,
                               "num_attention_heads": 32, "num_key_value_heads": 4,
                               "head_dim": 128, "num_hidden_layers": 48,
                               "torch_dtype": "bfloat16"}))
    out = json.loads(run("te", "--config", str(cfg), "--json").stdout)
    assert out["c_dense_mib"] == 36.0 and out["moe_weight_share"] == pytest.approx(2 / 3)


def test_correction_json():
    r = run("correction", "--moe-weight-share", "0.667", "--unique-ratio", "2.436",
            "--moe-time-share", "0.33", "--moe-time-ratio", "1.57", "--dense-time-ratio", "0.94",
            "--measured", "0.896", "--json")
    steps = json.loads(r.stdout)["steps"]
    assert [s["name"].split(":")[0] for s in steps] == ["weight baseline", "step 1", "step 2",
                                                        "step 3"]
    assert set(steps[1]) >= {"name", "te", "delta", "gap_closed"}
    assert steps[0]["delta"] is None and steps[1]["delta"] > 0


def test_synth_then_analyze(tmp_path):
    out = tmp_path / "t.parquet"
    assert run("synth", "--out", str(out), "--layers", "2", "--requests", "4", "--steps", "8",
               "--stickiness", "0.5").returncode == 0
    r = run("analyze", str(out), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["n_tokens"] == 4 * 8 * 4 and len(res["overlap_by_distance"]) == 3
    text = run("analyze", str(out)).stdout
    assert "step1" in text and "draft_position" in text


def test_analyze_gives_the_overlap_stages_bias_corrected_baseline(tmp_path):
    """`specmoe analyze` and the workflow's overlap stage give one trace the same independence
    baseline, step-1 overlap, temporal overlap and share along the committed sequence (the
    jackknife bias-corrected baseline: the command printed the plug-in one, biased up)."""
    from specmoe.contracts import Named
    from specmoe.stages.analysis import overlap_stage

    out = tmp_path / "t.parquet"
    assert run("synth", "--out", str(out), "--layers", "2", "--requests", "6", "--steps", "8",
               "--stickiness", "0.5").returncode == 0
    res = json.loads(run("analyze", str(out), "--json").stdout)
    overlap_stage(Named({"trace": str(out)}), Named({"json": str(tmp_path / "ov.json")}),
                  Named({"batch_sizes": [1], "shuffle_null": True}))
    stage = json.loads((tmp_path / "ov.json").read_text())["summary"]
    for key, theirs in (("independent", "independent"), ("step1", "step1"),
                        ("sequence_temporal", "sequence_excess"),
                        ("sequence_temporal_share", "sequence_temporal_share")):
        assert res[key] == pytest.approx(stage[theirs], abs=1e-12), key


@pytest.mark.parametrize("args,needle", [
    (["ipf", "--experts-per-token", "9", "--n", "8", "--overlaps", "0.3"], "k=9 exceeds N=8"),
    (["ipf", "--experts-per-token", "8", "--n", "128", "--overlaps", "0.3,1.4"], "[0, 1]"),
    (["ipf", "--experts-per-token", "8", "--n", "128", "--overlaps", "a,b"], "comma-separated"),
    (["ipf", "--experts-per-token", "8", "--n", "128", "--overlaps", "0.3", "--loads", "/nonexistent"],
     "no such loads file"),
    (["te", "--hidden", "2048", "--expert-intermediate", "768", "--heads", "32", "--kv-heads", "4",
      "--head-dim", "128", "--layers", "48", "--experts-per-token", "8", "--dtype", "int3"], "unknown dtype 'int3'"),
    (["te", "--hidden", "2048"], "give --config or all of"),
    (["te", "--config", "/nonexistent/config.json"], "no such config file"),
    (["analyze", "/nonexistent.parquet"], "no such trace file"),
    (["correction", "--moe-weight-share", "1.5", "--unique-ratio", "2", "--moe-time-share", "0.3",
      "--moe-time-ratio", "1.5", "--dense-time-ratio", "1"],
     "--moe-weight-share must be in (0, 1)"),
    (["frobnicate"], "invalid choice"),
    (["download", "foo"], "'foo' is not a Hugging Face repository id: it is owner/name"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]


def test_every_option_has_help_and_the_command_a_version():
    from specmoe.cli import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.choices and isinstance(a.choices, dict))
    missing = [f"{name} {a.option_strings or a.dest}" for name, sp in sub.choices.items()
               for a in sp._actions if a.help is None]
    assert not missing, missing
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("specmoe ")


def test_predict_flags_take_their_limits_from_the_model():
    """The command repeated the step model's limits (batch sizes up to 4096, a draft cost below
    10, the engines), where a change to one would leave the other behind: it reads them."""
    from specmoe.cli import build_parser
    from specmoe.cost import predictor, steptables

    sub = next(a for a in build_parser()._actions if a.choices and isinstance(a.choices, dict))
    flags = {o: a for a in sub.choices["predict"]._actions for o in a.option_strings}
    assert flags["--batch-sizes"].type.item.hi == predictor.MAX_BATCH
    assert tuple(flags["--engine"].choices) == steptables.ENGINES
    assert flags["--draft-cost"].type.hi == predictor.MAX_DRAFT_COST


@pytest.mark.parametrize("unique,ok", [(7.9, False), (8, True), (32, True), (32.5, False)])
def test_te_unique_must_lie_between_k_and_the_window(unique, ok):
    """A window of K+1 = 4 tokens of top-8 routing uses 8 to 32 unique experts: nothing else."""
    dims = ["--hidden", "2048", "--expert-intermediate", "768", "--heads", "32", "--kv-heads",
            "4", "--head-dim", "128", "--layers", "48", "--experts-per-token", "8", "--n", "128"]
    out = run("te", *dims, "--unique", str(unique))
    assert (out.returncode == 0) == ok
    if not ok:
        assert "impossible" in out.stderr and len(out.stderr.strip().splitlines()) == 1
