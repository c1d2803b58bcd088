import json
import math
import re

import numpy as np
import pytest

from specmoe.cost import costmodel as cm
from specmoe.errors import InputError
from specmoe.cost.hfconfig import dims_from_config
from specmoe.sources.published import gpus
from wf import h100

QWEN3_30B = {  # the fields of Qwen/Qwen3-30B-A3B's config.json that the model reads
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
    "torch_dtype": "bfloat16",
}


def test_hand_computed_bytes():
    d = cm.ModelDims.from_dims(hidden=2048, expert_intermediate=768, num_experts=128, top_k=8,
                               heads=32, kv_heads=4, head_dim=128, dtype="bf16", tp=1,
                               num_layers=48)
    # attention: q 2048x4096 + k,v 2048x512 each + o 4096x2048 = 18,874,368 params x 2 bytes
    assert d.c_dense == 18_874_368 * 2
    assert d.c_dense / cm.MIB == 36.0
    assert d.c_expert / cm.MIB == 3 * 2048 * 768 * 2 / 2**20 == 9.0
    assert abs(d.moe_weight_share - 72 / 108) < 1e-12
    assert abs(d.te_weight(19.49) - (36 + 72) / (36 + 19.49 * 9)) < 1e-12


def test_fp8_tp_and_shared_experts():
    d = cm.ModelDims.from_dims(hidden=2048, expert_intermediate=768, num_experts=128, top_k=8,
                               heads=32, kv_heads=4, head_dim=128, dtype="fp8", tp=2, num_layers=48,
                               shared_intermediate=1024)
    assert d.c_expert / cm.MIB == 2.25
    assert d.c_dense == (18_874_368 + 3 * 2048 * 1024) / 2


def test_from_hf_config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_30B))
    d = dims_from_config(path)
    assert (d.num_experts, d.top_k, d.dtype, d.num_layers) == (128, 8, "bf16", 48)
    assert d.c_dense / cm.MIB == 36.0
    fp8 = dict(QWEN3_30B, quantization_config={"quant_method": "fp8"})
    assert dims_from_config(fp8).dtype == "fp8"  # per-tensor scales: 1 byte
    # the published profiling table: Qwen3-30B fp8 TP1 has 4.5 MiB experts and 0.667 MoE weight share
    d8 = dims_from_config(fp8)
    assert d8.c_expert / cm.MIB == 4.5 and round(d8.moe_weight_share, 3) == 0.667


def test_mixtral_config():
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2, "num_attention_heads": 32,
               "num_key_value_heads": 8, "num_hidden_layers": 32, "torch_dtype": "bfloat16"}
    d = dims_from_config(mixtral, tp=2)
    assert d.c_expert / cm.MIB == 168.0  # published: 168 MiB at fp8 TP1 = bf16 TP2
    assert round(d.moe_weight_share, 3) == 0.894


def test_mla_config():
    glm = {"model_type": "glm4_moe_lite", "hidden_size": 2048, "moe_intermediate_size": 1536,
           "n_routed_experts": 64, "num_experts_per_tok": 4, "n_shared_experts": 1,
           "num_attention_heads": 20, "kv_lora_rank": 512, "q_lora_rank": 768,
           "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
           "num_hidden_layers": 4, "first_k_dense_replace": 0, "torch_dtype": "bfloat16"}
    d = dims_from_config(glm)
    q = 2048 * 768 + 768 * 20 * 256
    kv = 2048 * (512 + 64) + 512 * 20 * (192 + 256)
    o = 20 * 256 * 2048
    assert d.attention_params == q + kv + o
    assert d.shared_intermediate == 1536


def test_three_step_correction():
    out = cm.three_step_correction(0.667, 2.436, 0.33, 1.57, 0.94, measured=0.896)
    te = [s["te"] for s in out["steps"]]
    assert abs(te[0] - 1 / (0.333 + 0.667 * 2.436)) < 1e-12
    assert abs(te[1] - 1 / (0.67 + 0.33 * 2.436)) < 1e-12
    assert abs(te[2] - 1 / (0.67 + 0.33 * 1.57)) < 1e-12
    assert abs(te[3] - 1 / (0.67 * 0.94 + 0.33 * 1.57)) < 1e-12
    assert out["steps"][0]["delta"] is None
    gap = 0.896 - te[0]
    assert abs(sum(s["gap_closed"] for s in out["steps"][1:]) - (te[3] - te[0]) / gap) < 1e-12


