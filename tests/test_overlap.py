import numpy as np
import pytest

from specmoe.errors import InputError
from specmoe.routing.overlap import reference_stats, row_overlaps, window_stats
from specmoe.routing.synth import SynthParams, generate
from specmoe.routing.trace import Trace
from specmoe.routing.unique import batch_unique, independent_unique, uniform_unique, window_unique_table


def test_compiled_pass_equals_plain_python(small_trace):
    ws = window_stats(small_trace)
    starts, lengths = small_trace.windows()
    ref = reference_stats(small_trace.experts, starts, lengths, small_trace.k_draft, 32)
    np.testing.assert_allclose(ws.overlap, ref["overlap"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ws.q, ref["q"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ws.unique, ref["unique"], rtol=0, atol=1e-12)


def test_loads_and_unions_by_brute_force(small_trace):
    ws = window_stats(small_trace, shuffle_null=False)
    e = small_trace.experts
    starts, lengths = small_trace.windows()
    for layer in range(small_trace.num_layers):
        counts = np.bincount(e[:, layer].ravel(), minlength=32)
        np.testing.assert_allclose(ws.q[layer], counts / len(small_trace))
        unions = [set(e[s:s + n, layer].ravel().tolist()) for s, n in zip(starts, lengths)]
        assert abs(ws.unique[layer] - np.mean([len(u) for u in unions])) < 1e-12
        used = np.zeros(32)
        for u in unions:
            used[list(u)] += 1
        np.testing.assert_allclose(ws.used[layer], used / len(unions))
    assert abs(ws.q.sum(axis=1) - 4).max() < 1e-12
    np.testing.assert_allclose(ws.independence, (ws.q ** 2).sum(axis=1) / 4)


def test_shuffle_null_mixes_distances(small_trace):
    """Shuffling positions inside a window makes every distance carry the pair-weighted mean."""
    ws = window_stats(small_trace, shuffle_null=True)
    expected = (ws.overlap * ws.pairs).sum(axis=1) / ws.pairs.sum()
    for d in range(ws.k_draft):
        np.testing.assert_allclose(ws.shuffle[:, d], expected, atol=0.02)
    # Learned locality: step-1 overlap beats the shuffle null, which beats step K.
    assert (ws.overlap[:, 0] > ws.shuffle[:, 0] + 0.05).all()
    assert (ws.overlap[:, -1] < ws.shuffle[:, -1]).all()


def test_partial_windows_count_pairs_not_unions():
    e = np.array([[[0, 1]], [[1, 2]], [[2, 3]],   # window of 3 (K=2): full
                  [[0, 1]], [[0, 2]]], np.uint8)   # window of 2: partial
    cols = {"request": np.array([0, 0, 0, 1, 1]), "step": np.zeros(5, int),
            "position": np.array([0, 1, 2, 0, 1]), "status": np.zeros(5, int)}
    tr = Trace(experts=e, columns=cols, num_experts=4, k_draft=2)
    ws = window_stats(tr, shuffle_null=False)
    assert ws.pairs.tolist() == [3, 1]
    np.testing.assert_allclose(ws.overlap[0], [(1 + 1 + 1) / 6, 0 / 2])
    assert ws.n_full_windows == 1 and ws.unique[0] == 4


def test_row_overlaps(small_trace):
    consec, anchor = row_overlaps(small_trace)
    pos = small_trace.columns["position"]
    assert np.isnan(consec[pos == 0]).all() and not np.isnan(consec[pos > 0]).any()
    np.testing.assert_allclose(consec[pos == 1], anchor[pos == 1])
    e = small_trace.experts
    i = int(np.flatnonzero(pos == 2)[5])
    want = np.mean([len(set(e[i, l]) & set(e[i - 1, l])) / 4 for l in range(3)])
    assert abs(consec[i] - want) < 1e-12


def test_unique_formulas():
    assert uniform_unique(128, 8, 1) == 8
    assert abs(uniform_unique(128, 8, 4) - 128 * (1 - (120 / 128) ** 4)) < 1e-12
    q = np.full(128, 8 / 128)
    assert abs(independent_unique(q, 4) - uniform_unique(128, 8, 4)) < 1e-9
    # an expert used by every window is used by every batch
    assert batch_unique(np.array([0.0, 1.0, 0.5]), 2) == 1 + 0 + 0.75


def test_batch_unique_matches_sampled_batches():
    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=2, stickiness=0.5,
                              requests=100, steps=40, seed=9))
    ws = window_stats(tr, shuffle_null=False)
    rows = window_unique_table(ws.used, ws.q, 32, 4, 3, [4])
    starts, lengths = tr.windows()
    rng = np.random.default_rng(0)
    sampled = []
    for _ in range(2000):
        pick = rng.choice(starts.size, 4, replace=False)
        sampled.append(np.mean([len({x for w in pick for x in
                                     tr.experts[starts[w]:starts[w] + 4, layer].ravel().tolist()})
                                for layer in range(2)]))
    assert abs(np.mean(sampled) - rows[0]["verify_empirical"]) < 0.15
    assert rows[0]["verify_empirical"] < rows[0]["verify_independent"] < rows[0]["verify_uniform"] + 1e-9


def test_small_samples_are_marked_where_unseen_experts_could_matter():
    """128 experts with a long tail of rare ones: 30 windows see few of them, so large batches
    (which would reach the unseen ones) are marked; 4,000 windows are enough."""
    tr = generate(SynthParams(num_experts=128, top_k=8, num_layers=1, skew=1.2, stickiness=0.3,
                              requests=10, steps=3, seed=4))
    ws = window_stats(tr, shuffle_null=False)
    rows = window_unique_table(ws.used, ws.q, 128, 8, 3, [1, 64], by_request=_by_request(tr))
    assert ws.n_full_windows == 30
    small, big = rows
    assert not small["verify_empirical_reliable"] and not big["verify_empirical_reliable"]
    # a larger batch reaches more of the unseen tail: it needs a larger sample
    assert big["windows_needed"] > small["windows_needed"] > ws.n_full_windows
    assert big["verify_empirical_missing"] > small["verify_empirical_missing"] > 0
    many = generate(SynthParams(num_experts=128, top_k=8, num_layers=1, skew=1.2, stickiness=0.3,
                                requests=200, steps=20, seed=4))
    ws2 = window_stats(many, shuffle_null=False)
    rows2 = window_unique_table(ws2.used, ws2.q, 128, 8, 3, [1], by_request=_by_request(many))
    assert rows2[0]["verify_empirical_reliable"] is True
    with pytest.raises(InputError, match="not the one of `used`"):
        window_unique_table(ws2.used, ws2.q, 128, 8, 3, [1], by_request=_by_request(tr))


def _by_request(tr):
    """A trace's full windows by request, as the overlap stage gives them to the unique table."""
    from specmoe.routing.overlap import request_unique

    _, windows, use = request_unique(tr, np.unique(tr.columns["request"]))
    return use, windows


def test_a_small_sample_that_falls_short_of_the_process_is_not_marked_reliable(tmp_path):
    """The empirical unique experts of a batch, sum_e 1 - (1 - u_e)^B with u_e the share of
    windows using e, is convex in u_e: on 8 requests x 16 steps of Qwen3-30B's fitted process it
    falls 4-8% short at B = 8 (against 2,000 requests x 48 steps), yet the Good-Turing bound,
    which counts only experts the sample never saw, marked the cell reliable against the 2%
    tolerance, and the cost model drew that TE as sampled well enough. The overlap stage's
    table now adds the requests' jackknife estimate of that bias to the bound: the small trace
    is unreliable at B = 8, and one of the default run's size (112 requests x 18 steps) stays
    reliable at every batch size."""
    import json

    from specmoe.routing.trace import write_trace
    from specmoe.stages.analysis import overlap_stage

    class Files(dict):
        __getattr__ = dict.get

    class Params:
        batch_sizes, shuffle_null = [1, 8, 128], True

    fit = dict(skew=0.896, stickiness=0.1675, topic_spread=1.742, topic_switch=0.0444)
    cells = {}
    for requests, steps in ((8, 16), (112, 18)):
        write_trace(tmp_path / "t.parquet", generate(SynthParams(
            num_experts=128, top_k=8, num_layers=4, requests=requests, steps=steps,
            accept_prob=[0.8, 0.7, 0.65], seed=3, **fit)))
        overlap_stage(Files(trace=str(tmp_path / "t.parquet")),
                      Files(json=str(tmp_path / "o.json")), Params())
        table = json.loads((tmp_path / "o.json").read_text())["unique_by_batch"]
        cells[requests] = {r["batch"]: r for r in table}
    small = cells[8][8]
    assert not small["verify_empirical_reliable"]
    assert small["verify_empirical_missing"] < 0.02 * small["verify_empirical"]  # unseen: few
    assert small["verify_empirical_bias"] < -0.03 * small["verify_empirical"]
    assert small["windows_needed"] > 8 * 16
    assert all(r["verify_empirical_reliable"] for r in cells[112].values())


