"""The synthetic drafters' cost ratio c(B) = K T_drafter(B) / T_target(B) (the study's Figures 11
and 12, docs/method.md "Draft cost ratio"), priced by the step model's own functions."""

from __future__ import annotations

import numpy as np
import pytest

from specmoe.cost import stepmodel
from specmoe.errors import InputError
from specmoe.routing.unique import uniform_unique
from wf import h100

# fixed, not fitted: the physics only (a kernel latency at the low end of its range, no host work)
P = stepmodel.StepParams(moe_cta_gbs=13.0, node_us=1.0, verify_seq_us=0.0, host_seq_us=0.0)
BATCHES = [2 ** i for i in range(13)]  # 1 .. 4096
N896 = stepmodel.MOE_DRAFTER.format(n=896)
N128 = stepmodel.MOE_DRAFTER.format(n=128)


def _qwen3_30b_h100(step_overhead_us: float = 0.0):
    hw = h100(step_overhead_us=step_overhead_us)
    return stepmodel.study_model_dims("Qwen3-30B", "bf16", 1), hw


def _curves(context: float, p=P, batches=BATCHES) -> dict[str, list[float]]:
    d, hw = _qwen3_30b_h100()
    rows = stepmodel.draft_ratio_curve(d, hw, 3, batches, lambda b: uniform_unique(128, 8, b),
                                       896, p, context)
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r["synthetic_drafter"], []).append(r["draft_cost"])
    return out


def test_draft_cost_counts_the_drafters_lm_head_and_kv_reads():
    """At batch 1 the synthetic drafters are one layer each (the target's attention, k experts'
    worth of FFN as one dense FFN, or one MoE layer of N experts), on the target's LM head and one
    layer's KV cache; c(1) is K of their steps over the target's, each priced by the step model's
    own step time, and the MoE drafter's N is its own (the study's Figure 12: 896)."""
    d, hw = _qwen3_30b_h100()
    ctx = 512
    rows = stepmodel.draft_ratio_curve(d, hw, 3, [1, 64], lambda b: 8.0 if b == 1 else 100.0,
                                       896, P, ctx)
    drafters = stepmodel.synthetic_drafters(d, 896)
    dense, moe = drafters[stepmodel.DENSE_DRAFTER], drafters[N896]
    for x in (dense, moe):
        assert (x.num_layers, x.vocab_size, x.hidden) == (1, d.vocab_size, d.hidden)
        assert x.kv_per_token == pytest.approx(d.kv_per_token / d.num_layers)
        assert x.attention_params == d.attention_params
    assert (dense.num_experts, dense.top_k, dense.expert_intermediate) == (1, 1, 8 * 768)
    assert (moe.num_experts, moe.top_k, moe.expert_intermediate) == (896, 8, 768)
    target = stepmodel.step_time(d, hw, 1, 1, 8.0, P, ctx)
    b1 = [r for r in rows if r["batch"] == 1]
    assert {r["synthetic_drafter"] for r in b1} == {stepmodel.DENSE_DRAFTER, N128, N896}
    for r in b1:
        x = drafters.get(r["synthetic_drafter"]) or stepmodel.synthetic_drafters(d, 128)[N128]
        passes = stepmodel.step_times(x, hw, 1, 1, x.top_k, P, ctx)
        t_draft = sum(passes.values()) - passes["host"]  # a drafter pass pays no host work
        assert r["draft_cost"] == pytest.approx(3 * t_draft / target, rel=1e-9)
        assert r["t_target_us"] == pytest.approx(target * 1e6, rel=1e-9)
        assert r["status"] == "ok" and r["ridge_tokens"] == pytest.approx(989e12 / 3350e9)
    # a one-layer drafter reads a small share of what the 48-layer target reads at batch 1
    assert all(0.05 < r["draft_cost"] < 0.6 for r in b1)
    moe64 = next(r for r in rows if r["batch"] == 64 and r["synthetic_drafter"] == N896)
    assert moe64["unique_drafter"] == pytest.approx(896 * (1 - (1 - 8 / 896) ** 64))
    assert moe64["drafter_tokens_per_weight"] == pytest.approx(64 * 8 / 896)
    with pytest.raises(InputError, match="vocab_size"):
        stepmodel.draft_ratio_curve(stepmodel.ModelDims(**{**d.to_dict(), "vocab_size": 0}),
                                    hw, 3, [1], lambda b: 8.0, 896, P, ctx)


def test_a_fixed_cost_per_forward_pass_weighs_more_on_the_drafters_k_passes():
    """K drafter passes pay the fixed cost K times, the target's step once: with a fixed cost
    the dense drafter's ratio is higher at every batch size."""
    curves = {}
    for us in (0, 50):
        d, hw = _qwen3_30b_h100(us)
        curves[us] = [r["draft_cost"] for r in stepmodel.draft_ratio_curve(
            d, hw, 3, [1, 8, 64], lambda b: uniform_unique(128, 8, b), 896, P, 512)
            if r["synthetic_drafter"] == stepmodel.DENSE_DRAFTER]
    assert all(b > a for a, b in zip(curves[0], curves[50]))


def _bends(times: list[float], after: int = 1, batches=BATCHES, growth: float = 1.05) -> int:
    """The first batch size from `after` on from which a step time grows with the batch (its
    compute floor, once the weights it reads no longer grow)."""
    return next(b for b, t0, t1 in zip(batches, times, times[1:]) if b >= after and t1 > growth * t0)


