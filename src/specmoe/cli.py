"""The `specmoe` command: what-if calculations and trace tools without the pipeline.

Every subcommand prints a readable table, or JSON with --json. Bad input exits 2 with one line
(what is wrong, with the flag); a file that cannot be read or written is bad input too. Flags
that contradict each other are errors, not silently resolved.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cost.costmodel import DEFAULT_HARDWARE, MAX_BATCH, MAX_DRAFT_COST
from .cost.steptables import ENGINES
from .errors import InputError, SpecmoeError
from .names import DEFAULT_METHOD, MODEL_PRECISION, MODEL_TP, SPEC_METHODS, STUDY_BATCH_SIZES


class Range:
    """What a numeric flag's value means, written once beside the flag (its `type=`): an int or a
    float within [lo, hi] (open at an end where `open` says so), refused outside in one line; the
    range is shown in --help. `usual` is the sub-range a value is expected in, `unusual` the
    consequence a warning names outside it (the value is still used)."""

    def __init__(self, kind: type, lo: float | None = None, hi: float | None = None, *,
                 open: str = "", usual: tuple[float, float] | None = None, unusual: str = ""):
        self.kind, self.lo, self.hi, self.open = kind, lo, hi, open
        self.usual, self.unusual = usual, unusual
        self.__name__ = kind.__name__  # argparse's "invalid int value: 'x'"

    def __call__(self, text: str):
        v = self.kind(text)  # ValueError: argparse's "invalid int value"
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be a finite number (got {text})")
        if not self.holds(v):
            raise argparse.ArgumentTypeError(f"must be {self.violated(v)} (got {text})")
        return v

    def violated(self, v: float) -> str:
        """The bound `v` breaks, as said to the user: an integer's one bound, else the range."""
        if self.kind is not int:
            return str(self)
        low = Range(int, self.lo) if self.lo is not None else None
        return str(low if low is not None and not low.holds(v) else Range(int, hi=self.hi))

    def holds(self, v: float) -> bool:
        low = self.lo is None or (v > self.lo if "lo" in self.open else v >= self.lo)
        high = self.hi is None or (v < self.hi if "hi" in self.open else v <= self.hi)
        return low and high

    def warning(self, v: float) -> str | None:
        """The consequence of an unusual value (None: a usual one)."""
        if self.usual and not self.usual[0] <= v <= self.usual[1]:
            return self.unusual
        return None

    def __str__(self) -> str:
        def num(x):
            return f"{x:,}" if self.kind is int else f"{x:g}"
        if self.lo is not None and self.hi is not None:
            if self.kind is int:
                return f"in {num(self.lo)}..{num(self.hi)}"
            return (f"in {'(' if 'lo' in self.open else '['}{num(self.lo)}, {num(self.hi)}"
                    f"{')' if 'hi' in self.open else ']'}")
        if self.lo is not None:
            return f"{'>' if 'lo' in self.open else '>='} {num(self.lo)}"
        return f"{'<' if 'hi' in self.open else '<='} {num(self.hi)}"


class _Renamed(argparse.Action):
    """A flag's old spelling, refused in one line that says what became of it (`why`): the new
    one it names (`--k` meant experts per token in ipf, te and synth and the draft length in
    predict: _renamed), or that it is gone (_dropped)."""

    def __init__(self, option_strings, dest, why: str = "", **kwargs):
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)
        self.why = why

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} {self.why}")


def _renamed(s: argparse.ArgumentParser, old: str, new: str, what: str) -> None:
    s.add_argument(old, action=_Renamed, why=f"is now {new} ({what})")


def _dropped(s: argparse.ArgumentParser, old: str, why: str) -> None:
    """A flag that no longer means anything, refused in one line that says why, where argparse
    would take it and the command ignore it."""
    s.add_argument(old, action=_Renamed, why=f"is gone: {why}; drop the flag")


class _Once(argparse._StoreAction):
    """A single-valued flag given once: argparse would keep the last of two silently. It also
    records the warning of an unusual value (Range.warning) for main to print."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", {})
        if self.dest in given and option_string:
            raise argparse.ArgumentError(
                self, f"given twice ({_shown(given[self.dest])} and {_shown(values)}); give it "
                      "once")
        given[self.dest] = values
        kind = self.type.item if isinstance(self.type, _List) else self.type
        if isinstance(kind, Range) and option_string:
            for v in values if isinstance(values, list) else [values]:
                if (why := kind.warning(v)) is not None:
                    namespace.__dict__.setdefault("_warnings", []).append(
                        f"{option_string} {_shown(v)}: {why}")
                    break
        setattr(namespace, self.dest, values)


def _shown(v) -> str:
    if isinstance(v, list):
        return ",".join(map(_shown, v))
    return f"{v:g}" if isinstance(v, float) else str(v)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value that starts with a minus sign ("-0.1,0.2", "-5") is a value, not an option: its
        # check then says what is wrong with it
        self._negative_number_matcher = re.compile(r"^-\.?\d[\d.,eE+-]*$")
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def add_argument(self, *args, **kwargs):
        """The range of a Range-typed flag shown in its --help, from the Range itself."""
        kind = kwargs.get("type")
        kind = kind.item if isinstance(kind, _List) else kind
        if isinstance(kind, Range) and kwargs.get("help"):
            kwargs["help"] += f"; {'each ' if isinstance(kwargs['type'], _List) else ''}{kind}"
        return super().add_argument(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2, with the closest known name
        # "argument --n: must be >= 1 (got 0)" -> "--n must be >= 1 (got 0)"
        message = re.sub(r"^argument ([-\w/]+): (must|given|lists) ", r"\1 \2 ", message)
        sys.stderr.write(f"{self.prog}: error: {message}{self._hint(message)}\n")
        raise SystemExit(2)

    def _hint(self, message: str) -> str:
        from .checks.schema import did_you_mean

        if m := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
            known = re.findall(r"'([^']*)'", m[2])
            hint = did_you_mean(m[1], known)
        elif m := re.search(r"unrecognized arguments: (-\S+)", message):
            parsers = [self, *(a.choices[c] for a in self._actions
                               if isinstance(a, argparse._SubParsersAction) for c in a.choices)]
            known = {o for p in parsers for a in p._actions for o in a.option_strings}
            hint = did_you_mean(m[1].split("=")[0], known)
            if hint == m[1].split("=")[0]:  # a subcommand's flag before the subcommand
                return "; give it after the subcommand"
        else:
            hint = None
        return f"; did you mean '{hint}'?" if hint else ""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specmoe")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _items(text: str, kind: str) -> list[str]:
    """The comma-separated items of a flag's value; an empty one is an error (never dropped)."""
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        where = "an empty value" if len(items) > 1 else "no value"
        raise argparse.ArgumentTypeError(f"expected comma-separated {kind}, got '{text}' ({where})")
    return items