def test_repetitive_windows_are_flagged_and_can_be_left_out():
    from specmoe.routing.overlap import overlap_by_status, repetitive_windows, select_windows
    from specmoe.routing.trace import Trace, status_for

    # one request, three windows of K+1 = 3 tokens: a clean one, one repeating a token inside,
    # and one whose committed token repeats the previous step's
    tokens = [[5, 6, 7], [8, 9, 9], [8, 1, 2]]
    pos = np.tile(np.arange(3, dtype=np.int8), 3)
    acc = np.repeat(np.array([2, 1, 0], np.int8), 3)
    cols = {"request": np.zeros(9, np.int32), "step": np.repeat(np.arange(3, dtype=np.int32), 3),
            "position": pos, "accepted": acc, "status": status_for(pos, acc),
            "token_id": np.array(tokens, np.int32).ravel()}
    experts = np.arange(9 * 2).reshape(9, 1, 2) % 6
    tr = Trace(experts=experts, columns=cols, num_experts=6, k_draft=2)
    assert repetitive_windows(tr).tolist() == [False, True, True]
    clean = select_windows(tr, np.array([True, False, False]))
    assert len(clean) == 3 and clean.columns["token_id"].tolist() == [5, 6, 7]
    by = overlap_by_status(tr)
    assert {(r["draft_position"], r["status"]) for r in by} == {
        (1, "accepted"), (2, "accepted"), (1, "first_rejected"), (2, "first_rejected"),
        (2, "after_rejection")}


def _random_trace(seed, n_experts, top_k, layers, k_draft, requests=30):
    """Random routing with some stickiness and windows of every length 1..K+1 (request ends)."""
    rng = np.random.default_rng(seed)
    rows, req, step, pos = [], [], [], []
    for r in range(requests):
        prev = rng.permutation(n_experts)[:top_k]
        for s in range(int(rng.integers(1, 6))):
            for j in range(int(rng.integers(1, k_draft + 2))):
                layer_sets = []
                for _ in range(layers):
                    keep = prev[rng.random(top_k) < 0.4]
                    rest = np.setdiff1d(rng.permutation(n_experts), keep, assume_unique=True)
                    layer_sets.append(np.concatenate([keep, rng.permutation(rest)[:top_k - keep.size]]))
                prev = layer_sets[-1]
                rows.append(layer_sets)
                req.append(r), step.append(s), pos.append(j)
    dtype = np.uint8 if n_experts <= 256 else np.uint16
    cols = {"request": np.array(req, np.int32), "step": np.array(step, np.int32),
            "position": np.array(pos, np.int8), "status": np.zeros(len(req), np.int8),
            "token_id": np.arange(len(req), dtype=np.int32)}
    return Trace(experts=np.array(rows, dtype), columns=cols, num_experts=n_experts,
                 k_draft=k_draft)


@pytest.mark.parametrize("n_experts,top_k,layers,k_draft", [
    (8, 2, 3, 3), (64, 6, 2, 5), (128, 8, 2, 3), (130, 8, 2, 7), (256, 8, 2, 1), (384, 8, 2, 4)])
def test_compiled_pass_equals_plain_python_on_random_traces(n_experts, top_k, layers, k_draft):
    """Every expert count the bitmask words handle: one group of 128 ids, several groups, uint16
    ids; windows of every length."""
    tr = _random_trace(n_experts + k_draft, n_experts, top_k, layers, k_draft)
    starts, lengths = tr.windows()
    assert lengths.min() < k_draft + 1 == lengths.max()
    ws = window_stats(tr, shuffle_null=False)
    ref = reference_stats(tr.experts, starts, lengths, k_draft, n_experts)
    np.testing.assert_array_equal(ws.overlap, ref["overlap"])
    np.testing.assert_array_equal(ws.q, ref["q"])
    np.testing.assert_array_equal(ws.unique, ref["unique"])


def test_a_written_trace_read_back_gives_the_same_statistics(tmp_path):
    """The statistics of a trace written and read back are those of the trace in memory (the
    file's one reader is read_trace: its piece-by-piece reader, iter_trace, is gone)."""
    from specmoe.routing.trace import read_trace, write_trace

    from specmoe.routing.trace import status_for

    tr = _random_trace(5, 130, 4, 2, 3, requests=40)
    _, lengths = tr.windows()  # a trace written has acceptance: here every draft accepted
    tr.columns["accepted"] = np.repeat(lengths - 1, lengths).astype(np.int8)
    tr.columns["status"] = status_for(tr.columns["position"], tr.columns["accepted"])
    write_trace(tmp_path / "t.parquet", tr)
    whole = window_stats(tr, shuffle_null=True)
    read = window_stats(read_trace(tmp_path / "t.parquet"), shuffle_null=True)
    for name in ("overlap", "shuffle", "q", "unique", "used", "pairs"):
        np.testing.assert_array_equal(getattr(read, name), getattr(whole, name))
    assert (read.n_windows, read.n_full_windows) == (whole.n_windows, whole.n_full_windows)


@pytest.mark.parametrize("n_experts,top_k,max_d", [(8, 2, 8), (130, 8, 4), (384, 8, 8)])
def test_sequence_overlap_equals_plain_python(n_experts, top_k, max_d):
    """Overlap along sequences: every pair of tokens d apart inside one sequence, none across
    sequences; sequences shorter than d give no pair."""
    from specmoe.routing.overlap import sequence_overlap_rows

    tr = _random_trace(n_experts, n_experts, top_k, 2, 3, requests=25)
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 20, 12)
    lengths[-1] = len(tr) - lengths[:-1].sum()
    assert lengths[-1] > 0
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
    got, pairs = sequence_overlap_rows(tr.experts, starts, lengths, n_experts, max_d)
    for layer in range(2):
        for d in range(1, max_d + 1):
            vals = [len(set(tr.experts[s + t, layer]) & set(tr.experts[s + t + d, layer])) / top_k
                    for s, n in zip(starts, lengths) for t in range(n - d)]
            assert pairs[d - 1] == len(vals)
            assert got[layer, d - 1] == pytest.approx(np.mean(vals), abs=1e-12)


def test_committed_sequence_takes_position_zero_and_accepted_drafts():
    """Step 0 accepts 2 of 3 drafts, step 1 none: the committed sequence is c0 a1 a2 | c0' and the
    rejected drafts are left out; each request is its own sequence."""
    from specmoe.routing.overlap import committed_sequences, trace_sequence_overlap
    from specmoe.routing.trace import status_for

    req = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    step = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0])
    pos = np.tile(np.arange(4), 3)
    acc = np.array([2] * 4 + [0] * 4 + [3] * 4)
    sets = [[0, 1], [0, 2], [0, 3], [5, 6], [0, 4], [7, 6], [7, 5], [7, 4], [1, 2], [1, 3],
            [1, 4], [1, 5]]
    tr = Trace(experts=np.array(sets, np.uint8)[:, None, :], num_experts=8, k_draft=3,
               columns={"request": req, "step": step, "position": pos,
                        "status": status_for(pos, acc)})
    rows, starts, lengths = committed_sequences(tr)
    assert rows.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert starts.tolist() == [0, 4] and lengths.tolist() == [4, 4]
    seq, pairs = trace_sequence_overlap(tr, 3)
    # request 0: {0,1}{0,2}{0,3}{0,4}: every pair shares expert 0; request 1 likewise expert 1
    assert pairs.tolist() == [6, 4, 2]
    np.testing.assert_allclose(seq[0], [0.5, 0.5, 0.5])


