"""The report's sentences, each computed from the tables: the opening paragraph (what this run
shows), the findings table (each of the study's findings in the tiny targets beside their untrained
controls), what the routing and the measurements show run by run, how the run compares with the
study, and the caveats. A direction or a shape is stated only where an interval decides it, else
it is "undecided" (docs/method.md); the step model's curves are exact computations and are worded
as such.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from ..cost import stepmodel
from ..cost.costmodel import ModelDims
from ..cost.predictor import clipped_interval
from ..errors import InputError
from ..measured import sweep
from ..sources import published
from .bounds import SWEEP_REASONS
from .tables import Tables
from .words import and_join
from ..runs import dataset_parts, label_of
from .runs import (IPF_KEYS, by_distance, control_models, first_run, heldout_share, is_control,
                   load)

SHOWN, NOT_SHOWN, UNDECIDED, NOT_MEASURED = "shown", "not shown", "undecided", "not measured"
CPU = "not measurable on a CPU"
# the study's GPU findings the findings table carries beside the routing ones (_cpu_rows)
SPEEDUP_SHAPE, MOE_SHARE = ("SD speedup's shape against batch size, by the study's N/k rule",
                            "MoE share of time below its share of weights")
# what a sweep's shape must show, in the findings table's words (measured.sweep.shape_labels)
SHAPE_TESTS = {sweep.PEAK_LOW: "batch 1 above the largest batch size and, by an equivalence "
                               "test, no larger batch above batch 1 by more than the margin",
               sweep.CONCAVE: "an interior batch size above both the smallest and the largest "
                              "by more than the margin"}
LOOPING = 0.10  # share of windows that repeat a token above which a target's output loops
IPF_WITHIN = 0.04  # the study's "within 4%" of its uniform IPF (Table 20)


# --- small helpers ------------------------------------------------------------------------------


def _num(x, digits: int = 3, sign: bool = False) -> str:
    if not np.isfinite(x):
        return "–"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _with_interval(est: float, lo: float, hi: float, digits: int = 3, sign: bool = False) -> str:
    """"0.267 [0.255, 0.279]" (or the value alone where there is no interval)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{_num(est, digits, sign)} (no interval)"
    return (f"{_num(est, digits, sign)} [{_num(lo, digits, sign)}, "
            f"{_num(hi, digits, sign)}]")


def _pct_with_interval(v: float, lo: float, hi: float) -> str:
    """"58% [51%, 65%]": a share in percent with its 95% interval, with a decimal more (up to
    two) where whole percents would print an end that differs from the point as the point
    ("15% [15%, 15%]"); "(no interval)" beside it where it has none."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{100 * v:.0f}% (no interval)"
    for d in (0, 1, 2):
        p, a, b = (f"{100 * x:.{d}f}" for x in (v, lo, hi))
        if (a != p or lo == v) and (b != p or hi == v):
            break
    return f"{p}% [{a}%, {b}%]"


def _decided(low: float, high: float, above: float = 0.0) -> str:
    """shown / not shown / undecided for 'the quantity exceeds `above`', from its 95% interval."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return NOT_MEASURED
    if low > above:
        return SHOWN
    if high < above:
        return NOT_SHOWN
    return UNDECIDED


def direction(est: float, lo: float, hi: float, up: str, down: str) -> str:
    """A change worded only where its 95% interval decides it: `up` when it lies above 0,
    `down` below, else "undecided"; the number and interval beside the word."""
    decided = _decided(lo, hi)
    if decided == NOT_MEASURED:
        return (f"{_num(est, sign=True)} (no interval: no direction is claimed)"
                if np.isfinite(est) else "no interval: no direction is claimed")
    word = {SHOWN: up, NOT_SHOWN: down}.get(decided, "undecided")
    return f"{word} ({_with_interval(est, lo, hi, sign=True)})"


def _share_text(row) -> str:
    """The share of the temporal overlap that step 1 above the exact within-window shuffle null
    certifies, "15% [9%, 21%]" (empty where the table has none)."""
    v, (lo, hi) = _val(row, "above_shuffle_share"), _interval(row, "above_shuffle_share")
    if not np.isfinite(v):
        return ""
    return _pct_with_interval(v, lo, hi)


def _ordering_text(row) -> str:
    """What step 1 above the exact within-window shuffle null (a weighted mean of the decays
    from d = 1 inside windows) certifies, by its own interval: a share of the temporal overlap
    as within-window ordering only where step 1 is decidedly above the null; below it or
    undecided, the difference itself and that nothing is certified (empty where the table has
    none)."""
    share = _share_text(row)
    v, (lo, hi) = _val(row, "above_shuffle"), _interval(row, "above_shuffle")
    flagged = str(row.get("above_shuffle_share_status", "ok")) not in ("ok", "none", "nan")
    if not (share or flagged) or not np.isfinite(v):
        return ""
    if np.isfinite(lo) and lo > 0 and flagged:
        return (f"step 1 above the within-window shuffle null "
                f"({_with_interval(v, lo, hi, sign=True)}), but its share of the temporal "
                f"overlap is {row['above_shuffle_share_status']}: none certified")
    if np.isfinite(lo) and lo > 0:
        return f"certifying {share} of the temporal overlap as within-window ordering"
    where = ("below" if np.isfinite(hi) and hi < 0 else "not decidedly above")
    return (f"step 1 {where} the within-window shuffle null "
            f"({_with_interval(v, lo, hi, sign=True)}): no within-window ordering certified")


def _interval(row, col: str) -> tuple[float, float]:
    return float(row.get(f"{col}_low", np.nan)), float(row.get(f"{col}_high", np.nan))


def _bracket_pct(row, col: str) -> str:
    """ " [low%, high%]" of a percentage with its 95% interval in the row, else nothing."""
    lo, hi = _interval(row, col)
    return f" [{lo:+.1f}%, {hi:+.1f}%]" if np.isfinite(lo) and np.isfinite(hi) else ""


def _val(row, col: str) -> float:
    v = row.get(col, np.nan) if row is not None else np.nan
    return float(v) if v is not None and pd.notna(v) else np.nan


def _held(row, col: str) -> str:
    """What to say where the row flags an end of col's interval as held at the statistic's bound
    (col_clipped: the bootstrap's end passed what the statistic can be), else ""."""
    held = _flagged(row, f"{col}_clipped")
    return " (an end held at its bound, past which the bootstrap's fell)" if held else ""


def _too_few_without_repetition(row) -> str:
    """Where the overlap stage gave no numbers without the windows that repeat a token (too few
    are left: n_windows_no_repetition, beside NaN statistics), what to say instead; else ""."""
    n = _val(row, "n_windows_no_repetition")
    if not np.isfinite(n) or np.isfinite(_val(row, "step1_no_repetition")):
        return ""
    return f"only {int(n)} window(s) repeat no token, too few to measure without them"


def _bracket(row, col: str) -> str:
    """ " [low, high]" of a column with an interval in the row (an unbounded end as ∞), else
    nothing."""
    lo, hi = _interval(row, col)
    if not (np.isfinite(lo) and (np.isfinite(hi) or hi == np.inf)):
        return ""
    return f" [{lo:.2f}, {'∞' if hi == np.inf else f'{hi:.2f}'}]"


def _tau_text(v: float, lo: float, hi: float, spread: float = np.nan,
              repeats: float = np.nan) -> str:
    """A sweep's acceptance length as the report words it: with its 95% interval over the
    sweep's repeats where they differ, named as such; else "no interval over requests" (vLLM
    counts acceptance over the whole engine, not request by request), with why the repeats give
    none: they agree exactly (spread 0, or a table's interval of zero width), or there is one."""
    if not np.isfinite(v):
        return _num(v, 2)
    if np.isfinite(lo) and np.isfinite(hi) and lo < hi:
        return f"{v:.2f} [{lo:.2f}, {hi:.2f}] (over repeats, not requests)"
    # one repeat has spread 0 too: "measured once" is the reason there, tested first
    why = ("measured once" if repeats == 1
           else "repeats of greedy decoding agree exactly" if spread == 0 or lo == hi == v
           else "")
    return f"{v:.2f} (no interval over requests" + (f": {why})" if why else ")")


def _speedup_text(row) -> str:
    """A speedup with its 95% interval, as the report words it."""
    return f"{row['speedup']:.2f}" + (_bracket(row, "speedup") or " (no interval)")


def _te_text(row, col: str) -> str:
    """A TE of a table row as the report words it: the value (with its interval), or why it is
    not a number (its raw value, interval and status beside)."""
    v = row.get(col, np.nan)
    lo, hi = _interval(row, col)
    # a table of an older run may keep a value its interval does not identify, and one without
    # an interval may keep a value past a bound: the tables' one rule (sweep.bound_status)
    # decides it here too, by the point alone where there is no interval
    status = ((sweep.bound_status(v, lo, hi) if np.isfinite(lo) else sweep.bound_status(v))
              if pd.notna(v) else sweep.TE_OK)
    if status != sweep.TE_OK:
        return f"{status} (raw ratio {v:.2f}{_bracket(row, col)}, not a TE)"
    if pd.notna(v):
        return f"{v:.2f}" + _bracket(row, col)
    raw = row.get(f"{col}_raw", np.nan)
    status = row.get(f"{col}_status")
    if pd.isna(raw):
        # a TE the sweep measured but could not identify (no drafter series, no finite TE) is
        # not unmeasured: its reason, with the raw interval where the table keeps one
        if status in SWEEP_REASONS:
            iv = _bracket(row, f"{col}_raw").strip()
            return f"{status}" + (f" (raw ratio {iv})" if iv else "")
        return NOT_MEASURED
    # the raw ratio too is decided by the one rule, its interval where the table keeps one (as
    # bounds.bounded_te decides it); only a reason its numbers cannot show is kept as written
    if status not in SWEEP_REASONS:
        status = sweep.bound_status(raw, *(_interval(row, f"{col}_raw")
                                           if f"{col}_raw_low" in row else (None, None)))
    if status == sweep.TE_OK:  # an older table's NaN that the rule now reads as a TE
        return f"{raw:.2f}" + _bracket(row, f"{col}_raw")
    # the ratio is not a TE: said so, and its numbers named as raw
    return f"{status} (raw ratio {raw:.2f}{_bracket(row, f'{col}_raw')}, not a TE)"