class _List:
    """A comma-separated list of numbers, each of its Range; `counts`: how many items it may
    have (None: any), said as `form` where it has another; `distinct`: a set, each value once
    (a value given twice is refused, as the configuration's schema refuses it)."""

    def __init__(self, item: Range, counts: tuple[int, ...] | None = None, form: str = "",
                 distinct: bool = False):
        self.item, self.counts, self.form, self.distinct = item, counts, form, distinct

    def __call__(self, text: str) -> list:
        kind = "integers" if self.item.kind is int else "numbers"
        out = []
        for x in _items(text, kind):
            try:
                v = self.item.kind(x)
            except ValueError:
                what = "an integer" if self.item.kind is int else "a number"
                raise argparse.ArgumentTypeError(
                    f"expected comma-separated {kind}, got '{text}' ('{x}' is not {what})"
                ) from None
            if not math.isfinite(v):
                raise argparse.ArgumentTypeError(f"expected finite numbers, got '{x}' in '{text}'")
            if not self.item.holds(v):
                raise argparse.ArgumentTypeError(f"must be {self.item.violated(v)} each (got "
                                                 f"{x} in '{text}')")
            out.append(v)
        if self.distinct and len(set(out)) < len(out):
            raise argparse.ArgumentTypeError(f"lists a value twice (got '{text}'): give each "
                                             "once")
        if self.counts and len(out) not in self.counts:
            raise argparse.ArgumentTypeError(f"must be {self.form} (got {len(out)} numbers: "
                                             f"'{text}')")
        return out


def _print(obj: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj, default=float))
        return
    width = max(len(k) for k in obj)
    for key, val in obj.items():
        if isinstance(val, float):
            val = f"{val:.4f}"
        elif isinstance(val, list) and val and isinstance(val[0], dict):
            print(f"{key}:")
            cols = list(val[0])
            cells = [[_cell(row[c]) for c in cols] for row in val]
            widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
            print("  " + "  ".join(f"{c:>{w}}" for c, w in zip(cols, widths)))
            for r in cells:
                print("  " + "  ".join(f"{x:>{w}}" for x, w in zip(r, widths)))
            continue
        if isinstance(val, list) and val and all(isinstance(x, str) for x in val):
            print(f"{key}:")  # one line each (caveats, a legend)
            for x in val:
                print(f"  - {x}")
            continue
        print(f"{key:<{width}}  {val}")


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


# What the numbers mean (Range): each flag's range, once, as its type.
MAX_K = 8  # draft length: the trace stores positions 0..K in int8, IPF fits windows of <= 9
TOP_K = Range(int, 1, 1024)
EXPERTS = Range(int, 1, 1 << 20)
LAYERS = Range(int, 1, 1024)
HEADS = Range(int, 1, 1024)
WIDTH = Range(int, 1, 1 << 18)  # a hidden or FFN width: the widest published is about 2^16
DRAFT_LEN = Range(int, 1, MAX_K)
# the draft length te and predict assume without --draft-length: the study's K (synth's is
# SynthParams')
DRAFT_LENGTH = 3
TP = Range(int, 1, 64)
SEED = Range(int, 0)
SHARE = Range(float, 0, 1, open="lohi")
PROBABILITY = Range(float, 0, 1)
# a verification window of K+1 <= 9 tokens reads at most K+1 times one token's experts, and takes
# at most K+1 decode steps' time for each part of the step; a measured ratio outside the report's
# physical range (report.measured.CORRECTION_INPUTS) is kept and flagged there
WINDOW_RATIO = Range(float, 0, MAX_K + 1, open="lo")
BATCH = Range(int, 1, MAX_BATCH)


