"""Captions of every table and figure, and the report's grouping of them.

The caption texts are package data (`data/captions/<stem>.rst`, figures as `fig_<stem>.rst`): one
source for the Markdown, LaTeX and HTML tables, the Markdown report and Snakemake's HTML report,
which reads the same files as reStructuredText.
"""

from __future__ import annotations

from importlib import resources

# Every table, in the report's order: its section and the rule that writes it. The workflow's
# outputs, the stages' table lists, the captions and the report all read this one list.
TABLES = {
    "overlap_decomposition_step1": ("Overlap and IPF", "tables"),
    "overlap_by_distance": ("Overlap and IPF", "tables"),
    "overlap_by_status": ("Overlap and IPF", "tables"),
    "per_layer_overlap": ("Overlap and IPF", "tables"),
    "heldout_overlap": ("Overlap and IPF", "tables"),
    "unique_experts": ("Overlap and IPF", "tables"),
    "target_efficiency": ("Cost model", "tables"),
    "te_vs_batch": ("Cost model", "tables"),
    "draft_ratio_model": ("Cost model", "tables"),
    "step_model": ("Cost model", "step_model"),
    "weight_model": ("Cost model", "weight_model"),
    "speedup_vs_batch": ("Speedup and sweeps", "measured_tables"),
    "te_three_ways": ("Speedup and sweeps", "measured_tables"),
    "kernel_time_shares": ("Profiling", "measured_tables"),
    "three_step_correction": ("Profiling", "measured_tables"),
    "acceptance_consecutive": ("Acceptance", "tables"),
    "anchor_overlap": ("Acceptance", "tables"),
    "heldout_acceptance": ("Acceptance", "tables"),
    "comparison": ("The study side by side", "comparison"),
    "replay_unique_experts": ("The study side by side", "replay"),
    "replay_weight_model": ("The study side by side", "replay"),
    "replay_three_step": ("The study side by side", "replay"),
    "step_model_calibration": ("The study side by side", "replay"),
    "step_model_shapes": ("The study side by side", "replay"),
    "step_model_parameters": ("The study side by side", "replay"),
}
FIGURES = {
    "overlap_by_distance": "Overlap and IPF",
    "per_layer_overlap": "Overlap and IPF",
    "te_vs_batch": "Cost model",
    "te_by_dataset": "Cost model",
    "draft_ratio_model": "Cost model",
    "speedup_vs_batch": "Speedup and sweeps",
    "speedup_by_k": "Speedup and sweeps",
    "speedup_by_dataset": "Speedup and sweeps",
    "speedup_variants": "Speedup and sweeps",
    "draft_cost_vs_batch": "Speedup and sweeps",
    "anchor_overlap": "Acceptance",
    "comparison": "The study side by side",
    "step_model_calibration": "The study side by side",
}
# The report's sections, in the study's order, and what goes in each.
SECTIONS = {
    sec: {"tables": [t for t, (s, _) in TABLES.items() if s == sec],
          "figures": [f for f, s in FIGURES.items() if s == sec]}
    for sec in dict.fromkeys(s for s, _ in TABLES.values())
}


def written_by(rule: str) -> list[str]:
    """The tables one rule writes (tables, measured_tables, replay, weight_model, comparison)."""
    return [t for t, (_, r) in TABLES.items() if r == rule]


def section_of(stem: str, kind: str = "tables") -> str:
    known = TABLES if kind == "tables" else FIGURES
    if stem not in known:
        raise KeyError(f"{stem!r} is in no report section")
    return known[stem][0] if kind == "tables" else known[stem]


def path(stem: str, figure: bool = False) -> str:
    """The caption file (reStructuredText) of a table or, with figure=True, a figure."""
    p = resources.files("specmoe") / "data" / "captions" / f"{'fig_' if figure else ''}{stem}.rst"
    if not p.is_file():
        raise FileNotFoundError(f"no caption for {'figure' if figure else 'table'} {stem!r}")
    return str(p)


def text(stem: str, figure: bool = False) -> str:
    with open(path(stem, figure)) as fh:
        return " ".join(fh.read().split())