def test_the_three_step_correction_over_starts_is_the_starts_mean_of_each_starts_step():
    """A profiled step's TE is the starts' geometric mean of each start's TE at that step, with
    its interval over the starts (profiling.over_starts); its f, S_moe, S_dense are geometric
    means too (f, a share, on the logit scale), so the TE is not the formula of them; delta and
    gap_closed follow the TEs."""
    from specmoe.measured.profiling import over_starts, share_over_starts

    f, s_moe, s_dense = [0.30, 0.33, 0.36], [1.5, 1.6, 1.7], [0.95, 1.0, 1.05]
    out = cm.three_step_correction_over_starts(0.667, 2.4, f, s_moe, s_dense, measured=0.85)
    one = [cm.three_step_correction(0.667, 2.4, *p)["steps"] for p in zip(f, s_moe, s_dense)]
    steps = out["steps"]
    assert steps[0]["te"] == cm.te_time_share(0.667, 2.4) and steps[0]["te_low"] is None
    for j, s in enumerate(steps[1:], 1):
        assert (s["te"], s["te_low"], s["te_high"]) == over_starts([o[j]["te"] for o in one])
        assert s["te"] != pytest.approx(cm.te_time_share(s["f"], s["s_moe"], s["s_dense"]),
                                        abs=1e-4)
        assert s["delta"] == s["te"] - steps[j - 1]["te"]
        assert s["gap_closed"] == s["delta"] / (0.85 - steps[0]["te"])
    assert steps[2]["s_moe"] == over_starts(s_moe)[0] and steps[1]["s_moe"] == 2.4
    # f, a share, is the profile's: its mean on the logit scale (profiling.share_over_starts)
    assert all(s["f"] == share_over_starts(f)[0] for s in steps[1:])
    assert steps[3]["s_dense"] == over_starts(s_dense)[0] and steps[2]["s_dense"] == 1.0
    assert out["total_gap_closed"] == pytest.approx(sum(s["gap_closed"] for s in steps[1:]))
    with pytest.raises(InputError, match="one f, S_moe and S_dense per start"):
        cm.three_step_correction_over_starts(0.667, 2.4, f, s_moe[:2], s_dense)


def test_each_steps_delta_and_share_of_the_gap_have_their_interval_over_the_starts():
    """Each profiled step's TE had its interval over the engine starts, but its delta (the TE
    less the step before's) and its share of the gap to the sweep's TE were printed bare. The
    starts are paired (one start's f, S_moe and S_dense give all its steps): a delta's interval
    is that of the starts' ratio of the two steps' TEs (profiling.over_starts, as a step's TE),
    times the step before's TE over its interval; the gap's share takes the sweep TE's interval
    too, by interval arithmetic on the ends, unbounded where the gap's interval reaches 0."""
    from specmoe.measured.profiling import over_starts

    f, s_moe, s_dense = [0.45, 0.55, 0.5], [1.3, 1.6, 1.45], [1.05, 1.2, 1.1]
    out = cm.three_step_correction_over_starts(0.8, 2.0, f, s_moe, s_dense, measured=0.85,
                                               measured_low=0.80, measured_high=0.90)
    steps = out["steps"]
    assert steps[0]["delta_low"] is None and steps[0]["gap_closed_low"] is None
    for s in steps[1:]:
        assert s["delta_low"] <= s["delta"] <= s["delta_high"]
        assert s["gap_closed_low"] <= s["gap_closed"] <= s["gap_closed_high"]
    base = steps[0]["te"]
    # from the weight baseline, which has no interval: the step's TE interval less the baseline
    assert (steps[1]["delta_low"], steps[1]["delta_high"]) == pytest.approx(
        (steps[1]["te_low"] - base, steps[1]["te_high"] - base))
    # step 2's TE interval overlaps step 1's, but in every start S_moe lies below the unique
    # ratio (2), so every start's TE rises: the paired starts decide the sign
    assert steps[1]["te_high"] > steps[2]["te_low"] and steps[2]["delta_low"] > 0
    # step 3: the TE falls in every start but the starts' ratio's interval reaches past 1:
    # its sign is not decided, though its point is negative
    one = [cm.three_step_correction(0.8, 2.0, *p)["steps"] for p in zip(f, s_moe, s_dense)]
    r = over_starts([o[3]["te"] / o[2]["te"] for o in one])
    assert r[1] < 1 < r[2]
    assert steps[3]["delta"] < 0 < steps[3]["delta_high"] and steps[3]["delta_low"] < 0
    ends = [t * (x - 1) for t in (steps[2]["te_low"], steps[2]["te_high"]) for x in r[1:]]
    assert (steps[3]["delta_low"], steps[3]["delta_high"]) == pytest.approx((min(ends),
                                                                             max(ends)))
    # the share of the gap (0.85 - base, the sweep's TE within [0.80, 0.90])
    gaps = (0.80 - base, 0.90 - base)
    corners = [d / g for d in (steps[2]["delta_low"], steps[2]["delta_high"]) for g in gaps]
    assert (steps[2]["gap_closed_low"], steps[2]["gap_closed_high"]) == pytest.approx(
        (min(corners), max(corners)))
    # a sweep TE whose interval reaches down to the baseline: a gap that may be 0, no bound
    wide = cm.three_step_correction_over_starts(0.8, 2.0, f, s_moe, s_dense, measured=0.85,
                                                measured_low=0.5, measured_high=0.9)["steps"]
    assert (wide[2]["gap_closed_low"], wide[2]["gap_closed_high"]) == (-math.inf, math.inf)
    # a sweep TE without an interval: none for the share of the gap either
    bare = cm.three_step_correction_over_starts(0.8, 2.0, f, s_moe, s_dense, measured=0.85)
    assert all(math.isnan(s["gap_closed_low"]) for s in bare["steps"][1:])
    assert bare["steps"][2]["delta_low"] == steps[2]["delta_low"]