def slice_runs(df: pd.DataFrame) -> dict[str, str]:
    """Runs whose dataset is a part of another run's "a+b+c" of the same model and K: the same
    prompts, decoded alike (greedy), so a slice of that run and not a second piece of evidence.
    {run: the run it is a slice of}."""
    if df.empty or "run" not in df:
        return {}
    out = {}
    rows = df.drop_duplicates("run")
    for _, r in rows.iterrows():
        if "+" in str(r["dataset"]):
            continue
        for _, o in rows.iterrows():
            if (o["model"], o["drafter"], o["k"]) == (r["model"], r["drafter"], r["k"]) \
                    and r["dataset"] in dataset_parts(o["dataset"])[1:]:
                out[r["run"]] = o["run"]
                break
    return out


# --- the caveats ------------------------------------------------------------------------------


# the IPF fits of the unique_experts table (runs.IPF_KEYS) in the caveats' words
IPF_FITS = {"uniform_sequence": "the study's uniform IPF fit, of the overlap along the committed "
                                "sequence,",
            "uniform_window": "this project's uniform IPF fit, of the overlap inside windows,",
            "skewed_window": "this project's skewed IPF fit"}


def report_caveats(td: Tables) -> list[str]:
    """What a reader must know before trusting a number: IPF fits that did not converge (each
    of the three, named) and batch sizes too large for the trace's sample of windows."""
    out = []
    df = td.read("unique_experts")
    for _, r in df.iterrows():
        for key in IPF_KEYS:
            short, bad = (_val(r, f"ipf_{key}_{what}_experts")
                          for what in ("unconverged", "infeasible"))
            if not short > 0:
                continue
            out.append(f"{label_of(r['model'], r['k'], r['dataset'])}: {IPF_FITS[key]} stopped "
                       f"short of the margins of {int(short)} expert(s)"
                       + (f", {int(bad)} of them with pair margins that cannot hold together "
                          "(no distribution over a window's positions has them)" if bad > 0
                          else " (feasible, near the boundary, where it converges slowly)")
                       + f"; its prediction (ipf_{key}) is the closest fit"
                       # the cost model prices no TE from a fit that did not hold its margins
                       + ("; no TE is priced from it (te_vs_batch and target_efficiency: "
                          "ipf_fit, ipf_skewed_fit)" if key == "skewed_window" else ""))
    df = td.read("te_vs_batch")
    if "sample_ok" in df:
        bad = df[~df["sample_ok"].astype(bool)]
        for (m, d, k, ds), g in bad.groupby(["model", "drafter", "k", "dataset"]):
            out.append(f"{label_of(m, k, ds)}: the trace has too few windows for the "
                       "measured-windows TE at batch "
                       f"{', '.join(str(b) for b in sorted(g['batch'].unique()))}")
    return out


# --- what the routing shows, run by run ---------------------------------------------------------


def _fmt(xs) -> str:
    return " / ".join(f"{x:.3f}" for x in xs)


def report_findings(td: Tables) -> list[str]:
    """What the routing shows, run by run: overlap by distance inside windows (its decay, the share
    of the temporal overlap that the decay certifies as within-window ordering, and the decay
    among pairs of one acceptance status, with intervals by request) and along the
    committed sequence, against the independence baseline; without the windows that repeat a
    token where there are many (repeated tokens route alike)."""
    ob = load(td, "overlap_by_distance")
    if ob.empty:
        return []
    slices = slice_runs(ob)
    out = []
    for _, r in ob.iterrows():
        steps = by_distance(r)
        line = (f"{label_of(r['model'], r['k'], r['dataset'])}: inside windows, overlap at "
                f"d = 1..{len(steps)} {_fmt(steps)}, from d = 1 to {len(steps)} "
                + direction(_val(r, "window_decay"), *_interval(r, "window_decay"),
                            "decays", "rises"))
        ordering = _ordering_text(r)
        if ordering:
            line += f"; {ordering}"
        if np.isfinite(_val(r, "window_decay_within_status")):
            line += ("; among pairs of one acceptance status, from d = 1 to 2 "
                     + direction(_val(r, "window_decay_within_status"),
                                 *_interval(r, "window_decay_within_status"), "decays",
                                 "rises"))
        ind = _with_interval(_val(r, "independent"), *_interval(r, "independent"))
        line += f"; independence {ind}{_held(r, 'independent')}"
        seq = by_distance(r, prefix="seq")
        if seq:
            line += (f"; along the committed sequence, d = 1..{len(seq)} {_fmt(seq)}, from "
                     f"d = 1 to {len(seq)} "
                     + direction(_val(r, "seq_decay"), *_interval(r, "seq_decay"), "decays",
                                 "rises"))
        rep = _val(r, "repetitive_windows_pct")
        if rep > 1 and _too_few_without_repetition(r):
            line += (f"; {rep:.0f}% of windows repeat a token: "
                     f"{_too_few_without_repetition(r)}")
        elif rep > 1:
            clean = by_distance(r, "_no_repetition", len(steps))
            line += (f"; {rep:.0f}% of windows repeat a token, and without them {_fmt(clean)}, "
                     + direction(_val(r, "window_decay_no_repetition"),
                                 *_interval(r, "window_decay_no_repetition"), "decays",
                                 "rises"))
            if np.isfinite(_val(r, "window_decay_within_status_no_repetition")):
                line += (", among pairs of one acceptance status "
                         + direction(_val(r, "window_decay_within_status_no_repetition"),
                                     *_interval(r, "window_decay_within_status_no_repetition"),
                                     "decays", "rises"))
        if r["run"] in slices:
            line += (f" (the same prompts as a slice of {slices[r['run']]}: the same evidence, "
                     "not a second sample)")
        out.append(line)
    return out


def _without_loops(dropped: float) -> str:
    """"without the N looping request(s)" (a table without the count: the looping requests)."""
    return (f"without the {int(dropped)} looping request(s)" if np.isfinite(dropped)
            else "without the looping requests")


def repetition_notes(td: Tables, models: list[str]) -> list[str]:
    """A sentence per tiny target whose output loops (a repeated token routes like its copy, so
    a loop can make overlap): the findings' own decays, inside windows among pairs of one
    acceptance status and along the sequence, without the windows that repeat a token and
    without the looping requests, beside their values with them; the decays are said to stand
    without the loops only where the intervals without them lie above 0."""
    ob = load(td, "overlap_by_distance")
    out = []
    if ob.empty or "repetitive_windows_pct" not in ob:
        return out
    for m in models:
        r = _first(ob, m)  # the findings table's run
        if r is None:
            continue
        share = _val(r, "repetitive_windows_pct")
        if not share > 100 * LOOPING:
            continue
        pairs = []
        for what, col, free, without in (
                ("inside windows among pairs of one acceptance status",
                 "window_decay_within_status", "window_decay_within_status_no_repetition",
                 "without the windows that repeat a token"),
                ("along the sequence", "seq_decay", "seq_loop_free_decay",
                 _without_loops(_val(r, "seq_loop_free_dropped_requests")))):
            if free.endswith("_no_repetition") and _too_few_without_repetition(r):
                pairs.append((what, without, f"none ({_too_few_without_repetition(r)})",
                              _with_interval(_val(r, col), *_interval(r, col), sign=True),
                              np.nan))
            elif np.isfinite(_val(r, free)):
                pairs.append((what, without, _with_interval(_val(r, free), *_interval(r, free),
                                                            sign=True),
                              _with_interval(_val(r, col), *_interval(r, col), sign=True),
                              _interval(r, free)[0]))
            elif np.isfinite(_val(r, col)):  # a table without it: nothing stands unsaid
                pairs.append((what, without, "not in this table",
                              _with_interval(_val(r, col), *_interval(r, col), sign=True),
                              np.nan))
        if not pairs:
            continue
        words = "; ".join(f"{what}, {without}, {a} (with them {b})"
                          for what, without, a, b, _ in pairs)
        stand = all(np.isfinite(lo) and lo > 0 for *_, lo in pairs)
        out.append(f"{m}'s output repeats a token in {share:.0f}% of its windows (a repeated "
                   f"token routes like its copy). The decays {words}: "
                   + ("they stand without the loops." if stand else
                      "without the loops not every decay is decided, so the loops may carry "
                      "part of them."))
    return out


# --- the findings table: each finding beside the untrained control ------------------------------


def _excess_text(o, ind: float) -> str:
    """Step 1 along the sequence above independence, with its interval, and above the
    within-request baseline (a table without them: the step and the baseline alone)."""
    base = f"step 1 {_num(_val(o, 'seq1'))}, independence {ind:.3f}"
    if not np.isfinite(_val(o, "seq_excess")):
        return f"{base} (no excess with its interval in this table)"
    return (_with_interval(_val(o, "seq_excess"), *_interval(o, "seq_excess"), sign=True)
            + _held(o, "seq_excess") + f" ({base}); above the within-request baseline "
              f"{_num(_val(o, 'seq_within_request'))}: "
            + _with_interval(_val(o, "seq_excess_within"), *_interval(o, "seq_excess_within"),
                             sign=True))


def _window_decay_text(o) -> str:
    """The decay inside windows among pairs of one acceptance status, beside the decay over all
    pairs and the share of the temporal overlap it certifies."""
    every = ("all pairs, d = 1 to K: "
             + _with_interval(_val(o, "window_decay"), *_interval(o, "window_decay"), sign=True)
             + (f", {_ordering_text(o)}" if _ordering_text(o) else ""))
    if not np.isfinite(_val(o, "window_decay_within_status")):
        return f"{every} (no decay within acceptance status in this table)"
    return (_with_interval(_val(o, "window_decay_within_status"),
                           *_interval(o, "window_decay_within_status"), sign=True)
            + f"; {every}")


def _loop_free_text(o) -> str:
    """The sequence decay without the requests whose output loops (a sensitivity row: one
    looping request can carry the bootstrap's tail), where the table has it."""
    dropped = _val(o, "seq_loop_free_dropped_requests")
    if not np.isfinite(dropped) or not dropped:
        return "" if not np.isfinite(dropped) else "; no request loops"
    if not np.isfinite(_val(o, "seq_loop_free_decay")):
        return f"; {int(dropped)} requests loop, too many to leave out"
    return (f"; without the {int(dropped)} looping request(s): "
            + _with_interval(_val(o, "seq_loop_free_decay"),
                             *_interval(o, "seq_loop_free_decay"), sign=True))