def test_window_intervals_resample_requests_around_the_window_statistics(small_trace):
    """The request bootstrap of the window statistics: its point estimates are window_stats'
    (layer means, the same shuffle), each interval contains its estimate, a trace with stickiness
    is above its shuffle null and decays, and repeating every request's windows (no new
    requests) leaves the intervals where they were."""
    from dataclasses import replace

    from specmoe.routing.overlap import window_intervals

    ws = window_stats(small_trace, shuffle_null=True)
    ci = window_intervals(small_trace, shuffle_null=True)
    np.testing.assert_allclose(ci["overlap"], ws.overlap.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(ci["shuffle"], ws.shuffle.mean(axis=0), atol=1e-12)
    assert ci["n_requests"] == 40
    for d in range(small_trace.k_draft):
        assert ci["overlap_low"][d] <= ci["overlap"][d] <= ci["overlap_high"][d]
    assert ci["above_shuffle_low"] > 0 and ci["decay_low"] > 0
    # every window twice, under the same request: the same information, the same intervals
    starts, lengths = small_trace.windows()
    rows = np.concatenate([np.r_[np.arange(s, s + n), np.arange(s, s + n)]
                           for s, n in zip(starts, lengths)])
    cols = {k: v[rows] for k, v in small_trace.columns.items()}
    n_rows = np.concatenate([np.r_[np.full(n, 2 * w), np.full(n, 2 * w + 1)]
                             for w, n in enumerate(lengths)])
    cols["step"] = n_rows.astype(np.int32)  # two windows, each its own step
    twice = replace(small_trace, experts=small_trace.experts[rows], columns=cols, weights=None)
    ci2 = window_intervals(twice, shuffle_null=False)
    np.testing.assert_allclose(ci2["overlap_low"], ci["overlap_low"], atol=1e-12)
    np.testing.assert_allclose([ci2["decay_low"], ci2["decay_high"]],
                               [ci["decay_low"], ci["decay_high"]], atol=1e-12)


def test_window_intervals_of_an_untrained_like_trace_straddle_the_shuffle_null():
    """Routing that is the same vector for every position of a window (the untrained controls'
    clustering) is high but flat inside the window: far above independence, not above the
    within-window shuffle null, no decay."""
    from specmoe.routing.overlap import window_intervals

    rng = np.random.default_rng(0)
    windows, positions, n, k = 300, 4, 32, 4
    base = np.stack([rng.choice(n, k, replace=False) for _ in range(windows)])
    e = np.repeat(base, positions, axis=0)[:, None, :].copy()
    swap = rng.random(e.shape[0]) < 0.3  # each position swaps one expert at random
    for r in np.flatnonzero(swap):
        free = np.setdiff1d(np.arange(n), e[r, 0])
        e[r, 0, rng.integers(k)] = rng.choice(free)
    cols = {"request": np.repeat(np.arange(windows) // 3, positions).astype(np.int32),
            "step": np.repeat(np.arange(windows) % 3, positions).astype(np.int32),
            "position": np.tile(np.arange(positions), windows).astype(np.int8),
            "status": np.zeros(windows * positions, np.int8)}
    tr = Trace(experts=e.astype(np.uint8), columns=cols, num_experts=n, k_draft=3)
    ci = window_intervals(tr, shuffle_null=True)
    assert ci["overlap"][0] > 0.6
    assert ci["above_shuffle_low"] < 0 < ci["above_shuffle_high"]
    assert ci["decay_low"] < 0 < ci["decay_high"]


def _brute_force_shuffle(trace):
    """The within-window shuffle null by enumeration: per layer and distance, the summed
    intersections of each window's pairs averaged over every permutation of its positions."""
    from itertools import permutations

    starts, lengths = trace.windows()
    kd, layers = trace.k_draft, trace.num_layers
    sums = np.zeros((layers, kd))
    for s, n in zip(starts.tolist(), lengths.tolist()):
        perms = list(permutations(range(n)))
        for layer in range(layers):
            sets = [set(trace.experts[s + j, layer].tolist()) for j in range(n)]
            for d in range(1, n):
                sums[layer, d - 1] += sum(len(sets[p[j]] & sets[p[j + d]])
                                          for p in perms for j in range(n - d)) / len(perms)
    return sums


def test_the_shuffle_null_is_its_exact_expectation_over_all_permutations(small_trace):
    """The within-window shuffle null is the mean over every permutation of each window's
    positions (enumerated here), not one random permutation's value."""
    from specmoe.routing.overlap import window_intervals

    ws = window_stats(small_trace, shuffle_null=True)
    want = _brute_force_shuffle(small_trace) / (ws.pairs[None, :] * small_trace.top_k)
    np.testing.assert_allclose(ws.shuffle, want, rtol=0, atol=1e-12)
    ci = window_intervals(small_trace, shuffle_null=True)
    np.testing.assert_allclose(ci["shuffle"], want.mean(axis=0), rtol=0, atol=1e-12)


def test_step1_above_the_exact_null_is_the_window_decay_re_expressed():
    """With full windows of K = 3, step 1 minus the exact null is (2 (o1 - o2) + (o1 - o3)) / 6:
    one contrast of the distances, so it is reported as the share of the temporal overlap
    (step 1 - independence) it certifies, not as a finding beside the decay."""
    from specmoe.routing.overlap import select_windows, trace_sequence_stats, window_intervals

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=2, k_draft=3, skew=0.5,
                              stickiness=0.5, requests=30, steps=20, seed=3))
    tr = select_windows(tr, tr.windows()[1] == 4)
    ci = window_intervals(tr, shuffle_null=True)
    o = ci["overlap"]
    assert ci["above_shuffle"] == pytest.approx((2 * (o[0] - o[1]) + (o[0] - o[2])) / 6)
    # the bias-corrected baseline, as the sequence statistics measure against
    assert ci["independence"] == pytest.approx(trace_sequence_stats(tr)[2]["independence"],
                                               abs=1e-12)
    share = ci["above_shuffle"] / (o[0] - ci["independence"])
    assert ci["above_shuffle_share"] == pytest.approx(share)
    assert ci["above_shuffle_share_low"] <= share <= ci["above_shuffle_share_high"]
    assert 0 < share < 1