def test_te_curve_goes_compute_bound():
    d = cm.ModelDims.from_dims(hidden=2048, expert_intermediate=768, num_experts=128, top_k=8,
                               heads=32, kv_heads=4, head_dim=128, num_layers=48)
    hw = h100()
    rows = cm.te_curve(d, hw, 3, [1, 4096],
                       lambda b: 128 * (1 - (120 / 128) ** (4 * b)),
                       lambda b: 128 * (1 - (120 / 128) ** b))
    assert not rows[0]["compute_bound"]
    assert abs(rows[0]["te"] - d.te_weight(128 * (1 - (120 / 128) ** 4))) < 1e-12
    assert rows[1]["compute_bound"] and abs(rows[1]["te"] - 1 / 4) < 0.01


def test_speedup_and_te_from_sweep_invert():
    s = cm.speedup(tau=2.5, te=0.6, draft_cost=0.1)
    assert abs(cm.te_from_sweep(2.5, s, 0.1) - 0.6) < 1e-12


@pytest.mark.parametrize("kw,msg", [({"dtype": "int3"}, "unknown dtype"), ({"top_k": 200}, "exceeds"),
                                    ({"tp": 0}, "tp must be")])
def test_bad_dims(kw, msg):
    base = dict(hidden=2048, expert_intermediate=768, num_experts=128, top_k=8, heads=32,
                kv_heads=4, head_dim=128, num_layers=48)
    base.update(kw)
    with pytest.raises(InputError, match=msg):
        cm.ModelDims.from_dims(**base)


def test_plan_estimates_from_the_step_model():
    """One step of the plan is the step model's (uniform routing: the experts' upper bound); a
    series is waves x tokens x steps, SD steps with their drafting."""
    from specmoe.cost import plan, stepmodel
    from specmoe.routing.unique import uniform_unique

    d = cm.ModelDims.from_dims(hidden=2048, expert_intermediate=768, num_experts=128, top_k=8,
                               heads=32, kv_heads=4, head_dim=128, num_layers=48)
    hw = h100()
    p = stepmodel.StepParams(13.0, 3.0, 2.0, 0.0, sd_loop_us=1710.0, verify_seq_us=250.0)
    a = plan.PlanAssumptions(tau=2.0, draft_cost=0.1)
    one = stepmodel.step_time(d, hw, 1, 1, 8, p)
    assert plan.step_s(d, hw, 1, 1, p) == pytest.approx(one)
    assert plan.step_s(d, hw, 1, 4, p) == pytest.approx(
        stepmodel.step_time(d, hw, 1, 4, uniform_unique(128, 8, 4), p))
    assert plan.series_s(d, hw, [(1, 4)], 10, None, a, p) == pytest.approx(4 * 10 * one)
    sd = plan.series_s(d, hw, [(1, 4)], 10, 3, a, p)
    # each verification step also pays the engine's work per sequence (one sequence here) and
    # the engine's SD loop per iteration
    assert sd == pytest.approx(4 * 5 * (plan.step_s(d, hw, 1, 4, p) + 250e-6 + 1710e-6
                                        + 0.1 * one))
    with pytest.raises(InputError, match="plan: unknown key"):
        plan.PlanAssumptions.from_dict({"speed": 2})


def test_the_bill_of_an_sd_series_holds_its_no_sd_points_too():
    """An SD series measures its target without SD in the same job (on a GPU one engine after
    the other, serving.arm_order): its estimate is two start-ups, the SD points and the no-SD
    points, each dataset's."""
    from specmoe.cost import plan, stepmodel

    d = cm.ModelDims.from_dims(**QWEN3_30B_DIMS)
    hw = h100()
    a, p = plan.PlanAssumptions(), stepmodel.StepParams(13.0, 3.0, 2.0, 0.0, 0.3, 250.0)
    config = {"sweep": {"output_len": 64, "warmups": 2, "repeats": 2}}
    jobs = [{"rule": "sweep_sd", "drafter": "eagle", "k": 3, "dataset": ""},
            {"rule": "sweep_ar", "drafter": None, "k": None, "dataset": ""}]
    sched = [(1, 4), (8, 16)]
    model = {"jobs": jobs, "datasets": ["a", "b"], "schedules": {"a": sched, "b": sched},
             "gpus": 1}
    sd, ar = plan.job_rows("m", model, d, hw, config, a, p)
    warm = [(1, 2 * 4 + 2), (8, 2 * 16 + 8)]  # repeats x prompts, and warm-up requests
    no_sd = plan.series_s(d, hw, warm, 64, None, a, p)
    assert ar["hours"] * 3600 == pytest.approx(plan.startup_s(d, a) + 2 * no_sd)
    assert (sd["hours"] - ar["hours"]) * 3600 == pytest.approx(
        plan.startup_s(d, a) + 2 * plan.series_s(d, hw, warm, 64, 3, a, p))


