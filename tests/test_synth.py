import numpy as np
import pytest

from specmoe.errors import InputError
from specmoe.overlap import window_stats
from specmoe.synth import SynthParams, generate


@pytest.mark.parametrize("s", [0.0, 0.3, 0.7])
def test_stickiness_is_the_step1_overlap(s):
    tr = generate(SynthParams(num_experts=64, top_k=4, num_layers=4, stickiness=s, skew=0.5,
                              requests=50, steps=80, seed=3))
    ws = window_stats(tr, shuffle_seed=None)
    # E[overlap(j, j+1)] = s exactly for this generator; 4 layers x 12000 pairs -> SE ~ 0.001.
    assert abs(ws.overlap[:, 0].mean() - s) < 0.01


def test_per_layer_stickiness():
    stick = [0.1, 0.5, 0.9]
    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=3, stickiness=stick,
                              requests=40, steps=50, seed=5))
    ws = window_stats(tr, shuffle_seed=None)
    np.testing.assert_allclose(ws.overlap[:, 0], stick, atol=0.02)


def test_same_seed_same_trace():
    p = SynthParams(num_layers=2, requests=4, steps=5, seed=11)
    a, b = generate(p), generate(p)
    np.testing.assert_array_equal(a.experts, b.experts)
    np.testing.assert_array_equal(a.columns["accepted"], b.columns["accepted"])
    c = generate(SynthParams(num_layers=2, requests=4, steps=5, seed=12))
    assert not np.array_equal(a.experts, c.experts)


def test_sets_are_distinct_and_in_range(small_trace):
    e = small_trace.experts.astype(int)
    assert e.max() < 32
    srt = np.sort(e, axis=-1)
    assert (np.diff(srt, axis=-1) > 0).all()


def test_acceptance_rates_follow_accept_prob():
    tr = generate(SynthParams(num_layers=1, requests=100, steps=100, accept_prob=[0.9, 0.5, 0.2],
                              seed=2))
    first = tr.columns["position"] == 0
    a = tr.columns["accepted"][first]
    assert abs((a >= 1).mean() - 0.9) < 0.02
    assert abs((a >= 2).mean() - 0.45) < 0.02
    assert abs((a >= 3).mean() - 0.09) < 0.02


@pytest.mark.parametrize("kw,msg", [
    ({"top_k": 9, "num_experts": 8}, "exceeds"),
    ({"top_k": 5, "num_experts": 8}, ">= 2\\*top_k"),
    ({"stickiness": 1.5}, "stickiness"),
    ({"k_draft": 0}, "k_draft"),
    ({"stickiness": [0.1, 0.2]}, "2 values for 8 layers"),
])
def test_bad_parameters(kw, msg):
    with pytest.raises(InputError, match=msg):
        SynthParams(**kw).validate()


def test_unknown_parameter_named():
    with pytest.raises(InputError, match="bogus"):
        SynthParams.from_dict({"bogus": 1})