def _status_only_trace(windows=600, n=32, k=4, seed=0):
    """Windows of K = 3 whose committed and accepted tokens all route to the window's own experts
    and whose other drafts route at random: overlap depends on acceptance status, not on
    distance, while the share of accepted pairs falls with distance."""
    from specmoe.routing.trace import status_for

    rng = np.random.default_rng(seed)
    base = np.stack([rng.choice(n, k, replace=False) for _ in range(windows)])
    accepted = rng.integers(0, 4, windows)
    pos = np.tile(np.arange(4), windows)
    acc = np.repeat(accepted, 4)
    status = status_for(pos.astype(np.int8), acc.astype(np.int8))
    e = np.stack([base[w] if pos[r] <= acc[r] else rng.choice(n, k, replace=False)
                  for r, w in enumerate(np.repeat(np.arange(windows), 4))])[:, None, :]
    cols = {"request": np.repeat(np.arange(windows) // 6, 4).astype(np.int32),
            "step": np.repeat(np.arange(windows) % 6, 4).astype(np.int32),
            "position": pos.astype(np.int8), "status": status,
            "accepted": acc.astype(np.int8), "n_drafts": np.full(4 * windows, 3, np.int8)}
    return Trace(experts=e.astype(np.uint8), columns=cols, num_experts=n, k_draft=3)


def test_the_distance_contrast_within_acceptance_status_removes_the_status_mix():
    """Overlap set by acceptance status alone: the pooled window decay is positive (pairs far
    apart are more often non-accepted), the contrast among pairs of one status is 0 within its
    interval."""
    from specmoe.routing.overlap import window_intervals

    ci = window_intervals(_status_only_trace(windows=1200), shuffle_null=True)
    assert ci["decay_low"] > 0.05
    assert ci["decay_within_status_low"] < 0 < ci["decay_within_status_high"]
    assert abs(ci["decay_within_status"]) < 0.02


def _preference_trace(requests=60, steps=12, n=64, k=4, seed=0):
    """Each request routes every token to k experts drawn at random from its own 2k: a
    per-request preference, no order along the sequence. All drafts accepted."""
    from specmoe.routing.trace import status_for

    rng = np.random.default_rng(seed)
    own = np.stack([rng.choice(n, 2 * k, replace=False) for _ in range(requests)])
    rows = requests * steps * 4
    req = np.repeat(np.arange(requests), steps * 4)
    e = np.stack([rng.choice(own[r], k, replace=False) for r in req])[:, None, :]
    pos = np.tile(np.arange(4), requests * steps).astype(np.int8)
    acc = np.full(rows, 3, np.int8)
    cols = {"request": req.astype(np.int32),
            "step": np.repeat(np.arange(requests * steps) % steps, 4).astype(np.int32),
            "position": pos, "status": status_for(pos, acc), "accepted": acc,
            "n_drafts": np.full(rows, 3, np.int8)}
    return Trace(experts=e.astype(np.uint8), columns=cols, num_experts=n, k_draft=3)


def test_the_excess_over_independence_has_an_interval_and_a_within_request_baseline():
    """Per-request expert preference without order: step 1 along the sequence is far above the
    pooled independence baseline (its excess's interval above 0) and at the within-request
    baseline (its excess's interval across 0); the within-request baseline is the mean overlap of
    two distinct committed tokens of a request, by brute force, and the pooled baseline is the
    jackknife's bias-corrected one, the trace's without each request in turn."""
    from specmoe.routing.overlap import (committed_sequences, select_requests,
                                         trace_sequence_stats)

    tr = _preference_trace()
    ws = window_stats(tr, shuffle_null=False)
    seq, _, ci = trace_sequence_stats(tr)
    ids = np.unique(tr.columns["request"])
    jack = [window_stats(select_requests(tr, np.array([r])), shuffle_null=False).independence.mean()
            for r in ids]
    corrected = ids.size * ws.independence.mean() - (ids.size - 1) * np.mean(jack)
    assert ci["independence"] == pytest.approx(corrected, abs=1e-12)
    assert ci["independence"] < ws.independence.mean()
    assert ci["excess"] == pytest.approx(float(seq[:, 0].mean()) - ci["independence"])
    assert ci["excess_low"] > 0.1
    assert ci["excess_within_low"] < 0 < ci["excess_within_high"]
    rows, starts, lengths = committed_sequences(tr)
    num = den = 0.0
    for s, n in zip(starts.tolist(), lengths.tolist()):
        sets = [set(tr.experts[rows[s + i], 0].tolist()) for i in range(n)]
        mean = np.mean([len(a & b) for i, a in enumerate(sets) for j, b in enumerate(sets)
                        if i != j]) / tr.top_k
        num, den = num + (n - 1) * mean, den + (n - 1)
    assert ci["within_request"] == pytest.approx(num / den)


def test_routing_findings_are_shown_at_most_5_percent_of_the_time_without_locality():
    """200 simulated traces (fixed seed) whose requests prefer their own experts but route in no
    order (specmoe.measured.rules.null_trace): each finding decided by an interval over requests
    (step 1 above pooled independence, on traces of independent draws from the loads; the decay
    inside windows within acceptance status and over all pairs; the decay along the sequence;
    step 1 above the within-request baseline) is "shown" in at most 5% of them (800 traces gave
    2.4-3.4%: the percentile bootstrap over 40 requests is a little liberal against its
    nominal 2.5%)."""
    from specmoe.measured.rules import finding_rates

    for name, rate in finding_rates(trials=200, seed=11).items():
        assert rate <= 0.05, (name, rate)


def test_looping_requests_are_those_whose_committed_tokens_repeat_with_period_one_or_two(
        small_trace):
    """A request whose committed sequence holds a b a b a b (or a a a a a a) loops; one with
    a b a b a (five tokens) or all-distinct tokens does not; dropping them keeps the others."""
    import dataclasses

    from specmoe.routing.overlap import committed_sequences, looping_requests, select_requests

    rows, starts, lengths = committed_sequences(small_trace)
    tok = np.zeros(len(small_trace), np.int32)
    tok[rows] = np.arange(rows.size) + 100  # nothing repeats
    req = small_trace.columns["request"]
    at = {int(req[rows[s]]): rows[s:s + n] for s, n in zip(starts, lengths)}
    tok[at[3][4:10]] = [1, 2, 1, 2, 1, 2]   # period 2, six tokens: a loop
    tok[at[5][0:6]] = 7                      # period 1: a loop
    tok[at[8][2:7]] = [1, 2, 1, 2, 1]        # five tokens only: not a loop
    tr = dataclasses.replace(small_trace, columns={**small_trace.columns, "token_id": tok})
    loops = looping_requests(tr)
    assert loops.tolist() == [3, 5]
    kept = select_requests(tr, loops)
    assert set(np.unique(kept.columns["request"]).tolist()) == set(np.unique(req).tolist()) - {3, 5}
    assert looping_requests(kept).size == 0


def test_bca_interval_agrees_with_scipys_bca_on_a_skewed_ratio():
    """A ratio of sums over units with a heavy-tailed numerator: the BCa interval from the
    resamples and the jackknife is scipy's BCa interval (up to resampling noise), and it moves
    away from the percentile interval in the direction of the skew."""
    from scipy import stats

    from specmoe.routing.overlap import bca_interval

    rng = np.random.default_rng(3)
    num = rng.lognormal(0, 1.2, 60)
    den = rng.integers(5, 15, 60).astype(float)
    w = rng.multinomial(60, np.full(60, 1 / 60), size=4000).astype(float)
    boot = (w @ num) / (w @ den)
    est = num.sum() / den.sum()
    jack = (num.sum() - num) / (den.sum() - den)
    lo, hi = bca_interval(boot, est, jack)
    ref = stats.bootstrap((num, den), lambda a, b, axis=-1: a.sum(axis) / b.sum(axis),
                          paired=True, vectorized=True, method="BCa", n_resamples=4000,
                          random_state=4).confidence_interval
    width = ref.high - ref.low
    assert abs(lo - ref.low) < 0.08 * width and abs(hi - ref.high) < 0.08 * width
    plo, phi = np.percentile(boot, [2.5, 97.5])
    assert lo > plo and hi > phi  # right-skewed: both ends move up


def test_bca_coverage_of_the_sequence_decay_where_requests_loop():
    """bench/bca_coverage.py at a modest size (200 samples of 112 requests, 400 resamples each):
    where 5% of the population's requests loop, the sequence decay's BCa interval covers the
    population's decay about as often as it says (and at least as often as the percentile
    interval from the same resamples); where a loop is rare (2 in 112, the default run's
    tiny-fine), neither does: a sample that drew no looping request cannot know of them, and
    no interval from it can cover a decay they pull down."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bca_coverage.py"
    r = subprocess.run([sys.executable, str(script), "--trials", "200", "--boot", "400",
                        "--loop-share", str(2 / 112), "0.05", "--json"],
                       capture_output=True, text=True, check=True)
    rare, common = json.loads(r.stdout)
    assert common["bca_coverage"] >= 0.92
    assert common["bca_coverage"] >= common["percentile_coverage"]
    assert rare["bca_coverage"] < 0.91 and rare["percentile_coverage"] < 0.91


def test_overlap_and_acceptance_stages_give_the_same_numbers_on_one_thread_as_on_two(tmp_path):
    """Rules overlap and acceptance claim one core on a local machine (workflow/rules/common.smk:
    analysis_threads) and two on a cluster: their numba-parallel passes must not change a number
    with the thread count. The trace is big enough that every parallel pass splits its work."""
    import json

    import numba

    from specmoe.routing.trace import write_trace
    from specmoe.stages.analysis import acceptance_stage, overlap_stage

    if numba.config.NUMBA_NUM_THREADS < 2:
        raise AssertionError("numba sees one thread: the comparison cannot run")
    tr = generate(SynthParams(num_experts=64, top_k=8, num_layers=4, k_draft=5, skew=0.7,
                              stickiness=0.4, requests=60, steps=40, accept_prob=0.7,
                              accept_overlap_tie=2.0, categories=["a", "b"], seed=3))
    write_trace(tmp_path / "t.parquet", tr)

    class Files(dict):
        __getattr__ = dict.get

    class Params:
        batch_sizes, shuffle_null, heldout = [1, 4, 16], True, []

    out = {}
    for threads in (1, 2):
        for name, stage in (("overlap", overlap_stage), ("acceptance", acceptance_stage)):
            path = tmp_path / f"{name}-{threads}.json"
            stage(Files(trace=str(tmp_path / "t.parquet")), Files(json=str(path)), Params(),
                  threads=threads)
            doc = json.loads(path.read_text())
            doc.pop("provenance")
            out[name, threads] = doc
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert out["overlap", 1]["summary"] and out["acceptance", 1]
    assert out["overlap", 1] == out["overlap", 2]
    assert out["acceptance", 1] == out["acceptance", 2]


def test_the_temporal_shares_interval_recomputes_the_baseline_in_each_resample():
    """The decomposition table's share (step 1 - independence) / step 1 took its interval from
    step 1's ends with the baseline held fixed: 0.630 [0.619, 0.640] on 12 requests, where the
    ratio over the same resampled requests, each with its own baseline (as the matched
    contrast computes it), gives [0.583, 0.640]; the narrow one said 'shown' for a lead that
    the right one leaves undecided. Its interval spans as much as the matched contrast's
    resamples (its basic interval: their spread reflected about the plug-in estimate), around
    the same bias-corrected share: the contrast keeps the plug-in's resamples, and the stage's
    interval is their basic interval."""
    import dataclasses

    from specmoe.routing import controls, overlap
    from specmoe.routing.synth import SynthParams, generate

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=3, k_draft=3, skew=1.2,
                              stickiness=0.3, requests=12, steps=30, accept_prob=0.7,
                              topic_spread=2.0, topic_switch=0.05, categories=["a"], seed=7))
    tr = dataclasses.replace(tr, meta={"run": {"model": "t"}})
    ws = overlap.window_stats(tr)
    seq, pairs, ci = overlap.trace_sequence_stats(tr, 8)
    s = overlap.sequence_summary(seq, pairs, ws, ci)
    boot = controls.control_contrast(tr, tr)["share_boot"]
    share = np.array(boot["target"])
    lo, hi = s["sequence_temporal_share_low"], s["sequence_temporal_share_high"]
    assert boot["target_point"] == pytest.approx(s["sequence_temporal_share"])
    assert lo < boot["target_point"] < hi
    assert (lo, hi) == pytest.approx(overlap.basic_interval(share[0], share[1:], 12,
                                                        boot["target_point"]), abs=2e-6)
    assert hi - lo > 1.5 * 0.021  # the fixed-baseline interval's width


def _in_own_interval(row: dict) -> dict:
    """Each column of a table row that has a finite point and finite `_low` and `_high` beside
    it, mapped to whether the point lies within them."""
    return {c: row[f"{c}_low"] <= row[c] <= row[f"{c}_high"] for c in row
            if f"{c}_low" in row and f"{c}_high" in row
            and np.isfinite([row[c], row[f"{c}_low"], row[f"{c}_high"]]).all()}


def _overlap_json(tr: Trace, tmp_path) -> dict:
    """The overlap stage's JSON of a trace (batch size 1, shuffle seed 0): the trace written
    to tmp_path, the stage run on it, its output read back."""
    import json

    from specmoe.contracts import Named
    from specmoe.routing.trace import write_trace
    from specmoe.stages import analysis

    write_trace(tmp_path / "t.parquet", tr)
    analysis.overlap_stage(Named({"trace": tmp_path / "t.parquet"}),
                           Named({"json": tmp_path / "o.json"}),
                           Named({"batch_sizes": [1], "shuffle_null": True}))
    return json.loads((tmp_path / "o.json").read_text())


def test_the_independence_baseline_its_excess_and_share_lie_inside_their_intervals(tmp_path):
    """Near uniform loads the plug-in independence baseline sum_e q^2 / k is biased up by about
    sum_e Var(q_e) / k, more than its spread over requests, and its percentile interval (every
    resample above it) left out its own point: the default run's synth-coarse K = 3 gave 0.251127
    against [0.251168, 0.252332], synth-fine K = 5 a temporal share of 0.720774 against
    [0.714739, 0.720666]. Through the overlap stage into the report's rows, the bias-corrected
    baseline (below the plug-in, not below k/N), the excess over it and its temporal share each
    lie inside their basic intervals."""
    from specmoe.report.runs import decomposition_row, overlap_row

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=3, k_draft=3, stickiness=0.4,
                              requests=24, steps=30, accept_prob=0.7, skew=0.0, seed=1))
    ov = _overlap_json(tr, tmp_path)
    s = ov["summary"]
    ob, dec = overlap_row({}, s, ov), decomposition_row({}, s)
    inside = {**_in_own_interval(ob), **_in_own_interval(dec)}
    assert {"independent", "seq_excess", "sequence_temporal_share"} <= set(inside)
    assert all(inside.values()), {c: (ob | dec)[c] for c, ok in inside.items() if not ok}
    plug = float(window_stats(tr).independence.mean())
    assert 4 / 32 <= s["independent"] < plug - 3e-4  # the bias: 0.0007 here
    assert ob["seq_excess"] == pytest.approx(ob["seq1"] - ob["independent"], abs=1e-12)
    assert dec["temporal"] == pytest.approx(dec["empirical"] - ob["independent"], abs=1e-12)
    assert dec["sequence_temporal_share"] == pytest.approx(
        ob["seq_excess"] / ob["seq1"], abs=1e-12)


def test_the_loop_free_excess_carries_its_clipped_flag_to_the_table(tmp_path):
    """The excess without looping requests (seq_loop_free_excess) is a basic interval like the
    excess itself, and its flag of an end held at the bound reached the summary for the excess
    alone: the loop-free one came out NaN in the table. On a trace without loops the loop-free
    statistics are the whole trace's, flag included."""
    from specmoe.report.runs import overlap_row

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=2, k_draft=3, stickiness=0.4,
                              requests=12, steps=12, accept_prob=0.7, skew=0.0, seed=1))
    ov = _overlap_json(tr, tmp_path)
    s = ov["summary"]
    assert s["sequence_loop_free_dropped_requests"] == 0
    assert s["sequence_loop_free_excess_clipped"] is s["sequence_excess_clipped"]
    row = overlap_row({}, s, ov)
    assert row["seq_loop_free_excess_clipped"] in (True, False)