def test_the_gpu_plan_prices_the_engines_sd_loop_with_its_range():
    """The plan's SD jobs pay vLLM's SD loop per verification step, from the table the step model
    reads (engine_overhead.csv), at its value and at its range's top; jobs without SD pay none,
    and the SLURM runtime covers the top."""
    from dataclasses import replace

    from specmoe.cost import plan, stepmodel, steptables

    loop = plan.sd_loop()
    assert loop == steptables.engine_overheads()["vllm"]
    assert stepmodel.MECHANISMS["sd_loop_us"].value == loop.value and loop.high > loop.value
    d = cm.ModelDims.from_dims(**QWEN3_30B_DIMS)
    hw, a = h100(), plan.PlanAssumptions(tau=2.0, safety=1.0, min_runtime=1)
    p = stepmodel.StepParams()  # the unfitted defaults: sd_loop_us at its value
    config = {"sweep": {"repeats": 1, "warmups": 1, "output_len": 100}}
    model = {"jobs": [{"rule": "sweep_sd", "drafter": "d", "k": 3, "dataset": "x"},
                      {"rule": "sweep_ar", "drafter": None, "k": None, "dataset": "x"}],
             "datasets": ["x"], "schedules": {"x": [(1, 4), (4, 8)]}, "gpus": 1}
    sd, ar = plan.job_rows("m", model, d, hw, config, a, p)
    # waves x verification steps: batch 1, 4 + 1 prompts; batch 4, 8 + 4 prompts; 50 steps each
    iterations = (5 + 3) * 50
    assert sd["sd_loop_hours"] == pytest.approx(iterations * loop.value * 1e-6 / 3600)
    assert sd["sd_loop_hours_high"] == pytest.approx(iterations * loop.high * 1e-6 / 3600)
    bare = plan.job_rows("m", model, d, hw, config, a, replace(p, sd_loop_us=0.0))[0]
    assert sd["hours"] - bare["hours"] == pytest.approx(sd["sd_loop_hours"])
    assert sd["runtime_min"] == math.ceil((bare["hours"] + sd["sd_loop_hours_high"]) * 60)
    assert ar["sd_loop_hours"] == 0 and ar["sd_loop_hours_high"] == 0


@pytest.mark.parametrize("kw,msg", [
    ({"moe_time_share": float("nan")}, "moe_time_share must lie strictly between 0 and 1"),
    ({"moe_time_share": 0.0}, "moe_time_share must lie strictly between 0 and 1"),
    ({"moe_time_ratio": float("nan")}, "moe_time_ratio must be > 0"),
    ({"dense_time_ratio": 0.0}, "dense_time_ratio must be > 0"),
])
def test_degenerate_correction_inputs_are_errors_not_numbers(kw, msg):
    args = dict(moe_weight_share=0.667, unique_ratio=2.4, moe_time_share=0.33, moe_time_ratio=1.6,
                dense_time_ratio=0.95)
    args.update(kw)
    with pytest.raises(InputError, match=msg):
        cm.three_step_correction(**args)


QWEN3_30B_DIMS = dict(hidden=2048, expert_intermediate=768, num_experts=128, top_k=8, heads=32,
                 kv_heads=4, head_dim=128, num_layers=48, vocab_size=151936)


def test_a_model_without_a_layer_count_is_refused():
    """The step reads every layer: no default of one layer (which made the draft cost K)."""
    with pytest.raises(TypeError, match="num_layers"):
        cm.ModelDims.from_dims(**{k: v for k, v in QWEN3_30B_DIMS.items() if k != "num_layers"})


def test_the_gpu_plan_prefills_each_prompt_once():
    """A series over long prompts costs each request's prefill more: exactly prompts x one
    forward pass over the prompt, compute bound for 32k tokens (tens of decode steps: about 80
    at the grouped GEMMs' 0.48 of the peak that public fused-MoE kernels reach)."""
    from specmoe.cost import plan, stepmodel

    d = cm.ModelDims.from_dims(**QWEN3_30B_DIMS)
    hw = h100()
    a, p = plan.PlanAssumptions(), stepmodel.StepParams(13.0, 3.0, 2.0, 0.0, 0.3, 250.0)
    sched = [(1, 80), (8, 160)]
    # no output: the prefills alone, each attending to half its prompt on average
    prefills = plan.series_s(d, hw, sched, 0, None, a, p, prompt_tokens=32000)
    one = plan.step_s(d, hw, 1, 32000, p, context=16000)
    assert prefills == pytest.approx(240 * one)
    assert one > 50 * plan.step_s(d, hw, 1, 1, p)
    tokens = plan.table_prompt_tokens("builtin:v1", "tinybench")
    assert 5 < tokens < 100  # the embedded prompts are a sentence or two


@pytest.mark.parametrize("k", [None, 3])
def test_the_gpu_plan_prices_decoding_over_the_prompts_kv_cache(k):
    """A step after a 32k-token prompt reads that prompt's KV cache: every decode (verification)
    step of a series costs at least a step of the step model at a context of 32k tokens, not at
    the short default CONTEXT (which billed the speed-bench-32k sweeps at less than half)."""
    from specmoe.cost import plan, stepmodel
    from specmoe.routing.unique import uniform_unique

    d = cm.ModelDims.from_dims(**QWEN3_30B_DIMS)
    hw, a, p = h100(), plan.PlanAssumptions(tau=2.0), stepmodel.fitted()
    sched, out, prompt = [(1, 4), (16, 32)], 256, 32768
    steps = out if k is None else math.ceil(out / a.tau)
    window = 1 if k is None else k + 1
    floor = sum(math.ceil(n / b) * steps * stepmodel.step_time(
        d, hw, b, window, uniform_unique(d.num_experts, d.top_k, b * window), p, context=prompt)
        for b, n in sched)
    series = plan.series_s(d, hw, sched, out, k, a, p, prompt_tokens=prompt)
    prefills = plan.series_s(d, hw, sched, 0, None, a, p, prompt_tokens=prompt)
    assert series - prefills >= floor
    # and the prompt's KV cache weighs: well above the same steps at the default CONTEXT
    short = sum(math.ceil(n / b) * steps * plan.step_s(d, hw, b, window, p) for b, n in sched)
    assert floor > 1.5 * short


