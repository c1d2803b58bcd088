"""Figures in the shapes of the study's, as PNG and PDF with provenance in their metadata."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ..cost import costmodel, stepmodel
from ..routing.acceptance import TOO_FEW
from ..sources import published
from ..provenance import atomic_path
from ..runs import label_of, short_dataset
from . import prose, registry
from .runs import by_distance, first_run, is_control, load, models
from .tables import Tables

sns.set_theme(style="whitegrid", context="paper")


def save(fig: plt.Figure, stem: str | Path, prov: dict) -> list[Path]:
    """Save stem.png and stem.pdf atomically; provenance goes into the files' metadata. No
    time is written (a PDF's /CreationDate by default): the same figure and provenance give the
    same bytes."""
    stem = Path(stem)
    blob = json.dumps(prov, default=str, separators=(",", ":"))
    paths = []
    for ext, meta in (("png", {"Description": blob, "Software": "specmoe"}),
                      ("pdf", {"Subject": blob, "Creator": "specmoe", "CreationDate": None})):
        path = stem.with_suffix(f".{ext}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight", metadata=meta)
        paths.append(path)
    plt.close(fig)
    return paths


PAGE_WIDTH = 7.0  # inches: the report's column (1,100 px) at the 150 dpi figures are saved with
COLUMNS = 3        # panels per row of a faceted figure


def _title(ax, label: str) -> None:
    """A panel's short title (a run's short name, e.g. "tiny-fine, K=3, heldout-code")."""
    ax.set_title(textwrap.shorten(label, 38, placeholder="…"), fontsize=7.5)


def _facets(n: int, height: float = 2.1, cols: int = COLUMNS):
    """n panels in rows of `cols`, the figure as wide as the report's column (so it is shown at
    its own size, not shrunk); y labels on the first column only."""
    cols = min(n, cols)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH * cols / COLUMNS if n < COLUMNS
                                                  else PAGE_WIDTH, height * rows),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _ylabel(axes, text: str) -> None:
    """The y label on the first panel of each row only (repeated labels collide)."""
    cols = min(len(axes), COLUMNS)
    for i, ax in enumerate(axes):
        ax.set_ylabel(text if i % cols == 0 else "", fontsize=8)


def _label(d: pd.DataFrame) -> str:
    """A panel's title from its rows: the run's short name where the table has one."""
    return str(d["label"].iloc[0] if "label" in d else d["run"].iloc[0])


def _integer_ticks(ax) -> None:
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))


def palette(models) -> dict[str, tuple]:
    """One colour per model, the same in every figure of a report (order as given)."""
    names = list(dict.fromkeys(models))
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {m: cmap(i % cmap.N) for i, m in enumerate(names)}


# Each acceptance status its own colour (Okabe-Ito, distinct for colour-blind readers), marker
# and line style; the anchor figure draws no models, so these never read as one.
STATUS_STYLE = {"accepted": {"color": "#0072B2", "marker": "o", "ls": "-"},
                "first_rejected": {"color": "#D55E00", "marker": "s", "ls": "--"},
                "after_rejection": {"color": "#009E73", "marker": "^", "ls": ":"}}


def _status_style(status: str) -> dict:
    return STATUS_STYLE.get(str(status), {"color": "#505050", "marker": "D", "ls": "-."})


def _side_legend(ax, fontsize: float = 7) -> None:
    """The legend under the axes, not on the data (and not beside them, which would widen the
    figure past the page)."""
    n = len(ax.get_legend_handles_labels()[1])
    ax.legend(fontsize=fontsize, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              borderaxespad=0, frameon=False, ncol=2 if n > 3 else 1)


def empty(message: str) -> plt.Figure:
    """A figure that says why it has nothing to show in this configuration."""
    fig, ax = plt.subplots(figsize=(5.5, 1.6))
    ax.text(0.5, 0.5, textwrap.fill(message, 70), ha="center", va="center", fontsize=9,
            transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def _batch_axis(ax, batches) -> None:
    """Batch sizes on a log2 axis, every one ticked where they are few, every other (1, 4, 16,
    ...) where they are many."""
    ticks = sorted(set(int(b) for b in batches))
    if len(ticks) > 8:
        ticks = ticks[::2]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v / 1024:.0f}k" if v >= 1024 else f"{v:.0f}"))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("batch size", fontsize=8)


def _published(ax, pub: pd.DataFrame | None, run: str, x: str) -> str:
    """The study's published points of the model a run is matched with, as black crosses named
    in the legend (titles stay short); returns nothing, for the title."""
    if pub is None or pub.empty:
        return ""
    p = pub[pub["run"] == run]
    if not p.empty:
        ax.plot(p[x], p["value"], "x", color="black", ms=6, mew=1.5,
                label=f"published: {p['study_model'].iloc[0]}")
    return ""


def _figure_legend(fig, axes) -> None:
    """One legend for all panels, below them (panels' own legends would cover the data)."""
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        # as many columns as the page's width holds (about 110 characters at this font size)
        ncol = max(1, min(len(seen), 110 // (max(len(lab) for lab in seen) + 6)))
        rows = -(-len(seen) // ncol)
        height = fig.get_size_inches()[1]
        fig.legend(list(seen.values()), list(seen), loc="lower center", fontsize=7,
                   ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
        fig.tight_layout(rect=(0, min(0.5, 0.16 * rows / height + 0.02), 1, 1))


def overlap_by_distance(df: pd.DataFrame, colors: dict, pub: pd.DataFrame | None = None
                        ) -> plt.Figure:
    """df: run, model, distance, empirical (inside windows), sequence (along the committed
    sequence; optional), shuffle, independent, uniform (layer mean), with the 95% intervals the
    table gives (empirical_low/high and sequence_low/high: at d = 1 only; independent_low/high);
    pub: run, study_model, distance, value (the study's, along the committed sequence). Points
    are not joined: whether overlap decays with distance is the table's to decide
    (window_decay, seq_decay), not a line's; independence is a line with its interval a band."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        c = colors[d["model"].iloc[0]]
        _line(ax, d, "empirical", "o", c, "inside windows", x="distance")
        if "sequence" in d and d["sequence"].notna().any():
            _line(ax, d, "sequence", "^", c, "along the committed sequence", x="distance",
                  mfc="white")
        ax.plot(d["distance"], d["shuffle"], "s", color=c, alpha=0.5, label="within-window shuffle")
        ax.plot(d["distance"], d["independent"], ":", color="dimgray", label="independence")
        lo, hi = (d.get(f"independent_{e}", pd.Series(np.nan, index=d.index)).astype(float)
                  for e in ("low", "high"))
        if (np.isfinite(lo) & np.isfinite(hi)).all():
            ax.fill_between(d["distance"], lo, hi, color="dimgray", alpha=0.2, lw=0,
                            label="independence, 95% interval")
        ax.plot(d["distance"], d["uniform"], ":", color="silver", label="uniform k/N")
        _title(ax, _label(d) + _published(ax, pub, run, "distance"))
        ax.set_xlabel("step distance d", fontsize=8)
        _integer_ticks(ax)
        ax.set_ylim(bottom=0)
    _ylabel(axes, "overlap (fraction of k)")
    _figure_legend(fig, axes)
    return fig


def per_layer_overlap(df: pd.DataFrame, colors: dict, pub: pd.DataFrame | None = None
                      ) -> plt.Figure:
    """df: run, model, layer, step1_overlap (inside windows), sequence_step1 (along the
    committed sequence; optional), independent, shuffle; pub: run, study_model, layer, value (the
    study's, along the committed sequence)."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        c = colors[d["model"].iloc[0]]
        ax.plot(d["layer"], d["step1_overlap"], "o-", color=c, label="inside windows")
        if "sequence_step1" in d and d["sequence_step1"].notna().any():
            ax.plot(d["layer"], d["sequence_step1"], "^-", color=c, alpha=0.8, mfc="white",
                    label="along the committed sequence")
        ax.plot(d["layer"], d["shuffle"], "--", color=c, alpha=0.5, label="within-window shuffle")
        ax.plot(d["layer"], d["independent"], ":", color="dimgray", label="independence")
        _title(ax, _label(d) + _published(ax, pub, run, "layer"))
        ax.set_xlabel("MoE layer", fontsize=8)
        _integer_ticks(ax)
        ax.set_ylim(bottom=0)
    _ylabel(axes, "step-1 overlap (fraction of k)")
    _figure_legend(fig, axes)
    return fig


# Line styles by position: a marker and a dash pattern, cycled with lengths that share no factor
# (7 and 4), so the first 28 lines of a panel are all told apart and any number is drawn.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DASHES = ("-", "--", "-.", ":")
ROUTING_DASHES = (":", "--", "-.", "-")  # the routings' order: the measured windows solid


def line_style(i: int, dashes: tuple[str, ...] = DASHES) -> str:
    """The i-th line's format string ("o-", "s--", ...), for any i."""
    return MARKERS[i % len(MARKERS)] + dashes[i % len(dashes)]


TOO_FEW_WINDOWS = "open marker: too few windows for the batch size"


def _flags(d: pd.DataFrame, y: str, status: str | None = None) -> tuple[pd.Series, pd.Series]:
    """Rows whose `y` is not drawn as an ordinary value: those the table flags sample_ok False
    (the trace has too few windows at that batch size) and those whose status (the `status`
    column, by default <y>_status) is not "ok" though a raw value <y>_raw was computed (not a
    value: report.bounds or the table's own rule decided it; this takes precedence). A table
    without the columns flags nothing."""
    none = pd.Series(False, index=d.index)
    status, raw = status or f"{y}_status", f"{y}_raw"
    out = (d[status].ne("ok") & d[raw].astype(float).notna()) if status in d and raw in d \
        else none
    few = d["sample_ok"].eq(False) & ~out if "sample_ok" in d else none
    return few, out


def _flagged_line(ax, d: pd.DataFrame, y: str, style: str, color, label: str,
                  ms: float = 4, status: str | None = None) -> list[str]:
    """A line of `y` against batch size without its flagged points (_flags, by the `status`
    column): those of too few windows drawn apart as open markers (TOO_FEW_WINDOWS in the
    legend), those not a value left out, a curve with none left not drawn (no legend entry);
    returns the left-out points' statuses (for the panel's note)."""
    few, out = _flags(d, y, status)
    if not out.all():
        _line(ax, d.assign(**{y: d[y].where(~(few | out))}), y, style, color, label, ms)
    if few.any():
        ax.plot(d.loc[few, "batch"], d.loc[few, y], marker=style[0], ls="none", mfc="none",
                color=color, ms=ms + 1, label=TOO_FEW_WINDOWS)
    return [str(v) for v in d.loc[out, status or f"{y}_status"]] if out.any() else []


def _left_out_note(ax, reasons: list[str], y: str, status: str | None = None) -> None:
    """The panel's note of how many points were left out as not a value (_flags), and why: the
    statuses the table gives them."""
    if reasons:
        n = len(reasons)
        text = (f"{n} point{'s' if n > 1 else ''} left out, not a value: "
                f"{'; '.join(dict.fromkeys(reasons))} ({status or f'{y}_status'}; the raw "
                f"value in {y}_raw)")
        ax.text(0.03, 0.03, textwrap.fill(text, 26), transform=ax.transAxes, fontsize=5.5,
                ha="left", va="bottom", color="#505050", linespacing=1.1,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})


def te_vs_batch(df: pd.DataFrame, colors: dict) -> plt.Figure:
    """df: run, model, batch, routing, te (sample_ok: optional). One panel per run, one line
    style per routing; points of too few windows open, a TE whose te_status is not "ok" left out
    (noted)."""
    runs = list(dict.fromkeys(df["run"]))
    routings = list(dict.fromkeys(df["routing"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        c = colors[d["model"].iloc[0]]
        left_out: list[str] = []
        for i, routing in enumerate(routings):
            g = d[d["routing"] == routing]
            left_out += _flagged_line(ax, g, "te", line_style(i, ROUTING_DASHES), c, routing)
        _left_out_note(ax, left_out, "te")
        _batch_axis(ax, d["batch"])
        _title(ax, _label(d))
        ax.set_ylim(0, 1.05)
    _ylabel(axes, "target efficiency")
    _figure_legend(fig, axes)
    return fig


def _line(ax, df: pd.DataFrame, y: str, style: str, color, label: str, ms: float = 4,
          x: str = "batch", **kw) -> None:
    """df[y] against df[x] (batch size), with its 95% interval as error bars where df has one
    ({y}_low, {y}_high); kw: further marker settings (mfc)."""
    lo, hi = df.get(f"{y}_low"), df.get(f"{y}_high")
    if lo is None or hi is None or not np.isfinite(lo.astype(float)).any():
        ax.plot(df[x], df[y], style, color=color, ms=ms, label=label, **kw)
        return
    err = np.vstack([(df[y] - lo).clip(lower=0), (hi - df[y]).clip(lower=0)])
    ax.errorbar(df[x], df[y], yerr=np.nan_to_num(err), fmt=style, color=color, ms=ms,
                capsize=2, label=label, **kw)


def curves_by(df: pd.DataFrame, colors: dict, panel: list[str], line: str, y: str, ylabel: str,
              message: str, ref: float | None = None, vline: str | None = None,
              status: str | None = None) -> plt.Figure:
    """One panel per `panel` group with at least two values of `line`, one line style per value
    (colour: the panel's model); `vline`: a column whose value is marked on the batch axis;
    points flagged sample_ok False drawn open, those whose status (the `status` column, by
    default <y>_status) is not "ok" left out with a note giving it (_flagged_line). An
    explanatory figure where no group has two."""
    groups = [(k, g) for k, g in df.groupby(panel, sort=False) if g[line].nunique() >= 2]
    if not groups:
        return empty(message)
    fig, axes = _facets(len(groups))
    for ax, (key, g) in zip(axes, groups):
        key = key if isinstance(key, tuple) else (key,)
        left_out: list[str] = []
        for i, (val, h) in enumerate(g.groupby(line, sort=False)):
            h = h.sort_values("batch")
            model = h["model"].iloc[0]
            left_out += _flagged_line(ax, h, y, line_style(i), colors[model],
                                      f"{line} {val}" if line in ("K", "k") else str(val),
                                      status=status)
        _left_out_note(ax, left_out, y, status)
        if ref is not None:
            ax.axhline(ref, color="grey", lw=0.8, ls=":")
        if vline is not None and vline in g and np.isfinite(g[vline]).any():
            ax.axvline(float(g[vline].iloc[0]), color="grey", lw=0.8, ls="--",
                       label="roofline ridge of the dense drafter")
        _batch_axis(ax, g["batch"])
        _title(ax, ", ".join(f"K={v}" if col in ("k", "K") else
                             short_dataset(v) if col == "dataset" else str(v)
                             for col, v in zip(panel, key) if col != "drafter"))
    _ylabel(axes, ylabel)
    _figure_legend(fig, axes)
    return fig


def anchor_overlap(df: pd.DataFrame, effects: pd.DataFrame) -> plt.Figure:
    """df: run, draft_position, status, mean, se; effects: run, draft_position, cohens_d, size.
    Each position's Cohen's d labels its points ("too few" where too few requests decide
    nothing), the labels of a panel set apart (_labels_apart)."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    labels = {}
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        se = "se_by_request" if "se_by_request" in d else "se"
        for status, g in d.groupby("status", sort=False):
            ax.errorbar(g["draft_position"], g["mean"], yerr=g[se], capsize=3,
                        label=str(status).replace("_", " "), ms=4, **_status_style(status))
        e = effects[effects["run"] == run]
        labels[ax] = []
        for _, r in e.sort_values("draft_position").iterrows():
            if not np.isfinite(r["cohens_d"]):
                continue
            top = d[d["draft_position"] == r["draft_position"]]["mean"].max()
            # no d where too few requests decide nothing (its interval and verdict: the table)
            text = "d: too few" if r.get("size") == TOO_FEW else f"d={r['cohens_d']:.2f}"
            labels[ax].append(ax.annotate(text, (r["draft_position"], top),
                                          fontsize=6, textcoords="offset points",
                                          xytext=LABEL_OFFSET, ha="center"))
        if "first_rejected" not in set(d["status"]):  # every draft accepted: no effect to show
            ax.text(0.98, 0.96, "no draft rejected: no d", transform=ax.transAxes, fontsize=6,
                    ha="right", va="top", color="#505050")
        _title(ax, _label(d))
        ax.margins(y=0.18)  # room above the points for the d labels
        ax.set_xlabel("draft position j", fontsize=8)
        _integer_ticks(ax)
    _ylabel(axes, "overlap(S(0), S(j))")
    _figure_legend(fig, axes)
    for ax, texts in labels.items():  # on the final layout: the legend moved the panels
        _labels_apart(ax, texts)
    return fig


LABEL_OFFSET = (0, 6)  # points above the highest point of a position


def _labels_apart(ax, texts: list, gap: float = 1.5, tries: int = 4) -> None:
    """Point labels of one panel that do not overprint: each, left to right, is raised above
    its point in steps of its own height until it clears (by `gap` points) every label placed
    before it; where the raised labels pass the panel's top, the y axis is extended and the
    labels placed again."""
    from matplotlib.transforms import Bbox

    if not texts:
        return
    fig = ax.figure
    pad = gap * fig.dpi / 72  # points to pixels
    for _ in range(tries):
        renderer = fig.canvas.get_renderer()
        placed = []
        for t in texts:
            t.xyann = LABEL_OFFSET
            while True:
                bb = t.get_window_extent(renderer)
                grown = Bbox.from_extents(bb.x0 - pad, bb.y0 - pad, bb.x1 + pad, bb.y1 + pad)
                if not any(grown.overlaps(p) for p in placed):
                    break
                t.xyann = (t.xyann[0], t.xyann[1] + bb.height * 72 / fig.dpi + gap)
            placed.append(bb)
        over = max(bb.y1 for bb in placed) + pad - ax.bbox.y1
        if over <= 0:
            return
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + (over / ax.bbox.height) * (high - low) * 1.2)


def speedup_vs_batch(df: pd.DataFrame, colors: dict) -> plt.Figure:
    """df: model, label, batch, speedup (speedup_low, speedup_high: its 95% interval). One line
    per model on one axis, with error bars; speedup 1 marked."""
    if df.empty:
        return empty("No serving sweep in this configuration.")
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 3.4))
    for (model, label), g in df.groupby(["model", "legend"], sort=False):
        _line(ax, g.sort_values("batch"), "speedup", "o-", colors[model], label, ms=5)
    _batch_axis(ax, df["batch"])
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_ylabel("speedup (TPOT without / with SD)", fontsize=8)
    _side_legend(ax)
    fig.tight_layout()
    return fig


def draft_cost_vs_batch(df: pd.DataFrame, colors: dict) -> plt.Figure:
    """df: model, label, batch, draft_cost (drafters served alone only), with its 95% interval
    as error bars where the table gives one (draft_cost_low, draft_cost_high)."""
    df = df[np.isfinite(df["draft_cost"])] if not df.empty else df
    if df.empty:
        return empty("No drafter is served alone in this configuration (EAGLE heads and MTP "
                     "layers cannot run alone), so there is no measured draft cost ratio.")
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 3.4))
    seen: dict[str, int] = {}
    for (model, run), g in df.groupby(["model", "run"], sort=False):
        g = g.sort_values("batch")
        style = line_style(seen.setdefault(model, 0))
        seen[model] += 1
        _line(ax, g, "draft_cost", style, colors[model], _label(g))
    _batch_axis(ax, df["batch"])
    ax.set_ylabel("draft cost ratio c", fontsize=8)
    ax.set_ylim(bottom=0)
    _side_legend(ax)
    fig.tight_layout()
    return fig


# Quantities of the comparison whose unit is not their table's (the rest of a table shares one):
# each unit a panel of its own, named in its title, so no axis mixes MiB, fractions and counts
COMPARISON_UNITS = {"c_expert_mib_per_gpu": "MiB per GPU", "c_dense_mib_per_gpu": "MiB per GPU",
                    "unique_ipf": "unique experts", "cohens_d": "Cohen's d"}


def comparison(df: pd.DataFrame, colors: dict) -> plt.Figure:
    """df: model, table, quantity, published, reproduced (key: optional). One panel per table
    and unit (COMPARISON_UNITS), reproduced vs published (linear axes), one colour per model;
    the diagonal is agreement. A row this run did not identify (reproduced empty, e.g. a step
    whose TE left [0, 1]) is named in its panel's note, not drawn."""
    df = df[np.isfinite(df["published"])] if not df.empty else df
    if df.empty:
        return empty("No model of this configuration is matched to one of the study's models "
                     "(set compare_with, or use a study checkpoint).")
    df = df.assign(unit=df["quantity"].map(COMPARISON_UNITS).fillna(""))
    panels = list(dict.fromkeys(zip(df["table"], df["unit"])))
    fig, axes = _facets(len(panels), height=2.4)
    for ax, (table, unit) in zip(axes, panels):
        d = df[(df["table"] == table) & (df["unit"] == unit)]
        ok = np.isfinite(d["reproduced"])
        for model, g in d[ok].groupby("model", sort=False):
            _reproduced_points(ax, g, colors[model], model)
        ends = [d.loc[ok, c] for c in ("reproduced_low", "reproduced_high") if c in d]
        values = np.concatenate([d["published"], d.loc[ok, "reproduced"], [0.0],
                                 *[e[np.isfinite(e)] for e in ends]])
        lo, hi = float(min(values.min(), 0)), float(values.max())
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls=":")
        if not ok.all():
            _not_identified(ax, d[~ok])
        _title(ax, table.replace("_", " ") + (f" ({unit})" if unit else ""))
        ax.set_xlabel("published value", fontsize=8)
    _ylabel(axes, "this run's value")
    _figure_legend(fig, axes)
    return fig


NO_INTERVAL = "open marker: no interval in its table"


def _reproduced_points(ax, g: pd.DataFrame, color, label: str) -> None:
    """One model's reproduced values against the published ones: with the reproduced value's 95%
    interval as error bars where its table gives one (reproduced_low/high finite), an open
    marker (NO_INTERVAL in the legend) where not: a point alone says nothing of whether it
    differs from the published one."""
    lo = g.get("reproduced_low", pd.Series(np.nan, index=g.index)).astype(float)
    hi = g.get("reproduced_high", pd.Series(np.nan, index=g.index)).astype(float)
    has = np.isfinite(lo) & np.isfinite(hi)
    y = g["reproduced"]
    if has.any():
        err = np.vstack([(y - lo)[has].clip(lower=0), (hi - y)[has].clip(lower=0)])
        ax.errorbar(g.loc[has, "published"], y[has], yerr=err, fmt="o", color=color, ms=4,
                    capsize=2, label=label)
    if (~has).any():
        ax.scatter(g.loc[~has, "published"], y[~has], facecolors="none", edgecolors=color, s=16,
                   label=None if has.any() else label)
        ax.scatter([], [], facecolors="none", edgecolors="dimgray", s=16, label=NO_INTERVAL)


def _not_identified(ax, rows: pd.DataFrame) -> None:
    """The panel's note naming its rows with no reproduced value (they are in the table)."""
    several = rows["model"].nunique() > 1
    names = [(f"{m}: " if several else "") + (str(k) if isinstance(k, str) and k else str(q))
             for m, k, q in zip(rows["model"], rows.get("key", rows["quantity"]),
                                rows["quantity"])]
    text = f"not identified, see the table: {', '.join(names)}"
    ax.text(0.03, 0.97, textwrap.fill(text, 30), transform=ax.transAxes, fontsize=5.5,
            ha="left", va="top", color="#505050", linespacing=1.1,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})


def step_model_calibration(df: pd.DataFrame) -> plt.Figure:
    """df: the step model's calibration table. Predicted vs published TE at batch 1: the step
    model (filled, fitted without the model's rows) and the weight model (open), one colour per
    study model; the diagonal is agreement."""
    df = df[df["quantity"] == stepmodel.TE]
    colors = palette(list(dict.fromkeys(df["model"])))
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    for model, g in df.groupby("model", sort=False):
        ax.scatter(g["published"], g["step_model"], color=colors[model], s=22, label=model)
        ax.scatter(g["published"], g["weight_model"], facecolors="none",
                   edgecolors=colors[model], s=22)
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("published TE (batch 1, K = 3)")
    ax.set_ylabel("predicted TE (filled: step model; open: weight model)")
    _side_legend(ax)
    return fig


# --- what each figure draws, from the tables --------------------------------------------------


def _published_by_distance(ob: pd.DataFrame, study: dict) -> pd.DataFrame:
    """The study's steps 1-4 of the matched model, on a run of its main set at the study's K
    only (published.main_run: the study's tables are of its main set at K = 3)."""
    pub = published.load("overlap_by_distance").set_index("model")
    rows = []
    for _, r in ob.iterrows():
        entry = study.get(r["model"]) or {}
        if entry.get("study") not in pub.index or not published.main_run(r, entry):
            continue
        s = entry["study"]
        for d in range(1, 5):  # the study's steps 1-4, along the committed sequence
            rows.append({"run": r["run"], "study_model": s, "distance": d,
                         "value": pub.loc[s, f"step{d}"]})
    return pd.DataFrame(rows)


def _published_per_layer(pl: pd.DataFrame, study: dict) -> pd.DataFrame:
    """Published layers of the matched model that the run's model has too (the study publishes
    its first four layers and one deep layer: a shallower model shows the first ones), on a run
    of its main set at the study's K only."""
    pub = published.load("per_layer_overlap")
    rows = []
    for run, g in pl.groupby("run", sort=False):
        entry = study.get(g["model"].iloc[0]) or {}
        if not published.main_run(g.iloc[0], entry):
            continue
        p = pub[(pub["model"] == entry.get("study")) & (pub["layer"] <= g["layer"].max())]
        if p.empty:
            continue
        rows += [{"run": run, "study_model": entry["study"], "layer": r["layer"],
                  "value": r["step1_overlap"]}
                 for _, r in p.iterrows()]
    return pd.DataFrame(rows)


NONE = "This configuration has no {} (see the configuration's models)."
# where a caption file says what the speedup intervals hold in words true of every run (the
# caption Snakemake's report shows: it renders the file as it is), replaced by what this run's
# tables say they hold (the caption index.md shows)
INTERVALS = ("95% intervals from this run's repeats, with the engine-to-engine spread only for "
             "the series swept on a device for which sweep.engine_log_sd_device measured one "
             "(the speedup_vs_batch table's engine_log_sd column, where it has one, says "
             "which); none hold for the same machine on another day")


def caption(stem: str, declared) -> str:
    """A figure's caption: its caption file's text (registry.text), with INTERVALS replaced by
    what the intervals of the speedups it draws hold (prose.spread_words on those rows: each
    model's first run, as speedup_vs_batch draws them), so that it says the engine-to-engine
    spread only where the run's engine_log_sd took one."""
    text = registry.text(stem, figure=True)
    if INTERVALS not in text:
        return text
    sp = load(Tables.of(declared), "speedup_vs_batch")
    return text.replace(INTERVALS, prose.spread_words(first_run(sp) if not sp.empty else sp))


def figure_frames(declared, study: dict | None = None,
                  variant_of: dict | None = None) -> dict[str, tuple]:
    """Each figure's renderer and arguments, from the tables the job declares ({stem: CSV path}
    or a Tables; an undeclared table is an empty frame)."""
    td, study = Tables.of(declared), study or {}
    ob, pl, tb = (load(td, s) for s in ("overlap_by_distance", "per_layer_overlap", "te_vs_batch"))
    anchor, sp, cmp_ = (load(td, s) for s in ("anchor_overlap", "speedup_vs_batch", "comparison"))
    colors = palette(models([ob, sp, tb, cmp_]))
    out = {"overlap_by_distance": _overlap_frame(td, ob, colors, study),
           "per_layer_overlap": ((per_layer_overlap, pl, colors, _published_per_layer(pl, study))
                                 if not pl.empty else (empty, NONE.format("routing trace")))}
    out.update(_cost_frames(td, tb, colors))
    out.update(_speedup_frames(sp, colors, study, variant_of or {}))
    out["anchor_overlap"] = _anchor_frame(anchor)
    out["comparison"] = (comparison, cmp_ if not cmp_.empty else
                         pd.DataFrame(columns=published.COLUMNS), colors)
    cal = load(td, "step_model_calibration")
    out["step_model_calibration"] = ((step_model_calibration, cal) if not cal.empty else
                                     (empty, "No step-model calibration table."))
    return out


def _overlap_frame(td: Tables, ob: pd.DataFrame, colors: dict, study: dict) -> tuple:
    """The overlap-by-distance figure's frame: one row per run and distance, inside windows and
    along the committed sequence, with the study's published points."""
    if ob.empty:
        return (empty, NONE.format("routing trace"))
    long = []
    dec = load(td, "overlap_decomposition_step1").set_index("run")["uniform"]
    for _, r in ob.iterrows():
        within = by_distance(r)
        seq = by_distance(r, n=8, prefix="seq")
        for d in range(1, max(len(within), len(seq)) + 1):
            # the table gives the overlaps' intervals at d = 1 only (step1_*, seq1_*)
            first = {f"{name}_{e}": r.get(f"{col}_{e}", np.nan) if d == 1 else np.nan
                     for name, col in (("empirical", "step1"), ("sequence", "seq1"))
                     for e in ("low", "high")}
            long.append({"run": r["run"], "label": r["label"], "model": r["model"],
                         "distance": d,
                         "empirical": within[d - 1] if d <= len(within) else np.nan,
                         "sequence": seq[d - 1] if d <= len(seq) else np.nan, **first,
                         "shuffle": r.get(f"shuffle{d}", np.nan),
                         "independent": r["independent"],
                         "independent_low": r.get("independent_low", np.nan),
                         "independent_high": r.get("independent_high", np.nan),
                         "uniform": dec.get(r["run"])})
    return (overlap_by_distance, pd.DataFrame(long), colors, _published_by_distance(ob, study))


def _cost_frames(td: Tables, tb: pd.DataFrame, colors: dict) -> dict[str, tuple]:
    """The cost model's figures: TE vs batch, TE by dataset and the draft cost ratio model."""
    out = {"te_vs_batch": ((te_vs_batch, tb, colors) if not tb.empty
                           else (empty, NONE.format("cost model")))}
    measured = tb[tb["routing"] == costmodel.MEASURED_ROUTING] if not tb.empty else tb
    out["te_by_dataset"] = (
        (curves_by, measured, colors, ["model", "drafter", "k"], "dataset", "te",
         "target efficiency", "Each model has one dataset in this configuration: no "
         "dataset comparison to draw.") if not measured.empty
        else (empty, NONE.format("cost model")))
    dr = load(td, "draft_ratio_model")
    if dr.empty:
        out["draft_ratio_model"] = (empty, NONE.format("cost model"))
        return out
    # each model's first run (the ratio hardly depends on K or the dataset), untrained controls
    # left out (their dimensions, so their curves, are their targets')
    dr = dr[~is_control(dr)]
    out["draft_ratio_model"] = (curves_by, first_run(dr), colors, ["model", "k"],
                                "synthetic_drafter", "draft_cost", "draft cost ratio c",
                                "No cost model in this configuration.", None, "ridge_tokens",
                                "status")
    return out


SPEEDUP = "speedup (TPOT without / with SD)"


def _speedup_frames(sp: pd.DataFrame, colors: dict, study: dict,
                    variant_of: dict) -> dict[str, tuple]:
    """The serving sweeps' figures: speedup vs batch, by K, by dataset, across variants, and the
    measured draft cost. Each legend names a curve's model, K and shape (specmoe.runs.label_of)."""
    stems = ("speedup_vs_batch", "speedup_by_k", "speedup_by_dataset", "speedup_variants",
             "draft_cost_vs_batch")
    if sp.empty:
        return {f: (empty, NONE.format("serving sweep")) for f in stems}
    sp = sp.copy()
    sp["legend"] = [label_of(m, k, shape=str(s))
                    for m, k, s in zip(sp["model"], sp["k"], sp["shape"])]
    out = {"speedup_vs_batch": (speedup_vs_batch, first_run(sp), colors)}
    sp["K"] = sp["k"]
    out["speedup_by_k"] = (curves_by, sp, colors, ["model", "drafter", "dataset"], "K",
                           "speedup", SPEEDUP, "Each model is swept at one K in this "
                           "configuration.", 1.0)
    out["speedup_by_dataset"] = (curves_by, sp, colors, ["model", "drafter", "k"], "dataset",
                                 "speedup", SPEEDUP, "Each model is swept on one dataset in this "
                                 "configuration.", 1.0)
    # one panel per model family: a tiny target with its variants, a study model's variants
    targets = set(variant_of.values())
    sp["family"] = sp["model"].map(
        lambda m: variant_of.get(m) or (m if m in targets else None)
        or (study.get(m) or {}).get("study") or m)
    # each family at its own smallest K (one K for all dropped a family swept at larger Ks only)
    smallest = sp["k"] == sp.groupby("family")["k"].transform("min")
    out["speedup_variants"] = (curves_by, sp[smallest], colors,
                               ["family", "drafter", "dataset"], "model", "speedup", SPEEDUP,
                               "No study model is run in more than one variant (TP, "
                               "precision, hardware) in this configuration.", 1.0)
    out["draft_cost_vs_batch"] = (draft_cost_vs_batch, sp, colors)
    return out


def _anchor_frame(anchor: pd.DataFrame) -> tuple:
    """The anchor-overlap figure's frame, with each run's effect size at each position."""
    if anchor.empty:
        return (empty, NONE.format("routing trace"))
    effects = anchor.drop_duplicates(["run", "draft_position"])[
        ["run", "draft_position", "cohens_d", "size"]]
    return (anchor_overlap, anchor, effects)