def test_the_summary_without_repetition_measures_against_its_windows_corrected_baseline(
        tmp_path):
    """The overlap stage's summary without the windows that repeat a token measured its temporal
    overlap against the plug-in baseline of those windows (biased up), while its intervals are
    measured against the bias-corrected one: both are the kept windows' corrected baseline
    (overlap.trace_independence, as the whole trace's summary is)."""
    from specmoe.routing.overlap import repetitive_windows, select_windows, trace_independence

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=2, k_draft=3, stickiness=0.4,
                              requests=12, steps=12, accept_prob=0.7, skew=0.3, seed=1))
    starts, lengths = tr.windows()
    tok = tr.columns["token_id"]
    for s in starts[::3][lengths[::3] > 1]:  # every third window repeats its first token
        tok[s + 1] = tok[s]
    rep = repetitive_windows(tr)
    assert 0 < rep.mean() < 1
    nr = _overlap_json(tr, tmp_path)["summary_without_repetition"]
    kept = select_windows(tr, ~rep)
    ind = trace_independence(kept)
    assert ind < float(window_stats(kept).independence.mean())  # below the plug-in
    assert nr["independent"] == pytest.approx(ind, abs=1e-12)
    assert nr["temporal"] == pytest.approx(nr["step1"] - ind, abs=1e-12)


