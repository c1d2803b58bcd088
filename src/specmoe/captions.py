"""Captions of every table and figure, and the report's grouping of them.

The caption texts are package data (`data/captions/<stem>.rst`, figures as `fig_<stem>.rst`): one
source for the Markdown, LaTeX and HTML tables, the Markdown report and Snakemake's HTML report,
which reads the same files as reStructuredText.
"""

from __future__ import annotations

from importlib import resources

# The report's sections, in the study's order, and what goes in each.
SECTIONS = {
    "Overlap and IPF": {
        "tables": ["overlap_decomposition_step1", "overlap_by_distance", "overlap_by_status",
                   "per_layer_overlap", "heldout_overlap", "unique_experts"],
        "figures": ["overlap_by_distance", "per_layer_overlap"]},
    "Cost model": {
        "tables": ["target_efficiency", "te_vs_batch", "draft_ratio_model", "weight_model"],
        "figures": ["te_vs_batch", "te_by_dataset", "draft_ratio_model"]},
    "Speedup and sweeps": {
        "tables": ["speedup_vs_batch", "te_three_ways"],
        "figures": ["speedup_vs_batch", "speedup_by_k", "speedup_by_dataset",
                    "speedup_variants", "draft_cost_vs_batch"]},
    "Profiling": {
        "tables": ["kernel_time_shares", "three_step_correction"], "figures": []},
    "Acceptance": {
        "tables": ["acceptance_consecutive", "anchor_overlap", "heldout_acceptance"],
        "figures": ["anchor_overlap"]},
    "The study side by side": {
        "tables": ["comparison", "replay_unique_experts", "replay_weight_model",
                   "replay_three_step"],
        "figures": ["comparison"]},
}


def section_of(stem: str, kind: str = "tables") -> str:
    for name, items in SECTIONS.items():
        if stem in items[kind]:
            return name
    raise KeyError(f"{stem!r} is in no report section")


def path(stem: str, figure: bool = False) -> str:
    """The caption file (reStructuredText) of a table or, with figure=True, a figure."""
    p = resources.files("specmoe") / "data" / "captions" / f"{'fig_' if figure else ''}{stem}.rst"
    if not p.is_file():
        raise FileNotFoundError(f"no caption for {'figure' if figure else 'table'} {stem!r}")
    return str(p)


def text(stem: str, figure: bool = False) -> str:
    with open(path(stem, figure)) as fh:
        return " ".join(fh.read().split())
