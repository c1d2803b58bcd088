"""Expert overlap inside verification windows and along the committed sequence
(docs/method.md, "Overlap").

One compiled pass over the trace, parallel over layers, turns each token's top-k set into a bitmask
(ceil(N/64) words) and accumulates, per layer:
- the summed intersection size of every position pair at step distance d inside a window,
- expert loads (for q_e),
- the union size of every full window and, per expert, how many full windows used it.
The within-window shuffle null is exact: its expectation over every permutation of a window's
positions (shuffle_weights), computed from the same pass, not from one random permutation.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from . import bootstrap
from .trace import Trace

# Overlap along the committed sequence is measured at d = 1..SEQUENCE_DISTANCES (SPEC, "Overlap
# along the committed sequence (d = 1..8)"); the overlap stage, the controls and the decay
# overlap(1) - overlap(SEQUENCE_DISTANCES) all read it here.
SEQUENCE_DISTANCES = 8


@intrinsic
def _popcount(typingctx, x):
    """Population count of a uint64 (LLVM ctpop: one POPCNT instruction where the CPU has it)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@numba.njit(inline="always")
def _group_mask(row, base, k, g, every):
    """The ids of one token and layer (row[base:base + k]) that fall in group g (ids 128g to
    128g + 127) as a bitmask of two 64-bit words, built in registers and without branches on the
    id. With every=True all ids are taken to be in the group (N <= 128: the common case, and
    about 15% faster without the test)."""
    one, zero = np.uint64(1), np.uint64(0)
    lo = zero
    hi = zero
    for i in range(k):
        e = row[base + i]
        if not every and e >> 7 != g:
            continue
        eu = np.uint64(e)
        bit = one << (eu & np.uint64(63))
        upper = zero - ((eu >> np.uint64(6)) & one)
        hi |= bit & upper
        lo |= bit & ~upper
    return lo, hi


@numba.njit(cache=True, parallel=True)
def _window_pass(experts, starts, lengths, n_experts, positions, n_chunks):
    """Per layer: summed intersections of position pairs at each distance, expert loads, summed
    full-window union sizes, per expert the number of full windows that use it, and the summed
    intersections of all position pairs of the windows of each length n ([layer, n]: what the
    exact shuffle null needs).

    Parallel over chunks of windows: a window's rows are contiguous, so each thread streams its part
    of the trace once and keeps its sums in small thread-local arrays. Per window and layer, each
    position's top-k set becomes bitmask words; pairs and unions are AND/OR plus popcount; the
    union's experts are counted with a branch-free loop over its bits (a loop over set bits
    mispredicts once per word).
    """
    n_tokens, n_layers, k = experts.shape
    n_groups = (n_experts + 127) // 128
    n_words = 2 * n_groups
    every = n_groups == 1
    flat = experts.reshape(n_tokens, n_layers * k)
    pair_c = np.zeros((n_chunks, n_layers, positions), np.int64)
    load_c = np.zeros((n_chunks, n_layers, n_experts), np.int64)
    union_c = np.zeros((n_chunks, n_layers), np.int64)
    present_c = np.zeros((n_chunks, n_layers, n_experts), np.int64)
    bylen_c = np.zeros((n_chunks, n_layers, positions + 1), np.int64)
    one, zero = np.uint64(1), np.uint64(0)
    for c in numba.prange(n_chunks):
        masks = np.zeros(positions * n_words, np.uint64)
        load = np.zeros((n_layers, n_experts), np.int64)
        used = np.zeros((n_layers, n_words * 64), np.int64)
        pair = np.zeros((n_layers, positions), np.int64)
        union = np.zeros(n_layers, np.int64)
        bylen = np.zeros((n_layers, positions + 1), np.int64)
        w_lo = starts.size * c // n_chunks
        w_hi = starts.size * (c + 1) // n_chunks
        for w in range(w_lo, w_hi):
            s = starts[w]
            n = lengths[w]
            for layer in range(n_layers):
                base = layer * k
                for j in range(n):
                    row = flat[s + j]
                    if every:
                        lo, hi = _group_mask(row, base, k, 0, True)
                        masks[j * n_words] = lo
                        masks[j * n_words + 1] = hi
                    else:
                        for g in range(n_groups):
                            lo, hi = _group_mask(row, base, k, g, False)
                            masks[j * n_words + 2 * g] = lo
                            masks[j * n_words + 2 * g + 1] = hi
                    # loads in a loop of their own: inside the mask loop the stores would keep
                    # the words out of registers
                    for i in range(k):
                        load[layer, row[base + i]] += 1
                for d in range(1, n):
                    acc = zero
                    for t in range((n - d) * n_words):
                        acc += _popcount(masks[t] & masks[t + d * n_words])
                    pair[layer, d] += np.int64(acc)
                    bylen[layer, n] += np.int64(acc)
                if n == positions:
                    for word in range(n_words):
                        u = zero
                        for j in range(n):
                            u |= masks[j * n_words + word]
                        union[layer] += np.int64(_popcount(u))
                        for b in range(64):
                            used[layer, word * 64 + b] += np.int64((u >> np.uint64(b)) & one)
        pair_c[c] = pair
        load_c[c] = load
        union_c[c] = union
        present_c[c] = used[:, :n_experts]
        bylen_c[c] = bylen
    return (pair_c.sum(axis=0), load_c.sum(axis=0), union_c.sum(axis=0), present_c.sum(axis=0),
            bylen_c.sum(axis=0))


def shuffle_weights(n, max_d: int) -> np.ndarray:
    """[window, d-1] what the within-window shuffle null gives distance d of a window of n
    positions, per unit of the window's intersections summed over all its position pairs: a
    uniform permutation makes each of its n - d pairs at distance d a uniformly drawn pair of
    distinct positions, so the null's expectation over all n! permutations (exactly, without
    drawing one) is (n - d) / C(n, 2) times that sum (0 where n <= d)."""
    n = np.asarray(n, np.float64)[:, None]
    d = np.arange(1, max_d + 1, dtype=np.float64)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > d, (n - d) / (n * (n - 1) / 2), 0.0)


@numba.njit(cache=True, parallel=True)
def _row_overlaps(experts, starts, lengths, n_experts):
    """Per row j >= 1: layer-averaged overlap with position j-1 (consecutive) and position 0 (anchor)."""
    n_tokens, n_layers, k = experts.shape
    n_words = (n_experts + 63) // 64
    consec = np.full(n_tokens, np.nan)
    anchor = np.full(n_tokens, np.nan)
    one = np.uint64(1)
    for w in numba.prange(starts.size):
        s = starts[w]
        n = lengths[w]
        masks = np.zeros((n, n_words), np.uint64)
        c = np.zeros(n, np.int64)
        a = np.zeros(n, np.int64)
        for layer in range(n_layers):
            for j in range(n):
                for word in range(n_words):
                    masks[j, word] = 0
                for i in range(k):
                    e = np.int64(experts[s + j, layer, i])
                    masks[j, e >> 6] |= one << np.uint64(e & 63)
            for j in range(1, n):
                for word in range(n_words):
                    c[j] += np.int64(_popcount(masks[j - 1, word] & masks[j, word]))
                    a[j] += np.int64(_popcount(masks[0, word] & masks[j, word]))
        for j in range(1, n):
            consec[s + j] = c[j] / (n_layers * k)
            anchor[s + j] = a[j] / (n_layers * k)
    return consec, anchor