def _read_loads(path: str, n: int, k: int) -> np.ndarray:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such loads file")
    if not p.is_file():
        raise InputError(f"{p}: --loads must be a file of numbers, not a directory")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{p}: --loads is not text (expected numbers: JSON list, CSV or one per "
                         "line)") from None
    try:
        vals = json.loads(text) if text.lstrip().startswith("[") else \
            [float(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise InputError(f"{p}: expected numbers (JSON list, CSV or one per line)") from None
    if any(isinstance(v, list) for v in vals):
        raise InputError(f"{p}: a nested JSON array is not a list of loads: give one flat list "
                         "of N numbers (one layer's loads)")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
        raise InputError(f"{p}: expected numbers (JSON list, CSV or one per line)")
    q = np.asarray(vals, dtype=float)
    if not np.all(np.isfinite(q)):
        raise InputError(f"{p}: loads must be finite numbers (found nan or inf)")
    if q.size != n:
        raise InputError(f"{p}: {q.size} loads for N={n} experts")
    if np.any(q < 0) or q.max() <= 0:
        raise InputError(f"{p}: loads must be non-negative and not all zero")
    q = q / q.max()  # relative loads: scaled first, so that their sum cannot overflow
    q = q / q.sum() * k  # -> marginals with sum_e q_e = k
    if q.max() > 1:
        raise InputError(f"{p}: a load share of {q.max():.3f} > 1 after scaling to sum k={k}")
    return q


def _ipf_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--experts-per-token", dest="k", type=TOP_K, required=True,
                   help="experts per token k (top-k)")
    _renamed(s, "--k", "--experts-per-token", "experts per token")
    s.add_argument("--n", type=EXPERTS, required=True, help="routed experts per layer")
    s.add_argument("--overlaps", type=_List(PROBABILITY), required=True,
                   help="ov(d) for d = 1..K, comma-separated; the window has K+1 tokens; at "
                        "least max(0, 2k - N) / k")
    s.add_argument("--loads", help="file of N relative expert loads (skewed IPF)")
    s.add_argument("--batch", type=BATCH, default=1, help="independent sequences (default 1)")


def cmd_ipf(a) -> dict:
    from .routing import ipf
    from .routing.unique import check_nk, check_overlaps, uniform_unique

    check_nk(a.n, a.k)
    check_overlaps(a.n, a.k, a.overlaps)
    window = len(a.overlaps) + 1
    if a.loads:
        q = _read_loads(a.loads, a.n, a.k)
        floor = ipf.skewed_floor(q)
        for d, ov in enumerate(a.overlaps, 1):
            if ov < floor - 1e-12:
                raise InputError(
                    f"overlap {ov:g} at distance {d} is impossible with these loads: an expert "
                    f"chosen with probability q > 1/2 is chosen by both tokens at least 2q - 1 "
                    f"of the time, so ov >= {floor:.4g} (hottest expert q = {q.max():.3g})")
        res = ipf.predict_skewed(q[None, :], np.asarray(a.overlaps)[None, :], batch=a.batch)
        res.pop("per_layer")
    else:
        res = ipf.predict_uniform(a.n, a.k, a.overlaps, batch=a.batch)
    if res["infeasible"]:
        raise InputError(
            f"overlaps {','.join(f'{x:g}' for x in a.overlaps)} cannot hold together in one "
            f"window of {window} tokens: no distribution of an expert's use over its positions "
            "has them (e.g. ov(1) = 1 at both steps forces ov(2) = 1; low overlaps throughout a "
            "long window need more experts than N)")
    if not res["converged"]:
        _warn(a, f"IPF stopped {res['max_error']:.1e} short of the overlaps (they are feasible, "
                 "near the boundary, where it converges slowly): its margins are that close to them")
    return {"unique": res["unique"], "uniform": uniform_unique(a.n, a.k, window * a.batch),
            "window": window, "batch": a.batch, "loads": "skewed" if a.loads else "uniform",
            "converged": res["converged"], "n_clipped": res["n_clipped"]}


_DIMS = ("hidden", "expert_intermediate", "heads", "kv_heads", "head_dim", "experts_per_token",
         "n", "layers", "shared_intermediate")


def _tp_splits(shape: dict, tp: int, name: str = "the dimensions") -> None:
    from .cost.hfconfig import tp_problems

    bad = tp_problems(shape, tp, name)
    if bad:
        raise InputError(f"--tp {tp}: {bad[0]}")


def _te_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--config", help="a Hugging Face config.json instead of the dimensions")
    for name, kind, what in (
            ("hidden", WIDTH, "hidden size"),
            ("expert-intermediate", WIDTH, "intermediate size of one routed expert"),
            ("heads", HEADS, "attention heads"), ("kv-heads", HEADS, "key/value heads, dividing "
                                                                     "--heads"),
            ("head-dim", HEADS, "dimension of one attention head"),
            ("experts-per-token", TOP_K, "experts per token k (top-k)"),
            ("n", EXPERTS, "routed experts per layer (default: k)"),
            ("layers", LAYERS, "decoder layers, every one with experts"),
            ("shared-intermediate", Range(int, 0, WIDTH.hi),
             "intermediate size of the shared experts (0)")):
        s.add_argument(f"--{name}", type=kind, help=what)
    s.add_argument("--dtype", help="bf16, fp16, fp8 or fp32 (default: with --config, the "
                   "checkpoint's dtype as vLLM's dtype auto serves it on a GPU, a float32 one "
                   "in bf16; else bf16)")
    s.add_argument("--tp", type=TP, default=MODEL_TP,
                   help=f"tensor-parallel degree (default {MODEL_TP})")
    s.add_argument("--draft-length", dest="k_draft", type=DRAFT_LEN, default=DRAFT_LENGTH,
                   help=f"draft length K of the window that --unique counts (default "
                        f"{DRAFT_LENGTH})")
    _renamed(s, "--k", "--experts-per-token", "experts per token")
    _renamed(s, "--k-draft", "--draft-length", "the draft length K")
    s.add_argument("--unique", type=Range(float, 1),
                   help="unique experts per verification window of K+1 tokens, in [k, min(N, "
                        "k (K+1))]")


def cmd_te(a) -> dict:
    from .cost.costmodel import ModelDims
    from .cost.hfconfig import check_precision, dims_from_config, load_config
    from .routing.unique import check_nk

    if a.config:
        given = [f"--{n.replace('_', '-')}" for n in _DIMS if getattr(a, n) is not None]
        if given:
            raise InputError(f"{', '.join(given)} beside --config: the dimensions come from "
                             "--config; give one or the other")
        shape, name = load_config(a.config)
        _tp_splits(shape, a.tp, name)
        check_precision(a.config, a.dtype)
        # a checkpoint's GPU cost: without --dtype, as vLLM's dtype auto serves it on a GPU
        dims = dims_from_config(a.config, dtype=a.dtype or "auto", tp=a.tp)
    else:
        missing = [f"--{n.replace('_', '-')}" for n in _DIMS[:6] + ("layers",)
                   if getattr(a, n) is None]
        if missing:
            raise InputError(f"give --config or all of: {', '.join(missing)}")
        k = a.experts_per_token
        check_nk(a.n or k, k)
        dims = ModelDims.from_dims(hidden=a.hidden, expert_intermediate=a.expert_intermediate,
                                   num_experts=a.n or k, top_k=k, heads=a.heads,
                                   num_layers=a.layers,
                                   kv_heads=a.kv_heads, head_dim=a.head_dim,
                                   shared_intermediate=a.shared_intermediate or 0,
                                   dtype=a.dtype or "bf16", tp=a.tp)
        _tp_splits({"num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
                    "hidden_size": a.hidden, "moe_intermediate_size": a.expert_intermediate},
                   a.tp)
    if a.unique is not None:
        hi = min(dims.num_experts, dims.top_k * (a.k_draft + 1))
        if not dims.top_k <= a.unique <= hi:
            raise InputError(
                f"--unique {a.unique:g} is impossible: a window of K+1 = {a.k_draft + 1} tokens "
                f"uses between k = {dims.top_k} (every token the same experts) and "
                f"min(N, k (K+1)) = {hi} unique experts (N = {dims.num_experts}; --draft-length "
                "sets K)")
    out = dims.summary(a.unique)
    out.update(dtype=dims.dtype, tp=dims.tp, top_k=dims.top_k)
    return out


def _correction_args(s: argparse.ArgumentParser) -> None:
    for name, kind, what in (
            ("moe-weight-share", SHARE, "MoE share of the weights read per step"),
            ("unique-ratio", Range(float, 1, MAX_K + 1),
             "unique experts per window / k: at least one token's k, at most K+1 tokens' own"),
            ("moe-time-share", SHARE, "measured MoE share of decode time"),
            ("moe-time-ratio", WINDOW_RATIO, "measured verify/decode time ratio of MoE kernels "
                                              "(idle time between them included: may be "
                                              "below 1)"),
            ("dense-time-ratio", WINDOW_RATIO, "measured verify/decode time ratio of the rest "
                                               "(idle time included: may be below 1)")):
        s.add_argument(f"--{name}", type=kind, required=True, help=what)
    s.add_argument("--measured", type=Range(float, 0, 1, open="lo"),
                   help="TE measured from the sweep: decode step time / verification step time "
                        "(above 1 is noise or a mismatched pair of runs)")


def cmd_correction(a) -> dict:
    """costmodel.three_step_correction, each measured input and each step's TE flagged by the
    report's rule (report.measured.CORRECTION_INPUTS' physical ranges, report.bounds): a TE
    outside [0, 1] is no number (te None, te_raw and te_status beside it), and neither is the
    delta to or from it, as in the report's three_step_correction table."""
    from .cost.costmodel import three_step_correction
    from .report.bounds import bounded, bounded_te
    from .report.measured import CORRECTION_INPUTS

    given = {"f": ("--moe-time-share", a.moe_time_share),
             "s_moe": ("--moe-time-ratio", a.moe_time_ratio),
             "s_dense": ("--dense-time-ratio", a.dense_time_ratio)}
    for col, (flag, v) in given.items():
        status = bounded(col, v, **CORRECTION_INPUTS[col])[f"{col}_status"]
        if status != "ok":  # measured, so kept, but flagged
            _warn(a, f"{flag} {v:g}: {status}; a TE it puts outside [0, 1] is not shown")
    res = three_step_correction(a.moe_weight_share, a.unique_ratio, a.moe_time_share,
                                a.moe_time_ratio, a.dense_time_ratio, a.measured)
    steps = []
    for s in res["steps"]:
        te = bounded_te("te", s["te"])
        row = {k: s[k] for k in ("name", "f", "s_moe", "s_dense")}
        row.update(te=te["te"], te_raw=te["te_raw"], te_status=te["te_status"],
                   delta=s["delta"], gap_closed=s["gap_closed"])
        if steps and (row["te_status"] != "ok" or steps[-1]["te_status"] != "ok"):
            row["delta"] = row["gap_closed"] = None  # a step to or from a TE that is no value
        steps.append(row)
    res["steps"] = steps
    if "total_gap_closed" in res and any(r["te_status"] != "ok" for r in (steps[0], steps[-1])):
        res["total_gap_closed"] = None
    return res


def _synth_args(s: argparse.ArgumentParser) -> None:
    """Every flag of a SynthParams field defaults to None (only a value given is passed): the
    defaults are SynthParams', read from it for the help."""
    from dataclasses import fields

    from .routing import synth

    default = {f.name: f.default for f in fields(synth.SynthParams)}

    def dflt(name: str) -> str:
        return f" (default {_shown(default[name])})"

    s.add_argument("--out", type=Path, required=True, help="Parquet trace to write")
    s.add_argument("--n", type=EXPERTS, help="routed experts per layer" + dflt("num_experts"))
    s.add_argument("--experts-per-token", dest="k", type=TOP_K,
                   help="experts per token k" + dflt("top_k"))
    s.add_argument("--layers", type=LAYERS, help="MoE layers" + dflt("num_layers"))
    s.add_argument("--draft-length", dest="k_draft", type=DRAFT_LEN,
                   help="draft length K" + dflt("k_draft"))
    _renamed(s, "--k", "--experts-per-token", "experts per token")
    _renamed(s, "--k-draft", "--draft-length", "the draft length K")
    s.add_argument("--skew", type=Range(float, 0, usual=(0, 4), unusual=(
        "a Zipf exponent above 4 sends nearly every token to the same few experts")),
                   help="Zipf exponent of expert loads" + dflt("skew"))
    s.add_argument("--stickiness", type=Range(float, 0, 1, usual=(0, 0.99), unusual=(
        "every token keeps the previous token's experts: overlap 1 at every distance, nothing "
        "to predict")),
                   help="probability that a token keeps each of the previous token's experts"
                        + dflt("stickiness"))
    s.add_argument("--topic-spread", type=Range(float, 0),
                   help="log-affinity spread of a request's topic over experts (0: no topics)"
                        + dflt("topic_spread"))
    s.add_argument("--topic-switch", type=PROBABILITY,
                   help="probability that the topic changes at a token (needs --topic-spread)"
                        + dflt("topic_switch"))
    s.add_argument("--fit-to", help="a study model (e.g. Qwen3-30B): fit skew, stickiness and "
                                    "topics to its published overlap curve instead")
    s.add_argument("--requests", type=Range(int, 1, 1 << 20), help="requests" + dflt("requests"))
    s.add_argument("--steps", type=Range(int, 1, 1 << 24, usual=(1, 4096), unusual=(
        "over 4,096 SD steps per request: the trace holds requests x steps x (K+1) rows, its "
        "memory and time grow in proportion")), help="SD steps per request" + dflt("steps"))
    s.add_argument("--accept-prob", type=Range(float, 0, 1, usual=(0.01, 0.99), unusual=(
        "drafts (almost) always rejected or always accepted: acceptance tells nothing about "
        "overlap")), help="probability that each draft is accepted" + dflt("accept_prob"))
    s.add_argument("--tie", type=Range(float, 0, 10, usual=(0, 5), unusual=(
        "most acceptance probabilities clip to 0 or 1: the tie saturates")),
                   help="acceptance probability added per unit of a draft's overlap above the "
                        "process's mean overlap at distance 1: acceptance rises with overlap "
                        "around its --accept-prob, or is independent of it at 0"
                        + dflt("accept_overlap_tie"))
    s.add_argument("--seed", type=SEED, help="random seed" + dflt("seed"))


# synth's flags -> the SynthParams fields they set (the process's, FITTED, by their own names)
SYNTH_FLAGS = {"n": "num_experts", "k": "top_k", "layers": "num_layers", "k_draft": "k_draft",
               "fit_to": "fit_to", "requests": "requests", "steps": "steps",
               "accept_prob": "accept_prob", "tie": "accept_overlap_tie", "seed": "seed"}


def cmd_synth(a) -> dict:
    from .provenance import provenance
    from .routing.synth import FITTED, SynthParams, generate
    from .routing.trace import write_trace
    from .stages.analysis import model_ref

    _writable(a.out, "--out")
    fitted = {n: getattr(a, n) for n in FITTED if getattr(a, n) is not None}
    if a.fit_to and fitted:
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in fitted)
        raise InputError(f"{flags} beside --fit-to {a.fit_to}: --fit-to fits them to the "
                         "published curve; give one or the other")
    if a.topic_switch is not None and not a.topic_spread:
        raise InputError("--topic-switch has no effect without --topic-spread > 0 (no topics)")
    given = {field: getattr(a, flag) for flag, field in SYNTH_FLAGS.items()
             if getattr(a, flag) is not None}
    p = SynthParams(**given, **fitted)
    p.validate()
    tr = generate(p)
    # the model record the pipeline's synthetic traces carry (revision synthetic:<its hash>)
    model = model_ref({"name": "synthetic", "source": "synthetic", "synthetic": p.to_dict()})
    write_trace(a.out, tr, provenance(p.to_dict(), model=model))
    return {"out": str(a.out), "rows": len(tr), "layers": p.num_layers, "top_k": p.top_k,
            "num_experts": p.num_experts, "k_draft": p.k_draft}