def _routing_rows(m: str, o, d, u) -> list[dict]:
    """The routing findings of one model's first run (o: its overlap_by_distance row, d: its
    decomposition row, u: its unique_experts row or None): finding, target, value, status."""
    kn, ind = float(d["k_over_n"]), float(o["independent"])
    hot = _val(d, "hottest_expert_pct")
    ilo, ihi = _interval(o, "independent")
    rows = [
        # decided by the baseline's interval over requests (a point of 0.2499 against 0.25 was
        # 'shown'): below 2 k/N as a whole shown, above it not, across it undecided
        {"finding": "expert loads near uniform",
         "target": f"independence <= 2 k/N = {2 * kn:.3f} (its 95% interval)",
         "value": f"independence {_with_interval(ind, ilo, ihi)}{_held(o, 'independent')} "
                  f"(k/N {kn:.3f}; hottest expert "
                  f"{hot:.0f}% of tokens)",
         "status": (UNDECIDED if not (np.isfinite(ilo) and np.isfinite(ihi)) else
                    SHOWN if ihi <= 2 * kn else NOT_SHOWN if ilo > 2 * kn else UNDECIDED)},
        {"finding": "step-1 overlap above independence",
         "target": "step 1 along the sequence minus independence > 0 (its 95% interval)",
         "value": _excess_text(o, ind),
         "status": _decided(*_interval(o, "seq_excess")),
         "interval": _interval(o, "seq_excess")},
        {"finding": "overlap decays inside windows",
         "target": "overlap(1) - overlap(2) inside windows, pairs of one acceptance status, > 0",
         "value": _window_decay_text(o),
         "status": _decided(*_interval(o, "window_decay_within_status")),
         "interval": _interval(o, "window_decay_within_status")},
        {"finding": "overlap decays with distance",
         "target": "overlap(1) - overlap(8) along the sequence > 0",
         "value": _with_interval(_val(o, "seq_decay"), *_interval(o, "seq_decay"), sign=True)
                  + (f", {int(o['seq_requests'])} requests"
                     if np.isfinite(_val(o, "seq_requests")) else "") + _loop_free_text(o),
         "status": _decided(*_interval(o, "seq_decay")),
         "interval": _interval(o, "seq_decay")},
    ]
    if u is not None and "ipf_uniform_sequence_error_pct" in u:
        err = _val(u, "ipf_uniform_sequence_error_pct")
        lo, hi = _interval(u, "ipf_uniform_sequence_error_pct")
        within = 100 * IPF_WITHIN
        # decided by the error's 95% interval over requests: wholly inside +-4% shown, wholly
        # outside not, across its edge undecided (a point of 3.9% on a few requests was shown)
        rows.append({"finding": "uniform IPF predicts unique experts",
                     "target": "within 4% of measured (its 95% interval), from the overlap "
                               "along the sequence (the study's input)",
                     "value": f"{_with_interval(err, lo, hi, digits=2, sign=True)}% "
                              f"({_val(u, 'ipf_uniform_sequence'):.2f} vs "
                              f"{_val(u, 'empirical'):.2f})",
                     "status": (NOT_MEASURED if not np.isfinite(err) else
                                UNDECIDED if not (np.isfinite(lo) and np.isfinite(hi)) else
                                SHOWN if -within <= lo and hi <= within else
                                NOT_SHOWN if lo > within or hi < -within else UNDECIDED)})
    return rows


# The rule _learned applies, as the report states it (the untrained control shares the target's
# architecture, not its training)
LEARNED_RULE = ("Where the run has a matched control (the control read its target's own inputs), "
                "the paired difference decides: a finding the target shows is evidence of "
                "learned routing where the target's value lies above the control's (the "
                "difference's 95% interval above 0), whether or not the control shows the "
                "finding as well, and a control that is not comparable is never evidence. "
                "Without a matched control, or for a finding with no paired difference, a "
                "finding the control shows as well is not evidence of learned routing (and where "
                "the control's is undecided, the target's interval must lie above the "
                "control's).")
SHARED = "though its untrained control shows it as well"


def _learned(status: str, control: str | None, ours=(np.nan, np.nan),
             theirs=(np.nan, np.nan), matched: dict | None = None,
             paired: tuple | None = None) -> str:
    """Whether a finding is evidence of learned routing, by LEARNED_RULE: with a matched control
    (its target's inputs, matched_controls) the paired difference decides, and a control that
    also shows the finding is said beside it (SHARED); without one, shown by the trained target
    and not by its untrained control, or, where the control's own interval is undecided, the
    target's wholly above it."""
    if status == CPU:
        return "–"
    if status != SHOWN:
        return "no: not shown" if status == NOT_SHOWN else status
    if control is None:
        return "no control to compare"
    if matched is not None and not matched["comparable"]:
        return f"not comparable: the control {matched['why']}"
    if matched is not None and paired is not None and np.isfinite(paired[1]):
        diff = _with_interval(*paired, sign=True)
        if paired[1] > 0:
            return f"yes: above the matched control by {diff}" + (
                f", {SHARED}" if control == SHOWN else "")
        if paired[2] < 0:
            return f"no: below the matched control ({diff})"
        return f"undecided: not separated from the matched control ({diff})"
    if control == UNDECIDED:
        return ("yes" if np.isfinite(ours[0]) and np.isfinite(theirs[1]) and ours[0] > theirs[1]
                else "undecided: the control's is undecided")
    return {SHOWN: "no: the untrained control shows it as well",
            NOT_SHOWN: "yes"}.get(control, control)


# the paired statistic of the matched_controls table behind each routing finding
PAIRED = {"step-1 overlap above independence": "seq_excess",
          "overlap decays inside windows": "window_decay_within_status",
          "overlap decays with distance": "seq_decay"}


def _matched(mc: pd.DataFrame, target: str, like) -> dict | None:
    """The matched_controls row of a target's run (None: the table has none)."""
    if mc.empty or "target" not in mc:
        return None
    g = mc[(mc["target"] == target) & (mc["k"] == like["k"]) & (mc["dataset"] == like["dataset"])]
    if g.empty:
        return None
    r = g.iloc[0]
    why = r.get("not_comparable_because")
    return {**r.to_dict(), "comparable": bool(r["comparable"]),
            "why": why if isinstance(why, str) else ""}


def _paired(m: dict | None, finding: str) -> tuple | None:
    name = PAIRED.get(finding)
    if m is None or name is None or f"{name}_difference" not in m:
        return None
    return tuple(float(m.get(f"{name}_{key}", np.nan))
                 for key in ("difference", "difference_low", "difference_high"))


def _first(df: pd.DataFrame, model: str, like=None):
    """A model's first run (smallest K, first dataset), or the run like `like`'s where it has
    one: `like`'s own run where both name runs (runs.load; a profile is of one drafter), else
    the run of the same K and dataset (a control's of its target's)."""
    g = df[df["model"] == model]
    if g.empty:
        return None
    if like is not None:
        same = g[g["run"] == like["run"]] if "run" in g and "run" in like else g.iloc[:0]
        if same.empty:
            same = g[(g["k"] == like["k"]) & (g["dataset"] == like["dataset"])]
        if not same.empty:
            return same.iloc[0]
    return g.sort_values("k", kind="stable").iloc[0]


def _target_runs(ob: pd.DataFrame) -> dict[str, tuple]:
    """{tiny target (a model with an untrained control): (its first run's overlap_by_distance
    row, its control's row of the same K and dataset)}, the runs the findings table compares."""
    control = control_models(ob)
    out = {}
    for m in dict.fromkeys(ob["model"]):
        if m in control:
            o = _first(ob, m)
            out[m] = (o, _first(ob, control[m], like=o))
    return out


def control_independence(td: Tables) -> str:
    """What the untrained controls' step 1 does against independence and against the
    within-window shuffle null, at the runs the findings table compares (_target_runs), in a
    sentence: that they clear independence without within-window ordering only for the controls
    whose intervals decide both (seq_excess above 0, above_shuffle below it), each with its
    numbers; every other control with its numbers and what its intervals leave; nothing where
    the tables have no control."""
    ob = load(td, "overlap_by_distance")
    if ob.empty or "seq_excess" not in ob:
        return ""
    clear, other = [], []
    for _, c in _target_runs(ob).values():
        excess = _with_interval(_val(c, "seq_excess"), *_interval(c, "seq_excess"), sign=True)
        above = _decided(*_interval(c, "seq_excess"))
        null = _decided(*_interval(c, "above_shuffle"))
        shuffle = _with_interval(_val(c, "above_shuffle"), *_interval(c, "above_shuffle"),
                                 sign=True)
        where = {NOT_SHOWN: "below", UNDECIDED: "not decidedly above",
                 SHOWN: "above"}.get(null)
        ordering = (f"step 1 {where} the within-window shuffle null ({shuffle})" if where
                    else "no within-window shuffle null with its interval in this table")
        name = label_of(c["model"], c["k"], c["dataset"])
        if above == SHOWN and null == NOT_SHOWN:  # an undecided interval decides nothing
            clear.append(f"{name}: step 1 along the sequence above independence by {excess}, "
                         f"{ordering}")
        elif above == SHOWN:
            other.append(f"{name}: step 1 along the sequence above independence by {excess}, "
                         f"and {ordering}")
        else:
            words = {NOT_SHOWN: "below independence",
                     UNDECIDED: "not decidedly above independence"}.get(
                above, "without an interval against independence")
            other.append(f"{name}: step 1 along the sequence {words} ({excess}), {ordering}")
    out = []
    if clear:
        out.append("Untrained controls clear independence without it where their intervals "
                   "decide both: " + "; ".join(clear) + ".")
    if other:
        out.append(("Other untrained controls" if clear else "The untrained controls")
                   + ", along the sequence and inside windows: " + "; ".join(other) + ".")
    return " ".join(out)


