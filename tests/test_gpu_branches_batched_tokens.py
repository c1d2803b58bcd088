"""A serving series' max_num_batched_tokens against its widest step on a GPU, refused when the
configuration loads (Config.graph_problems): vLLM's scheduler spends K + 1 tokens a request (and
a draft model's extra input slot) from that budget, so below B (K + 1) fewer requests than the
point's batch verify each step while the target without SD decodes all of them."""

from __future__ import annotations

import dataclasses

import pytest

from specmoe.checks.preflight import batched_tokens
from specmoe.errors import InputError
from test_config import resolved


def _budget(tokens):
    def edit(cfg):
        cfg["sweep"]["engine_args"] = {**(cfg["sweep"].get("engine_args") or {}),
                                       "max_num_batched_tokens": tokens}
    return edit


def test_a_budget_below_the_step_at_the_largest_batch_is_refused_on_load():
    """sweep.engine_args max_num_batched_tokens 512 with paper.yaml's schedule (batch 128)
    loaded cleanly; at K = 7 vLLM would verify about 56 requests a step of the 128. Each K whose
    step it stops is one line, naming the models; a draft model's series counts its extra
    slot."""
    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", _budget(512))
    lines = str(err.value).splitlines()
    c = resolved("config/paper.yaml")
    for j in (j for j in c.gpu_jobs() if j.rule == "sweep_sd"):
        draft = c.drafters[j.drafter].served_alone
        need = 128 * (int(j.k) + (2 if draft else 1))
        assert c.series_batch(j.model) == 128
        mine = [ln for ln in lines if j.model in ln and f"below the {need} tokens of a step at "
                f"batch 128 with K = {j.k} " in ln]
        if need <= 512:  # MTP at K = 3: 128 x 4 tokens fit
            assert not mine, (j, lines)
            continue
        assert len(mine) == 1, (j, lines)
        assert "max_num_batched_tokens 512 is below" in mine[0]
        assert "(sweep.engine_args)" in mine[0]
    # a budget of the widest step loads
    widest = max(128 * (int(j.k) + (2 if c.drafters[j.drafter].served_alone else 1))
                 for j in c.gpu_jobs() if j.rule == "sweep_sd")
    resolved("config/paper.yaml", _budget(widest))


def test_vllms_default_budget_on_the_models_gpu_is_the_one_checked(monkeypatch):
    """Without max_num_batched_tokens the check reads vLLM's server default for the model's GPU
    (preflight.batched_tokens: 2048 below 70 GiB): on an H100 taken as a 40 GiB GPU a series at
    batch 256 with K = 8 (2304 tokens a step) is refused, as vLLM's server would run it short;
    at paper.yaml's batch 128 (at most 128 x 9 = 1152 tokens) nothing is."""
    def small(cfg):
        cfg["hardware"]["H100"] = {**cfg["hardware"]["H100"], "memory_gib": 40,
                                   "cuda_memory_mib": 40960}

    assert batched_tokens(40, False, {}) == 2048
    c = resolved("config/paper.yaml", small)
    assert not c.graph_problems()
    j = next(j for j in c.gpu_jobs() if j.rule == "sweep_sd" and c.hardware_of(j.model) == "H100"
             and not c.drafters[j.drafter].served_alone)
    monkeypatch.setattr(c, "series_batch", lambda name: 256)
    problem = c._step_budget_problem(dataclasses.replace(j, k=8), {})
    assert problem == (
        "max_num_batched_tokens 2048 (vLLM's default on H100's 40.00 GiB (40,960 MiB as CUDA "
        "reports it)) is below the 2304 tokens of a step at batch 256 with K = 8 (K + 1 = 9 "
        "tokens a request): vLLM would verify fewer requests a step than the batch; set "
        "max_num_batched_tokens to at least 2304")
    assert c._step_budget_problem(dataclasses.replace(j, k=8),
                                  {"max_num_batched_tokens": 2304}) is None