def _writable(path: Path, flag: str) -> None:
    """A file that can be written: not a directory, in a directory that exists."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{flag} {path}: directory {parent} is not writable")


def _analyze_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("trace", help="a routing trace (Parquet)")
    _dropped(s, "--seed", "the shuffle null is exact, so no seed changes it")


def _warn(a: argparse.Namespace, message: str) -> None:
    """A warning main prints on stderr when the subcommand succeeds (one line each)."""
    a.__dict__.setdefault("_warnings", []).append(message)


def cmd_analyze(a) -> dict:
    """A trace's statistics as the overlap and acceptance stages compute them, each beside its
    95% interval over requests (the independent units): window_intervals, trace_sequence_stats
    and acceptance_stats, the stages' own calls. Below bootstrap.MIN_REQUESTS requests the library
    gives no interval, and a warning says so."""
    from .routing import acceptance, bootstrap, overlap
    from .routing.trace import read_trace
    from .routing.unique import uniform_unique
    from .stages.analysis import window_interval_summary

    if Path(a.trace).is_dir():
        raise InputError(f"{a.trace}: is a directory; give a routing trace (Parquet file)")
    tr = read_trace(a.trace)  # a trace of no rows is refused there (Trace.validate)
    ws = overlap.window_stats(tr)
    seq, seq_pairs, seq_ci = overlap.trace_sequence_stats(tr)
    # the baseline bias-corrected over requests, as the overlap stage gives it
    s = ws.summary(seq_ci["independence"])
    s.update(overlap.sequence_summary(seq, seq_pairs, ws, seq_ci))
    s.update(window_interval_summary(overlap.window_intervals(tr)))
    n_req = s["window_requests"]
    if n_req < bootstrap.MIN_REQUESTS:
        _warn(a, f"{a.trace}: {n_req} request(s): no interval (at least {bootstrap.MIN_REQUESTS} "
                 "needed): overlap, temporal share and acceptance are points from too few "
                 "independent units to read (a request's windows share its prompt and routing)")
    out = {k: s[k] for k in ("num_experts", "top_k", "k_draft", "n_tokens", "n_windows")}
    out["n_requests"] = n_req
    out["uniform"] = s["uniform"]
    for key, point, low, high in (
            ("independent", "independent", "independent_low", "independent_high"),
            ("step1", "step1", ("window_low", 0), ("window_high", 0)),
            ("shuffle_step1", "shuffle_step1", ("shuffle_low", 0), ("shuffle_high", 0)),
            ("sequence_step1", "sequence_step1", ("sequence_low", 0), ("sequence_high", 0)),
            ("sequence_temporal", "sequence_excess", "sequence_excess_low",
             "sequence_excess_high"),
            ("sequence_temporal_share", "sequence_temporal_share",
             "sequence_temporal_share_low", "sequence_temporal_share_high"),
            ("overlap_by_distance", "overlap_by_distance", "window_low", "window_high"),
            ("shuffle_by_distance", "shuffle_by_distance", "shuffle_low", "shuffle_high")):
        out[key] = s[point]
        out[f"{key}_low"], out[f"{key}_high"] = (
            s[end] if isinstance(end, str) else s[end[0]][end[1]] for end in (low, high))
    out["unique_empirical"] = float(np.nanmean(ws.unique))
    out["unique_uniform"] = uniform_unique(ws.num_experts, ws.top_k, ws.k_draft + 1)
    consec, anchor = overlap.row_overlaps(tr)
    acc = acceptance.acceptance_stats(tr, consec, anchor)
    tau = acc["acceptance_length"]
    out.update(tau=tau["tau"], tau_low=tau["tau_low"], tau_high=tau["tau_high"])
    out["acceptance"] = [
        {"draft_position": r["draft_position"], "accepted_overlap": r["accepted_overlap"],
         "first_rejected_overlap": r["first_rejected_overlap"], "delta": r["delta"],
         "delta_low": r["delta_low_by_request"], "delta_high": r["delta_high_by_request"],
         "cohens_d": r["cohens_d"], "cohens_d_low": r["cohens_d_low"],
         "cohens_d_high": r["cohens_d_high"], "p_by_request": r["p_by_request"],
         "size": r["size"]} for r in acc["by_position"]]
    return out if a.json else _intervals_shown(out, n_req)


def _intervals_shown(out: dict, n_requests: int) -> dict:
    """cmd_analyze's <key>, <key>_low, <key>_high as one readable value: "0.4312 [0.4101,
    0.4530]", or the point with why it has no interval."""
    from .routing import bootstrap

    def shown(v, lo, hi, why: str) -> str:
        if v is None or not np.isfinite(v):
            return "-"
        if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
            return f"{v:.4f}; {why}"
        return f"{v:.4f} [{lo:.4f}, {hi:.4f}]"

    why = (f"no interval ({n_requests} requests, at least {bootstrap.MIN_REQUESTS} needed)"
           if n_requests < bootstrap.MIN_REQUESTS else "no interval")
    res = {}
    for key, v in out.items():
        if key.endswith(("_low", "_high")) and key.rsplit("_", 1)[0] in out:
            continue
        if f"{key}_low" not in out:
            res[key] = v
        elif isinstance(v, list):
            res[key] = [f"d={d}: {shown(x, lo, hi, why)}" for d, (x, lo, hi) in enumerate(
                zip(v, out[f"{key}_low"], out[f"{key}_high"]), 1)]
        else:
            res[key] = shown(v, out[f"{key}_low"], out[f"{key}_high"], why)
    res["acceptance"] = [
        {k: (shown(r[k], r[f"{k}_low"], r[f"{k}_high"], "no interval") if f"{k}_low" in r
             else r[k]) for k in r if not k.endswith(("_low", "_high"))}
        for r in out["acceptance"]]
    return res