SYNTH_DIMS = dict(hidden=2048, expert_intermediate=768, heads=32, kv_heads=4, head_dim=128,
                  num_layers=48, vocab_size=151936, dtype="bf16", tp=1)


def _synthetic_overlap_and_ipf(tmp_path, name="m", dims=SYNTH_DIMS, n=32, k=4):
    """A synthetic model's trace (8 requests of N = n, k = k routing, K = 3) through the overlap
    and IPF stages: the model entry and the overlap, IPF and (not yet written) cost-model
    files."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import IpfParams, OverlapParams
    from specmoe.stages import analysis

    model = {"name": name, "source": "synthetic", "hardware": "H100", "dims": dims,
             "synthetic": {"num_experts": n, "top_k": k, "num_layers": 2, "requests": 8,
                           "steps": 6, "seed": 0}}
    run = {"model": name, "drafter": "synth", "k": 3, "dataset": "synth"}
    analysis.synth_trace(model, run, tmp_path / "t.parquet")
    o, i, c = tmp_path / "o.json", tmp_path / "i.json", tmp_path / "c.json"
    analysis.overlap_stage(Named({"trace": tmp_path / "t.parquet"}), Named({"json": o}),
                           OverlapParams(batch_sizes=[1, 8], shuffle_null=True))
    analysis.ipf_stage(Named({"overlap": o}), Named({"json": i}), IpfParams([1, 8]))
    return model, o, i, c


@pytest.mark.parametrize("name,dims,n,k,heavy", [
    ("qwen-like", dict(hidden=2048, expert_intermediate=768, heads=32, kv_heads=4, head_dim=128,
                       num_layers=48, vocab_size=151936, dtype="bf16", tp=1), 128, 8, False),
    ("mixtral-like", dict(hidden=4096, expert_intermediate=14336, heads=32, kv_heads=8,
                          head_dim=128, num_layers=32, vocab_size=32000, dtype="bf16", tp=2),
     8, 2, True)])
def test_costmodel_stage_prices_the_draft_ratio_past_the_ridge(tmp_path, name, dims, n, k,
                                                               heavy):
    """The costmodel stage on a real (synthetic) trace: the draft-ratio rows run to the
    configured 4,096 sequences for the dense drafter, the target's own N and N = 896; an
    896-expert layer of Mixtral's width outweighs Mixtral and is flagged, not priced."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import CostmodelParams
    from specmoe.provenance import read_json
    from specmoe.stages import analysis

    model, o, i, _ = _synthetic_overlap_and_ipf(tmp_path, name, dims, n, k)
    hw = {"H100": gpus()["H100"]}
    batches = [1, 64, 512, 4096]
    draft = {"context_tokens": 512, "moe_drafter_experts": 896, "batch_sizes": batches}
    analysis.costmodel_stage(Named({"overlap": o, "ipf": i}), Named({"json": tmp_path / "c.json"}),
                             CostmodelParams(model=model, hardware=hw, draft=draft))
    rows = read_json(tmp_path / "c.json")["draft_ratio_vs_batch"]
    by = {}
    for r in rows:
        by.setdefault(r["synthetic_drafter"], []).append(r)
    assert set(by) == {"dense drafter (one layer, the target's active FFN width)",
                       f"MoE drafter (one of the target's MoE layers, N = {n})",
                       "MoE drafter (one of the target's MoE layers, N = 896)"}
    for drafter, rs in by.items():
        assert [r["batch"] for r in rs] == batches
        flagged = "N = 896" in drafter and heavy
        assert all((r["status"] != "ok") == flagged for r in rs), drafter
        assert all(np.isnan(r["draft_cost"]) == flagged and r["draft_cost_raw"] > 0 for r in rs)


def test_the_gpu_plan_bills_every_gpu_job_a_draft_model_served_alone_included(tmp_path,
                                                                             study_drafters):
    """The plan lists exactly the GPU jobs the workflow runs (Config.gpu_jobs) of the engines it
    can size: the draft model served alone for the draft cost (rule sweep_ar) too, priced as the
    dense model its own config.json describes, its SLURM runtime the plan's; a draft model
    without a repository is named as not planned."""
    import yaml

    from specmoe.checks.preflight import offline_config
    from specmoe.config import Config
    from specmoe.contracts import Named
    from specmoe.contracts.report import PlanParams, plan_config, plan_entry
    from specmoe.cost import plan, stepmodel
    from specmoe.cost.hfconfig import dense_dims_from_config
    from specmoe.names import job_label
    from specmoe.stages.report import plan_stage
    from wf import REPO

    c = Config.load(yaml.safe_load((REPO / "config/paper.yaml").read_text()),
                    REPO / "workflow/schemas/config.schema.yaml")
    out = Named({"md": tmp_path / "plan.md", "json": tmp_path / "plan.json"})
    plan_stage(Named({}), out, PlanParams.from_config(c))
    bill = json.loads((tmp_path / "plan.json").read_text())
    rows = {job_label(r["rule"], r["model"], r["drafter"], r["k"], r["dataset"], r["dtype"],
                      r["tp"]): r for r in bill["jobs"]}
    assert {j.label for j in c.gpu_jobs() if c.entry(j.model).get("repo_id")} == set(rows)
    # in the dtype and TP of qwen2-57b's SD series (auto, TP 2), as vLLM gives the draft model
    # inside them: on two GPUs
    alone = rows[job_label("sweep_ar", "qwen2-0.5b", "", "", "", "auto", 2)]
    assert alone["gpus"] == 2 and "mixtral-draft" in bill["unplanned"]
    draft, _ = offline_config(c.entry("qwen2-0.5b"))
    priced = plan.job_rows("qwen2-0.5b", plan_entry(c, "qwen2-0.5b"),
                           dense_dims_from_config(draft, tp=2), h100(), c.raw,
                           plan.PlanAssumptions.from_dict(c.raw["plan"]), stepmodel.fitted(),
                           {ds: c.prompt_tokens(ds)[0] for ds in c.sweep_datasets("qwen2-0.5b")})
    assert alone["hours"] == pytest.approx(priced[0]["hours"])
    # the workflow's sweep_ar job asks for the plan's runtime (computed as the plan computes it,
    # workflow/rules/common.smk), and reads no download for it (read from the Hugging Face cache)
    p = PlanParams.from_config(c)
    planner = plan.Planner(p.entries, p.config, p.prompt_tokens)
    assert planner.runtime("sweep_ar", {"model": "qwen2-0.5b"}) == alone["runtime_min"]
    assert planner.runtime("sweep_ar", {"model": "mixtral-draft"}) is None  # not planned
    assert plan_config(c, "qwen2-0.5b") == []


