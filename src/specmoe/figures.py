"""Figures in the shapes of the study's, as PNG and PDF with provenance in their metadata."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .provenance import atomic_path  # noqa: E402

sns.set_theme(style="whitegrid", context="paper")


def save(fig: plt.Figure, stem: str | Path, prov: dict) -> list[Path]:
    """Save stem.png and stem.pdf atomically; provenance goes into the files' metadata."""
    stem = Path(stem)
    blob = json.dumps(prov, default=str, separators=(",", ":"))
    paths = []
    for ext, meta in (("png", {"Description": blob, "Software": "specmoe"}),
                      ("pdf", {"Subject": blob, "Creator": "specmoe"})):
        path = stem.with_suffix(f".{ext}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight", metadata=meta)
        paths.append(path)
    plt.close(fig)
    return paths


def _title(ax, run: str) -> None:
    ax.set_title(textwrap.fill(run, 38), fontsize=8)  # long run names wrap instead of overlapping


def _facets(n: int, width: float = 3.2, height: float = 2.6):
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def overlap_by_distance(df: pd.DataFrame) -> plt.Figure:
    """df: run, distance, empirical, shuffle, independent, uniform (layer-averaged)."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        ax.plot(d["distance"], d["empirical"], "o-", label="empirical")
        ax.plot(d["distance"], d["shuffle"], "s--", label="within-window shuffle")
        ax.plot(d["distance"], d["independent"], ":", label="independence")
        ax.plot(d["distance"], d["uniform"], ":", color="grey", label="uniform k/N")
        _title(ax, run)
        ax.set_xlabel("step distance d")
        ax.set_ylabel("overlap")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def per_layer_overlap(df: pd.DataFrame) -> plt.Figure:
    """df: run, layer, step1_overlap, independent, shuffle."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        ax.plot(d["layer"], d["step1_overlap"], "o-", label="step-1 overlap")
        ax.plot(d["layer"], d["shuffle"], "--", label="within-window shuffle")
        ax.plot(d["layer"], d["independent"], ":", label="independence")
        _title(ax, run)
        ax.set_xlabel("layer")
        ax.set_ylabel("overlap")
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def te_vs_batch(df: pd.DataFrame) -> plt.Figure:
    """df: run, batch, routing, te. One panel per run, one line per routing assumption."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        sns.lineplot(data=d, x="batch", y="te", hue="routing", style="routing", markers=True,
                     ax=ax, legend=ax is axes[0])
        ax.set_xscale("log", base=2)
        _title(ax, run)
        ax.set_ylabel("target efficiency")
        ax.set_ylim(0, 1.05)
    if axes[0].get_legend():
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def anchor_overlap(df: pd.DataFrame, effects: pd.DataFrame) -> plt.Figure:
    """df: run, draft_position, status, mean, se; effects: run, draft_position, cohens_d."""
    runs = list(dict.fromkeys(df["run"]))
    fig, axes = _facets(len(runs))
    for ax, run in zip(axes, runs):
        d = df[df["run"] == run]
        for status, g in d.groupby("status", sort=False):
            ax.errorbar(g["draft_position"], g["mean"], yerr=g["se"], marker="o", capsize=3,
                        label=status)
        e = effects[effects["run"] == run]
        for _, r in e.iterrows():
            top = d[d["draft_position"] == r["draft_position"]]["mean"].max()
            ax.annotate(f"d={r['cohens_d']:.2f}", (r["draft_position"], top), fontsize=6,
                        textcoords="offset points", xytext=(0, 6), ha="center")
        _title(ax, run)
        ax.set_xlabel("draft position j")
        ax.set_ylabel("overlap(S(0), S(j))")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def speedup_vs_batch(df: pd.DataFrame) -> plt.Figure:
    """df: run, batch, speedup, tau. One line per run; speedup 1 marked."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    if df.empty:
        ax.text(0.5, 0.5, "no sweep in this configuration", ha="center", va="center",
                transform=ax.transAxes)
    else:
        sns.lineplot(data=df, x="batch", y="speedup", hue="run", style="run", markers=True, ax=ax)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(df["batch"].unique()))
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.legend(fontsize=7)
    ax.set_xlabel("batch size (max concurrency)")
    ax.set_ylabel("speedup (TPOT no SD / TPOT SD)")
    fig.tight_layout()
    return fig