def _download_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("repo_id", help="a Hugging Face repository, e.g. Qwen/Qwen3-30B-A3B-FP8")
    s.add_argument("--revision", help="commit (pins it), branch or tag (default: newest, unpinned)")
    s.add_argument("--mode", choices=["full", "config"],
                   help="full (default): what vLLM loads; config: config.json and tokenizer only")
    s.add_argument("--repo-type", choices=["model", "dataset"], default="model",
                   help="model (default) or dataset")
    s.add_argument("--trust-remote-code", action="store_true", help="also fetch *.py files")
    s.add_argument("--name", help="name for messages (default: the repo id)")
    s.add_argument("--out", type=Path, help="also write the manifest here")


@contextmanager
def _held_log(a: argparse.Namespace) -> Iterator[None]:
    """The library's log warnings (the `specmoe` logger: hub.download's "unpinned", its retries)
    held while a subcommand runs: on success each is one of its warnings (main prints them,
    "specmoe: warning: ..."), on failure dropped, so that a refusal stays its one line."""
    held: list[logging.LogRecord] = []

    class _Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record)

    logger, handler = logging.getLogger("specmoe"), _Hold(logging.WARNING)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    for record in held:
        _warn(a, record.getMessage())


def cmd_download(a) -> dict:
    from .sources.hub import download

    if not a.repo_id.strip():
        raise InputError("give a Hugging Face repository id (owner/name), e.g. "
                         "Qwen/Qwen3-30B-A3B-FP8")
    if a.out:
        _writable(a.out, "--out")
    if a.repo_type == "dataset" and (a.trust_remote_code or a.mode):
        flag = "--trust-remote-code" if a.trust_remote_code else f"--mode {a.mode}"
        raise InputError(f"{flag} applies to model repositories, not to --repo-type dataset")
    with _held_log(a):
        man = download(a.name or a.repo_id, a.repo_id, a.revision, mode=a.mode or "full",
                       repo_type=a.repo_type, trust_remote_code=a.trust_remote_code,
                       pin_hint="rerun with --revision <the recorded commit> to pin it")
    if a.out:  # the record the pipeline's download stages write (stages.study)
        from .provenance import provenance, write_json
        from .stages.analysis import model_ref

        got = {"repo_id": a.repo_id, "revision": man["commit"]}
        of = ({"dataset": got} if a.repo_type == "dataset" else
              {"model": model_ref({"name": a.name or a.repo_id, "source": "hf",
                                   "revision": man["commit"]})})
        write_json(a.out, man, provenance({"repo_id": a.repo_id, "revision": a.revision,
                                           "mode": a.mode or "full"}, stage="download", **of))
    return man


