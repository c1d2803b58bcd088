import numpy as np
import pytest

from specmoe.sources import published
from specmoe.errors import InputError
from specmoe.routing.overlap import trace_sequence_overlap, window_stats
from specmoe.routing.synth import SynthParams, generate


def test_stickiness_one_keeps_every_expert_and_zero_gives_independence():
    kw = dict(num_experts=64, top_k=4, num_layers=2, skew=0.8, requests=60, steps=40, seed=3)
    same = window_stats(generate(SynthParams(stickiness=1.0, **kw)), shuffle_null=False)
    assert np.allclose(same.overlap, 1.0)
    free = window_stats(generate(SynthParams(stickiness=0.0, **kw)), shuffle_null=False)
    # no stickiness and no topic: tokens draw independently from the same loads
    assert abs(free.overlap.mean() - free.independence.mean()) < 0.01


def test_overlap_rises_with_stickiness_per_layer():
    stick = [0.1, 0.5, 0.9]
    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=3, stickiness=stick,
                              requests=40, steps=50, seed=5))
    ws = window_stats(tr, shuffle_null=False)
    assert np.all(np.diff(ws.overlap[:, 0]) > 0.2)
    # s + (1 - s) * (chance that a fresh draw hits a dropped expert): at least s
    assert np.all(ws.overlap[:, 0] >= np.array(stick) - 0.02)


def test_committed_sequence_is_one_chain():
    """The committed sequence continues across windows: its overlap at d = 1 is the process's,
    as inside windows, and a topic keeps overlap above independence at d = 8."""
    tr = generate(SynthParams(num_experts=64, top_k=4, num_layers=2, skew=0.5, stickiness=0.3,
                              topic_spread=1.5, topic_switch=0.05, requests=60, steps=40,
                              accept_prob=0.6, seed=8))
    ws = window_stats(tr, shuffle_null=False)
    seq, pairs = trace_sequence_overlap(tr, 8)
    assert pairs[0] > 5000
    assert abs(seq[:, 0].mean() - ws.overlap[:, 0].mean()) < 0.02
    assert seq[:, 7].mean() > ws.independence.mean() + 0.05
    assert np.all(np.diff(seq.mean(axis=0)) < 0.005)  # falls (up to noise) with distance


def test_the_closed_form_truth_of_uniform_loads_is_what_a_long_trace_measures():
    """synth.uniform_truth, which the baselines' coverage test takes as the truth: a trace of
    400 requests from the process with uniform loads measures its step-1 overlap along the
    committed sequence and its independence baseline (within 3 standard errors, ~0.002)."""
    from specmoe.routing.synth import uniform_truth

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=3, stickiness=0.4, skew=0.0,
                              requests=400, steps=30, accept_prob=0.7, seed=2))
    t = uniform_truth(32, 4, 0.4)
    seq, _ = trace_sequence_overlap(tr, 1)
    assert seq[:, 0].mean() == pytest.approx(t["step1"], abs=0.002)
    assert window_stats(tr, shuffle_null=False).independence.mean() == pytest.approx(
        t["independent"], abs=0.0005)


@pytest.mark.parametrize("study,n,k", [("Qwen3-30B", 128, 8), ("Mixtral-8x7B", 8, 2)])
def test_fitted_process_matches_the_published_curve(study, n, k):
    """Fitted from the study's Table 17 alone, the generator's committed-sequence overlap is
    within 0.02 of the published curve at d = 1..4, and its independence baseline close."""
    pub = published.load("overlap_by_distance").set_index("model").loc[study]
    tr = generate(SynthParams(num_experts=n, top_k=k, num_layers=4, fit_to=study, requests=64,
                              steps=48, seed=1))
    seq, _ = trace_sequence_overlap(tr, 4)
    want = pub[[f"step{d}" for d in range(1, 5)]].to_numpy(float)
    np.testing.assert_allclose(seq.mean(axis=0), want, atol=0.02)
    ws = window_stats(tr, shuffle_null=False)
    assert abs(ws.independence.mean() - pub["independent"]) < 0.02
    assert tr.meta["generator"]["fit_to"] is None  # the fitted parameters are recorded


def test_fit_to_and_fitted_parameters_are_exclusive():
    with pytest.raises(InputError, match="set them or fit_to"):
        SynthParams.from_dict({"fit_to": "Qwen3-30B", "skew": 1.0})
    with pytest.raises(InputError, match="no published overlap curve"):
        SynthParams(fit_to="GPT-5").fitted()