def test_where_every_window_repeats_a_token_there_are_no_numbers_without_repetition(tmp_path):
    """A looping model whose every window repeats a token left no window to measure without
    them, and the overlap stage wrote the statistics with them under summary_without_repetition
    (the report printed them as the numbers without the repeating windows): it now writes how
    many windows are left and why there are no numbers."""
    tr = generate(SynthParams(num_experts=64, top_k=4, num_layers=2, k_draft=3, requests=6,
                              steps=8, stickiness=0.5, seed=3))
    tr.columns["token_id"][:] = 7
    ov = _overlap_json(tr, tmp_path)
    assert ov["repetitive_windows"] == 1.0
    nr = ov["summary_without_repetition"]
    assert nr["n_windows"] == 0 and "fewer than the 2" in nr["omitted"]
    assert "overlap_by_distance" not in nr and "window_decay" not in nr


def test_the_baselines_intervals_cover_a_known_truth():
    """40 synthetic traces of 24 requests (fixed seeds) whose loads are uniform by
    construction, so that the true independence baseline is k/N and the true step-1 overlap
    has a closed form (synth.uniform_truth): the basic intervals of the bias-corrected
    baseline, of its excess and of the temporal share cover the truth in at least 80% of them
    (40, 37 and 37), where the percentile intervals covered the baseline in none and the share
    in 18."""
    from specmoe.routing.overlap import sequence_summary, trace_sequence_stats
    from specmoe.routing.synth import uniform_truth

    n, k, stick = 32, 4, 0.4
    t = uniform_truth(n, k, stick)
    truth = {"independent": t["independent"], "sequence_excess": t["excess"],
             "sequence_temporal_share": t["temporal_share"]}
    hits = {c: 0 for c in truth}
    for seed in range(40):
        tr = generate(SynthParams(num_experts=n, top_k=k, num_layers=3, k_draft=3,
                                  stickiness=stick, requests=24, steps=30, accept_prob=0.7,
                                  skew=0.0, seed=seed))
        seq, pairs, ci = trace_sequence_stats(tr)
        s = sequence_summary(seq, pairs, window_stats(tr, shuffle_null=False), ci)
        for c in truth:
            hits[c] += s[f"{c}_low"] <= truth[c] <= s[f"{c}_high"]
    assert all(h >= 32 for h in hits.values()), hits


def test_the_shared_bootstrap_settings_move_every_interval_together(small_trace, monkeypatch):
    """One level and one number of resamples for every request bootstrap (routing.bootstrap):
    lowering the level narrows the window intervals and the sequence ones alike, percentile,
    basic and BCa, and the acceptance's by request (the sequence's percentile ends were a
    literal 2.5/97.5 and its resamples a literal 2,000: setting the window's LEVEL and N_BOOT
    left them where they were)."""
    from specmoe.routing import bootstrap
    from specmoe.routing.acceptance import by_request
    from specmoe.routing.overlap import trace_sequence_stats, window_intervals

    def widths():
        w = window_intervals(small_trace, shuffle_null=True)
        s = trace_sequence_stats(small_trace, 4)[2]
        rng = np.random.default_rng(0)
        acc_req, rej_req = np.repeat(np.arange(30), 5), np.repeat(np.arange(30), 2)
        a = by_request(rng.normal(0.3, 0.1, acc_req.size), rng.normal(0.2, 0.1, rej_req.size),
                       acc_req, rej_req)
        pick = {"window step 1": (w["overlap_low"][0], w["overlap_high"][0]),
                "window decay": (w["decay_low"], w["decay_high"]),
                "sequence step 1": (s["low"][0], s["high"][0]),
                "sequence decay (BCa)": (s["decay_low"], s["decay_high"]),
                "sequence excess (basic)": (s["excess_low"], s["excess_high"]),
                "acceptance delta": (a["delta_low_by_request"], a["delta_high_by_request"])}
        return {k: hi - lo for k, (lo, hi) in pick.items()}

    wide = widths()
    monkeypatch.setattr(bootstrap, "LEVEL", 0.5)
    narrow = widths()
    for name in wide:
        assert 0 < narrow[name] < 0.8 * wide[name], name
    # the resamples: a different number draws different resamples everywhere
    monkeypatch.setattr(bootstrap, "N_BOOT", 300)
    fewer = widths()
    for name in wide:
        assert fewer[name] != narrow[name], name


@pytest.mark.parametrize("requests", [1, 9])
def test_fewer_requests_than_the_floor_give_no_interval_and_no_direction(requests):
    """Below bootstrap.MIN_REQUESTS requests nothing is decided: every interval of the window
    and sequence statistics (percentile, basic and BCa) and the IPF's error interval is NaN and
    the report claims no direction; the points stay. One request gave the decays zero-width
    intervals at their points ("decays (+0.231 [+0.231, +0.231])"); at the floor there are
    intervals again."""
    from specmoe.report.prose import direction
    from specmoe.routing import bootstrap, ipf
    from specmoe.routing.overlap import request_unique, trace_sequence_stats, window_intervals

    assert requests < bootstrap.MIN_REQUESTS
    for n, decided in ((requests, False), (bootstrap.MIN_REQUESTS, True)):
        tr = generate(SynthParams(num_experts=64, top_k=4, num_layers=4, k_draft=3, requests=n,
                                  steps=40, stickiness=0.4, seed=1))
        w = window_intervals(tr)
        seq, _, s = trace_sequence_stats(tr, 8)
        per = s["per_sequence"]
        u_sum, u_n, _ = request_unique(tr, per["request"])
        ov = np.nanmean(seq, axis=0)[:3]
        boot, measured = ipf.measured_resamples({"unique_sum": u_sum, "full_windows": u_n})
        err = ipf.uniform_error_interval(
            64, 4, ov, ipf.predict_uniform(64, 4, ov)["unique"], per["sums"][:, :3],
            per["pairs"][:, :3], 4, boot, measured)
        ends = {**{f"window {k}": np.ravel(v) for k, v in w.items()
                   if k.endswith(("_low", "_high"))},
                **{f"sequence {k}": np.ravel(v) for k, v in s.items()
                   if k.endswith(("low", "high"))},
                "ipf error": np.asarray(err)}
        # the window's overlap, shuffle, decay, decay within status, step 1 above the shuffle
        # and its share, the temporal overlap and its share; the sequence's overlap, decay,
        # independence, excess, temporal share, excess within requests and the share within
        # requests; the IPF's error
        assert len(ends) == 2 * 8 + 2 * 7 + 1
        for name, v in ends.items():
            assert np.isfinite(v).all() == decided, (n, name, v)
        for name in ("decay", "above_shuffle", "above_shuffle_share", "decay_within_status"):
            assert np.isfinite(w[name]), name
        for name in ("decay", "excess", "independence", "excess_within"):
            assert np.isfinite(s[name]), name
        said = direction(w["decay"], w["decay_low"], w["decay_high"], "decays", "rises")
        assert ("no direction is claimed" in said) != decided, said
        assert (said.startswith("decays")) == decided, said


