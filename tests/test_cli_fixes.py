"""The CLI's review fixes: each test failed on the code before its fix."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmoe import cli

QWEN = str(Path(cli.__file__).parent / "data" / "hf_configs" / "Qwen3-30B-A3B.json")


def _predict(*args):
    return cli.main(["predict", QWEN, "--batch-sizes", "1", "--json", *args])


def test_a_broken_hardware_file_is_refused_without_hardware(tmp_path, capsys):
    """--hardware-file without --hardware was ignored (the H100 used): its broken entry passed."""
    f = tmp_path / "hw.yaml"
    f.write_text("hardware:\n  X1:\n    hbm_bandwidth_gbs: 3000\n")
    assert _predict("--hardware-file", str(f)) == 2
    assert "hardware X1: peak_tflops" in capsys.readouterr().err


def test_a_broken_entry_beside_the_one_used_is_refused(tmp_path, capsys):
    f = tmp_path / "hw.yaml"
    f.write_text("hardware:\n  X1:\n    hbm_bandwidth_gbs: 3000\n    peak_tflops: {bf16: 900}\n"
                 "  Y2:\n    hbm_bandwidth_gbs: 3000\n")
    assert _predict("--hardware-file", str(f), "--hardware", "X1") == 2
    assert "hardware Y2: peak_tflops" in capsys.readouterr().err


def test_the_hardware_file_s_one_entry_is_used(tmp_path, capsys):
    f = tmp_path / "hw.yaml"
    f.write_text("hardware:\n  X1:\n    hbm_bandwidth_gbs: 3000\n    peak_tflops: {bf16: 900}\n")
    assert _predict("--hardware-file", str(f)) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("hardware X1 from" in c for c in out["caveats"])


def test_a_hardware_file_of_several_entries_needs_hardware(tmp_path, capsys):
    f = tmp_path / "hw.yaml"
    entry = "    hbm_bandwidth_gbs: 3000\n    peak_tflops: {bf16: 900}\n"
    f.write_text(f"hardware:\n  X1:\n{entry}  Y2:\n{entry}")
    assert _predict("--hardware-file", str(f)) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("names X1, Y2; give --hardware") and len(err.splitlines()) == 1


def test_without_a_file_the_default_hardware_is_costmodel_s(monkeypatch, capsys):
    from specmoe.cost import costmodel, predictor

    assert _predict() == 0
    h100 = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(predictor, "DEFAULT_HARDWARE", "B200")
    assert costmodel.DEFAULT_HARDWARE == "H100"
    assert _predict() == 0
    assert json.loads(capsys.readouterr().out)["te"] != h100["te"]


def _specmoe(*args, env=None):
    return subprocess.run([sys.executable, "-m", "specmoe", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args", [["predict", "specmoe-test/not-cached"],
                                  ["download", "specmoe-test/not-cached"]])
def test_an_offline_refusal_is_one_line(tmp_path, args):
    """The unpinned warning went out through logging's fallback handler before the refusal: two
    lines, the first without the "specmoe: warning:" prefix."""
    r = _specmoe(*args, env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("specmoe: error: ")


def test_predict_repo_warns_unpinned_on_success_with_its_flag(tmp_path):
    from hubfake import lay_out_cache

    lay_out_cache(tmp_path / "hub", "someone/moe", {"config.json": Path(QWEN).read_bytes()})
    r = _specmoe("predict", "someone/moe", "--batch-sizes", "1", "--json",
                 env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmoe: warning: someone/moe: no revision")
    assert "give --revision <commit>" in lines[0] and "config" not in lines[0]


CORRECTION = ["correction", "--moe-weight-share", "0.8", "--unique-ratio", "2.5",
              "--moe-time-share", "0.5", "--json"]


def test_correction_shows_no_te_past_one(capsys):
    """Ratios of 0.2 (verify faster than decode) gave TE 1.6667 and 5.0 as numbers."""
    assert cli.main([*CORRECTION, "--moe-time-ratio", "0.2", "--dense-time-ratio", "0.2",
                     "--measured", "0.9"]) == 0
    cap = capsys.readouterr()
    steps = json.loads(cap.out)["steps"]
    assert [s["te_status"] for s in steps] == ["ok", "ok", "above 1: not physical",
                                               "above 1: not physical"]
    assert steps[2]["te"] is None and steps[2]["te_raw"] == pytest.approx(1 / 0.6)
    assert steps[2]["delta"] is None and steps[3]["gap_closed"] is None
    assert json.loads(cap.out)["total_gap_closed"] is None
    # the ratios themselves hold idle time, which may fall from decode to verify: no warning
    assert cap.err == ""


def test_correction_ratios_range_is_the_report_s(monkeypatch, capsys):
    from specmoe.report import measured

    monkeypatch.setitem(measured.CORRECTION_INPUTS, "s_dense", {"lower": 0.9, "upper": 2.0})
    assert cli.main([*CORRECTION, "--moe-time-ratio", "1.5", "--dense-time-ratio", "0.94"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main([*CORRECTION, "--moe-time-ratio", "1.5", "--dense-time-ratio", "2.5"]) == 0
    assert "--dense-time-ratio 2.5: above 2: not physical" in capsys.readouterr().err


def _synth(path, requests, steps):
    assert cli.main(["synth", "--out", str(path), "--layers", "2", "--requests", str(requests),
                     "--steps", str(steps)]) == 0


def test_analyze_one_request_says_no_interval(tmp_path, capsys):
    """One request (64 windows) gave plain values, exit 0, no warning: the warning counted
    windows (30), not the independent units."""
    _synth(tmp_path / "t.parquet", 1, 64)
    capsys.readouterr()
    assert cli.main(["analyze", str(tmp_path / "t.parquet")]) == 0
    cap = capsys.readouterr()
    assert cap.err.strip().splitlines() == [
        f"specmoe: warning: {tmp_path / 't.parquet'}: 1 request(s): no interval (at least 10 "
        "needed): overlap, temporal share and acceptance are points from too few independent "
        "units to read (a request's windows share its prompt and routing)"]
    assert "tau" in cap.out and "no interval (1 requests, at least 10 needed)" in cap.out


def test_analyze_gives_the_stages_intervals(tmp_path, capsys):
    """Each statistic beside its interval from the stages' own calls (they were dropped)."""
    from specmoe.routing import acceptance, overlap
    from specmoe.routing.trace import read_trace

    _synth(tmp_path / "t.parquet", 12, 8)
    capsys.readouterr()
    assert cli.main(["analyze", str(tmp_path / "t.parquet"), "--json"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    out = json.loads(cap.out)
    tr = read_trace(tmp_path / "t.parquet")
    wi = overlap.window_intervals(tr)
    _, _, ci = overlap.trace_sequence_stats(tr)
    acc = acceptance.acceptance_stats(tr, *overlap.row_overlaps(tr))
    assert out["n_requests"] == 12
    assert out["overlap_by_distance_low"] == pytest.approx(wi["overlap_low"])
    assert out["step1_high"] == pytest.approx(wi["overlap_high"][0])
    assert out["shuffle_by_distance_high"] == pytest.approx(wi["shuffle_high"])
    assert out["sequence_temporal_share_low"] == pytest.approx(ci["temporal_share_low"])
    assert out["independent_high"] == pytest.approx(ci["independence_high"])
    assert (out["tau_low"], out["tau_high"]) == pytest.approx(
        (acc["acceptance_length"]["tau_low"], acc["acceptance_length"]["tau_high"]))
    for mine, theirs in zip(out["acceptance"], acc["by_position"]):
        assert mine["delta_low"] == pytest.approx(theirs["delta_low_by_request"])
        assert mine["cohens_d_high"] == pytest.approx(theirs["cohens_d_high"])
    assert out["tau_low"] < out["tau"] < out["tau_high"]
    assert cli.main(["analyze", str(tmp_path / "t.parquet")]) == 0
    text = capsys.readouterr().out
    assert f"tau{' ' * 3}" in text and f"[{out['tau_low']:.4f}, {out['tau_high']:.4f}]" in text


def test_synth_records_the_pipelines_model_revision(tmp_path):
    """synth --out recorded revision None where the pipeline's traces record synthetic:<hash>."""
    from specmoe.provenance import config_hash
    from specmoe.routing.synth import SynthParams
    from specmoe.routing.trace import read_trace

    _synth(tmp_path / "t.parquet", 2, 4)
    prov = read_trace(tmp_path / "t.parquet").meta["provenance"]
    params = SynthParams(num_layers=2, requests=2, steps=4).to_dict()
    assert prov["config_hash"] == config_hash(params)
    assert prov["model"] == {"name": "synthetic", "source": "synthetic",
                             "revision": "synthetic:" + config_hash(params)}


def test_download_out_records_the_model_and_its_commit(tmp_path):
    """download --out's provenance had no model record (the pipeline's download stage records
    model.revision = the manifest's commit)."""
    from hubfake import lay_out_cache

    lay_out_cache(tmp_path / "hub", "someone/moe", {"config.json": Path(QWEN).read_bytes()},
                  commit="b" * 40)
    r = _specmoe("download", "someone/moe", "--mode", "config", "--out",
                 str(tmp_path / "m.json"), env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    prov = json.loads((tmp_path / "m.json").read_text())["provenance"]
    assert prov["model"] == {"name": "someone/moe", "source": "hf", "revision": "b" * 40}


def test_the_predict_stage_records_its_model(tmp_path):
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import PredictParams
    from specmoe.sources import published
    from specmoe.stages.analysis import predict_stage

    snapshot = tmp_path / "olmoe"
    snapshot.mkdir()
    (snapshot / "config.json").write_bytes(
        (Path(__file__).parent / "fixtures/hf_configs/OLMoE-1B-7B-0924.json").read_bytes())
    cfg = {"name": "olmoe", "source": "hf", "revision": "c" * 40, "precision": "bf16", "tp": 1,
           "hardware": "H100", "hf_config": str(snapshot)}
    predict_stage(Named({}), Named({"json": tmp_path / "p.json"}),
                  PredictParams(model=cfg, hardware={"H100": published.gpus()["H100"]},
                                batch_sizes=[1], study=None,
                                predictions=[{"k": 3, "method": "eagle3",
                                              "run": {"model": "olmoe", "drafter": "olmoe-eagle",
                                                      "k": 3, "dataset": "heldout-prose"}}]))
    prov = json.loads((tmp_path / "p.json").read_text())["provenance"]
    assert prov["model"] == {"name": "olmoe", "source": "hf", "revision": "c" * 40}


def test_synth_defaults_come_from_synthparams(tmp_path, monkeypatch, capsys):
    """synth's flags carried literal copies of SynthParams' defaults (128, 8, 8, 3, 32, ...):
    a change of SynthParams did not reach the command."""
    import dataclasses

    from specmoe.routing import synth

    small = dataclasses.make_dataclass("Small", [("requests", int, 2), ("num_layers", int, 3)],
                                       bases=(synth.SynthParams,))
    monkeypatch.setattr(synth, "SynthParams", small)
    assert cli.main(["synth", "--out", str(tmp_path / "t.parquet"), "--steps", "1",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == 2 * 1 * 4 and out["layers"] == 3  # requests x steps x (K+1)
    helped = cli.build_parser()._subparsers._group_actions[0].choices["synth"].format_help()
    assert "requests (default 2)" in " ".join(helped.split())


def test_predict_refuses_a_batch_size_given_twice(capsys):
    """--batch-sizes 1,1,2 silently dropped the second 1."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["predict", QWEN, "--batch-sizes", "1,1,2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("specmoe predict: error: --batch-sizes lists a value twice (got '1,1,2'): "
                   "give each once")