def test_a_trace_from_its_models_fit_file_equals_one_fitted_in_its_own_job(tmp_path):
    """Rule synth_fit fits a model's process once and each of its traces (one per K) reads the
    file: every trace equals, bit for bit, the one its job made when it fitted the process
    itself, and the fit's params are what the fit reads of the generator (fit_to, N, k) only."""
    from types import SimpleNamespace

    from specmoe.names import FIT_KEYS
    from specmoe.provenance import read_json
    from specmoe.routing.trace import read_trace
    from specmoe.stages.analysis import synth_fit_stage, synth_trace

    model = {"name": "s", "source": "synthetic",
             "synthetic": {"num_experts": 8, "top_k": 2, "num_layers": 2, "requests": 6,
                           "steps": 5, "fit_to": "Mixtral-8x7B", "seed": 4}}
    fit_file = tmp_path / "fit.json"
    synth_fit_stage({}, SimpleNamespace(json=fit_file), SimpleNamespace(
        fit={k: model["synthetic"][k] for k in FIT_KEYS}))
    fit = read_json(fit_file)
    assert {k: fit[k] for k in FIT_KEYS} == {"fit_to": "Mixtral-8x7B", "num_experts": 8,
                                             "top_k": 2}
    assert fit["provenance"]["stage"] == "synth_fit"
    for k in (3, 5):
        run = {"model": "s", "drafter": "synth", "k": k, "dataset": "synth"}
        synth_trace(model, run, tmp_path / f"own{k}.parquet")
        synth_trace(model, run, tmp_path / f"read{k}.parquet", fit)
        own, read = read_trace(tmp_path / f"own{k}.parquet"), read_trace(tmp_path / f"read{k}.parquet")
        np.testing.assert_array_equal(own.experts, read.experts)
        for col in own.columns:
            np.testing.assert_array_equal(own.columns[col], read.columns[col])
        assert own.meta["generator"] == read.meta["generator"]


def test_a_fit_of_another_generator_is_refused_in_one_line():
    fit = SynthParams(num_experts=8, top_k=2, fit_to="Mixtral-8x7B").process_fit()
    with pytest.raises(InputError, match=r"of another generator: num_experts 8 \(this one: 16\)"):
        SynthParams(num_experts=16, top_k=4, fit_to="Mixtral-8x7B").with_fit(
            {**fit, "top_k": 4})
    with pytest.raises(InputError, match="has no fit_to"):
        SynthParams(num_experts=8, top_k=2, stickiness=0.3).with_fit(fit)
    with pytest.raises(InputError, match="has no stickiness"):
        SynthParams(num_experts=8, top_k=2, fit_to="Mixtral-8x7B").with_fit(
            {k: v for k, v in fit.items() if k != "stickiness"})


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


def test_a_tie_to_overlap_tilts_acceptance_without_raising_it():
    """The tie was centred on the stickiness s (0.167 for Qwen3-30B's fit) rather than the
    process's mean overlap at distance 1 (0.43): at the default configuration's tie of 3 every
    draft of synth-fine was accepted (1.00 / 1.00 / 1.00 against 0.8 / 0.56 / 0.36), so its
    accepted vs rejected comparison had no rejected arm. With the tie, acceptance stays near
    accept_prob and rises with the window's overlap."""
    from specmoe.routing.overlap import row_overlaps
    from specmoe.routing.trace import ACCEPTED, FIRST_REJECTED

    rates = {}
    for tie in (0.0, 3.0):
        # a process like Qwen3-30B's fit: stickiness 0.167, overlap at distance 1 about 0.4
        p = SynthParams(num_experts=128, top_k=8, num_layers=6, skew=1.0, stickiness=0.167,
                        topic_spread=1.5, topic_switch=0.05, requests=48, steps=48,
                        accept_prob=[0.8, 0.7, 0.65], accept_overlap_tie=tie, seed=1)
        tr = generate(p)
        a = tr.columns["accepted"][tr.columns["position"] == 0]
        rates[tie] = np.array([(a >= j).mean() for j in (1, 2, 3)])
    assert rates[0.0] == pytest.approx([0.8, 0.56, 0.364], abs=0.03)
    assert rates[3.0] == pytest.approx(rates[0.0], abs=0.06)
    consec, _ = row_overlaps(tr)
    st, pos = tr.columns["status"], tr.columns["position"]
    at1 = pos == 1
    assert consec[at1 & (st == ACCEPTED)].mean() > consec[at1 & (st == FIRST_REJECTED)].mean()