def test_mirrored_ends_past_what_a_statistic_can_be_are_held_there_and_flagged():
    """The basic (mirrored) intervals of the sequence's excess over independence (at most
    1 - k/N: step 1 <= 1, the baseline >= k/N), of its temporal share (1 - baseline / step 1, at
    most 1 - k/N too) and of the baseline (at least k/N) can pass those bounds: on 10 sticky
    requests of 2 steps, 8 experts and k = 2 the excess read 0.625 [0.479, 0.807] and the share
    its high end 0.807, where 0.75 is the most either can be. Each end is held at its bound and
    the interval flagged (`<name>_clipped`), and the flags reach the report's tables; a trace
    whose intervals stay inside has none."""
    from specmoe.report.runs import decomposition_row, overlap_row
    from specmoe.routing.overlap import sequence_summary, trace_sequence_stats, within_range

    def stats(**kw):
        tr = generate(SynthParams(num_layers=1, k_draft=3, requests=10, **kw))
        seq, pairs, ci = trace_sequence_stats(tr, 8)
        ws = window_stats(tr)
        s = {**ws.summary(ci["independence"]), **sequence_summary(seq, pairs, ws, ci)}
        rc = {"model": "m", "drafter": "d", "k": 3, "dataset": "x"}
        return tr, ci, overlap_row(rc, s, {}), decomposition_row(rc, s)

    tr, ci, ob, dec = stats(num_experts=8, top_k=2, steps=2, stickiness=0.99, skew=2.0, seed=27)
    top = 1 - tr.top_k / tr.num_experts
    assert ci["excess"] < top and ci["excess_high"] == top and ci["excess_clipped"]
    assert ci["excess_low"] < ci["excess"]
    assert ci["temporal_share_high"] == top and ci["temporal_share_clipped"]
    assert ci["independence_low"] == tr.top_k / tr.num_experts and ci["independence_clipped"]
    assert ob["seq_excess_high"] == top and ob["seq_excess_clipped"] is True
    assert ob["independent_clipped"] is True
    assert dec["sequence_temporal_share_high"] == top
    assert dec["sequence_temporal_share_clipped"] is True
    # inside its range an interval is the bootstrap's own and unflagged
    _, ci, ob, dec = stats(num_experts=64, top_k=4, steps=30, stickiness=0.4, seed=1)
    assert not (ci["excess_clipped"] or ci["temporal_share_clipped"] or ci["independence_clipped"])
    assert ob["seq_excess_clipped"] is False and dec["sequence_temporal_share_clipped"] is False
    assert within_range(0.2, 0.5, 0.0, 1.0) == (0.2, 0.5, False)
    assert within_range(-0.1, 1.2, 0.0, 1.0) == (0.0, 1.0, True)
    lo, hi, flag = within_range(float("nan"), float("nan"), 0.0, 1.0)
    assert np.isnan(lo) and np.isnan(hi) and not flag


def test_the_sequence_distances_are_one_constant(small_trace):
    """d = 1..8 along the committed sequence (SPEC) was written four times over (the controls'
    SEQUENCE_D, the overlap stage's SEQUENCE_DISTANCES, max_d=8 defaults in overlap): one
    constant now, read by the library's defaults and the controls' decay. The defaults are read
    from the source: an `is` on the values could not fail (CPython caches small ints, so a
    literal 8 is the constant's object)."""
    import ast
    import inspect

    from specmoe.routing import controls, overlap

    assert overlap.SEQUENCE_DISTANCES == 8
    defaults = {}
    for node in ast.walk(ast.parse(inspect.getsource(overlap))):
        if isinstance(node, ast.FunctionDef):
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            pairs = list(zip(args, node.args.defaults))
            pairs += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d]
            defaults.update({node.name: d for a, d in pairs if a.arg == "max_d"})
    assert {f.__name__ for f in (overlap.sequence_overlap_rows, overlap.sequence_overlap,
                                 overlap.trace_sequence_overlap,
                                 overlap.trace_sequence_stats)} <= set(defaults)
    for name, default in defaults.items():
        assert isinstance(default, ast.Name) and default.id == "SEQUENCE_DISTANCES", \
            f"{name}: max_d's default is {ast.unparse(default)}, not SEQUENCE_DISTANCES"
    assert not hasattr(controls, "SEQUENCE_D")
    assert controls.STATISTICS["seq_decay"].endswith(f"d = {overlap.SEQUENCE_DISTANCES}")
    ov, pairs, ci = overlap.trace_sequence_stats(small_trace)
    assert ov.shape[-1] == pairs.shape[-1] == overlap.SEQUENCE_DISTANCES
    # the controls' decay is overlap(1) - overlap(SEQUENCE_DISTANCES), the overlap stage's
    ids = np.unique(small_trace.columns["request"].astype(np.int64))
    _, points = controls._statistics(small_trace, ids, np.ones((1, ids.size)))
    assert points["seq_decay"] == pytest.approx(ci["decay"], abs=1e-12)


def _windows_trace(sets: list, acc: list, k: int, requests: int, steps: int):
    """A one-layer trace of 16 experts from each row's expert set and each window's accepted
    count (requests x steps windows of K + 1 rows, in order), validated; and its positions."""
    from specmoe.routing.trace import Trace, status_for

    acc = np.array(acc, np.int8)
    pos = np.tile(np.arange(k + 1, dtype=np.int8), requests * steps)
    cols = {"request": np.repeat(np.arange(requests, dtype=np.int32), steps * (k + 1)),
            "step": np.tile(np.repeat(np.arange(steps, dtype=np.int32), k + 1), requests),
            "position": pos, "accepted": acc, "n_drafts": np.full(acc.size, k, np.int8),
            "status": status_for(pos, acc), "token_id": np.arange(acc.size, dtype=np.int32)}
    tr = Trace(experts=np.array(sets, np.uint8)[:, None, :], columns=cols, num_experts=16,
               k_draft=k)
    tr.validate()
    return tr, pos


def test_overlap_by_status_compares_within_a_draft_position(small_trace):
    """Acceptance independent of routing, position 1 keeping position 0's experts (overlap 1) and
    position 2 taking others (overlap 0): pooled over positions, accepted drafts (more of them at
    position 1) showed 0.60 against 0.46 for first-rejected ones, a gap made by the mix of
    positions alone. Per draft position (SPEC: the same position only) the statuses agree, each
    mean with its interval over resampled requests."""
    from specmoe.routing.overlap import overlap_by_status

    rng = np.random.default_rng(0)
    k, requests, steps = 2, 30, 20
    sets, acc = [], []
    for _ in range(requests * steps):
        a = rng.choice(3, p=[0.2, 0.3, 0.5])
        base = rng.choice(16, 4, replace=False)
        sets += [base[:2], base[:2], base[2:]]
        acc += [a] * (k + 1)
    tr, pos = _windows_trace(sets, acc, k, requests, steps)
    rows = {(r["draft_position"], r["status"]): r for r in overlap_by_status(tr)}
    assert set(rows) == {(1, "accepted"), (1, "first_rejected"), (2, "accepted"),
                         (2, "first_rejected"), (2, "after_rejection")}
    for (j, status), r in rows.items():
        assert r["mean"] == (1.0 if j == 1 else 0.0)
        assert r["mean_low"] == r["mean_high"] == r["mean"]  # no spread: every resample the same
        st = tr.columns["status"][pos == j]
        assert r["n"] == int((st == ["committed", "accepted", "first_rejected",
                                     "after_rejection"].index(status)).sum())
        assert r["n_requests"] == requests
    # routing with spread: each mean inside an interval of some width
    for r in overlap_by_status(small_trace):
        assert r["mean_low"] < r["mean"] < r["mean_high"], r


def test_overlap_by_status_resamples_only_the_requests_with_drafts_in_the_cell():
    """The cell's interval resamples the requests that have drafts in that (position, status)
    cell, not all of the trace's: position-2 first-rejected drafts only in requests 0 and 1 of
    30 got the interval [0.0, 1.0] from two requests (resamples missing both were dropped as
    NaN), against the docstring's NaN below bootstrap.MIN_REQUESTS requests. Now NaN there, and
    an interval where the cell has every request."""
    from specmoe.routing import bootstrap
    from specmoe.routing.overlap import overlap_by_status

    k, requests, steps = 2, 30, 4
    rng = np.random.default_rng(1)
    sets, acc = [], []
    for r in range(requests):
        for s in range(steps):
            a = 1 if (r < 2 and s == 0) else 2  # position 2 first-rejected: requests 0 and 1 only
            base = rng.choice(16, 4, replace=False)
            third = (base[2:] if r == 0 else base[:2]) if (s == 0 and r < 2) else base[1:3]
            sets += [base[:2], base[:2], third]
            acc += [a] * (k + 1)
    tr, pos = _windows_trace(sets, acc, k, requests, steps)
    rows = {(r["draft_position"], r["status"]): r for r in overlap_by_status(tr)}
    few = rows[(2, "first_rejected")]
    assert few["n_requests"] == 2 < bootstrap.MIN_REQUESTS and few["mean"] == 0.5
    assert np.isnan(few["mean_low"]) and np.isnan(few["mean_high"]), few
    many = rows[(2, "accepted")]
    assert many["n_requests"] == requests >= bootstrap.MIN_REQUESTS
    assert np.isfinite([many["mean_low"], many["mean_high"]]).all(), many
    assert many["mean_low"] <= many["mean"] <= many["mean_high"]