def _predict_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("model", help="a config.json (or its folder), or a Hugging Face repo id "
                                 "(its config.json is fetched as the download stage does)")
    s.add_argument("--hardware",
                   help=f"a shipped GPU (H100, H200, B200) or an entry of --hardware-file "
                        f"(default: the file's one entry, without a file {DEFAULT_HARDWARE})")
    s.add_argument("--hardware-file",
                   help="YAML or JSON with a `hardware` section (as config.yaml's) for a GPU "
                        "the package does not ship")
    s.add_argument("--tp", type=TP, default=MODEL_TP, help=f"tensor-parallel degree ({MODEL_TP})")
    s.add_argument("--precision", default=MODEL_PRECISION, choices=["auto", "fp8", "bf16", "fp16"],
                   help="auto: the checkpoint's own format as vLLM's dtype auto serves it (a "
                        "float32 one in bf16); fp8: vLLM's online fp8 (auto)")
    s.add_argument("--draft-length", dest="k", type=DRAFT_LEN, default=DRAFT_LENGTH,
                   help=f"draft length K ({DRAFT_LENGTH})")
    _renamed(s, "--k", "--draft-length", "the draft length K")
    s.add_argument("--method", default=DEFAULT_METHOD, choices=SPEC_METHODS,
                   help="speculative method; its drafter's cost comes from the target's shape, "
                        f"or from --draft-config (a draft model's or an EAGLE head's) ({DEFAULT_METHOD})")
    s.add_argument("--draft-config", help="config.json of a separate draft model or EAGLE head")
    s.add_argument("--draft-cost", type=Range(float, 0, MAX_DRAFT_COST, open="hi"),
                   help="a known draft cost c (the K drafts' time per SD step over one decode "
                        "step of the target)")
    s.add_argument("--engine", default="vllm", choices=ENGINES,
                   help="the serving engine (the step model is vLLM's; others widen the "
                        "interval) (vllm)")
    s.add_argument("--overlaps", type=_List(PROBABILITY),
                   help="ov(d) for d = 1..K (default: the study's published curve for its own "
                        "models, else its models' curves of the same granularity as a prior)")
    s.add_argument("--acceptance-length", type=_List(Range(float, 1, MAX_K + 1), (1, 2),
                                                     "one tau or a range low,high"),
                   help="tau, or its range low,high, at most K+1 (default: a prior of 0.54 to "
                        "0.85 accepted per draft, e.g. 2.0,3.2 at K = 3)")
    s.add_argument("--batch-sizes", type=_List(BATCH, distinct=True),
                   default=list(STUDY_BATCH_SIZES),
                   help="comma-separated (1,2,4,...,128)")
    s.add_argument("--context", type=Range(int, 1),
                   help="KV-cache tokens per sequence that attention reads (default: the "
                        "calibration's, an MT-Bench prompt and half its output, which the answer "
                        "states; one far from it lies outside the calibration)")
    s.add_argument("--revision", help="with a repo id: commit, branch or tag")
    s.add_argument("--study-model", help="the study model this is (e.g. Qwen3-30B): its published "
                                         "overlaps (a repo id of the study's finds it itself)")