def routing_targets(td: Tables) -> pd.DataFrame:
    """Does each captured tiny target (a model with an untrained control: control_of) route like the
    study's models? Its first run (lowest K, first dataset) against the study's findings, each
    decided by the run's 95% intervals where it has them (bootstrap over requests), beside the
    control's value on the same K and dataset; evidence of learned routing by LEARNED_RULE."""
    ob, dec, ue, mc = (load(td, s) for s in ("overlap_by_distance",
                                               "overlap_decomposition_step1", "unique_experts",
                                               "matched_controls"))
    if ob.empty or "seq1" not in ob or dec.empty:
        return pd.DataFrame()
    control = control_models(ob)
    pairs = _target_runs(ob)
    tiny = list(pairs)
    rows, shares, matched = [], {}, {}
    for m, (o, c) in pairs.items():
        mt = matched[m] = _matched(mc, m, o)
        ours = _routing_rows(m, o, dec[dec["run"] == o["run"]].iloc[0],
                             _first(ue, m, like=o) if not ue.empty else None)
        theirs = _routing_rows(control[m], c, dec[dec["run"] == c["run"]].iloc[0],
                               _first(ue, control[m], like=c) if not ue.empty else None)
        for a, b in zip(ours, theirs):
            iv = (a.pop("interval", (np.nan, np.nan)), b.pop("interval", (np.nan, np.nan)))
            paired = _paired(mt, a["finding"])
            value = b["value"]
            if mt is not None:  # what the control read, and the paired difference
                value = (f"{value}; matched: {_with_interval(*paired, sign=True)} target minus "
                         "control, paired by request" if paired is not None and
                         np.isfinite(paired[1]) else f"{value}; not comparable"
                         if not mt["comparable"] else value)
            rows.append({"model": m, "run": o["run"], **a, "control_value": value,
                         "control_status": b["status"],
                         "learned": _learned(a["status"], b["status"], *iv, matched=mt,
                                             paired=paired)})
        for who, row in ((m, o), (control[m], c)):
            d = dec[dec["run"] == row["run"]].iloc[0]
            shares[who] = (float(d["k_over_n"]), _val(d, "sequence_temporal_share"),
                           *_interval(d, "sequence_temporal_share"))
    rows += _granularity_rows(tiny, shares, control, matched)
    rows += _cpu_rows(td, tiny)
    return pd.DataFrame(rows)


def _share_order(fine: tuple, coarse: tuple) -> str:
    return SHOWN if fine[2] > coarse[3] else NOT_SHOWN if fine[3] < coarse[2] else UNDECIDED


def _granularity_rows(tiny: list[str], shares: dict, control: dict,
                      matched: dict | None = None) -> list[dict]:
    """"Temporal share larger for finer experts", for each pair of tiny targets of neighbouring
    granularity, beside the same comparison of their untrained controls (not comparable where
    either control is not: matched_controls); `control`: each target's control (shares holds
    both)."""
    rows = []
    ranked = sorted(tiny, key=lambda m: shares[m][0])
    for fine, coarse in zip(ranked, ranked[1:]):
        f, c = shares[fine], shares[coarse]
        if f[0] == c[0]:
            continue
        fc, cc = shares[control[fine]], shares[control[coarse]]
        both = _both((matched or {}).get(fine), (matched or {}).get(coarse))
        row = {"model": fine, "run": "", "finding": "temporal share larger for finer experts",
               "target": f"temporal share of {fine} (k/N {f[0]:.3f}) > {coarse}'s ({c[0]:.3f})"}
        lead = _share_lead((matched or {}).get(fine), coarse)
        if lead is not None:  # paired by prompt (matched_controls' share_* columns)
            status = _decided(lead["lead_low"], lead["lead_high"])
            theirs = _decided(lead["control_lead_low"], lead["control_lead_high"])
            excess = tuple(lead[key] for key in ("excess", "excess_low", "excess_high"))
            rows.append({**row,
                         "value": f"{_with_interval(*f[1:])} vs {_with_interval(*c[1:])}; "
                                  f"lead {_lead_text(lead, 'lead')}, paired by prompt",
                         "status": status,
                         "control_value": f"{_with_interval(*fc[1:])} vs "
                                          f"{_with_interval(*cc[1:])}; lead "
                                          f"{_lead_text(lead, 'control_lead')}",
                         "control_status": theirs,
                         "learned": _learned(status, theirs, matched=both or {
                             "comparable": True, "why": ""}, paired=excess)})
            continue
        # `theirs`, not `control`: that names the targets' controls for the next pair
        status, theirs = _share_order(f, c), _share_order(fc, cc)
        # unpaired (a table without the paired columns): the fine target's lead over the coarse
        # one from the two intervals' extremes, against the controls' lead
        iv = (f[2] - c[3], f[3] - c[2])
        iv_control = (fc[2] - cc[3], fc[3] - cc[2])
        rows.append({**row,
                     "value": f"{_with_interval(*f[1:])} vs {_with_interval(*c[1:])}",
                     "status": status,
                     "control_value": f"{_with_interval(*fc[1:])} vs {_with_interval(*cc[1:])}",
                     "control_status": theirs,
                     "learned": _learned(status, theirs, iv, iv_control, matched=both)})
    return rows


def _share_lead(m: dict | None, coarse: str) -> dict | None:
    """The paired share lead of a matched_controls row over `coarse` (None: none there)."""
    if m is None or m.get("share_coarser") != coarse or not m.get("share_paired"):
        return None
    out = {key: float(m.get(f"share_{key}", np.nan)) for key in (
        "lead", "lead_low", "lead_high", "control_lead", "control_lead_low",
        "control_lead_high", "excess", "excess_low", "excess_high")}
    return out if np.isfinite(out["lead"]) else None


def _lead_text(lead: dict, name: str) -> str:
    return _with_interval(lead[name], lead[f"{name}_low"], lead[f"{name}_high"], sign=True)


def _both(a: dict | None, b: dict | None) -> dict | None:
    """Two targets' matched controls as one: comparable only where both are."""
    if a is None or b is None:
        return None
    bad = [x for x in (a, b) if not x["comparable"]]
    return {"comparable": not bad, "why": bad[0]["why"] if bad else ""}


def _speedup_run(sp: pd.DataFrame, model: str) -> pd.DataFrame:
    """A model's speedup rows at its first run (runs.first_run: smallest K, first drafter and
    dataset), by batch size: the run the opening's speedup sentence gives, so the findings
    table and the opening describe one run (empty where the table has none)."""
    g = sp[sp["model"] == model] if not sp.empty else sp
    return first_run(g).sort_values("batch") if not g.empty else g


def _like(g: pd.DataFrame):
    """The run of a model's first rows (their first row), for _first's `like`; None: none."""
    return g.iloc[0] if not g.empty else None


def _cpu_rows(td: Tables, models: list[str]) -> list[dict]:
    """The study's GPU findings, with this run's numbers: marked as what a CPU cannot show for a
    model swept on a CPU (a tiny model's step time there is host overhead rather than weight
    reads; a table without the device column comes from a CPU run), decided for one swept on a
    GPU: the speedup by the sweep's shape (decided by its intervals), the MoE share by its
    interval over the profile's engine starts against the MoE share of weights (te_three_ways'
    moe_time_share_low/high; undecided where the table has none). Each of the model's first
    run, the opening's (_speedup_run), the profile's rows of that run where it has them."""
    sp, ks = load(td, "speedup_vs_batch"), load(td, "kernel_time_shares")
    te = load(td, "te_three_ways")
    gpu = set(swept_on(td, "cuda"))
    dec = load(td, "overlap_decomposition_step1")
    rows = []
    blank = {"control_value": "–", "control_status": "–", "learned": "–"}
    for m in models:
        g = _speedup_run(sp, m)
        like = _like(g)
        if not g.empty:
            expected, target = _expected_shape(dec, m, like)
            rows.append({"model": m, "run": g["run"].iloc[0],
                         "finding": SPEEDUP_SHAPE, "target": target,
                         "value": f"{_speedup_text(g.iloc[0])} at batch {int(g['batch'].iloc[0])}"
                                  + (" (its smallest)" if g["batch"].iloc[0] != 1 else "")
                                  + f"{_highest_text(g)}; shape: {g['shape'].iloc[0]}",
                         "status": (_shape_status(g["shape"].iloc[0], expected) if m in gpu
                                    else CPU),
                         **blank})
        r = _first(ks[(ks["class"] == "moe") & (ks["batch"] == 1)], m, like) \
            if not ks.empty else None
        if r is not None:
            weights = float(r["moe_weight_share"])
            # its interval wherever a table has one; the device decides only the status
            share = _moe_share(te, m, like, r)
            value = (f"{_with_interval(*share, digits=2)} of time" if share else
                     f"{r['decode_share']:.2f} of time (no interval)")
            rows.append({"model": m, "run": r["run"],
                         "finding": MOE_SHARE,
                         "target": "MoE share of decode kernel time < MoE share of "
                                   "weights (its 95% interval over engine starts)",
                         "value": f"{value}, {weights:.2f} of weights",
                         "status": (CPU if m not in gpu else UNDECIDED if share is None else
                                    SHOWN if share[2] < weights else
                                    NOT_SHOWN if share[1] > weights else UNDECIDED), **blank})
    return rows


def _moe_share(te: pd.DataFrame, model: str, like=None,
               profile=None) -> tuple[float, float, float] | None:
    """A model's MoE share of decode kernel time at batch 1 with its 95% interval over the
    profile's engine starts: the study's "MoE kernels take a smaller share of GPU time than of
    weights" is about kernel time, and on a GPU the eager profile's step time also holds launch
    gaps (`profile`, the model's kernel_time_shares row of class moe at batch 1, by its
    decode_kernel_share_low/high; on a CPU the same as its share of step time). Tables written
    before the kernel share: te_three_ways' moe_time_share (its row of the run like `like`, else
    of its first run: _first), else the profile's decode_share. None where none has an
    interval."""
    r = (_first(te[te["batch"] == 1], model, like)
         if not te.empty and "moe_time_share_low" in te else None)
    cols = ("moe_time_share", "moe_time_share_low", "moe_time_share_high")
    kernel = ("decode_kernel_share", "decode_kernel_share_low", "decode_kernel_share_high")
    for row, names in ((profile if profile is not None and kernel[1] in profile else None,
                        kernel),
                       (r, cols), (profile, ("decode_share", "decode_share_low",
                                             "decode_share_high"))):
        if row is None:
            continue
        v, lo, hi = (_val(row, c) for c in names)
        if np.isfinite(lo) and np.isfinite(hi):
            return v, lo, hi
    return None


def _expected_shape(dec: pd.DataFrame, model: str, like=None) -> tuple[str, str]:
    """The speedup shape the study's N/k rule gives a model (stepmodel.nk_rule_shape: peak at
    low batch for a fine-grained one, N/k >= FINE_GRAINED, else concave, as its coarse Mixtral),
    from its N/k (1 / k_over_n of its overlap_decomposition_step1 row, of the run like `like`),
    and the findings table's words for it: the shape, the model's N/k against the rule's split,
    where the study's fine-grained models peak, and what the sweep's shape must show."""
    r = _first(dec, model, like) if not dec.empty and "k_over_n" in dec else None
    kn = _val(r, "k_over_n") if r is not None else np.nan
    if not 0 < kn <= 1:
        raise InputError(f"{model}: no k_over_n in (0, 1] in overlap_decomposition_step1 (got "
                         f"{kn}): the study's N/k rule cannot give its speedup shape")
    frac = Fraction(kn).limit_denominator(4096)  # k/N of integers, read back from the table
    dims = ModelDims(hidden=1, expert_intermediate=1, num_experts=frac.denominator,
                     top_k=frac.numerator, attention_params=1.0)
    shape, nk = stepmodel.nk_rule_shape(dims), frac.denominator / frac.numerator
    grain = stepmodel.granularity(dims)
    where = ("" if grain == "fine" else "; the study's fine-grained models, N/k >= "
             f"{stepmodel.FINE_GRAINED}, peak at low batch: this miniature is coarser")
    return shape, (f"shape '{shape}' (the study's N/k rule: N/k = {nk:g} "
                   f"{'>=' if grain == 'fine' else '<'} {stepmodel.FINE_GRAINED}, "
                   f"{grain}-grained{where}): {SHAPE_TESTS[shape]}")