def test_the_gpu_plan_bills_a_capture_for_the_prompts_the_capture_runs(tmp_path, study_drafters):
    """A capture runs every distinct prompt of its dataset, at most `capture.prompts`
    (sources.prompts.distinct_prompts): without `capture.prompts` the plan bills ShareGPT's capture
    for its max_prompts, 2560, as with `prompts: 2560` (it billed 80, and the SLURM limit fell
    below the real work), Aya's for 80 per language; a dataset whose size is not known before
    the download (Spec-Bench) is not estimated: its runtime is the model's `gpu.runtime`, and
    plan.md says so."""
    import yaml

    from specmoe.config import Config
    from specmoe.contracts import Named
    from specmoe.contracts.report import PlanParams
    from specmoe.names import job_label
    from specmoe.stages.report import plan_stage
    from wf import REPO

    raw = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    raw["datasets"]["sharegpt"]["max_prompts"] = 2560  # a table larger than paper.yaml's 80
    name = "qwen3-235b-fp8-tp4"

    def bill(prompts, tag):
        capture = {k: v for k, v in raw["capture"].items() if k != "prompts"}
        given = {"prompts": prompts} if prompts else {}
        c = Config.load({**raw, "capture": {**capture, **given}},
                        REPO / "workflow/schemas/config.schema.yaml")
        out = Named({"md": tmp_path / f"{tag}.md", "json": tmp_path / f"{tag}.json"})
        plan_stage(Named({}), out, PlanParams.from_config(c))
        jobs = json.loads((tmp_path / f"{tag}.json").read_text())["jobs"]
        rows = {j["dataset"]: j for j in jobs if j["model"] == name and j["rule"] == "capture"}
        return rows, (tmp_path / f"{tag}.md").read_text(), c

    unset, md, c = bill(None, "unset")
    for ds, n in (("sharegpt", 2560), ("aya", 400)):
        assert c.capture_prompts(name, ds) == n
        capped, _, _ = bill(n, str(n))
        assert unset[ds]["estimated"] and unset[ds]["hours"] == pytest.approx(capped[ds]["hours"])
    assert bill(80, "80")[0]["sharegpt"]["hours"] < unset["sharegpt"]["hours"] / 2
    # MT-Bench's 80 questions are known before the download (its max_prompts in paper.yaml)
    assert c.capture_prompts(name, "mt-bench") == 80 and unset["mt-bench"]["estimated"]
    assert c.capture_prompts(name, "spec-bench") is None
    assert not unset["spec-bench"]["estimated"]
    assert unset["spec-bench"]["runtime_min"] == c.gpu_resources(name)["runtime"]
    job = unset["spec-bench"]
    label = job_label("capture", name, job["drafter"], job["k"], "spec-bench")
    assert label in md.split("Not estimated:")[1].split("\n")[0]