def cmd_predict(a) -> dict:
    """The step model's prediction (specmoe.cost.predictor, the entry point the rule predict shares)."""
    from .checks.preflight import shipped_config_path, shipped_repo_of
    from .cost import predictor
    from .cost.hfconfig import check_precision, dims_from_config, load_config

    hw, caveats = predictor.hardware(a.hardware, a.hardware_file)
    config, repo = Path(a.model), None
    if config.exists():
        if a.revision:
            raise InputError(f"--revision {a.revision} beside the local file {a.model}: a revision "
                             "is a commit of a Hugging Face repository; give a repo id or no "
                             "--revision")
    else:  # a repo id: the package's copy of a study checkpoint's config.json, else the download
        # stage's config mode (the cache with HF_HUB_OFFLINE=1)
        if a.model.count("/") != 1 or a.model.endswith(".json"):
            raise InputError(f"{a.model}: no such config.json (nor a Hugging Face repo id)")
        repo = a.model
        config = None if a.revision else shipped_config_path(repo)
        if config is None:
            from .sources.hub import download

            with _held_log(a):
                man = download(repo, repo, a.revision, mode="config",
                               pin_hint="give --revision <commit> to pin it")
            config = Path(man["snapshot_path"])
    if config.is_dir():
        config = config / "config.json"
    check_precision(config, a.precision)
    dims = dims_from_config(config, dtype=a.precision, tp=a.tp)  # auto: as vLLM serves it
    study = a.study_model
    if study is None:  # a study checkpoint by repo id, or by its config.json anywhere
        from .sources import published

        study = published.study_model_of({"repo_id": repo or
                                          shipped_repo_of(load_config(config)[0])})
    tau = None
    if a.acceptance_length:
        tau = (a.acceptance_length[0], a.acceptance_length[-1])
        if tau[0] > tau[1]:
            raise InputError(f"--acceptance-length {_shown(a.acceptance_length)}: a range is "
                             "low,high (low first)")
    if a.draft_cost is not None and a.draft_cost >= a.k:
        # speedup = tau / (c + 1/TE) with tau <= K + 1 and 1/TE >= 1: below 1 once c >= K
        _warn(a, f"--draft-cost {a.draft_cost:g} at K = {a.k}: the drafts cost at least K decode "
                 "steps, and a window gives at most K + 1 tokens for at least one decode step of "
                 "verification: SD cannot pay")
    if a.draft_config:
        if a.draft_cost is not None:
            raise InputError("--draft-cost beside --draft-config: a known cost replaces the "
                             "drafter's; give one or the other")
        if a.method == "mtp":
            raise InputError("--draft-config beside --method mtp: MTP drafts with the target's "
                             "own layers; use --method draft_model, eagle or eagle3")
    res = predictor.prediction(
        dims, hw, a.k, a.method, a.batch_sizes, config=config, study_model=study,
        overlaps=[a.overlaps] if a.overlaps else None, tau=tau,
        draft_config=a.draft_config, draft_name=f"--draft-config {a.draft_config}",
        draft_cost=a.draft_cost, engine=a.engine, caveats=caveats,
        **({} if a.context is None else {"context": a.context}))
    res["model"] = str(repo or config)
    return res if a.json else predictor.human(res)