def _shape_status(shape: str, expected: str) -> str:
    """The shape the study's N/k rule expects (_expected_shape) is shown where the sweep's
    intervals decide it; a shape they leave undecided is undecided; any other decided shape is
    not the expected one."""
    return SHOWN if shape == expected else \
        UNDECIDED if shape in (sweep.UNDECIDED, sweep.TOO_FEW) else NOT_SHOWN


def timing_note(targets: pd.DataFrame) -> str:
    """What the findings heading says of the timing rows (SPEEDUP_SHAPE, MOE_SHARE), from their
    statuses: the models whose rows are marked CPU (swept on a CPU) are named as given with
    their numbers but not shown there; nothing where no row is so marked (a GPU sweep decides
    its rows) or there are no timing rows."""
    if targets.empty:
        return ""
    cpu = targets[targets["finding"].isin([SPEEDUP_SHAPE, MOE_SHARE])
                  & (targets["status"] == CPU)]
    if cpu.empty:
        return ""
    named = and_join(list(dict.fromkeys(cpu["model"])))
    return (f"The timing findings of {named}, swept on a CPU, are given with their numbers but "
            "cannot be shown on a CPU.")


FINDINGS_HEADER = ["model", "finding", "target", "this run", "status", "untrained control",
                   "evidence of learned routing"]


def findings_table(targets: pd.DataFrame) -> list[str]:
    """The findings table as Markdown lines."""
    lines = ["| " + " | ".join(FINDINGS_HEADER) + " |", "|" + "---|" * len(FINDINGS_HEADER)]
    for _, r in targets.iterrows():
        control = (f"{r['control_value']} ({r['control_status']})"
                   if r["control_status"] not in ("–", None) else "–")
        lines.append(f"| {r['model']} | {r['finding']} | {r['target']} | {r['value']} | "
                     f"{r['status']} | {control} | {r['learned']} |")
    return lines


# --- the opening paragraph ----------------------------------------------------------------------


def _highest_text(g: pd.DataFrame) -> str:
    """Where a run's speedup is highest (g: its rows by batch size, the first already given), as
    the words after the first: "largest" only where the sweep's pair test puts every other
    batch size below it (the below_highest column: sweep.below_highest; a table without it
    decides none), else the highest point estimate and the batch sizes not separated from it."""
    best = g.loc[g["speedup"].idxmax()]
    others = g[g.index != best.name]
    if others.empty:
        return ""
    below = (others["below_highest"].eq(True) if "below_highest" in others
             else pd.Series(False, index=others.index))
    open_ = [str(int(b)) for b in others.loc[~below, "batch"]]
    name = "largest" if not open_ else "highest point estimate"
    where = (f", the {name}" if best.name == g.index[0] else
             f", {name} {_speedup_text(best)} at batch {int(best['batch'])}")
    if not open_:
        return where
    if len(open_) == len(others):
        return f"{where}; the batch sizes are not separated by their intervals"
    return f"{where}, not separated by their intervals from batch {and_join(open_)}"


def _speedup_summary(td: Tables) -> list[str]:
    """Each model's measured SD speedup at its first run, in words: at batch 1 and where it is
    highest (_highest_text: the largest only where the intervals decide it), each with its 95%
    interval, whether it is faster or slower over the curve where the
    intervals decide it (adjusted for the number of batch sizes), and how many of its 95%
    intervals lie below 1, above 1 or across it."""
    sp = load(td, "speedup_vs_batch")
    if sp.empty:
        return []
    out = []
    for run, g in first_run(sp).groupby("run", sort=False):
        g = g.sort_values("batch")
        nan = pd.Series(np.nan, index=g.index)
        lo = g.get("speedup_low", nan).to_numpy(float)
        hi = g.get("speedup_high", nan).to_numpy(float)
        below, above = int((hi < 1).sum()), int((lo > 1).sum())
        n = len(g)
        first = g.iloc[0]
        out.append(f"{label_of(g['model'].iloc[0], g['k'].iloc[0])}: {_direction_word(g)}; speedup "
                   f"{_speedup_text(first)} at batch {int(first['batch'])}{_highest_text(g)}; "
                   f"{below} of {n} intervals below 1 and {above} above")
    return out


# a finding measured again by a target's other runs (the same prompts at another K, and slices of
# them), by its column of overlap_by_distance: the decay inside windows differs with K (other
# windows); the overlap along the committed sequence does not (SD commits the same tokens)
ELSEWHERE = {"overlap decays inside windows": "window_decay_within_status"}


def other_runs(td: Tables, model: str) -> dict[str, str]:
    """How each finding of ELSEWHERE fares in a target's runs other than its first (the
    findings table's), each run in words decided by its own interval, by finding."""
    ob = load(td, "overlap_by_distance")
    if ob.empty or model not in set(ob["model"]):
        return {}
    first = _first(ob, model)
    g = ob[(ob["model"] == model)
           & ~((ob["k"] == first["k"]) & (ob["dataset"] == first["dataset"]))]
    out = {}
    for finding, col in ELSEWHERE.items():
        if col not in g:
            continue
        runs = [f"{label_of(model, r['k'], r['dataset']).split(', ', 1)[1]}: "
                + direction(_val(r, col), *_interval(r, col), "decays", "rises")
                for _, r in g.iterrows() if np.isfinite(_val(r, col))]
        if runs:
            out[finding] = ("in its other runs (the same prompts at another K, or a slice of "
                            "them): " + "; ".join(runs))
    return out


def _routing_sentence(model: str, rows: pd.DataFrame, elsewhere: dict | None = None) -> str:
    """One target's routing findings in a sentence (LEARNED_RULE): the evidence of learned
    routing with its numbers (and how each fares in the target's other runs: other_runs; and
    where its untrained control shows it as well), the findings its untrained control shows as
    well with no paired difference to decide them (named), those not shown."""
    elsewhere = elsewhere or {}

    def named(df, numbers=True):
        return ", ".join(f"{r['finding']}" + (
            f" ({r['value']}" + (f"; {elsewhere[r['finding']]}" if r["finding"] in elsewhere
                                 else "")
            + ("; shown by its untrained control as well, the target above it"
               if r["learned"].endswith(SHARED) else "") + ")" if numbers else "")
            for _, r in df.iterrows())

    learned = rows[rows["learned"].str.startswith("yes")]
    both = rows[rows["learned"].str.startswith("no: the untrained")]
    # below its matched control: the pair decides that, not whether the control shows it
    below = rows[rows["learned"].str.startswith("no: below the matched")]
    open_ = rows[(rows["status"] == SHOWN) & rows["learned"].str.startswith("undecided")]
    apart = rows[rows["learned"].str.startswith("not comparable")]
    missed = rows[rows["status"].isin([NOT_SHOWN, UNDECIDED])]
    above = learned[learned["learned"].str.startswith("yes: above")]
    alone = learned[~learned.index.isin(above.index)]
    parts = ([f"shown and above its untrained control, matched request by request or prompt "
              f"by prompt (evidence of learned routing): {named(above)}"] * (not above.empty)
             + [f"shown and not shared by its untrained control (evidence of learned routing): "
                f"{named(alone)}"] * (not alone.empty)
             or ["nothing that separates learned routing"])
    if not both.empty:
        parts.append(f"its untrained control shows {named(both, False)} as well, with no "
                     "paired difference to decide them, so these are not evidence of learned "
                     "routing")
    if not below.empty:
        parts.append("below its matched control, so not evidence of learned routing: " + ", ".join(
            f"{r['finding']} {r['learned'].removeprefix('no: below the matched control ')}"
            for _, r in below.iterrows()))
    if not open_.empty:
        parts.append(f"shown, with the control undecided or not separated from it: "
                     f"{named(open_)}")
    if not apart.empty:
        parts.append(f"shown, but its control is not comparable ({apart['learned'].iloc[0]}): "
                     f"{named(apart, False)}")
    if not missed.empty:
        parts.append(f"not shown or undecided: {named(missed)}")
    return f"{model}: " + "; ".join(parts)


NO_SD_APART = "the no-SD points measured apart from the SD points"


def _no_sd_words(no_sd_series: str) -> str:
    """How a speedup's no-SD points were taken (its no_sd_series), in the opening's words."""
    if no_sd_series.startswith("interleaved"):
        return "the SD and no-SD points interleaved, AB BA"
    if no_sd_series.startswith("in blocks"):
        return ("the SD points and then the no-SD points, in blocks in the same job (one engine "
                "at a time, so a point's two sides not adjacent in time)")
    return NO_SD_APART


DEVICE_WORDS = {"cpu": "a CPU", "cuda": "a GPU"}


def spread_words(sp: pd.DataFrame) -> str:
    """What the speedup intervals hold besides this run's repeats, in words: the engine-to-engine
    spread where the rows' engine_log_sd took one (measured on the device their sweep ran on),
    not measured where it is 0 (sweep.engine_log_sd_device names another device, or nothing was
    measured), by device; and for how long they hold. A table without the column (an older run)
    does not say."""
    if "engine_log_sd" not in sp or sp.empty:
        return ("95% intervals from this run's repeats (the table does not say whether the "
                "engine-to-engine spread is in them): they hold for this session, not for the "
                "same machine on another day")
    dev = sp["device"] if "device" in sp else pd.Series(None, index=sp.index, dtype=object)

    def on(rows) -> str:
        return and_join(list(dict.fromkeys(
            DEVICE_WORDS.get(d, f"device {d}") if isinstance(d, str) else "an unrecorded device"
            for d in dev[rows])))

    took = sp["engine_log_sd"].fillna(0) > 0
    if took.all():
        return ("95% intervals from this run's repeats and the engine-to-engine spread "
                f"measured for the device they ran on, {on(took)} (sweep.engine_log_sd): they "
                "hold for this session, not for the same machine on another day")
    if not took.any():
        return (f"95% intervals from this run's repeats alone: the engine-to-engine spread is "
                f"not measured for {on(~took)} (sweep.engine_log_sd_device), so they hold for "
                "these engine starts, not for another start or the same machine on another day")
    return ("95% intervals from this run's repeats, with the engine-to-engine spread for the "
            f"series swept on {on(took)} and without it for those swept on {on(~took)} (not "
            "measured there, sweep.engine_log_sd_device; those hold for their engine starts "
            "alone): none hold for the same machine on another day")