def test_the_method_states_the_centre_the_tie_uses():
    """docs/method.md's synthetic acceptance centres the tie where generate does (a centre per
    draft position, solved so P(a >= j) stays the product of accept_prob), not on the stickiness s
    or the mean overlap."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "method.md").read_text()
    windows = text.split("## Synthetic routing")[1].split("- Windows:")[1].split("\n\n")[0]
    assert "centre c_j" in windows and "overlap minus s)" not in windows
    assert "expected_overlap" not in windows


def test_a_tie_keeps_the_configured_acceptance_where_it_nears_one():
    """The tie added tie * (ov_j - mean overlap) and clipped the probability to [0, 1]: near an
    acceptance of 1 the clip cut more than the tilt added, and accept_prob 0.95 / 0.9 / 0.9 at
    tie 3 gave P(a >= j) 0.885 / 0.758 / 0.654 (four layers of Qwen3-30B's fit) for 0.95 /
    0.855 / 0.770. Its centres are now calibrated per position so that P(a >= j) stays the
    product of accept_prob, and a seed still gives the same acceptance on every run."""
    kw = dict(num_experts=128, top_k=8, num_layers=4, skew=0.896, stickiness=0.1675,
              topic_spread=1.742, topic_switch=0.0444, accept_prob=[0.95, 0.9, 0.9],
              accept_overlap_tie=3.0)
    tr = generate(SynthParams(requests=300, steps=48, seed=5, **kw))
    a = tr.columns["accepted"][tr.columns["position"] == 0]
    assert [(a >= j).mean() for j in (1, 2, 3)] == pytest.approx([0.95, 0.855, 0.7695], abs=0.01)
    small = SynthParams(**{**kw, "num_experts": 32, "top_k": 4}, requests=4, steps=5, seed=5)
    np.testing.assert_array_equal(generate(small).columns["accepted"],
                                  generate(small).columns["accepted"])


@pytest.mark.parametrize("kw,msg", [
    ({"top_k": 9, "num_experts": 8}, "exceeds"),
    ({"top_k": 5, "num_experts": 8}, ">= 2\\*top_k"),
    ({"stickiness": 1.5}, "stickiness"),
    ({"k_draft": 0}, "k_draft"),
    ({"stickiness": [0.1, 0.2]}, "2 values for 8 layers"),
    # each passed validate: a NaN or infinity passes every comparison, and the generator failed
    # with numpy's errors (or, for the tie, wrote a trace with every draft rejected)
    ({"accept_overlap_tie": float("nan")}, "accept_overlap_tie must be a finite"),
    ({"skew": float("nan")}, "skew must be a finite"),
    ({"topic_spread": float("inf")}, "topic_spread must be a finite"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"vocab_size": 1}, "vocab_size"),
    ({"seed": -1}, "seed must be >= 0"),
    ({"categories": "ab"}, "categories must be a list"),
    ({"categories": ["a", 1]}, "categories must be a list"),
    ({"requests": 2.5}, "requests must be an integer"),
    ({"num_experts": 2**32 + 1}, "does not fit"),
])
def test_bad_parameters(kw, msg):
    with pytest.raises(InputError, match=msg):
        SynthParams(**kw).validate()


def test_expert_ids_past_uint16_are_not_wrapped(tmp_path):
    """num_experts=70000 was validated and its ids stored as uint16: 70000 experts drawn as ids
    0..65535 (an id past 65535 wrapped to a small one). The trace's own dtype holds them and they
    survive a write and a read."""
    from specmoe.routing.trace import read_trace, write_trace

    tr = generate(SynthParams(num_experts=70000, top_k=8, num_layers=1, requests=4, steps=4,
                              skew=0.0, seed=0))
    assert tr.experts.max() >= 2**16 and tr.experts.max() < 70000
    write_trace(tmp_path / "t.parquet", tr)
    np.testing.assert_array_equal(read_trace(tmp_path / "t.parquet").experts, tr.experts)


def test_a_negative_tie_is_a_tie_too():
    """accept_overlap_tie tilts acceptance towards windows that keep their experts, a negative
    one away from them; either way the centres keep each draft's acceptance at accept_prob."""
    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=2, k_draft=3, stickiness=0.4,
                              accept_prob=[0.8, 0.7, 0.65], accept_overlap_tie=-3.0,
                              requests=200, steps=30, seed=1))
    a = tr.columns["accepted"][tr.columns["position"] == 0]
    assert [(a >= j).mean() for j in (1, 2, 3)] == pytest.approx([0.8, 0.56, 0.364], abs=0.02)


def test_unknown_parameter_named():
    with pytest.raises(InputError, match="bogus"):
        SynthParams.from_dict({"bogus": 1})


def test_an_extreme_skew_still_routes_each_token_to_k_different_experts():
    """Zipf weights rank^-skew underflowed to 0 past a skew of a few hundred, fewer than k
    experts were left to draw, and 30 of 128 rows at skew 400 routed to one expert twice (the
    trace was written, and its independence baseline came out above 1)."""
    for skew in (400.0, 1e6):
        tr = generate(SynthParams(num_experts=128, top_k=8, num_layers=1, k_draft=3, skew=skew,
                                  requests=4, steps=8, seed=0))
        assert (np.diff(np.sort(tr.experts, axis=2), axis=2) > 0).all()
        tr.validate()