@dataclass(frozen=True)
class Subcommand:
    """One `specmoe` subcommand, a row of SUBCOMMANDS (after vLLM's benchmark subcommands): its
    name and help, the function that adds its arguments (every subcommand also takes --json) and
    the one that runs it, returning what is printed."""

    name: str
    help: str
    add_cli_args: Callable[[argparse.ArgumentParser], None]
    cmd: Callable[[argparse.Namespace], dict]


SUBCOMMANDS = (
    Subcommand("ipf", "max-entropy IPF prediction of unique experts", _ipf_args, cmd_ipf),
    Subcommand("te", "weight-model target efficiency", _te_args, cmd_te),
    Subcommand("correction", "three-step correction of the weight model", _correction_args,
               cmd_correction),
    Subcommand("synth", "write a synthetic routing trace", _synth_args, cmd_synth),
    Subcommand("analyze", "summarise a routing trace", _analyze_args, cmd_analyze),
    Subcommand("download", "fetch a Hugging Face repository into the HF cache and print its "
                           "manifest (with `predict REPO`, the only networked commands)",
               _download_args, cmd_download),
    Subcommand("predict", "does SD pay for this MoE, at this batch size, on this GPU? TE and "
                          "speedup from the step model, before any run", _predict_args,
               cmd_predict),
)


def build_parser() -> argparse.ArgumentParser:
    """The `specmoe` parser: one subparser per row of SUBCOMMANDS."""
    p = _Parser(prog="specmoe", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    for c in SUBCOMMANDS:
        s = sub.add_parser(c.name, help=c.help)
        c.add_cli_args(s)
        s.add_argument("--json", action="store_true", help="print JSON")
        s.set_defaults(fn=c.cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input exits 2 with one line, an unexpected failure 1 with one line
    (SPECMOE_DEBUG=1 shows its traceback)."""
    args = build_parser().parse_args(argv)
    try:
        out = args.fn(args)
    except SpecmoeError as exc:
        return _fail(f"{exc}".splitlines()[0], 2)
    except OSError as exc:  # a file that cannot be read or written
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return _fail(f"{where}{exc.strerror or exc}", 2)
    except MemoryError:
        return _fail("out of memory: ask for fewer requests, steps, layers or experts", 2)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("SPECMOE_DEBUG"):
            raise
        text = (str(exc).splitlines() or [""])[0]
        return _fail(f"internal error: {type(exc).__name__}: {text} (rerun with SPECMOE_DEBUG=1 "
                     "for the traceback)", 1)
    for message in getattr(args, "_warnings", []):
        sys.stderr.write(f"specmoe: warning: {message}\n")
    try:
        _print(_clean(out), args.json)
    except BrokenPipeError:  # the reader stopped early (| head): not an error of this command
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so that exiting flushes nowhere
    return 0


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"specmoe: error: {message}\n")
    return code


def _clean(obj):
    """NaN -> None so that --json output is strict JSON."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


if __name__ == "__main__":
    sys.exit(main())