def _timing_scope(td: Tables) -> str:
    """What the speedup intervals cover, in words: how the no-SD points were taken beside the SD
    ones, and that repeats on this run's engines (and the engine spread, where it was measured
    on their device: spread_words) are all they hold: the machine's drift from one session to
    the next is not in them."""
    sp = load(td, "speedup_vs_batch")
    how = sp["no_sd_series"].dropna() if "no_sd_series" in sp else []
    # in the order the rows record them: each speedup's no_sd_series (measured.arms
    # PAIR_ORDER, from its series' arm order) in words
    said = list(dict.fromkeys(_no_sd_words(h) for h in how)) or [NO_SD_APART]
    timing = set(sp["timing"].dropna()) if "timing" in sp else set()
    by = f"timed by the {timing.pop()}" if len(timing) == 1 else "timed"
    return (f"{by}; " + (said[0] if len(said) == 1 else
                         " in some series, ".join(said) + " in the others")
            + "; " + spread_words(sp))


def opening(td: Tables) -> str:
    """What this run shows, in a paragraph: the routing findings that separate learned routing
    (LEARNED_RULE), those the controls show as well with nothing paired to decide them, those not
    shown; the measured SD speedup with its intervals (where it was measured: the Provenance
    section's "Measured on" lines); what a CPU cannot show, for the models swept on one; and
    the hardware entries the curves are priced on."""
    t = routing_targets(td)
    out = []
    if not t.empty:
        routing = t[~t["status"].isin([CPU, NOT_MEASURED])
                    & ~t["finding"].isin([SPEEDUP_SHAPE, MOE_SHARE])]
        out.append("Routing, in each trained tiny target beside its untrained control (95% "
                   "intervals by request; the report's findings table has every number): "
                   + ". ".join(_routing_sentence(m, g, other_runs(td, m))
                               for m, g in routing.groupby("model", sort=False)) + ".")
    speed = _speedup_summary(td)
    if speed:
        out.append(f"Speculative decoding in this run, on the machines the Provenance section's "
                   f'"Measured on" lines name ({_timing_scope(td)}): ' + "; ".join(speed) + ".")
    cpu, priced = swept_on(td, "cpu"), _priced_on(td)
    te = _te_identified(td, cpu) if cpu else ""
    if cpu:
        out.append("What a CPU run cannot show: the study's GPU claims. "
                   + and_join(cpu) + (" was" if len(cpu) == 1 else " were") + " swept on a CPU, "
                   "where a model's step costs host overhead rather than weight reads"
                   + _cpu_step_numbers(td, cpu) + ", so "
                   + ("its speedup curve, its MoE share of time and its TE" if len(cpu) == 1
                      else "their speedup curves, MoE shares of time and TEs")
                   + " test the pipeline, not the study"
                   + (f"; {te}" if te else "")
                   + (f"; {priced}" if priced else "") + ".")
    elif priced and (speed or not t.empty):
        out.append(priced[0].upper() + priced[1:] + ".")
    return " ".join(out)


def swept_on(td: Tables, device: str) -> list[str]:
    """The models whose sweeps ran on `device` ("cpu" or "cuda"), by the speedup table's device
    column (from each sweep's provenance); none where the table lacks it (a table of an older run
    does not say where its sweeps ran)."""
    sp = td.read("speedup_vs_batch")
    if sp.empty or "device" not in sp:
        return []
    return list(dict.fromkeys(sp[sp["device"] == device]["model"]))


def _cpu_step_numbers(td: Tables, models: list[str]) -> str:
    """For each of `models` (swept on a CPU), its decode step at batch 1 as measured (the sweep's
    TPOT without SD) beside what the step model prices it at from its weights and launches
    (draft_ratio_model's t_target_us), and its profiled MoE share of time beside its MoE share
    of weights (kernel_time_shares), and its TE at batch 1 from the sweep, from profiled passes
    and from the cost model (_cpu_te: a ratio that is not a TE by its raw numbers, named as
    such): " (tiny-fine: ...)", or nothing where the tables lack them. Each of the model's first
    run, the one the speedup sentence gives (_speedup_run), the other tables' rows of that run
    where they have them."""
    sp, dr, ks = (load(td, t) for t in ("speedup_vs_batch", "draft_ratio_model",
                                        "kernel_time_shares"))
    if sp.empty:
        return ""
    parts = []
    for model in models:
        g = _speedup_run(sp, model)
        like = _like(g)
        step = (g[g["batch"] == 1]["tpot_ar_ms"].dropna() if "tpot_ar_ms" in g
                else pd.Series(dtype=float))
        priced = (_first(dr[(dr["batch"] == 1) & dr["t_target_us"].notna()], model, like)
                  if not dr.empty else None)
        said = []
        if not step.empty and priced is not None:
            ms, us = float(step.iloc[0]), float(priced["t_target_us"])
            said.append(f"a decode step at batch 1 took {ms:.2f} ms, {ms * 1e3 / us:.0f} times "
                        f"the {us / 1e3:.2f} ms the step model prices for its weights and "
                        "launches")
            k = ks[ks["batch"] == 1] if not ks.empty else ks
            moe = _first(k[k["class"] == "moe"], model, like) if not k.empty else None
            other = _first(k[k["class"] == "other"], model, like) if not k.empty else None
            if moe is not None and np.isfinite(moe["decode_share"]):
                share = _moe_share(load(td, "te_three_ways"), model, like, moe)
                took = _pct_with_interval(*(share or (moe["decode_share"], np.nan, np.nan)))
                said.append(f"its MoE kernels took {took} of the profiled step against "
                            f"{100 * moe['moe_weight_share']:.0f}% of its weights"
                            + (", and ops outside attention, GEMMs and MoE "
                               + _pct_with_interval(*(_val(other, c) for c in (
                                   "decode_share", "decode_share_low", "decode_share_high")))
                               if other is not None else ""))
        te = _cpu_te(td, g)
        if te:
            said.append(te)
        if said:
            parts.append(f"{model}: " + "; ".join(said))
    return f" ({'; '.join(parts)})" if parts else ""


# the TEs of te_three_ways at batch 1 beside the sweep's, in the opening's words
TE_WAYS = (("te_profiled", "from profiled passes"), ("te_costmodel", "from the cost model"))


def _cpu_te(td: Tables, g: pd.DataFrame) -> str:
    """A model's TE at batch 1 at its first run (g: its speedup rows, _speedup_run): from the
    sweep (the speedup table's te_sweep), from profiled passes and from the cost model
    (te_three_ways' row of that run), each as _te_text words it: where it is not a TE, its
    status with its raw ratio and interval, named as not a TE; "" where the tables have none."""
    one = g[g["batch"] == 1] if not g.empty else g
    if one.empty or not {"te_sweep", "te_sweep_raw"} & set(one.columns):
        return ""
    te = load(td, "te_three_ways")
    r = _first(te[te["batch"] == 1], g["model"].iloc[0], _like(g)) if not te.empty else None
    ways = [f"{words} {_te_text(r, col)}" for col, words in TE_WAYS
            if r is not None and col in r and _te_text(r, col) != NOT_MEASURED]
    return f"its TE at batch 1 from the sweep {_te_text(one.iloc[0], 'te_sweep')}" + "".join(
        f", {w}" for w in ways)


def _te_identified(td: Tables, models: list[str]) -> str:
    """Whether the sweep's TE at batch 1 is a value for `models` (at each one's first run,
    _speedup_run), in words: the study's headline quantity, which a run that does not identify
    it cannot speak to; "" where the speedup table has no TE."""
    sp = td.read("speedup_vs_batch")
    if sp.empty or "te_sweep" not in sp:
        return ""
    rows = [g[g["batch"] == 1] for g in (_speedup_run(sp, m) for m in models)]
    rows = [r.iloc[0] for r in rows if not r.empty]
    if not rows:
        return ""
    named = [r["model"] for r in rows if np.isfinite(_val(r, "te_sweep"))]
    if not named:
        return ("the TE at batch 1 that the study's argument rests on is identified by the "
                f"sweep for none of {'it' if len(rows) == 1 else 'them'} (the sweep's ratios above "
                "are raw, not TEs)")
    return (f"the sweep identifies the TE at batch 1 for {and_join(named)} of {len(rows)}, on a "
            "CPU's step times")


def _priced_on(td: Tables) -> str:
    """Which hardware entry each model's TE and draft cost curves are priced on, from the
    target-efficiency table (untrained controls, priced as their targets, left out): a curve
    priced on a CPU entry is that CPU's roofline, not a GPU curve."""
    te = td.read("target_efficiency")
    if te.empty or "hardware" not in te:
        return ""
    te = te[~is_control(te)]
    by_hw = {hw: list(dict.fromkeys(g["model"]))
             for hw, g in te.groupby(te["hardware"].astype(str), sort=False)}
    priced = "; ".join(f"{', '.join(ms)} on {hw}" for hw, ms in by_hw.items())
    return ("the curves of TE and of the draft cost ratio against batch size come from the "
            f"cost and step models, each priced on its model's hardware entry ({priced}): only "
            "a GPU entry's curves speak to the study's GPU claims")


# --- what the measurements show ---------------------------------------------------------------


def _direction_word(g: pd.DataFrame) -> str:
    """A run's direction (g: its speedup rows), decided in the sweep with intervals adjusted for
    the number of batch sizes (sweep.direction_labels); a table without it decides none."""
    word = g["direction"].iloc[0] if "direction" in g else None
    return word if isinstance(word, str) and word else "direction not decided"


