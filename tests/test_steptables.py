"""The step model's shipped engine- and kernel-level tables (specmoe.cost.steptables) and how the
step model reads them: the SD loop in microseconds per engine, kernels per layer by attention
kind, the MoE kernel's efficiency bound, and a fitted term on its bound reported as a missing
effect."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from specmoe.cost import stepmodel, steptables
from specmoe.cost.hfconfig import dims_from_config
from specmoe.errors import InputError
from wf import REPO

CONFIGS = REPO / "src" / "specmoe" / "data" / "hf_configs"
FIXTURES = REPO / "tests" / "fixtures" / "hf_configs"


def rows(name):
    with (resources.files("specmoe") / "data" / name).open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("table", ["engine_overhead.csv", "kernels_per_layer.csv",
                                   "moe_gemm_bandwidth.csv", "decode_batch1.csv",
                                   "moe_kernel_times.csv", "node_memory.csv"])
def test_every_shipped_table_has_its_source_note(table):
    note = resources.files("specmoe") / "data" / table.replace(".csv", ".SOURCE.md")
    assert note.is_file() and len(note.read_text()) > 500
    assert rows(table)


def test_every_engine_value_carries_its_quote_and_address():
    for r in rows("engine_overhead.csv"):
        assert r["quote"] and r["source_url"].startswith("https://github.com/")
        assert float(r["value_us"]) > 0
    for r in rows("decode_batch1.csv"):
        assert r["quote"] and r["source_url"].startswith("https://")
        assert (REPO / r["config"]).is_file()


def test_the_engine_term_is_read_per_engine_with_its_spread():
    eo = steptables.engine_overheads()
    assert set(eo) == set(stepmodel.ENGINE_LOG_SD)
    v = eo["vllm"]
    assert (v.value, v.low, v.high, v.sourced) == (1710.0, 0.0, 2370.0, True)
    assert eo["sglang"].sourced and eo["sglang"].high == 3160.0
    assert not eo["trtllm"].sourced  # no source: said so, and the widest range
    # only vLLM's loop is measured against plain decoding (predictor.loop_caveat says the rest)
    assert [e for e, x in eo.items() if x.measured] == ["vllm"]
    m = stepmodel.MECHANISMS["sd_loop_us"]
    assert (m.value, m.low, m.high, m.fitted) == (v.value, v.low, v.high, False)


def test_a_loop_measured_under_an_unpriced_condition_sizes_no_range_and_names_the_miss():
    """The SD loop measured with the CUDA-graph downgrade speculative decoding triggers (28.6 ms
    per iteration against a 17.5 ms plain step) is kept with its condition and source, draws
    into no engine's range (vLLM's stays its engine-level 0-2,370 us, the unsourced engines'
    0 to the largest priced value), and is what catchup_passes on its bound is said to hide."""
    [r] = steptables.unpriced_overheads()
    assert r["engine"] == "vllm" and float(r["value_us"]) == 28600.0
    assert "CUDA-graph downgrade" in r["quote"] and "graph" in r["condition"]
    # the derivation's own numbers: acceptance length over decode rate, with and without MTP
    assert 1e3 * (1.87 / 40.6 - 1 / 57.0) == pytest.approx(28.6, abs=0.1)
    eo = steptables.engine_overheads()
    assert eo["vllm"].high == 2370.0 and eo["trtllm"].high == 3160.0
    on = stepmodel.StepParams(catchup_passes=stepmodel.MECHANISMS["catchup_passes"].high)
    text = stepmodel.missing_effects(on)["catchup_passes"]
    assert "piecewise" in text and "unpriced" in text


def test_the_gemm_benchmarks_bound_the_moe_kernel():
    low, high = steptables.moe_efficiency_bounds()
    assert low == pytest.approx(1509 / 3350) and high == pytest.approx(0.8833, abs=1e-4)
    d = dims_from_config(CONFIGS / "Qwen3-30B-A3B.json")
    hw = stepmodel.study_hardware("H100")
    p = stepmodel.StepParams(moe_cta_gbs=200.0)
    # Little's law alone would give 0.9+ for 128 experts in flight; the benchmarks cap it
    assert stepmodel.moe_efficiency(d, hw, 128, p) == pytest.approx(high)
    assert stepmodel.moe_efficiency(d, hw, 1, stepmodel.StepParams(moe_cta_gbs=20.0)) < high


def test_kernels_per_layer_follow_the_attention_kind():
    """MLA's block launches 10 kernels where grouped-query attention's launches 6, DSA's indexer 9
    more on each layer, Gated DeltaNet 7 (kernels_per_layer.csv, read from vLLM's code)."""
    k = steptables.kernels_per_layer()
    total = {b: sum(v.values()) for b, v in k.items()}
    assert (total["attention"], total["attention_mla"], total["dsa_indexer"],
            total["attention_linear"]) == (6, 10, 9, 7)
    r1 = dims_from_config(FIXTURES / "DeepSeek-R1.json", tp=8)
    v32 = dims_from_config(FIXTURES / "DeepSeek-V3.2.json", tp=8)
    assert r1.mla_layers == r1.num_layers and r1.dsa_layers == 0
    assert v32.dsa_layers == v32.num_layers
    n1, n32 = stepmodel.kernels(r1), stepmodel.kernels(v32)
    assert sum(n32.values()) - sum(n1.values()) == 9 * v32.num_layers
    nxt = dims_from_config(CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json")
    linear = nxt.num_layers - nxt.attention_layers
    assert stepmodel.kernels(nxt)["state"] == 2 * linear > 0
    # an MTP drafter is one of the target's layers, of its attention kind
    mtp = stepmodel.drafter_dims(v32, "mtp", None)
    assert (mtp.mla_layers, mtp.dsa_layers) == (1, 1)


def test_the_loop_costs_microseconds_so_less_of_a_larger_models_step():
    """The same engine's loop is a smaller share of a larger model's decode step: TE's loss to
    it shrinks with the model (the old form charged a fixed share of the step by method name)."""
    hw = stepmodel.study_hardware("H100")
    p = stepmodel.fitted()
    small = dims_from_config(CONFIGS / "Qwen3-30B-A3B.json", tp=1)
    large = dims_from_config(CONFIGS / "Qwen3-235B-A22B-Instruct-2507.json", tp=8)

    def loop_share(d):
        step = stepmodel.step_time(d, hw, 1, 1, d.top_k, p)
        return p.sd_loop_us * 1e-6 / step

    assert loop_share(large) < loop_share(small)


def test_a_fitted_term_on_its_bound_is_reported_as_a_missing_effect():
    from specmoe.report.predicted import parameter_table

    inside = stepmodel.StepParams(moe_cta_gbs=60.0, node_us=3.0, verify_draft_model=0.5,
                                  catchup_passes=0.5)
    assert stepmodel.missing_effects(inside) == {}
    on = stepmodel.StepParams(moe_cta_gbs=200.0, node_us=3.0, verify_draft_model=0.0,
                              catchup_passes=1.0)
    assert stepmodel.at_bound(on) == {"moe_cta_gbs": "high", "verify_draft_model": "low",
                                      "catchup_passes": "high"}
    text = stepmodel.missing_effects(on)
    assert "MTP block" in text["catchup_passes"] and "not accepted" in text["moe_cta_gbs"]
    table = parameter_table(on).set_index("parameter")
    assert table.loc["catchup_passes", "at_bound"] and table.loc["catchup_passes",
                                                                  "missing_effect"]
    assert not table.loc["node_us", "at_bound"] and table.loc["node_us", "missing_effect"] == ""
    assert table.loc["sd_loop_us", "missing_effect"] == ""  # unfitted: set, never on a bound


def test_a_table_that_cannot_be_right_is_refused(monkeypatch):
    bad = [{"block": "moe", "class": "tensor cores", "kernels": "3"}]
    monkeypatch.setattr(steptables, "_rows", lambda name: bad)
    steptables.kernels_per_layer.cache_clear()
    try:
        with pytest.raises(InputError, match="unknown class"):
            steptables.kernels_per_layer()
    finally:
        monkeypatch.undo()
        steptables.kernels_per_layer.cache_clear()
    assert steptables.kernels_per_layer()["moe"] == {"dense": 2, "moe": 6}


def _bench(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_public_moe_kernel_times_are_possible_and_the_bench_reads_them():
    """No public kernel time is faster than its experts' bytes at the datasheet bandwidth; each
    shape's time grows with M; bench/moe_kernels.py scores every row, its verification growth
    T(4M)/T(M) read from the table's own 4M row."""
    bench = _bench("moe_kernels")
    res = bench.score()
    table = rows("moe_kernel_times.csv")
    assert len(res) == len(table) == 42
    for r in res:
        assert 0 < r["bandwidth_share"] <= 1, r
        assert r["tokens_per_expert"] == pytest.approx(
            r["m"] * next(int(t["top_k"]) / int(t["num_experts"]) for t in table
                          if t["shape"] == r["shape"]), abs=1e-3)
    by = {}
    for r in res:
        by.setdefault((r["shape"], r["gpu"]), []).append(r)
    for curve in by.values():
        times = [r["public_us"] for r in sorted(curve, key=lambda r: r["m"])]
        assert all(b >= a * 0.97 for a, b in zip(times, times[1:])), times
    t = {(r["shape"], r["gpu"], r["m"]): r["public_us"] for r in res}
    for r in res:
        if r["verify_growth_public"] is not None:
            assert r["verify_growth_public"] == pytest.approx(
                t[(r["shape"], r["gpu"], 4 * r["m"])] / r["public_us"], abs=1e-3)


def test_the_moe_flops_add_to_its_bytes_on_a_smooth_roofline():
    """Where the FLOPs are negligible the MoE time is its bytes' (the roofline); where both count
    it lies between the larger and their sum (Mixtral's layer at 64 tokens per expert: the
    public table's 537 us over a flat 483-494 us)."""
    assert stepmodel.smooth_roofline(5.0, 0.0) == 5.0
    both = stepmodel.smooth_roofline(3.0, 4.0)
    assert max(3.0, 4.0) < both < 7.0 and both == pytest.approx(5.0)
    res = {r["m"]: r for r in _bench("moe_kernels").score() if r["shape"].startswith("Mixtral")}
    assert res[256]["model_us"] > res[64]["model_us"] * 1.04  # the FLOPs show past the bytes
    assert res[64]["model_us"] < res[32]["model_us"] * 1.02   # and not before


def test_the_study_shapes_are_scored_by_their_share_of_draws():
    """The predicted shape is predict's, decided by the draws' pair intervals (a share of the
    draws, 0.8, decided it before: stepmodel.draw_shape); the shares are information, a draw
    with a TE at a clip bound counted toward no shape."""
    bench = _bench("study_shapes")
    [r] = bench.score(draws=40, models=["Mixtral-8x7B"])
    assert r["published"] == "concave"
    assert sum(r["shape_shares"].values()) == pytest.approx(1.0, abs=1e-2)
    assert r["p_published"] == r["shape_shares"].get("concave", 0.0)
    assert r["decided_right"] == (r["predicted"] == "concave")
    assert r["predicted"] in stepmodel.SHAPES and set(r["shape_shares"]) <= {
        *stepmodel.SHAPES, stepmodel.CLIPPED}


def test_the_docs_shape_numbers_are_study_shapes_and_the_step_models():
    """README said the step model 'gives Mixtral-8x7B's concave curve' where bench/study_shapes.py
    (predict's intervals) gave 'undecided', and docs/method.md quoted a P(published) of 0.69
    where the bench gave 0.72. Each such claim is read from the text and recomputed here: predict's
    shapes and shares from study_shapes.score, the step model's own curves from predict_shape on
    its fitted parameters and on the leave-one-model-out fits (step_model_shapes)."""
    rows = {r["model"]: r for r in _bench("study_shapes").score()}
    assert len(rows) == 5 and {r["predicted"] for r in rows.values()} == {"undecided"}
    p = {m: f"{r['p_published']:.2f}" for m, r in rows.items()}
    clip = [r["shape_shares"].get(stepmodel.CLIPPED, 0.0) for r in rows.values()]
    method = " ".join((REPO / "docs" / "method.md").read_text().split())
    assert (f"Mixtral-8x7B concave {p['Mixtral-8x7B']}, Qwen3-30B peak at low batch "
            f"{p['Qwen3-30B']}, Qwen3-235B {p['Qwen3-235B']}, and, from the study's N/k rule, "
            f"GLM-4.7-Flash {p['GLM-4.7-Flash']} and GPT-OSS-120B {p['GPT-OSS-120B']}, with "
            f"{min(clip):.2f}-{max(clip):.2f} of each model's curves at a TE clip bound") in method
    assert "the intervals decide none of the five, so all five stay \"undecided\"" in method
    readme = " ".join((REPO / "README.md").read_text().split())
    mix = rows["Mixtral-8x7B"]["shape_shares"]
    assert ("with its 95% intervals `specmoe predict` decides none of the five published shapes "
            f"(`bench/study_shapes.py`: Mixtral-8x7B undecided, {mix['concave']:.2f} of its drawn "
            f"curves concave and {mix[stepmodel.CLIPPED]:.2f} with a TE at a clip bound)") in readme
    assert set(mix) == {"concave", stepmodel.CLIPPED}
    # "the step model's curve from its fitted parameters is concave for Mixtral-8x7B, as
    # published, and for Qwen3-30B-A3B and Qwen3-235B-A22B too"
    assert "is concave for Mixtral-8x7B, as published, and for Qwen3-30B-A3B and " \
        "Qwen3-235B-A22B too, where the study measures a peak at batch 1" in readme
    cal = stepmodel.calibration()
    shapes = stepmodel.shape_rows()
    lomo = list(cal.lomo)[len(stepmodel.calibration_rows()):]
    for r, lo in zip(shapes, lomo):
        if r["model"] in ("Mixtral-8x7B", "Qwen3-30B", "Qwen3-235B"):
            assert stepmodel.predict_shape(r, cal.params) == lo["predicted"] == "concave", r
    assert {r["model"]: r["published"] for r in shapes}["Mixtral-8x7B"] == "concave"


def test_no_public_fused_moe_time_implies_more_than_the_moe_kernels_ceiling():
    """The ceiling was DeepGEMM's fp8 0.796 of the bandwidth, while vLLM's bf16 fused_moe on
    Mixtral-8x7B TP 2 (H100, M = 16) streams its unique experts at 0.883 of it: every public
    fused-MoE time with at least half a token per expert implies a share within the range."""
    low, high = steptables.moe_efficiency_bounds()
    assert stepmodel.MECHANISMS["moe_max_efficiency"].high == high
    fractions = steptables.fused_moe_fractions()
    ceiling = [f for _, tpe, f in fractions if tpe >= steptables.CEILING_TOKENS_PER_EXPERT]
    assert len(ceiling) >= 20 and max(ceiling) <= high
    [(mixtral16, _, f)] = [x for x in fractions if x[0]["shape"] == "Mixtral-8x7B TP2"
                           and x[0]["m_tokens"] == "16"]
    assert f == pytest.approx(0.883, abs=1e-3) and f > 2668 / 3350