def test_past_its_ridge_the_dense_ratio_rises_while_the_moe_ratio_stays_flat():
    """The study's Figures 11 and 12 on Qwen3-30B's dimensions (48 layers, 8 of 128 experts, H100,
    bf16) through the step model, without a KV cache (the layer cost the figures draw): a dense
    drafter turns compute-bound once its batch passes the ridge (every token meets every weight)
    and its time grows with the batch, while the target's experts each see B k / N tokens and
    stay bandwidth-bound until N / k times that batch: the dense ratio rises. The 896-expert MoE
    drafter's reads grow until its B tokens use every expert (about 512 sequences), and then it
    is bandwidth-bound like the target (each expert sees B k / 896 tokens): its ratio stays flat,
    while the dense one keeps rising, up to the target's own ridge. Over that window the dense
    ratio more than doubles while the 896-expert one stays within 25% (its reads and the
    target's grow alike; the sampler's passes over the logits, which both pay, move it a little)."""
    d, hw = _qwen3_30b_h100()
    dense_d = stepmodel.synthetic_drafters(d, 896)[stepmodel.DENSE_DRAFTER]
    t_dense = [stepmodel.step_time(dense_d, hw, b, 1, 1, P, 0) for b in BATCHES]
    t_moe = [stepmodel.step_times(d, hw, b, 1, uniform_unique(128, 8, b), P, 0)["moe"]
             for b in BATCHES]
    def saturated(n):  # the batch from which B tokens use nearly every one of n experts
        return next(b for b in BATCHES if uniform_unique(n, 8, b) > 0.98 * n)

    # the target's experts bend where their time grows 10% per doubling: at the MoE kernel's
    # ceiling of the public fused-MoE times (0.883 of the bandwidth) their bytes take less time,
    # so the FLOPs' share grows 5.5% from 512 to 1024 sequences, still bandwidth-bound
    ridge_dense = _bends(t_dense)
    ridge_target = _bends(t_moe, after=saturated(128), growth=1.1)
    saturated = saturated(896)
    assert ridge_dense <= 4 * stepmodel.ridge_tokens(d, hw)   # about 300 tokens, or earlier
    assert ridge_target >= 4 * ridge_dense and saturated < ridge_target
    c = _curves(0)
    at = {b: i for i, b in enumerate(BATCHES)}
    dense, moe = c[stepmodel.DENSE_DRAFTER], c[N896]
    window = [at[b] for b in BATCHES if saturated <= b <= 2 * ridge_target]
    least = int(np.argmin(dense))
    assert BATCHES[least] <= 4 * stepmodel.ridge_tokens(d, hw)
    assert all(b >= a for a, b in zip(dense[least:], dense[least + 1:]))  # rises from its least
    rise = dense[window[-1]] / dense[window[0]]
    flat = np.array([moe[i] for i in window])
    assert rise > 2                                               # the dense ratio more than doubles
    assert flat.max() / flat.min() < 1.25 and rise > 1.5 * flat.max() / flat.min()


def test_a_kv_cache_that_grows_with_the_batch_bends_both_ratios():
    """With 512 tokens per sequence in the KV cache the target's attention reads grow with the
    batch (48 layers' cache against the drafter's one): the dense ratio still rises past its
    ridge, but less, and the MoE drafter's falls once its reads saturate."""
    c0, c512 = _curves(0), _curves(512)
    at = {b: i for i, b in enumerate(BATCHES)}
    dense = c512[stepmodel.DENSE_DRAFTER]
    assert dense[at[4096]] > 2 * dense[at[64]]
    assert dense[at[4096]] / dense[at[64]] < c0[stepmodel.DENSE_DRAFTER][at[4096]] / \
        c0[stepmodel.DENSE_DRAFTER][at[64]]
    assert c512[N896][at[4096]] < c512[N896][at[512]]


def test_an_moe_drafter_that_outweighs_its_target_is_flagged_not_priced():
    """896 experts of Mixtral's width are 315 GB in one layer, several times Mixtral itself: such
    a drafter is not a drafter, so its ratio is NaN (the value kept raw, the reason beside it);
    the same 896 experts of Qwen3-30B's width (8.5 GB) are a drafter of Qwen3-30B (57 GB)."""
    mixtral = stepmodel.study_model_dims("Mixtral-8x7B", "bf16", 1)
    hw = h100()
    rows = stepmodel.draft_ratio_curve(mixtral, hw, 3, [1, 64], lambda b: 8.0, 896, P, 512)
    heavy = [r for r in rows if r["synthetic_drafter"] == N896]
    assert heavy[0]["drafter_gib"] > 290 and heavy[0]["drafter_gib"] > heavy[0]["target_gib"]
    assert all(np.isnan(r["draft_cost"]) and r["draft_cost_raw"] > 0 for r in heavy)
    assert {r["status"] for r in heavy} == {stepmodel.OUTWEIGHS}
    light = [r for r in rows if r["synthetic_drafter"] != N896]
    assert all(r["status"] == "ok" and np.isfinite(r["draft_cost"]) for r in light)
    d, hw = _qwen3_30b_h100()
    qwen = stepmodel.draft_ratio_curve(d, hw, 3, [1], lambda b: 8.0, 896, P, 512)
    assert {r["status"] for r in qwen} == {"ok"}
    assert next(r for r in qwen if r["synthetic_drafter"] == N896)["drafter_gib"] < 9