def measured_findings(td: Tables) -> list[str]:
    """The measured side in one line per run: speedup curve and its shape, the IPF's error (the
    study's input, then this project's), TE three ways at batch 1."""
    out = []
    sp = load(td, "speedup_vs_batch")
    for run, g in (sp.groupby("run", sort=False) if not sp.empty else []):
        g = g.sort_values("batch")
        pts = ", ".join(f"B={int(r['batch'])}: {_speedup_text(r)}" for _, r in g.iterrows())
        # tau with its 95% interval over the repeats where they differ, else none (a table
        # written before tau kept its interval lacks tau_low/tau_high: _interval reads none)
        r0 = g.iloc[0]
        tau = _tau_text(_val(r0, "tau"), *_interval(r0, "tau"), _val(r0, "tau_spread"),
                        _val(r0, "repeats"))
        out.append(f"{run}: speedup {pts}; shape: {g['shape'].iloc[0]}; {_direction_word(g)}; "
                   f"acceptance length at B={int(r0['batch'])} {tau}")
    ue = load(td, "unique_experts")
    if not ue.empty and "ipf_uniform_sequence" in ue:
        for _, r in ue.iterrows():
            out.append(f"{label_of(r['model'], r['k'], r['dataset'])}: unique experts per "
                       f"window {r['empirical']:.2f}{_bracket(r, 'empirical')} measured, "
                       f"{r['uniform']:.2f} uniform i.i.d.; "
                       f"uniform IPF from the overlap along the sequence (the study's input) "
                       f"{r['ipf_uniform_sequence']:.2f} ({_ipf_error(r, 'uniform_sequence')}), "
                       f"from the overlap inside windows (this project's) "
                       f"{r['ipf_uniform_window']:.2f} ({_ipf_error(r, 'uniform_window')}); "
                       f"skewed IPF (this project's) {r['ipf_skewed_window']:.2f} "
                       f"({_ipf_error(r, 'skewed_window')})")
    te = load(td, "te_three_ways")
    te1 = te[te["batch"] == 1] if not te.empty else te
    for _, r in (te1.iterrows() if not te1.empty else []):
        out.append(f"{r['run']}: TE at batch 1 from the sweep {_te_text(r, 'te_sweep')}, from "
                   f"profiled passes {_te_text(r, 'te_profiled')}, from the cost model "
                   f"{_te_text(r, 'te_costmodel')}")
    return out


def _ipf_error(r, key: str) -> str:
    """An IPF's error with its interval, "over" or "under" only where the interval excludes 0."""
    col = f"ipf_{key}_error_pct"
    lo, hi = _interval(r, col)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{r[col]:+.1f}%, no interval: no sign claimed"
    sign = "over" if lo > 0 else "under" if hi < 0 else "sign undecided"
    return f"{r[col]:+.1f}%{_bracket_pct(r, col)}, {sign}"


def _against_prediction(r) -> str:
    """Where a measured speedup lies against the predicted 95% interval: "inside" (its point in
    it), "outside" (its own interval apart from it) or "open" (neither: not separated)."""
    lo, hi = _interval(r, "speedup_measured")
    if r["speedup_low"] <= r["speedup_measured"] <= r["speedup_high"]:
        return "inside"
    return "outside" if hi < r["speedup_low"] or lo > r["speedup_high"] else "open"


AGAINST = {"inside": "inside the predicted interval",
           "outside": "outside the predicted interval, the measured interval apart from it",
           "open": "not separated from the predicted interval (the point outside it, the "
                   "measured interval not apart from it)"}


def _predicted_speedup(r) -> str:
    """A predicted speedup with its 95% interval as `specmoe predict` says it
    (predictor.clipped_interval: an end drawn from TE's end held at its clip bound is "no
    information below" or "above")."""
    return clipped_interval(r["speedup_predicted"], r["speedup_low"], r["speedup_high"],
                            (_flagged(r, "te_low_clipped"), _flagged(r, "te_high_clipped")))


def _flagged(row, col: str) -> bool:
    """A table's boolean flag as read back from its CSV (True, "True", 1)."""
    v = row.get(col) if row is not None else None
    return v is not None and pd.notna(v) and str(v).lower() in ("true", "1", "1.0")


def _sweep_repeats(sp: pd.DataFrame, r) -> tuple[float, float]:
    """(tau_spread, repeats) of the speedup table's point of the run and batch size of a step
    model row `r` (NaN, NaN where the table has none)."""
    keys = [c for c in ("model", "drafter", "k", "dataset", "batch") if c in sp and c in r]
    hit = sp[np.logical_and.reduce([sp[c] == r[c] for c in keys])] if not sp.empty else sp
    if hit.empty:
        return np.nan, np.nan
    return _val(hit.iloc[0], "tau_spread"), _val(hit.iloc[0], "repeats")


def prediction_findings(td: Tables) -> list[str]:
    """The step model's prediction beside the measurement, one line per predicted run with both
    (naming the run, whose sweep measured it): the speedup at each measured batch size with its
    interval, inside, outside or not separated from the predicted 95% interval
    (_against_prediction) where the prediction has information (TE's interval short of its
    whole physical range), the predicted medians there without a shape read from them, the
    prediction's shape as its draws decide it, and the measured shape."""
    out = []
    sm, sp = load(td, "step_model"), load(td, "speedup_vs_batch")
    studied = set(published.load("hardware")["gpu"])
    # a run's rows (older tables name the model alone), those with a measurement in g
    keys = [c for c in ("model", "drafter", "k", "dataset") if c in sm]
    for _, run_rows in (sm.groupby(keys, sort=False) if not sm.empty else []):
        g = run_rows[np.isfinite(run_rows["speedup_measured"])].sort_values("batch")
        if g.empty:
            continue
        model = g["model"].iloc[0]
        # where the step model said nothing (stepmodel.summarise's own flag, not recomputed)
        blind = g["no_information"].astype(bool)
        seen = g[~blind]
        against = [_against_prediction(r) for _, r in seen.iterrows()]
        pts = ", ".join(
            f"B={int(r['batch'])}: "
            f"{_with_interval(r['speedup_measured'], *_interval(r, 'speedup_measured'), 2)} "
            "measured, "
            + ("no information predicted (TE's 95% interval spans its whole range)" if nothing
               else f"{_predicted_speedup(r)} predicted")
            for (_, r), nothing in zip(g.iterrows(), blind))
        hw = g["hardware"].iloc[0]
        where = (f"on {hw}" if hw in studied else
                 f"on {hw}, where it is an uncalibrated roofline (calibrated on the study's GPUs)")
        if "dataset" in g:  # the run predicted, whose sweep is the measurement (older tables: none)
            where = (f"for {label_of(model, g['k'].iloc[0], g['dataset'].iloc[0])} with "
                     f"{g['drafter'].iloc[0]}, {where}")
        whole = run_rows["batch"].astype(int)
        count = (f"of the {len(against)} measured batch size(s)"
                 + (" where the prediction has information" if blind.any() else "") + ", "
                 + ", ".join(f"{against.count(k)} {words}" for k, words in AGAINST.items()
                             if k in against)
                 if against else "no measured batch size where the prediction has information")
        tau = ""
        if "tau_measured" in g and np.isfinite(g["tau_measured"]).any():
            lo, hi = float(g["tau_predicted_low"].iloc[0]), float(g["tau_predicted_high"].iloc[0])
            meas = g[np.isfinite(g["tau_measured"])]
            drawn = f"{lo:.2f}" if lo == hi else f"{lo:.2f} to {hi:.2f}"
            # the sweep's lowest and highest, each with its 95% interval over the repeats
            # where it has one, and its point's spread and repeats (speedup_vs_batch) saying
            # why it has none (a table written before tau kept its interval lacks
            # tau_measured_low/high: _interval reads none)
            ends = [meas.loc[meas["tau_measured"].idxmin()],
                    meas.loc[meas["tau_measured"].idxmax()]]
            swept = " to ".join(dict.fromkeys(
                _tau_text(_val(r, "tau_measured"), *_interval(r, "tau_measured"),
                          *_sweep_repeats(sp, r))
                for r in ends))
            tau = (f"; acceptance length {drawn} in the prediction against {swept} in the sweep "
                   "(the speedup scales with it)")
        medians = (", ".join(f"{r['speedup_predicted']:.3f} at B={int(r['batch'])}"
                             for _, r in seen.iterrows())
                   if not seen.empty else "none (no information at any measured batch size)")
        out.append(f"{model} (step model {where}): {pts}; {count}{tau}; predicted medians, where "
                   f"the prediction has information, {medians} (no shape is read from medians); "
                   f"over batch {whole.min()}–{whole.max()} the prediction's shape, decided over "
                   f"its draws, is {g['shape_predicted'].iloc[0]}; the measured one "
                   f"{g['shape_measured'].iloc[0]}")
    return out


def calibration_findings(td: Tables) -> list[str]:
    """The step model's leave-one-model-out error on the study's Table 10 beside its two
    baselines' (the mean TE of the other models' rows, the weight model), and its shapes beside
    the study's, with the two shape baselines' counts (the study's N/k rule; every curve peaking
    at low batch)."""
    out = []
    cal = load(td, "step_model_calibration")
    goal = cal[cal["in_table_10"].astype(bool)] if not cal.empty else cal
    if not goal.empty:
        out.append(f"step model on the study's {len(goal)} Table 10 configurations, each "
                   "predicted without its own model's rows: mean absolute TE error "
                   f"{goal['error'].abs().mean():.3f} (largest {goal['error'].abs().max():.3f}, "
                   f"{goal.loc[goal['error'].abs().idxmax(), 'model']}); the mean baseline's "
                   "(the other models' mean TE of its method family and granularity) "
                   f"{goal['mean_baseline_error'].abs().mean():.3f}, the weight model's "
                   f"{goal['weight_model_error'].abs().mean():.3f}")
    shp = load(td, "step_model_shapes")
    if not shp.empty:
        # a shape the study measured on the model's own curve, apart from one its N/k rule gives
        own = shp["published_by"].astype(str) == "the model's own curve"
        parts = []
        for measured, what in ((True, "curves the study measured"),
                               (False, "shapes the study's N/k rule gives (not measured curves)")):
            g = shp[own == measured]
            if g.empty:
                continue
            right = {c: int((g[c].astype(str) == "True").sum())
                     for c in ("agrees", "nk_rule_agrees", "constant_agrees")}
            agree = g["agrees"].astype(str) == "True"
            miss = "; ".join(f"{r['model']}: published {r['published_shape']}, predicted "
                             f"{r['step_model_shape']}" for _, r in g[~agree].iterrows())
            parts.append(f"{right['agrees']} of {len(g)} {what} right"
                         + (f" ({miss})" if miss else "")
                         + f", against {right['nk_rule_agrees']} of {len(g)} by the study's N/k "
                         f"rule{'' if measured else ' (by construction)'} and "
                         f"{right['constant_agrees']} of {len(g)} by a peak at low batch for "
                         "every model")
        out.append("step model on the speedup shapes the study states, each predicted without "
                   "its own model's rows and shape: " + "; ".join(parts))
    return out