def _iid_trace(requests, steps=10, k_draft=3, n=64, k=4, layers=1, seed=0, categories=None,
               accepted=None):
    """Routing with no locality at all: each token's k of n experts drawn uniformly and
    independently (true overlap k/n at every distance, true temporal overlap 0); each step's
    accepted count drawn (or `accepted`); categories: each request's slice (category)."""
    from specmoe.routing.trace import status_for

    rng = np.random.default_rng(seed)
    rows = [(r, s, j, a) for r in range(requests) for s in range(steps)
            for a in [int(rng.integers(0, k_draft + 1)) if accepted is None else accepted]
            for j in range(k_draft + 1)]
    req, step, pos, acc = (np.array(c) for c in zip(*rows))
    experts = np.argsort(rng.random((len(rows) * layers, n)), axis=1)[:, :k]
    cols = {"request": req.astype(np.int32), "step": step.astype(np.int32),
            "position": pos.astype(np.int8), "accepted": acc.astype(np.int8),
            "status": status_for(pos, acc), "token_id": np.arange(len(rows), dtype=np.int32),
            "n_drafts": np.full(len(rows), k_draft, np.int8)}
    meta = {}
    if categories is not None:
        cols["category"] = np.array([categories[r] for r in req])
        meta["slice_datasets"] = {c: "held" for c in set(categories)}
    return Trace(experts=experts.reshape(len(rows), layers, k).astype(np.uint8), columns=cols,
                 num_experts=n, k_draft=k_draft, meta=meta)


def test_each_slice_is_measured_against_its_corrected_baseline_with_its_intervals():
    """The held-out slices' table took each slice's plug-in baseline sum q^2 / k (biased up) and
    no interval: on i.i.d. routing (k = 4 of N = 64, true overlap 0.0625 at every distance) in
    two slices of 6 requests, slice a read 0.0632/0.0620/0.0740 (rising, to the eye) and slice
    b's step 1 0.0549 lay below its plug-in baseline 0.0647, nothing saying that 6 requests
    decide nothing. Each slice is now measured as the trace is, against its bias-corrected
    baseline (trace_independence of the slice), with intervals over its requests: NaN with 6
    (below bootstrap.MIN_REQUESTS), and so the held-out set's mean of the two; with 12 requests
    each has its intervals, the mean's over both slices' requests."""
    from specmoe.report.runs import HELDOUT_MEAN, heldout_overlap_rows
    from specmoe.routing import bootstrap
    from specmoe.routing.overlap import select_windows, trace_independence
    from specmoe.stages.analysis import slice_overlaps

    for per_slice in (6, 12):
        cats = ["a"] * per_slice + ["b"] * per_slice
        tr = _iid_trace(2 * per_slice, seed=5, categories=cats)
        by_slice, by_ds = slice_overlaps(tr)
        assert set(by_slice) == {"a", "b"} and by_ds["held"]["slices"] == ["a", "b"]
        starts, _ = tr.windows()
        for name, sl in by_slice.items():
            sub = select_windows(tr, tr.columns["category"][starts] == name)
            assert sl["independent"] == trace_independence(sub)
            assert sl["n_requests"] == per_slice
        rows = heldout_overlap_rows({}, by_slice, {"held": {"slices": ["a", "b"]}}, by_ds)
        assert [r["slice"] for r in rows] == ["a", "b", f"{HELDOUT_MEAN}held"]
        ends = [r[f"step{d}_{e}"] for r in rows for d in (1, 2, 3) for e in ("low", "high")]
        ends += [r[f"decay_{e}"] for r in rows for e in ("low", "high")]
        if per_slice < bootstrap.MIN_REQUESTS:
            assert np.isnan(ends).all()
        else:
            assert np.isfinite(ends).all()
            # the mean of two slices' resamples: narrower than either slice's
            width = [r["step1_high"] - r["step1_low"] for r in rows]
            assert 0 < width[2] < min(width[:2])


def test_the_window_temporal_overlap_and_its_shares_carry_intervals(tmp_path):
    """The decomposition table gave the temporal overlap inside windows (step 1 - independence)
    and its share of step 1 bare, and the within-request share along the sequence too: on i.i.d.
    routing with every draft rejected (true temporal overlap 0) a temporal overlap of 0.0188
    and a share of about 0.07 stood with nothing beside them. Through the overlap stage into the
    table's row each now has its 95% interval over requests, the temporal overlap's and its
    share's holding 0 here, and each point inside its own interval."""
    from specmoe.report.runs import decomposition_row

    ov = _overlap_json(_iid_trace(24, steps=10, seed=2, accepted=0), tmp_path)
    s = ov["summary"]
    row = decomposition_row({}, s)
    for name in ("temporal", "temporal_share", "sequence_temporal_share_within_request"):
        lo, hi = row[f"{name}_low"], row[f"{name}_high"]
        assert np.isfinite([lo, hi]).all() and lo <= row[name] <= hi, name
    for name in ("temporal", "temporal_share"):
        assert row[f"{name}_low"] == s[f"{name}_low"] and row[f"{name}_clipped"] is False
        assert row[f"{name}_low"] < 0 < row[f"{name}_high"], name


def test_the_sequence_excess_and_share_are_the_temporal_intervals(monkeypatch):
    """sequence_intervals wrote out the excess and share intervals that temporal_intervals
    (the window's temporal overlap) also computes (two bounded_basic_interval calls each): the
    sequence's excess_* and temporal_share_* ends are now temporal_intervals' own, one call."""
    from specmoe.routing import overlap

    calls = []
    real = overlap.temporal_intervals

    def spy(*a):
        calls.append(real(*a))
        return calls[-1]

    monkeypatch.setattr(overlap, "temporal_intervals", spy)
    tr = _iid_trace(12, seed=3)
    ci = overlap.trace_sequence_stats(tr)[2]
    assert len(calls) == 1
    t = calls[0]
    for key in ("", "_low", "_high", "_clipped"):
        assert ci[f"excess{key}"] == t[f"temporal{key}"]
    for key in ("_low", "_high", "_clipped"):
        assert ci[f"temporal_share{key}"] == t[f"temporal_share{key}"]
    assert np.isfinite([ci["excess_low"], ci["excess_high"]]).all()


def test_slice_overlaps_resample_no_baseline_they_do_not_keep(monkeypatch):
    """window_intervals ran baseline_resamples for its temporal overlap even where the caller
    kept none of it (slice_overlaps, finding_rates): one resampled baseline per slice thrown
    away. With temporal=False (and no shuffle null) it computes none; slice_overlaps keeps each
    slice's own corrected baseline (trace_independence) and makes no call of baseline_resamples,
    and its intervals are those of window_intervals with the temporal overlap."""
    from specmoe.routing import overlap
    from specmoe.stages.analysis import slice_overlaps

    tr = _iid_trace(24, seed=5, categories=["a"] * 12 + ["b"] * 12)
    with_temporal = overlap.window_intervals(tr, shuffle_null=False)
    calls = []
    real = overlap.baseline_resamples

    def spy(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(overlap, "baseline_resamples", spy)
    without = overlap.window_intervals(tr, shuffle_null=False, temporal=False)
    assert calls == [] and "temporal" not in without
    for key in ("overlap_low", "overlap_high", "decay_low", "decay_high"):
        assert without[key] == with_temporal[key]
    overlap.window_intervals(tr, shuffle_null=False)
    assert len(calls) == 1
    calls.clear()
    by_slice, _ = slice_overlaps(tr)
    assert set(by_slice) == {"a", "b"} and calls == []
    assert np.isfinite(by_slice["a"]["decay_low"])