def test_costmodel_stage_refuses_an_overlap_without_the_reliability_of_its_measured_windows(
        tmp_path):
    """An overlap file whose unique_by_batch lacks verify_empirical_reliable (one written before
    the overlap job recorded it) is refused in one line naming the file and the rule to rerun:
    the measured-windows TE rows took sample_ok true at every batch size from it, whatever the
    trace's windows could support."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import CostmodelParams
    from specmoe.provenance import read_json, write_json
    from specmoe.stages import analysis

    model, o, i, c = _synthetic_overlap_and_ipf(tmp_path)
    params = CostmodelParams(model=model, hardware={"H100": gpus()["H100"]},
                             draft={"context_tokens": 512, "moe_drafter_experts": 64,
                                    "batch_sizes": [1, 64]})
    job = (Named({"overlap": o, "ipf": i}), Named({"json": c}), params)
    analysis.costmodel_stage(*job)  # the overlap job's own file: its rows take its column
    ov = read_json(o)
    rel = {r["batch"]: r["verify_empirical_reliable"] for r in ov["unique_by_batch"]}
    measured = [r for r in read_json(c)["te_vs_batch"] if r["routing"] == cm.MEASURED_ROUTING]
    assert measured and all(r["sample_ok"] == rel[r["batch"]] for r in measured)
    c.unlink()
    for r in ov["unique_by_batch"]:
        del r["verify_empirical_reliable"]
    write_json(o, {k: v for k, v in ov.items() if k != "provenance"}, ov.get("provenance", {}))
    with pytest.raises(InputError, match=rf"{re.escape(str(o))}: .*verify_empirical_reliable"
                                         r".*rerun rule overlap"):
        analysis.costmodel_stage(*job)
    assert not c.exists()


def test_a_hardware_entry_has_the_keys_something_reads():
    """l2_mib and sm_count were parsed and checked into Hardware (l2_bytes, sm_count) and read by
    nothing (profiles take the device's own SM count): gone from the schema, the shipped
    configuration and the dataclass; the keys the cost model accepts are the schema's, and a
    hardware file with any other is refused, never ignored."""
    import dataclasses

    from specmoe.checks.schema import load_schema
    from wf import REPO

    schema = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")
    keys = schema["properties"]["hardware"]["additionalProperties"]["properties"]
    assert set(keys) == set(cm.HARDWARE_KEYS)
    fields = {f.name for f in dataclasses.fields(cm.Hardware)}
    assert not fields & {"l2_bytes", "sm_count"}
    entry = {"hbm_bandwidth_gbs": 3350, "peak_tflops": {"bf16": 989}}
    cm.Hardware.from_config("G1", entry)
    for key in ("l2_mib", "sm_count"):
        with pytest.raises(InputError, match=f"hardware G1: unknown key '{key}'"):
            cm.Hardware.from_config("G1", {**entry, key: 1})


def test_a_hardware_number_outside_its_physical_range_is_refused_as_the_schema_refuses_it():
    """Hardware.from_config checked "> 0" alone: true read as 1 GB/s, 3.35 (TB/s typed as GB/s),
    a peak of 989e12 (FLOP/s typed as TFLOP/s), an fp8 peak below bf16's, a step overhead of
    1e9 us and an int4 peak the schema forbids were all taken. Each number now lies within its
    device's physical range (costmodel.HARDWARE_RANGES), the bounds the configuration's schema
    gives the same keys, and the peaks are the schema's dtypes."""
    from specmoe.checks.schema import load_schema, validate
    from wf import REPO

    ok = {"hbm_bandwidth_gbs": 3350, "peak_tflops": {"bf16": 989, "fp8": 1979}}
    cm.Hardware.from_config("G1", ok)
    cm.Hardware.from_config("CPU", {"hbm_bandwidth_gbs": 20, "peak_tflops": {"bf16": 0.2},
                                    "device": "cpu"})
    schema = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")
    bad = [({**ok, "hbm_bandwidth_gbs": 3.35}, "hbm_bandwidth_gbs = 3.35 lies outside 50-"),
           ({**ok, "hbm_bandwidth_gbs": True}, "hbm_bandwidth_gbs must be a number, got True"),
           ({**ok, "peak_tflops": {"bf16": 989e12}}, "peak_tflops.bf16 = 9.89e+14 lies outside"),
           ({**ok, "peak_tflops": {"bf16": 989, "fp8": 500}}, "peak_tflops.fp8 500 below bf16's"),
           ({**ok, "step_overhead_us": 1e9}, "step_overhead_us = 1e+09 lies outside 0-"),
           ({**ok, "nvlink_gbs": 0}, "nvlink_gbs must be > 0"),
           ({**ok, "peak_tflops": {"bf16": 989, "int4": 3958}},
            "peak_tflops.int4: not a compute dtype"),
           ({**ok, "memory_gib": 81920}, "memory_gib = 81920 lies outside 1-4096 GiB"),
           ({**ok, "cuda_memory_mib": 80}, "cuda_memory_mib = 80 lies outside 1024-"),
           ({**ok, "memory_gib": True}, "memory_gib must be a number, got True"),
           ({**ok, "device": "cpu", "hbm_bandwidth_gbs": 0.5},
            "hbm_bandwidth_gbs = 0.5 lies outside 1-100000 GB/s, the range of a CPU's")]
    for entry, message in bad:
        with pytest.raises(InputError, match=re.escape(f"hardware G1: {message}")):
            cm.Hardware.from_config("G1", entry)
        if message.startswith("peak_tflops.fp8"):  # a relation of two keys: the schema's not
            continue
        assert validate({"hardware": {"G1": dict(entry)}}, schema)[0:1] and any(
            "hardware.G1" in line for line in validate({"hardware": {"G1": dict(entry)}},
                                                        schema)), entry
    # the schema's bounds are HARDWARE_RANGES': every device's widest, a GPU's least otherwise
    node = schema["properties"]["hardware"]["additionalProperties"]
    ranges = cm.HARDWARE_RANGES
    for key in ("hbm_bandwidth_gbs", "nvlink_gbs", "step_overhead_us", "memory_gib",
                "cuda_memory_mib"):
        assert (node["properties"][key]["minimum"], node["properties"][key]["maximum"]) == (
            min(r[key][0] for r in ranges.values()), max(r[key][1] for r in ranges.values())), key
    peaks = node["properties"]["peak_tflops"]["properties"]
    assert tuple(peaks) == cm.PEAK_DTYPES
    for dtype, bound in peaks.items():
        assert (bound["minimum"], bound["maximum"]) == (ranges["cpu"]["peak_tflops"][0],
                                                      ranges["gpu"]["peak_tflops"][1])
    gpu = node["then"]["properties"]
    assert node["if"] == {"properties": {"device": {"const": "gpu"}}}
    assert gpu["hbm_bandwidth_gbs"]["minimum"] == ranges["gpu"]["hbm_bandwidth_gbs"][0]
    assert {v["minimum"] for v in gpu["peak_tflops"]["properties"].values()} == {
        ranges["gpu"]["peak_tflops"][0]} and tuple(gpu["peak_tflops"]["properties"]) == \
        cm.PEAK_DTYPES
    for key in ("nvlink_gbs", "step_overhead_us"):
        assert ranges["gpu"][key] == ranges["cpu"][key]
    for key in ("memory_gib", "cuda_memory_mib"):  # a GPU's most, a CPU's least as a CPU's
        assert gpu[key] == {"maximum": ranges["gpu"][key][1]}, key
        assert ranges["gpu"][key][0] == ranges["cpu"][key][0], key


def test_the_peak_dtypes_are_defined_once():
    """PEAK_DTYPES was written out twice, in cost/costmodel.py (the schema's peak_tflops keys)
    and in sources/published.py (the columns of hardware.csv it reads): one edited alone would
    ship GPUs whose peaks the cost model refuses, or drop one. published reads costmodel's."""
    from pathlib import Path

    import specmoe
    from specmoe.sources import published

    assert published.PEAK_DTYPES is cm.PEAK_DTYPES
    src = Path(specmoe.__file__).parent
    defined = [p.relative_to(src).as_posix() for p in sorted(src.rglob("*.py"))
               if re.search(r"^PEAK_DTYPES\s*=", p.read_text(), re.M)]
    assert defined == ["cost/costmodel.py"], defined
    assert set(next(iter(gpus().values()))["peak_tflops"]) == set(cm.PEAK_DTYPES)


@pytest.mark.parametrize("converged,infeasible,status", [
    (False, 0, "not converged"), (False, 2, "infeasible"), (True, 0, "ok")])
def test_a_skewed_ipf_fit_that_does_not_hold_its_margins_gives_no_te(tmp_path, converged,
                                                                     infeasible, status):
    """The cost model read the skewed IPF's unique experts without asking whether the fit held
    its margins: predict_skewed(q = [[0.25] * 8], ov = [[0] * 8]) gives 8.0 unique experts, not
    converged and infeasible, and that became an ordinary TE (te_vs_batch's IPF rows had
    sample_ok true, te_ipf_skewed a number). A fit that did not converge, or whose margins no
    distribution has, now gives no TE at any batch size nor at batch 1, each of its rows saying
    why (ipf_fit), into the report's rows; the other routings' rows are untouched."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import CostmodelParams
    from specmoe.provenance import read_json, write_json
    from specmoe.report.runs import _add_cost_rows
    from specmoe.stages import analysis

    from specmoe.routing import ipf as ipf_mod

    fit = ipf_mod.predict_skewed(np.full((1, 8), 0.25), np.zeros((1, 8)))
    assert fit["unique"] == pytest.approx(8.0) and not fit["converged"] and fit["infeasible"]
    model, o, i, c = _synthetic_overlap_and_ipf(tmp_path)
    ip = read_json(i)
    assert ip["converged"]["skewed_window"] and not ip["n_infeasible_experts"]["skewed_window"]
    ip["converged"]["skewed_window"] = converged
    ip["n_infeasible_experts"]["skewed_window"] = infeasible
    ip["n_unconverged_experts"]["skewed_window"] = 0 if converged else max(infeasible, 1)
    write_json(i, {k: v for k, v in ip.items() if k != "provenance"}, ip.get("provenance", {}))
    params = CostmodelParams(model=model, hardware={"H100": gpus()["H100"]},
                             draft={"context_tokens": 512, "moe_drafter_experts": 64,
                                    "batch_sizes": [1, 64]})
    analysis.costmodel_stage(Named({"overlap": o, "ipf": i}), Named({"json": c}), params)
    out = read_json(c)
    ipf_routing = "max-entropy IPF, skewed (this project's)"
    rows = [r for r in out["te_vs_batch"] if r["routing"] == ipf_routing]
    others = [r for r in out["te_vs_batch"] if r["routing"] != ipf_routing]
    assert len(rows) == 2 and len(others) == 6
    assert all(r["ipf_fit"] == status for r in rows)
    assert all(np.isnan(r["te"]) != (status == "ok") for r in rows)
    assert all(np.isfinite(r["te"]) and r["ipf_fit"] is None for r in others)
    assert out["ipf_skewed_fit"] == status
    assert np.isnan(out["te_weight_batch1"]["ipf_skewed"]) != (status == "ok")
    t = {"target_efficiency": [], "te_vs_batch": [], "draft_ratio_model": []}
    _add_cost_rows(t, out)
    assert t["target_efficiency"][0]["ipf_skewed_fit"] == status
    table = [r for r in t["te_vs_batch"] if r["routing"] == ipf_routing]
    assert all(r["ipf_fit"] == status and (r["te_status"] == "ok") == (status == "ok")
               for r in table)