def turning_points(values, margin: float = 0.05) -> list[int]:
    """The indices where a curve turns (its first and last point included): a rise or fall
    counts once it moves beyond the margin from the running extreme, so wiggles within the
    margin are not turns."""
    v = np.asarray(values, float)
    points, pivot, ext, way = [0], 0, 0, 0
    for i in range(1, len(v)):
        if way == 0:
            if v[i] > v[pivot] * (1 + margin) or v[i] * (1 + margin) < v[pivot]:
                way, ext = (1 if v[i] > v[pivot] else -1), i
        elif way * (v[i] - v[ext]) > 0:
            ext = i
        elif (v[ext] > v[i] * (1 + margin)) if way > 0 else (v[i] > v[ext] * (1 + margin)):
            points.append(ext)
            pivot, ext, way = ext, i, -way
    if points[-1] != len(v) - 1:
        points.append(len(v) - 1)
    return points


def course(batches, values, margin: float = 0.05) -> str:
    """How an exact (model-derived) curve goes with batch size, in words: "stays flat (within
    5%)", or its rises and falls between its turning points (turning_points: each move beyond
    the margin), from its first point to its last."""
    v, b = np.asarray(values, float), list(batches)

    def at(i: int) -> str:
        return f"{v[i]:.3f} at batch {int(b[i])}"

    end = len(v) - 1
    if v.max() <= v.min() * (1 + margin):
        return f"stays flat (within {margin:.0%}) with batch size, from {at(0)} to {at(end)}"
    pts = turning_points(v, margin)
    word = lambda a, z: "rises" if v[z] > v[a] else "falls"  # noqa: E731
    if len(pts) == 2:
        return f"{word(0, end)} with batch size, from {at(0)} to {at(end)}"
    return (f"{word(pts[0], pts[1])} from {at(0)} to {at(pts[1])}, "
            + ", ".join(f"then {word(a, z)} to {at(z)}" for a, z in zip(pts[1:], pts[2:])))


def _size(gib: float) -> str:
    return f"{gib:,.1f} GiB" if gib >= 1 else f"{gib * 1024:,.1f} MiB"


def _ratio_sentence(g: pd.DataFrame) -> str:
    """One synthetic drafter's curve: its course over every batch size and, where the table
    reaches past the roofline's ridge, its course from the ridge on (the study's Figures 11 and
    12 are about what happens there)."""
    g = g.sort_values("batch")
    if "status" in g and (g["status"] != "ok").all():
        r = g.iloc[0]
        return (f"none: {r['status']} ({_size(r['drafter_gib'])} against the target's "
                f"{_size(r['target_gib'])})")
    g = g[np.isfinite(g["draft_cost"])]
    text = course(g["batch"], g["draft_cost"])
    if "ridge_tokens" in g:
        ridge = float(g["ridge_tokens"].iloc[0])
        past = g[g["batch"] >= ridge]
        if len(past) >= 2 and len(past) < len(g):
            text += (f"; from the dense drafter's ridge ({ridge:,.0f} tokens per pass on this "
                     f"hardware) on it {course(past['batch'], past['draft_cost'])}")
    return text


def draft_cost_findings(td: Tables) -> list[str]:
    """The draft-cost curves in words computed from their tables: the step model's synthetic
    drafters (exact computations, so their direction is stated; models of the same dimensions,
    such as a target and its untrained control, in one sentence) and the measured ratio of
    drafters served alone (numbers, with their intervals where the table gives them: no
    direction is claimed)."""
    out = []
    dr = load(td, "draft_ratio_model")
    if not dr.empty:  # an untrained control has its target's dimensions: its curves are the same
        dr = first_run(dr[~is_control(dr)])
        said: dict[str, list[str]] = {}
        for (model, drafter), g in dr.groupby(["model", "synthetic_drafter"], sort=False):
            said.setdefault(f"{drafter}: the step model's draft cost ratio "
                            f"{_ratio_sentence(g)}.", []).append(model)
        for sentence, names in said.items():
            same = " (the same dimensions)" if len(names) > 1 else ""
            out.append(f"{and_join(names)}{same}, {sentence}")
    sp = load(td, "speedup_vs_batch")
    if not sp.empty and "draft_cost" in sp:
        for run, g in sp[np.isfinite(sp["draft_cost"])].groupby("run", sort=False):
            g = g.sort_values("batch")
            ends = [(r.get("draft_cost_low", np.nan), r.get("draft_cost_high", np.nan))
                    for _, r in g.iterrows()]
            known = [bool(np.isfinite(lo) and np.isfinite(hi)) for lo, hi in ends]
            out.append(f"{run}: measured draft cost ratio " + ", ".join(
                f"{r['draft_cost']:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if ok else "")
                + f" at batch {int(r['batch'])}"
                for (_, r), (lo, hi), ok in zip(g.iterrows(), ends, known))
                + (" (95% intervals where both series were repeated; no direction is claimed)."
                   if any(known) else " (no interval: no direction is claimed)."))
    return out


# --- how the run compares with the study ----------------------------------------------------

HEADLINES = [("overlap_by_distance", "seq1", "step-1 overlap along the committed sequence"),
             ("overlap_by_distance", "independent", "independence"),
             ("overlap_decomposition_step1", "sequence_temporal_share",
              "temporal share of step-1 overlap"),
             ("unique_experts", "empirical", "unique experts per 4-token window"),
             ("unique_experts", "ipf_uniform_sequence",
              "uniform IPF from the overlap along the sequence"),
             ("te_three_ways", "te_sweep", "TE at batch 1"),
             ("kernel_time_shares", "decode_kernel_share",
              "MoE share of decode kernel time at batch 1")]


def pooled_note(td: Tables, run: pd.Series) -> str:
    """What a compared run is of, where its dataset joins held-out sets ("a+b+c"): its main set
    pooled with its held-out slices, not the main set alone that the study's tables are of, with
    the share of its windows held out (heldout_overlap), or the datasets where that has none."""
    parts = dataset_parts(run["dataset"])
    if len(parts) < 2:
        return ""
    ho = load(td, "heldout_overlap")
    mine = ho[ho["run"] == run["run"]] if not ho.empty else ho
    share = heldout_share(mine, run["dataset"])
    held = (f"{100 * share:.0f}% of its windows held out" if np.isfinite(share)
            else f"{parts[0]} with {', '.join(parts[1:])}")
    return f" on its main set pooled with its held-out slices ({held})"


def _published_of(table: str, q: str, study_model: str) -> str:
    """What the study publishes of a headline quantity (the pipeline's `table` and column `q`,
    by published.SPECS) for `study_model`: its values, each with the variant it is of, as
    "0.270 (bf16, TP 2, draft_model)"; "" where it publishes none."""
    spec = next((s for s in published.SPECS if s.table == table and q in s.quantities), None)
    if spec is None:
        return ""
    pub, col = published.load(spec.published), spec.quantities[q]
    p = pub[(pub["model"] == study_model) & pub[col].notna()] if col in pub else pub.iloc[0:0]
    return ", ".join(f"{float(r[col]):.3f}" + (" (" + ", ".join(
        f"TP {int(r[c])}" if c == "tp" and pd.notna(r[c]) else str(r[c])
        for c in spec.variant) + ")"
        if spec.variant else "") for _, r in p.iterrows())


def _not_compared(td: Tables, table: str, q: str, model: str, like) -> str:
    """Why a headline quantity the study publishes is not beside it for a model, with this
    run's own numbers (its row at the study's K and batch 1 where the spec asks them, of the
    run like `like`): not measured, not a value (its status and raw numbers, _te_text), or a
    value with no published row of its variant, drafting method or main set."""
    spec = next(s for s in published.SPECS if s.table == table and q in s.quantities)
    df = load(td, table)
    for c, v in spec.where.items():
        if c in df:
            df = df[df[c] == v]
    r = _first(df, model, like) if not df.empty and q in df else None
    if r is None:
        return "this run does not measure it (ours: none)"
    v = _val(r, q)
    if not np.isfinite(v):
        return f"this run's is not a value (ours: {_te_text(r, q)})"
    return ("the study publishes it for another variant, drafting method or dataset (ours: "
            f"{_with_interval(v, *_interval(r, q))})")


def _reproduced_text(r) -> str:
    """A comparison row's reproduced value with its interval; where the run measured it but did
    not identify it (empty, its status beside: a TE), why, with its raw numbers (_te_text)."""
    if np.isfinite(_val(r, "reproduced")):
        return _with_interval(r["reproduced"], *_interval(r, "reproduced"))
    return _te_text(r, "reproduced")


def comparison_findings(td: Tables) -> list[str]:
    """Per matched model: the headline quantities beside the study's, saying where its run pools
    held-out slices with its main set, and each headline quantity the study publishes for the
    matched model that the run does not set beside it, "not compared" with why and this run's
    own numbers (_not_compared); and the replay's agreement."""
    out = []
    cmp_ = load(td, "comparison")
    for (model, study_model), g in (cmp_.groupby(["model", "study_model"], sort=False)
                                   if not cmp_.empty else []):
        parts = []
        for table, q, name in HEADLINES:
            h = g[(g["table"] == table) & (g["quantity"] == q)]
            if not h.empty:
                r = h.iloc[0]
                parts.append(f"{name} {_reproduced_text(r)} vs {r['published']:.3f}")
        of_runs = g[g["dataset"].apply(lambda ds: isinstance(ds, str) and ds != "")]
        note = pooled_note(td, of_runs.iloc[0]) if not of_runs.empty else ""
        like = of_runs.iloc[0] if not of_runs.empty else None
        for table, q, name in HEADLINES:
            theirs = _published_of(table, q, study_model)
            if theirs and g[(g["table"] == table) & (g["quantity"] == q)].empty:
                parts.append(f"{name} not compared: {_not_compared(td, table, q, model, like)}; "
                             f"the study's {theirs}")
        if parts:
            out.append(f"{model} (compared with {study_model}){note}: " + "; ".join(parts))
    for stem, col in (("replay_unique_experts", "uniform_ipf_diff"),
                      ("replay_weight_model", "te_predicted_diff"), ("replay_three_step", "te_diff")):
        df = load(td, stem)
        if not df.empty and col in df:
            out.append(f"{stem}: replayed from the published inputs, largest difference from the "
                       f"published {col.removesuffix('_diff')} {np.nanmax(np.abs(df[col])):.4f}")
    return out
