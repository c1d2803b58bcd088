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
    "prompt_fit": ("Overlap and IPF", "tables"),
    "matched_controls": ("Overlap and IPF", "tables"),
    "target_efficiency": ("Cost model", "tables"),
    "te_vs_batch": ("Cost model", "tables"),
    "draft_ratio_model": ("Cost model", "tables"),
    "step_model": ("Cost model", "step_model"),
    "weight_model": ("Cost model", "weight_model"),
    "speedup_vs_batch": ("Speedup and sweeps", "measured_tables"),
    "te_three_ways": ("Speedup and sweeps", "measured_tables"),
    "prompt_fit_sweeps": ("Speedup and sweeps", "measured_tables"),
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
# Each table's and figure's heading in the report (the file stem stays the file's name).
TITLES = {
    "overlap_decomposition_step1": "Step-1 overlap: uniform, independence, temporal",
    "overlap_by_distance": "Overlap by step distance",
    "overlap_by_status": "Overlap by acceptance status",
    "per_layer_overlap": "Step-1 overlap per layer",
    "heldout_overlap": "Overlap by distance per slice",
    "unique_experts": "Unique experts per window and the IPF predictions",
    "prompt_fit": "Captured prompts against the engine's context",
    "matched_controls": "Trained targets against their matched untrained controls",
    "prompt_fit_sweeps": "Swept prompts against the engine's context",
    "target_efficiency": "Weight-model TE at batch 1",
    "te_vs_batch": "TE vs batch size",
    "draft_ratio_model": "Draft cost ratio of the synthetic drafters",
    "step_model": "The step model's prediction beside the measurement",
    "weight_model": "Weight model of the configured study models",
    "speedup_vs_batch": "Speedup vs batch size",
    "te_three_ways": "TE three ways",
    "kernel_time_shares": "Kernel time shares",
    "three_step_correction": "Three-step correction",
    "acceptance_consecutive": "Consecutive overlap: accepted vs first rejected",
    "anchor_overlap": "Anchor overlap by acceptance status",
    "heldout_acceptance": "Accepted minus rejected per slice",
    "comparison": "Published vs reproduced",
    "replay_unique_experts": "Replay: unique experts (Tables 3 and 20)",
    "replay_weight_model": "Replay: weight model (Table 1)",
    "replay_three_step": "Replay: three-step correction (Table 11)",
    "step_model_calibration": "Step-model calibration",
    "step_model_shapes": "Step-model speedup shapes",
    "step_model_parameters": "Step-model parameters",
}
FIGURE_TITLES = {
    "overlap_by_distance": "Overlap by step distance",
    "per_layer_overlap": "Step-1 overlap per layer",
    "te_vs_batch": "TE vs batch size by routing assumption",
    "te_by_dataset": "TE vs batch size by dataset",
    "draft_ratio_model": "Draft cost ratio of the synthetic drafters",
    "speedup_vs_batch": "Speedup vs batch size",
    "speedup_by_k": "Speedup by draft length K",
    "speedup_by_dataset": "Speedup by dataset",
    "speedup_variants": "Speedup across variants",
    "draft_cost_vs_batch": "Measured draft cost ratio",
    "anchor_overlap": "Anchor overlap by acceptance status",
    "comparison": "Published vs reproduced",
    "step_model_calibration": "Step-model calibration",
}
# What each figure shows, for readers who cannot see it (the HTML's alt text).
ALT = {
    "overlap_by_distance": "Point plots, one panel per run: expert overlap against step "
                           "distance inside windows and along the committed sequence, with 95% "
                           "intervals at distance 1, the independence baseline with its "
                           "interval as a band and the within-window shuffle null.",
    "per_layer_overlap": "Line plots, one panel per run: step-1 overlap of each MoE layer "
                         "inside windows and along the committed sequence, against the "
                         "layer's independence baseline and shuffle null.",
    "te_vs_batch": "Line plots, one panel per run: target efficiency against batch size under "
                   "four routing assumptions.",
    "te_by_dataset": "Line plots: target efficiency against batch size, one line per dataset "
                     "of the same model.",
    "draft_ratio_model": "Line plots, one panel per model: the draft cost ratio of the dense "
                         "and the MoE synthetic drafters against the configured batch sizes, "
                         "with the roofline ridge of the dense drafter marked.",
    "speedup_vs_batch": "Line plot: measured speedup of speculative decoding against batch "
                        "size with 95% intervals, one line per model, speedup 1 marked.",
    "speedup_by_k": "Line plots, one panel per model: measured speedup against batch size, one "
                    "line per draft length K.",
    "speedup_by_dataset": "Line plots, one panel per model: measured speedup against batch "
                          "size, one line per dataset.",
    "speedup_variants": "Line plots: measured speedup against batch size of one model's "
                        "variants (precision), one line each.",
    "draft_cost_vs_batch": "Line plot: measured draft cost ratio of drafters served alone "
                           "against batch size, with 95% intervals where the table gives them.",
    "anchor_overlap": "Line plots, one panel per run: anchor overlap against draft position for "
                      "accepted, first-rejected and after-rejection drafts, with standard "
                      "errors by request (no bar below 10 requests) and Cohen's d labels.",
    "comparison": "Scatter plots, one panel per table: this run's values against the study's "
                  "published ones, the diagonal marking agreement.",
    "step_model_calibration": "Scatter plot: TE at batch 1 predicted by the step model and by "
                              "the weight model against the study's published TE.",
}
# The columns that name a row: repeated in every part of a table split for reading.
KEYS = ("model", "drafter", "k", "dataset", "batch", "draft_position", "status", "slice",
        "slice_dataset", "heldout_dataset", "layer", "routing", "synthetic_drafter", "class",
        "step", "name", "table", "study_model", "key", "quantity", "gpu", "precision", "tp",
        "method")
# Wide tables split into parts for reading (part title -> regular expression of its columns);
# tables not listed are split into parts of at most MAX_COLUMNS value columns.
MAX_COLUMNS = 10
GROUPS = {
    "overlap_by_distance": {
        "inside windows": r"(step\d+|independent|step1_(low|high)|above_shuffle.*"
                          r"|window_(decay|decay_within_status|requests)(_low|_high)?)",
        "the within-window shuffle null": r"shuffle\d+",
        "along the committed sequence": r"(seq.*|verify_ratio)",
        "without windows that repeat a token": r".*_no_repetition(_low|_high)?"
                                               r"|repetitive_windows_pct",
    },
    "acceptance_consecutive": {
        "the delta, clustered by request": r"(accepted_overlap|first_rejected_overlap|delta"
                                           r"|.*_by_request|p_holm|n_requests.*"
                                           r"|cohens_d(_low|_high)?|size)",
        "token-level statistics (as the study reports them)": r"(n_accepted|n_first_rejected|"
                                                              r".*_tokens.*)",
    },
    "unique_experts": {
        "measured and closed forms": r"(empirical.*|uniform|independent)",
        "IPF predictions (the study's input first)": r"ipf_.*",
    },
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


def title(stem: str, figure: bool = False) -> str:
    """A table's or figure's heading in the report."""
    return (FIGURE_TITLES if figure else TITLES).get(stem, stem.replace("_", " "))


def text(stem: str, figure: bool = False) -> str:
    with open(path(stem, figure)) as fh:
        return " ".join(fh.read().split())