@numba.njit(inline="always")
def _fill_masks(experts, s, n, layer, masks):
    """masks[j] = the bitmask of the experts row s + j selects at `layer`, for j < n."""
    one = np.uint64(1)
    masks[:] = 0
    for j in range(n):
        for slot in range(experts.shape[2]):
            e = np.int64(experts[s + j, layer, slot])
            masks[j, e >> 6] |= one << np.uint64(e & 63)


@numba.njit(inline="always")
def _pair_sum(masks, n, d):
    """sum over j < n - d of |S(j) & S(j + d)| from the rows' bitmasks."""
    acc = np.int64(0)
    for j in range(n - d):
        for word in range(masks.shape[1]):
            acc += np.int64(_popcount(masks[j, word] & masks[j + d, word]))
    return acc


@numba.njit(cache=True, parallel=True)
def _sequence_pass(experts, starts, lengths, n_experts, max_d):
    """Per sequence (rows starts[i] .. starts[i] + lengths[i] - 1), layer and distance
    d = 1..max_d: the summed |S(t) & S(t+d)| over its token pairs d apart."""
    n_layers = experts.shape[1]
    n_words = (n_experts + 63) // 64
    n_seq = starts.size
    sums = np.zeros((n_seq, n_layers, max_d), np.int64)
    for i in numba.prange(n_seq):
        masks = np.zeros((lengths[i], n_words), np.uint64)
        for layer in range(n_layers):
            _fill_masks(experts, starts[i], lengths[i], layer, masks)
            for d in range(1, max_d + 1):
                sums[i, layer, d - 1] = _pair_sum(masks, lengths[i], d)
    return sums


def _sequence_sums(experts: np.ndarray, starts, lengths, num_experts: int,
                   max_d: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence: summed intersections [seq, layer, d-1] and pair counts [seq, d-1]."""
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    sums = _sequence_pass(np.ascontiguousarray(experts), starts, lengths, num_experts, max_d)
    return sums, np.clip(lengths[:, None] - np.arange(1, max_d + 1)[None, :], 0, None)


def sequence_overlap_rows(experts: np.ndarray, starts, lengths, num_experts: int,
                          max_d: int = SEQUENCE_DISTANCES) -> tuple[np.ndarray, np.ndarray]:
    """Overlap along token sequences: ([layer, d-1] mean |S(t) & S(t+d)| / k over every pair of
    tokens d apart inside one sequence, [d-1] number of pairs). A sequence is the rows
    starts[i] .. starts[i] + lengths[i] - 1 of `experts` (rows, layers, k); NaN where no pair."""
    sums, pairs = _sequence_sums(experts, starts, lengths, num_experts, max_d)
    return _overlap_of(sums, pairs, experts.shape[2])


def _overlap_of(sums: np.ndarray, pairs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    total = pairs.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums.sum(axis=0) / (total[None, :] * k), total


def sequence_intervals(sums: np.ndarray, pairs: np.ndarray, k: int, n_boot: int | None = None,
                       seed: int | None = None, baselines: dict | None = None) -> dict:
    """Bootstrap intervals (at bootstrap.LEVEL, 95%) of the layer-mean overlap along sequences,
    resampling whole sequences (requests: the independent units; tokens of one request are not):
    for each d, and for the decay overlap(1) - overlap(max_d). sums, pairs: per sequence, from
    _sequence_sums. Percentile intervals by distance over n_boot resamples (default
    bootstrap.N_BOOT) drawn from a fixed seed (default bootstrap.BOOT_SEED); the decay a
    BCa interval (bca_interval) from the same resamples: its tail is heavy where one request
    loops. With fewer than bootstrap.MIN_REQUESTS sequences every interval is NaN
    (request_weights): the points alone, no direction.

    baselines (per sequence, from sequence_baselines): the pooled independence baseline
    (`independence`) and the step-1 overlap's excess over it (`excess`), each with its interval,
    and the interval of its temporal share (excess / step 1: sequence_summary), the baseline
    recomputed from each resample's loads; and the excess over the within-request baseline
    (`excess_within`, BCa). The plug-in baseline sum_e q^2 / k is biased up by about
    sum_e Var(q_e) / k, near uniform loads by more than its own spread: its percentile interval
    left out its point and the truth (0% coverage at uniform loads). The baseline is therefore
    the jackknife bias-corrected one (independence_corrected), and the three take basic
    intervals (basic_interval), which covered the truth in 89-100% of simulated traces where
    the percentile ones fell to 0% (the baseline) and 3% (the share), and BCa ones of the
    corrected excess to 72% (bench/independence_coverage.py)."""
    per_seq = sums.mean(axis=1)  # [seq, d]: layer-mean intersections
    n = per_seq.shape[0]
    w = request_weights(n, n_boot, seed)  # [boot, seq]
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (w @ per_seq) / (w @ pairs * k)  # [boot, d]
        est = per_seq.sum(axis=0) / (pairs.sum(axis=0) * k)
    decay = boot[:, 0] - boot[:, -1]
    lo, hi = _percentiles(boot, est, n)
    # the decay: BCa (a looping request can carry its resamples' tail)
    with np.errstate(invalid="ignore", divide="ignore"):
        jk = (per_seq.sum(axis=0) - per_seq) / ((pairs.sum(axis=0) - pairs) * k)  # [seq, d]
    dlo, dhi = bca_interval(decay, float(est[0] - est[-1]), jk[:, 0] - jk[:, -1])
    out = {"n_sequences": int(n), "low": lo.tolist(), "high": hi.tolist(),
           "decay": float(est[0] - est[-1]), "decay_low": float(dlo), "decay_high": float(dhi),
           # the units themselves, for statistics of the overlaps resampled with them (the IPF's)
           "per_sequence": {"sums": per_seq, "pairs": pairs}}
    if baselines is not None:
        loads, tokens, within = baselines["loads"], baselines["tokens"], baselines["within"]
        ind, plug, ind_boot = baseline_resamples(w, loads, tokens, k)
        # the mirrored ends held inside what each can be (bounded_basic_interval), flagged where
        # they were moved: the baseline in [k/N, 1] (sum_e q_e = k), its point held at k/N too;
        # step 1 in [0, 1], so the excess in [-1, 1 - k/N] and the share 1 - baseline / step 1 at
        # most 1 - k/N (mirrored, they reached 1.01 and 1.10 where 0.75 is the most)
        floor = k / loads.shape[-1]
        ilo, ihi, iclip = bounded_basic_interval(plug, ind_boot, floor, 1.0, n=n,
                                                 point=ind)
        # the excess and the share: the corrected baseline's, each resample with its own baseline
        # (held fixed, the share's interval was 2-2.6 times too narrow), as the window's
        # temporal overlap takes them (temporal_intervals)
        t = temporal_intervals(float(est[0]), boot[:, 0], ind, plug, ind_boot, floor, n)
        with np.errstate(invalid="ignore", divide="ignore"):
            wr = within.sum() / (pairs[:, 0].sum() * k)
            wr_boot = (w @ within) / (w @ pairs[:, 0] * k)
            wr_jk = (within.sum() - within) / ((pairs[:, 0].sum() - pairs[:, 0]) * k)
        wlo, whi = bca_interval(boot[:, 0] - wr_boot, float(est[0] - wr), jk[:, 0] - wr_jk)
        # its share of step 1, as the excess within: BCa over the same resamples
        with np.errstate(invalid="ignore", divide="ignore"):
            wslo, wshi = bca_interval((boot[:, 0] - wr_boot) / boot[:, 0],
                                      float((est[0] - wr) / est[0]),
                                      (jk[:, 0] - wr_jk) / jk[:, 0])
        out.update(independence=ind, independence_low=ilo, independence_high=ihi,
                   independence_clipped=iclip,
                   excess=t["temporal"], excess_low=t["temporal_low"],
                   excess_high=t["temporal_high"], excess_clipped=t["temporal_clipped"],
                   temporal_share_low=t["temporal_share_low"],
                   temporal_share_high=t["temporal_share_high"],
                   temporal_share_clipped=t["temporal_share_clipped"],
                   within_request=float(wr),
                   excess_within=float(est[0] - wr), excess_within_low=float(wlo),
                   excess_within_high=float(whi), temporal_share_within_low=float(wslo),
                   temporal_share_within_high=float(wshi))
    return out


def request_weights(n: int, n_boot: int | None = None, seed: int | None = None) -> np.ndarray:
    """[boot, unit] how often each of n units (requests) is drawn in each of n_boot bootstrap
    resamples (default bootstrap.N_BOOT), from a fixed seed (default bootstrap.BOOT_SEED): the
    same resamples wherever the same units are resampled.

    Below bootstrap.MIN_REQUESTS units every weight is NaN: a handful of requests decides
    nothing (one request gave the window and sequence decays zero-width intervals, and with them
    a direction), so every interval resampled with these weights (the window's, the sequence's,
    percentile, basic and BCa, and the IPF's error) is NaN: no interval, no direction."""
    n_boot = bootstrap.N_BOOT if n_boot is None else n_boot
    if n < bootstrap.MIN_REQUESTS:
        return np.full((n_boot, n), np.nan)
    rng = np.random.default_rng(bootstrap.BOOT_SEED if seed is None else seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)


def independence_corrected(loads: np.ndarray, tokens: np.ndarray, k: int) -> float:
    """The pooled independence baseline of requests (loads, tokens: per request, from
    request_loads) less the jackknife's estimate of its bias, n plug - (n - 1) mean(jack) over
    the n requests (jack: the baseline without each in turn): sum_e q^2 / k of estimated loads
    exceeds that of the true ones by sum_e Var(q_e) / k (0.0007 at uniform loads on 24
    requests, seven times its spread). Held at k/N, the floor it cannot pass (sum_e q_e = k);
    the plug-in where it has no jackknife (one request)."""
    plug = float(independence_of(loads.sum(axis=0), tokens.sum(), k))
    with np.errstate(invalid="ignore", divide="ignore"):
        jack = independence_of(loads.sum(axis=0)[None] - loads, tokens.sum() - tokens, k)
    if jack.size < 2 or not np.isfinite(jack).all():
        return plug
    return float(max(jack.size * plug - (jack.size - 1) * jack.mean(), k / loads.shape[-1]))


def basic_interval(est: float, boot: np.ndarray, n: int,
                   point: float | None = None) -> tuple[float, float]:
    """The basic (reflected) bootstrap interval (at bootstrap.LEVEL) [2 est - q_high,
    2 est - q_low] of a plug-in estimate from its resamples: their spread about the estimate
    stands for the estimate's about the truth, so a bias as large as the spread (the independence
    baseline near uniform loads: resamples above the estimate, itself above the truth) is
    reflected away where the percentile interval repeats it, and the interval holds the jackknife
    bias-corrected point. n: the requests resampled: the reflected half-widths are widened for
    the small sample (bootstrap.widen) about `point`, the point reported beside the interval
    (default est; the bias-corrected one where est is a plug-in: widened about the plug-in, the
    interval left that point by f - 1 times the bias)."""
    if not np.isfinite(est):
        return float("nan"), float("nan")
    lo, hi = _ends(boot)
    lo, hi = bootstrap.widen(est if point is None else point, 2 * est - hi, 2 * est - lo, n)
    return float(lo), float(hi)


def bounded_basic_interval(est: float, boot: np.ndarray, low: float = -np.inf,
                           high: float = np.inf, *, n: int,
                           point: float | None = None) -> tuple[float, float, bool]:
    """The basic interval (basic_interval) of a plug-in estimate from its resamples, held inside
    its statistic's range [low, high] (within_range): its ends, and whether either was moved
    (an acceptance length's in [1, K+1]; an excess over independence's). For an estimate
    measured against the plug-in independence baseline, each resample is measured against its
    own resample's plug-in baseline, and the point reported beside it is the one against the
    bias-corrected baseline (independence_corrected): the resamples' spread about the plug-in,
    reflected, stands for the plug-in's about the truth, so the interval holds the corrected
    point. Resamples moved
    by the correction instead centre on the plug-in, and their percentile interval sits about
    one bias below the corrected point (the matched contrasts' excess covered its truth in 72%
    of simulated traces of 12 requests, every miss below it; tests/test_routing_fixes.py)."""
    return within_range(*basic_interval(est, boot, n, point), low, high)


def within_range(lo: float, hi: float, low: float, high: float) -> tuple[float, float, bool]:
    """An interval's ends held inside its statistic's range [low, high], and whether either end
    had to be moved: a basic interval mirrors its resamples about the estimate, so near a bound
    an end can pass it (an excess of 0.669 [0.534, 1.010] where 0.75 is the most it can be). The
    end shown is then the bound, and the flag (`<name>_clipped` in the tables) says that it is
    not the bootstrap's own: a value outside the range is never shown as one. NaN ends stay NaN
    (and unflagged)."""
    clipped = bool(lo < low or hi > high or lo > high or hi < low)
    return float(np.clip(lo, low, high)), float(np.clip(hi, low, high)), clipped


def bca_interval(boot: np.ndarray, est: float, jack: np.ndarray,
                 level: float | None = None) -> tuple[float, float]:
    """The bias-corrected and accelerated (BCa) bootstrap interval: the percentile interval's
    ends moved by the bootstrap's median bias (z0) and by the skew of the leave-one-out
    (jackknife) estimates over the resampled units (acceleration a), so a statistic whose
    resamples are skewed (one unit carrying a heavy tail) keeps its coverage better than the
    plain percentile interval (Efron 1987). boot: the resamples' values; jack: the statistic
    without each unit in turn (one per request resampled: their number widens the interval
    about est for the small sample, bootstrap.widen); level: default bootstrap.LEVEL."""
    # the standard normal's quantile and distribution functions themselves (scipy.stats.norm
    # calls these; importing scipy.stats costs an analysis job more than its bootstrap)
    from scipy.special import ndtr, ndtri

    n = jack.size
    boot = boot[np.isfinite(boot)]
    jack = jack[np.isfinite(jack)]
    if not boot.size or not np.isfinite(est):
        return float("nan"), float("nan")
    below = ((boot < est).sum() + 0.5 * (boot == est).sum()) / boot.size
    z0 = ndtri(np.clip(below, 1 / (2 * boot.size), 1 - 1 / (2 * boot.size)))
    d = jack.mean() - jack
    spread = (d ** 2).sum()
    a = (d ** 3).sum() / (6 * spread ** 1.5) if spread > 0 else 0.0
    level = bootstrap.LEVEL if level is None else level
    z = ndtri(np.asarray([(1 - level) / 2, (1 + level) / 2]))
    q = ndtr(z0 + (z0 + z) / (1 - a * (z0 + z)))
    lo, hi = bootstrap.widen(est, *np.percentile(boot, 100 * q), n)
    return float(lo), float(hi)


def sequence_baselines(trace: Trace, rows: np.ndarray, starts: np.ndarray,
                       lengths: np.ndarray) -> dict:
    """Per committed sequence (one per request, from committed_sequences): the loads of all its
    request's rows (the pooled independence baseline's pieces) and its within-request baseline,
    the summed layer-mean intersections its n - 1 adjacent pairs would have if its tokens came
    in random order: sum_e (c_e^2 - c_e) / n per layer (c_e: its committed tokens selecting e),
    so that per-request expert preference is not counted as temporal."""
    req = trace.columns["request"][rows[starts]].astype(np.int64)
    ids, loads, tokens = request_loads(trace)
    at = np.searchsorted(ids, req)
    c = group_loads(trace.experts, rows, np.repeat(np.arange(starts.size), lengths), starts.size,
                    trace.num_experts)
    with np.errstate(invalid="ignore", divide="ignore"):
        within = np.where(lengths > 1, (c * (c - 1)).sum(axis=2).mean(axis=1) / lengths, 0.0)
    return {"loads": loads[at], "tokens": tokens[at], "within": within}


def sequence_overlap(experts: np.ndarray, max_d: int = SEQUENCE_DISTANCES,
                     num_experts: int | None = None) -> np.ndarray:
    """[layer, d-1] overlap along sequences of equal length: experts (sequences, T, layers, k)."""
    n_seq, t, n_layers, k = experts.shape
    n = int(experts.max()) + 1 if num_experts is None else num_experts
    starts = np.arange(n_seq, dtype=np.int64) * t
    return sequence_overlap_rows(experts.reshape(n_seq * t, n_layers, k), starts,
                                 np.full(n_seq, t, np.int64), n, max_d)[0]


def sequence_summary(seq: np.ndarray, pairs: np.ndarray, ws: "WindowStats", ci: dict) -> dict:
    """Layer-averaged overlap along the committed sequence beside a trace's window statistics:
    by distance, its step 1 against ci's bias-corrected independence baseline (ci: the sequence
    intervals with their baselines, trace_sequence_stats), and the verify ratio (the step-1
    overlap of adjacent positions inside verification windows, rejected drafts included: this
    pipeline's reading of the study's undefined "verify ratio", docs/method.md)."""
    ov = np.nanmean(seq, axis=0) if seq.size else np.full(0, np.nan)
    ind, wr = float(ci["independence"]), ci["within_request"]
    s1 = float(ov[0]) if ov.size and np.isfinite(ov[0]) else float("nan")
    out = {"sequence_by_distance": ov.tolist(), "sequence_pairs": pairs.tolist(),
           "sequence_step1": s1, "sequence_temporal": s1 - ind,
           "sequence_temporal_share": (s1 - ind) / s1 if s1 > 0 else float("nan"),
           "verify_ratio": float(ws.overlap[:, 0].mean()),
           "hottest_share": float(ws.q.max(axis=1).max()),
           "sequence_low": ci["low"], "sequence_high": ci["high"],
           "sequence_requests": ci["n_sequences"], "sequence_decay": ci["decay"],
           "sequence_decay_low": ci["decay_low"], "sequence_decay_high": ci["decay_high"],
           # over the resampled requests with the baseline recomputed in each (the step-1
           # interval's ends with the baseline held fixed were far too narrow)
           "sequence_temporal_share_low": ci["temporal_share_low"],
           "sequence_temporal_share_high": ci["temporal_share_high"],
           # an end held at what the statistic can be (within_range)
           "sequence_temporal_share_clipped": ci["temporal_share_clipped"],
           "independent_low": ci["independence_low"], "independent_high": ci["independence_high"],
           "independent_clipped": ci["independence_clipped"],
           "sequence_temporal_share_within_request": (s1 - wr) / s1 if s1 > 0 else float("nan"),
           # its interval: BCa over the same resamples (sequence_intervals)
           "sequence_temporal_share_within_request_low": ci["temporal_share_within_low"],
           "sequence_temporal_share_within_request_high": ci["temporal_share_within_high"]}
    out.update({f"sequence_{key}": ci[key] for key in (
        "excess", "excess_low", "excess_high", "excess_clipped", "excess_within",
        "excess_within_low", "excess_within_high", "within_request")})
    return out


def committed_sequences(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the committed token sequence of every request, in generation order: position 0 of
    each step (the last committed token, decoded from) and the accepted drafts after it. Returns
    (row indices, sequence starts and lengths into those indices), one sequence per request."""
    from .trace import ACCEPTED, COMMITTED

    st = trace.columns["status"]
    rows = np.flatnonzero((st == COMMITTED) | (st == ACCEPTED))
    req = trace.columns["request"][rows].astype(np.int64)
    if rows.size == 0:
        return rows, np.zeros(0, np.int64), np.zeros(0, np.int64)
    new = np.ones(rows.size, bool)
    new[1:] = req[1:] != req[:-1]
    starts = np.flatnonzero(new).astype(np.int64)
    return rows, starts, np.diff(np.append(starts, rows.size)).astype(np.int64)


@numba.njit(cache=True, parallel=True)
def _window_pair_pass(experts, starts, lengths, n_experts, max_d):
    """Per window and distance d = 1..max_d: |S(j) & S(j+d)| summed over its position pairs
    d apart and over layers."""
    n_layers = experts.shape[1]
    n_words = (n_experts + 63) // 64
    out = np.zeros((starts.size, max_d), np.int64)
    for w in numba.prange(starts.size):
        masks = np.zeros((lengths[w], n_words), np.uint64)
        for layer in range(n_layers):
            _fill_masks(experts, starts[w], lengths[w], layer, masks)
            for d in range(1, lengths[w]):
                out[w, d - 1] += _pair_sum(masks, lengths[w], d)
    return out


@numba.njit(cache=True, parallel=True)
def _status_pair_pass(experts, starts, lengths, n_experts, cls, max_d):
    """Per window, acceptance class c (cls per row: 0 committed or accepted, 1 not accepted) and
    distance d = 1..max_d: |S(j) & S(j+d)| summed over layers and over the position pairs d apart
    whose two tokens are both of class c, and the number of those pairs."""
    n_layers = experts.shape[1]
    n_words = (n_experts + 63) // 64
    sums = np.zeros((starts.size, 2, max_d), np.int64)
    pairs = np.zeros((starts.size, 2, max_d), np.int64)
    for w in numba.prange(starts.size):
        s = starts[w]
        n = lengths[w]
        masks = np.zeros((n, n_words), np.uint64)
        for layer in range(n_layers):
            _fill_masks(experts, s, n, layer, masks)
            for d in range(1, min(n, max_d + 1)):
                for j in range(n - d):
                    c = cls[s + j]
                    if c != cls[s + j + d]:
                        continue
                    acc = np.int64(0)
                    for word in range(n_words):
                        acc += np.int64(_popcount(masks[j, word] & masks[j + d, word]))
                    sums[w, c, d - 1] += acc
                    if layer == 0:
                        pairs[w, c, d - 1] += 1
    return sums, pairs


def _percentiles(boot: np.ndarray, est, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval's ends (at bootstrap.LEVEL) of resamples [boot, ...] of n
    requests, widened about the point est ([...]) for the small sample (bootstrap.widen); NaN
    where none is finite (too few requests to resample: request_weights)."""
    return bootstrap.widen(np.asarray(est, dtype=np.float64), *_ends(boot), n)


def _ends(boot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The resamples' own percentiles at the tails of bootstrap.LEVEL, unwidened."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "All-NaN slice": NaN is the answer
        lo, hi = np.nanpercentile(boot, bootstrap.tails(), axis=0)
    return lo, hi


def request_loads(trace: Trace, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """(sorted request ids, per request the [layer, expert] count of its tokens selecting each
    expert, its token count) over `rows` (default: every row): the pieces of the pooled
    independence baseline that a bootstrap over requests resamples."""
    rows = np.arange(len(trace)) if rows is None else rows
    ids, unit = np.unique(trace.columns["request"][rows].astype(np.int64), return_inverse=True)
    return (ids, group_loads(trace.experts, rows, unit, ids.size, trace.num_experts),
            np.bincount(unit, minlength=ids.size).astype(np.float64))


def group_loads(experts: np.ndarray, rows: np.ndarray, group: np.ndarray, n_groups: int,
                num_experts: int, chunk: int = 1 << 16) -> np.ndarray:
    """[group, layer, expert] how many of the given rows of each group select each expert, in
    chunks of rows (memory stays small whatever the trace's length)."""
    n_layers = experts.shape[1]
    out = np.zeros(n_groups * n_layers * num_experts, np.int64)
    for lo in range(0, rows.size, chunk):
        r, g = rows[lo:lo + chunk], group[lo:lo + chunk].astype(np.int64)
        flat = (g[:, None, None] * n_layers + np.arange(n_layers)[None, :, None]) * num_experts \
            + experts[r].astype(np.int64)
        out += np.bincount(flat.ravel(), minlength=out.size)
    return out.reshape(n_groups, n_layers, num_experts).astype(np.float64)


def independence_of(loads: np.ndarray, tokens: np.ndarray, k: int) -> np.ndarray:
    """The layer-mean independence baseline sum_e q_e^2 / k from summed loads [..., layer, expert]
    and token counts [...] (WindowStats.independence, averaged over layers)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        q = loads / np.asarray(tokens, np.float64)[..., None, None]
    return (q ** 2).sum(axis=-1).mean(axis=-1) / k


def _resampled_independence(w: np.ndarray, loads: np.ndarray, tokens: np.ndarray,
                            k: int) -> tuple[float, np.ndarray]:
    """The pooled independence baseline and its value in each resample of requests (w: [boot,
    request] weights; loads, tokens: per request, from request_loads)."""
    shape = loads.shape
    boot = independence_of((w @ loads.reshape(shape[0], -1)).reshape(-1, *shape[1:]), w @ tokens,
                           k)
    return float(independence_of(loads.sum(axis=0), tokens.sum(), k)), boot


def baseline_resamples(w: np.ndarray, loads: np.ndarray, tokens: np.ndarray,
                       k: int) -> tuple[float, float, np.ndarray]:
    """The pooled independence baseline of requests (loads, tokens: per request, from
    request_loads) bias-corrected (independence_corrected: the point reported), its plug-in and
    the plug-in in each resample of requests (w: [boot, request] weights): a statistic measured
    against the baseline takes its point against the corrected one and its interval from the
    plug-in and its resamples (bounded_basic_interval)."""
    plug, boot = _resampled_independence(w, loads, tokens, k)
    return independence_corrected(loads, tokens, k), plug, boot


def window_intervals(trace: Trace, shuffle_null: bool = True, keep: np.ndarray | None = None,
                     n_boot: int | None = None, seed: int | None = None,
                     temporal: bool = True) -> dict:
    """Intervals (at bootstrap.LEVEL, 95%) of the layer-mean overlap inside windows by distance,
    of the within-window shuffle null, of the step-1 overlap above that null (step 1 - shuffle 1)
    and of the decay from d = 1 to d = K, each resampling whole requests (percentile bootstrap,
    n_boot resamples, default bootstrap.N_BOOT, from a fixed seed, default bootstrap.BOOT_SEED):
    a request's windows share its prompt and routing, so the request is the unit. keep: the
    windows to use (e.g. those without repetition). With fewer than bootstrap.MIN_REQUESTS
    requests every interval is NaN (request_weights): the points alone, no direction.

    The shuffle null (left out where shuffle_null is False) is exact (shuffle_weights), so step 1
    above it is a fixed contrast of the distances, for K = 3 (2 (o1 - o2) + (o1 - o3)) / 6: a
    re-expression of the decay, not a second effect. It is reported as the share of the temporal
    overlap (step 1 - independence) that it certifies as within-window ordering
    (`above_shuffle_share`; the rest is window-level), against the bias-corrected baseline with a
    basic interval (bounded_basic_interval). `decay_within_status`: the step-1 minus
    step-2 overlap among pairs of tokens of the same acceptance status (both committed or
    accepted, or both not accepted), weighted by each status's step-2 pairs: the distance
    contrast without the change of status mix with distance.

    temporal: the temporal overlap and its share with their intervals (temporal_intervals);
    with temporal and shuffle_null both False the resampled baseline they take
    (baseline_resamples) is not computed, for callers that keep neither."""
    from .trace import ACCEPTED, COMMITTED

    starts, lengths = trace.windows()
    kd = trace.k_draft
    req = trace.columns["request"][starts].astype(np.int64)
    experts = np.ascontiguousarray(trace.experts)
    sums = _window_pair_pass(experts, starts, lengths, trace.num_experts, kd)
    pairs = np.clip(lengths[:, None] - np.arange(1, kd + 1)[None, :], 0, None)
    st = trace.columns["status"]
    cls = (~((st == COMMITTED) | (st == ACCEPTED))).astype(np.int8)
    st_sums, st_pairs = _status_pair_pass(experts, starts, lengths, trace.num_experts, cls,
                                          min(2, kd))
    row_keep = None
    if keep is not None:
        sums, pairs, req, lengths = sums[keep], pairs[keep], req[keep], lengths[keep]
        st_sums, st_pairs = st_sums[keep], st_pairs[keep]
        row_keep = np.repeat(keep, trace.windows()[1])
    ids, unit = np.unique(req, return_inverse=True)
    g = ids.size
    scale = float(trace.num_layers * trace.top_k)

    def per_request(x):
        x = x.reshape(x.shape[0], -1).astype(np.float64)
        return np.stack([np.bincount(unit, weights=x[:, c], minlength=g)
                         for c in range(x.shape[1])], axis=1)

    s_req, p_req = per_request(sums), per_request(pairs)
    w = request_weights(g, n_boot, seed) if g else np.zeros((n_boot or bootstrap.N_BOOT, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        est = s_req.sum(axis=0) / (p_req.sum(axis=0) * scale)
        boot = (w @ s_req) / ((w @ p_req) * scale)
    # the requests' pieces (layer sums [request, d], pairs [request, d]; overlap = sums /
    # (pairs * layers * k)) for statistics that resample them with others (slices_mean)
    out = {"n_requests": int(g), "overlap": est.tolist(),
           "per_request": {"sums": s_req, "pairs": p_req, "scale": scale}}
    lo, hi = _percentiles(boot, est, g)
    out.update(overlap_low=lo.tolist(), overlap_high=hi.tolist())
    dlo, dhi = _percentiles(boot[:, 0] - boot[:, -1], est[0] - est[-1], g)
    out.update(decay=float(est[0] - est[-1]), decay_low=float(dlo), decay_high=float(dhi))
    if kd >= 2:
        out.update(_within_status(per_request(st_sums), per_request(st_pairs), w, scale, g))
    if temporal or shuffle_null:
        ind, plug, ind_boot = baseline_resamples(
            w, *request_loads(trace, None if row_keep is None else np.flatnonzero(row_keep))[1:],
            trace.top_k)
    if temporal:
        out.update(temporal_intervals(float(est[0]), boot[:, 0], ind, plug, ind_boot,
                                      trace.top_k / trace.num_experts, g))
    if shuffle_null:
        # per window: all its pairs' intersections, spread over the distances as a shuffle would
        sh_req = per_request(sums.sum(axis=1)[:, None] * shuffle_weights(lengths, kd))
        with np.errstate(invalid="ignore", divide="ignore"):
            sh_est = sh_req.sum(axis=0) / (p_req.sum(axis=0) * scale)
            sh_boot = (w @ sh_req) / ((w @ p_req) * scale)
            share = (est[0] - sh_est[0]) / (est[0] - ind)
            # the share has no range to hold it in (its denominator, the temporal overlap, can
            # be 0 or below: the report marks a share outside [0, 1])
            share_lo, share_hi, _ = bounded_basic_interval(
                float((est[0] - sh_est[0]) / (est[0] - plug)),
                (boot[:, 0] - sh_boot[:, 0]) / (boot[:, 0] - ind_boot), n=g, point=float(share))
        lo, hi = _percentiles(sh_boot, sh_est, g)
        above_lo, above_hi = _percentiles(boot[:, 0] - sh_boot[:, 0], est[0] - sh_est[0], g)
        out.update(shuffle=sh_est.tolist(), shuffle_low=lo.tolist(), shuffle_high=hi.tolist(),
                   above_shuffle=float(est[0] - sh_est[0]), above_shuffle_low=float(above_lo),
                   above_shuffle_high=float(above_hi), independence=ind,
                   above_shuffle_share=float(share), above_shuffle_share_low=float(share_lo),
                   above_shuffle_share_high=float(share_hi))
    return out


def slices_mean(units: list[dict], n_boot: int | None = None) -> dict:
    """The mean over slices (prompt categories) of each one's layer-mean overlap inside windows
    by distance, as the study's Table 18 averages a held-out set's slices, and of its decay
    from d = 1 to K, each with its percentile interval (at bootstrap.LEVEL) from a stratified
    bootstrap over requests: each slice's own requests resampled (request_weights, slice i from
    seed bootstrap.BOOT_SEED + i: a request's windows lie in one slice) and the resampled slices
    averaged. units: each slice's window_intervals "per_request". With fewer than
    bootstrap.MIN_REQUESTS requests in any slice the intervals are NaN."""
    seed = bootstrap.BOOT_SEED
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.mean([u["sums"].sum(axis=0) / (u["pairs"].sum(axis=0) * u["scale"])
                       for u in units], axis=0)
        boot = np.mean([(w @ u["sums"]) / ((w @ u["pairs"]) * u["scale"]) for i, u in
                        enumerate(units) for w in [request_weights(u["sums"].shape[0], n_boot,
                                                                   seed + i)]], axis=0)
    # each slice's resamples short of its own spread: widened for the smallest slice's requests
    n = min(u["sums"].shape[0] for u in units)
    lo, hi = _percentiles(boot, est, n)
    dlo, dhi = _percentiles(boot[:, 0] - boot[:, -1], est[0] - est[-1], n)
    return {"overlap": est.tolist(), "overlap_low": lo.tolist(), "overlap_high": hi.tolist(),
            "decay": float(est[0] - est[-1]), "decay_low": float(dlo), "decay_high": float(dhi),
            "n_requests": int(sum(u["sums"].shape[0] for u in units))}


def temporal_intervals(step1: float, step1_boot: np.ndarray, ind: float, plug: float,
                       ind_boot: np.ndarray, floor: float, n: int) -> dict:
    """The temporal overlap (step 1 - independence) and its share of step 1, against the
    bias-corrected baseline `ind`, with basic intervals (bounded_basic_interval) from each
    resample's step 1 against its own plug-in baseline (plug, ind_boot: baseline_resamples),
    as the sequence's excess and share take theirs (sequence_intervals): the excess held in
    [-1, 1 - k/N] and the share at most 1 - k/N (floor: k/N), `_clipped` where an end was;
    n: the requests resampled."""
    top = 1 - floor
    step1 = np.float64(step1)  # a step 1 of 0 divides to inf/NaN, as the resamples do
    with np.errstate(invalid="ignore", divide="ignore"):
        tlo, thi, tclip = bounded_basic_interval(step1 - plug, step1_boot - ind_boot, -1.0, top,
                                                  n=n, point=step1 - ind)
        slo, shi, sclip = bounded_basic_interval((step1 - plug) / step1,
                                                 (step1_boot - ind_boot) / step1_boot,
                                                 -np.inf, top, n=n,
                                                 point=(step1 - ind) / step1)
    return {"temporal": float(step1 - ind), "temporal_low": tlo, "temporal_high": thi,
            "temporal_clipped": tclip,
            "temporal_share": float((step1 - ind) / step1) if step1 > 0 else float("nan"),
            "temporal_share_low": slo, "temporal_share_high": shi,
            "temporal_share_clipped": sclip}


def status_contrast(sums: np.ndarray, pairs: np.ndarray, scale: float) -> np.ndarray:
    """The step-1 minus step-2 overlap within acceptance status from summed intersections and
    pair counts [..., (class, d)] of the two classes at d = 1, 2, each class weighted by its
    step-2 pairs: [...]."""
    with np.errstate(invalid="ignore", divide="ignore"):
        o = (sums / (pairs * scale)).reshape(*sums.shape[:-1], 2, 2)
        n2 = pairs.reshape(*pairs.shape[:-1], 2, 2)[..., 1]
        diff = o[..., 0] - o[..., 1]
        weight = np.where(np.isfinite(diff), n2, 0.0)
        return (np.where(weight > 0, diff, 0.0) * weight).sum(axis=-1) / weight.sum(axis=-1)


def _within_status(s_req: np.ndarray, p_req: np.ndarray, w: np.ndarray, scale: float,
                   n: int) -> dict:
    """decay_within_status and its interval from per-request sums and pair counts [request,
    (class, d)] for the two acceptance classes at d = 1, 2 (w: the resamples' request weights
    over n requests)."""
    est = float(status_contrast(s_req.sum(axis=0), p_req.sum(axis=0), scale))
    lo, hi = _percentiles(status_contrast(w @ s_req, w @ p_req, scale), est, n)
    return {"decay_within_status": est,
            "decay_within_status_low": float(lo), "decay_within_status_high": float(hi)}


def trace_sequence_overlap(trace: Trace, max_d: int = SEQUENCE_DISTANCES
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Overlap along each request's committed sequence, across verification windows:
    ([layer, d-1], pairs [d-1]) for d = 1..max_d."""
    rows, starts, lengths = committed_sequences(trace)
    return sequence_overlap_rows(trace.experts[rows], starts, lengths, trace.num_experts, max_d)


def trace_sequence_stats(trace: Trace, max_d: int = SEQUENCE_DISTANCES
                         ) -> tuple[np.ndarray, np.ndarray, dict]:
    """trace_sequence_overlap and its sequence_intervals (one request, one unit) from one pass;
    the intervals' per_sequence units carry each one's request id."""
    rows, starts, lengths = committed_sequences(trace)
    sums, pairs = _sequence_sums(trace.experts[rows], starts, lengths, trace.num_experts, max_d)
    ov, total = _overlap_of(sums, pairs, trace.top_k)
    ci = sequence_intervals(sums, pairs, trace.top_k,
                            baselines=sequence_baselines(trace, rows, starts, lengths))
    ci["per_sequence"]["request"] = trace.columns["request"][rows[starts]].astype(np.int64)
    return ov, total, ci


def trace_independence(trace: Trace) -> float:
    """The pooled independence baseline of a trace's requests, bias-corrected over them: the one
    trace_sequence_stats' intervals measure against (independence_corrected of
    sequence_baselines' loads), without their resamples."""
    rows, starts, lengths = committed_sequences(trace)
    b = sequence_baselines(trace, rows, starts, lengths)
    return independence_corrected(b["loads"], b["tokens"], trace.top_k)


def request_window_sums(trace: Trace, requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request (in the order `requests` gives them, sorted ids): |S(j) & S(j+d)| summed over
    its windows' position pairs d apart [request, layer, d-1] and the count of those pairs
    [request, d-1], d = 1..K: the pieces of each layer's overlap inside windows (WindowStats.
    overlap: their sums over requests / (pairs * k)) that a bootstrap over requests resamples."""
    starts, lengths = trace.windows()
    sums, pairs = _sequence_sums(trace.experts, starts, lengths, trace.num_experts, trace.k_draft)
    at = np.searchsorted(requests, trace.columns["request"][starts].astype(np.int64))
    out_s = np.zeros((requests.size, *sums.shape[1:]))
    out_p = np.zeros((requests.size, pairs.shape[1]))
    np.add.at(out_s, at, sums)
    np.add.at(out_p, at, pairs)
    return out_s, out_p


def request_unique(trace: Trace, requests: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """Per request (in the order `requests` gives them): the summed layer-mean number of distinct
    experts of its full windows (K + 1 rows), how many it has, and [layer, expert] how many of
    them use each expert: the pieces of the empirical unique experts per window that a bootstrap
    over requests resamples, and of WindowStats.used that the unique table's jackknife leaves
    out (unique.window_unique_table)."""
    starts, lengths = trace.windows()
    full = starts[lengths == trace.k_draft + 1]
    positions, (_, n_layers, k), n = trace.k_draft + 1, trace.experts.shape, trace.num_experts
    total = np.zeros(requests.size)
    count = np.zeros(requests.size)
    use = np.zeros((requests.size, n_layers, n))
    if not full.size:
        return total, count, use
    at = np.searchsorted(requests, trace.columns["request"][full].astype(np.int64),
                         sorter=np.argsort(requests))
    at = np.argsort(requests)[at]
    for lo in range(0, full.size, 4096):  # a few MB at a time
        chunk, unit = full[lo:lo + 4096], at[lo:lo + 4096]
        ids = trace.experts[chunk[:, None] + np.arange(positions)[None, :]]  # [w, pos, L, k]
        ids = np.sort(ids.transpose(0, 2, 1, 3).reshape(chunk.size, n_layers, positions * k),
                      axis=2).astype(np.int64)
        first = np.concatenate([np.ones((chunk.size, n_layers, 1), bool),
                                np.diff(ids, axis=2) != 0], axis=2)  # each distinct expert once
        np.add.at(total, unit, first.sum(axis=2).mean(axis=1))
        np.add.at(count, unit, 1)
        # a repeat counts as expert n, left out; grouped by the chunk's own requests, so that
        # each chunk allocates for those alone, not for every request of the trace
        present, local = np.unique(unit, return_inverse=True)
        use[present] += group_loads(np.where(first, ids, n), np.arange(chunk.size), local,
                                    present.size, n + 1)[..., :n]
    return total, count, use


@dataclass
class WindowStats:
    """Per-layer window statistics of one trace. Arrays are indexed [layer] or [layer, d-1]."""

    num_experts: int
    top_k: int
    k_draft: int
    n_tokens: int
    n_windows: int
    n_full_windows: int
    pairs: np.ndarray          # [d-1] number of position pairs at distance d
    overlap: np.ndarray        # [layer, d-1]
    shuffle: np.ndarray | None  # [layer, d-1] within-window shuffle null
    q: np.ndarray              # [layer, e] load marginals, sum_e q = top_k
    unique: np.ndarray         # [layer] mean |union| over full windows
    used: np.ndarray           # [layer, e] fraction of full windows that use e

    @property
    def num_layers(self) -> int:
        return self.q.shape[0]

    @property
    def uniform(self) -> float:
        return self.top_k / self.num_experts

    @property
    def independence(self) -> np.ndarray:
        """[layer] sum_e q_e^2 / k."""
        return (self.q**2).sum(axis=1) / self.top_k

    def summary(self, independent: float | None = None) -> dict:
        """Layer-averaged statistics, in the shape of the study's overlap tables. independent:
        the baseline the temporal overlap is measured against (default the plug-in sum_e q^2 / k
        of the loads, biased up; the overlap stage gives the corrected one: trace_independence)."""
        ov = self.overlap.mean(axis=0)
        ind = float(self.independence.mean()) if independent is None else float(independent)
        out = {
            "num_experts": self.num_experts, "top_k": self.top_k, "k_draft": self.k_draft,
            "n_tokens": self.n_tokens, "n_windows": self.n_windows,
            "n_full_windows": self.n_full_windows,
            "uniform": self.uniform, "independent": ind,
            "overlap_by_distance": ov.tolist(),
            "pairs_by_distance": self.pairs.tolist(),
            "step1": float(ov[0]),
            "temporal": float(ov[0] - ind),
            "temporal_share": float((ov[0] - ind) / ov[0]) if ov[0] > 0 else float("nan"),
            "decay_1_to_K": float(ov[0] - ov[-1]),
        }
        if self.shuffle is not None:
            sh = self.shuffle.mean(axis=0)
            out["shuffle_by_distance"] = sh.tolist()
            out["shuffle_step1"] = float(sh[0])
        return out


def window_stats(trace: Trace, shuffle_null: bool = True) -> WindowStats:
    """Overlap by distance, loads and window unions of a trace; the shuffle null where
    shuffle_null is True.

    The within-window shuffle null is its exact expectation over all permutations of each
    window's positions (shuffle_weights): no permutation is drawn, so there is no seed."""
    positions = trace.k_draft + 1
    starts, lengths = trace.windows()
    if lengths.size and lengths.max() > positions:
        raise ValueError(f"window of {lengths.max()} rows exceeds K+1={positions}")
    experts = np.ascontiguousarray(trace.experts)
    n_chunks = max(1, min(starts.size, 8 * numba.get_num_threads()))
    pair_sum, load, union_sum, present, bylen = _window_pass(
        experts, starts, lengths, trace.num_experts, positions, n_chunks)
    pairs = np.array([np.clip(lengths - d, 0, None).sum() for d in range(1, positions)],
                     np.int64)
    n_full = int((lengths == positions).sum())
    n_tokens = len(trace)
    k = trace.top_k
    with np.errstate(invalid="ignore", divide="ignore"):
        overlap = pair_sum[:, 1:] / (pairs[None, :] * k)
        shuffle = None if not shuffle_null else \
            bylen @ shuffle_weights(np.arange(positions + 1), positions - 1) / (pairs[None, :] * k)
        return WindowStats(
            num_experts=trace.num_experts, top_k=k, k_draft=trace.k_draft, n_tokens=n_tokens,
            n_windows=int(starts.size), n_full_windows=n_full, pairs=pairs, overlap=overlap,
            shuffle=shuffle, q=load / max(n_tokens, 1),
            unique=union_sum / n_full if n_full else np.full(trace.num_layers, np.nan),
            used=present / n_full if n_full else np.full(load.shape, np.nan),
        )


def row_overlaps(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (consecutive overlap with j-1, anchor overlap with j=0), layer-averaged; NaN at j=0."""
    starts, lengths = trace.windows()
    return _row_overlaps(np.ascontiguousarray(trace.experts), starts, lengths, trace.num_experts)


def reference_stats(experts: np.ndarray, starts, lengths, k_draft: int, num_experts: int) -> dict:
    """Plain-Python overlap by distance, loads and window unions (sets and loops).

    The reference that tests check the compiled pass against and that the benchmark beats.
    """
    n_layers, k = experts.shape[1], experts.shape[2]
    sums = [[0] * (k_draft + 1) for _ in range(n_layers)]
    counts = [0] * (k_draft + 1)
    loads = [[0] * num_experts for _ in range(n_layers)]
    unions = [0] * n_layers
    n_full = 0
    for s, n in zip(starts.tolist(), lengths.tolist()):
        for d in range(1, n):
            counts[d] += n - d
        n_full += n == k_draft + 1
        for layer in range(n_layers):
            sets = [set(experts[s + j, layer].tolist()) for j in range(n)]
            for st in sets:
                for e in st:
                    loads[layer][e] += 1
            for d in range(1, n):
                for j in range(n - d):
                    sums[layer][d] += len(sets[j] & sets[j + d])
            if n == k_draft + 1:
                unions[layer] += len(set().union(*sets))
    n_tokens = int(sum(lengths))
    return {
        "overlap": np.array([[sums[l][d] / (counts[d] * k) for d in range(1, k_draft + 1)]
                             for l in range(n_layers)]),
        "q": np.array(loads) / n_tokens,
        "unique": np.array(unions) / max(n_full, 1),
    }


def repetitive_windows(trace: Trace) -> np.ndarray:
    """Per window: does it show degenerate repetition? A token that occurs twice inside the
    window, or a committed token equal to the previous step's committed token of the same request.
    Repeated tokens route alike, so such windows inflate overlap without saying anything about
    routing; tables report overlap with them and without them."""
    starts, lengths = trace.windows()
    tok = trace.columns["token_id"]
    req = trace.columns["request"]
    flag = np.zeros(starts.size, bool)
    for w, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
        ids = tok[s:s + n]
        flag[w] = np.unique(ids).size < n
    same_req = np.zeros(starts.size, bool)
    same_req[1:] = req[starts[1:]] == req[starts[:-1]]
    repeat_prev = np.zeros(starts.size, bool)
    repeat_prev[1:] = tok[starts[1:]] == tok[starts[:-1]]
    return flag | (same_req & repeat_prev)


def select_windows(trace: Trace, keep: np.ndarray) -> Trace:
    """The trace restricted to the kept windows (whole windows, order unchanged)."""
    from dataclasses import replace

    starts, lengths = trace.windows()
    rows = np.repeat(keep, lengths)
    return replace(trace, experts=trace.experts[rows],
                   columns={k: v[rows] for k, v in trace.columns.items()},
                   weights=None if trace.weights is None else trace.weights[rows])


def overlap_by_status(trace: Trace, consec: np.ndarray | None = None) -> list[dict]:
    """Mean consecutive overlap overlap(S(j-1), S(j)) of the drafts in each acceptance status at
    each draft position j = 1..K (SPEC: tokens are compared within one position only; pooled over
    positions, the statuses' mix of positions made a gap of its own), each mean with its
    percentile interval over resamples of the requests with drafts in that cell (request_weights:
    the same draw as every other routing interval; NaN below bootstrap.MIN_REQUESTS of them). One row per position and
    status that has drafts: draft_position, status, mean, mean_low, mean_high, n (drafts),
    n_requests."""
    from .trace import STATUS

    if consec is None:
        consec, _ = row_overlaps(trace)
    st, pos = trace.columns["status"], trace.columns["position"]
    req = trace.columns["request"].astype(np.int64)
    ids, unit = np.unique(req, return_inverse=True)
    rows = []
    for j in range(1, trace.k_draft + 1):
        for s, name in enumerate(STATUS[1:], start=1):
            m = (pos == j) & (st == s) & np.isfinite(consec)
            if not m.any():
                continue
            sums = np.bincount(unit[m], weights=consec[m], minlength=ids.size)
            counts = np.bincount(unit[m], minlength=ids.size).astype(np.float64)
            # resample the cell's own requests (those with drafts in it), as acceptance does:
            # over all of the trace's, a cell of two requests got an interval from resamples
            # that happened to draw them
            cell = counts > 0
            w = request_weights(int(cell.sum()))
            with np.errstate(invalid="ignore", divide="ignore"):
                lo, hi = _percentiles((w @ sums[cell]) / (w @ counts[cell]),
                                      sums.sum() / counts.sum(), int(cell.sum()))
            rows.append({"draft_position": j, "status": name,
                         "mean": float(sums.sum() / counts.sum()),
                         "mean_low": float(lo), "mean_high": float(hi), "n": int(m.sum()),
                         "n_requests": int(np.count_nonzero(counts))})
    return rows


LOOP_SPAN = 6  # committed tokens that must repeat with period 1 or 2 for a request to loop


def looping_requests(trace: Trace, span: int = LOOP_SPAN) -> np.ndarray:
    """The requests whose committed sequence loops: somewhere `span` consecutive committed tokens
    repeat with period 1 (a a a ...) or 2 (a b a b ...). One such request can carry the tail of a
    sequence statistic's bootstrap (overlap along a loop measures the loop); the sensitivity
    rows leave them out (sorted request ids)."""
    rows, starts, lengths = committed_sequences(trace)
    tok = trace.columns["token_id"][rows].astype(np.int64)
    req = trace.columns["request"][rows].astype(np.int64)
    out = []
    for s, n in zip(starts.tolist(), lengths.tolist()):
        t = tok[s:s + n]
        for p in (1, 2):
            if n < span:
                break
            same = (t[p:] == t[:-p]).astype(np.int64)  # t[i + p] == t[i]
            run = span - p  # equalities in a row that make `span` periodic tokens
            if same.size >= run and (np.convolve(same, np.ones(run, np.int64), "valid")
                                     == run).any():
                out.append(int(req[s]))
                break
    return np.array(sorted(set(out)), np.int64)


def select_requests(trace: Trace, drop: np.ndarray) -> Trace:
    """The trace without the given requests (whole requests, order unchanged)."""
    from dataclasses import replace

    rows = ~np.isin(trace.columns["request"].astype(np.int64), drop)
    return replace(trace, experts=trace.experts[rows],
                   columns={k: v[rows] for k, v in trace.columns.items()},
                   weights=None if trace.weights is None else trace.weights[rows])
