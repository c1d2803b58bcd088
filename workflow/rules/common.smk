# Helpers shared by the rules: config validation, the list of runs, per-run paths.
from snakemake.utils import min_version, validate

min_version("9.0")


validate(config, "../../config/schema.yaml")


report: "../report/workflow.rst"


MODELS = {m["name"]: m for m in config["models"]}
SYNTHETIC = [m["name"] for m in config["models"] if m["source"] == "synthetic"]
RUNS = [
    {"model": m["name"], "drafter": d, "k": k, "dataset": ds}
    for m in config["models"]
    for d in m["drafters"]
    for k in config["ks"]
    for ds in m["datasets"]
]
TABLES = [
    "overlap_decomposition_step1",
    "overlap_by_distance",
    "per_layer_overlap",
    "unique_experts",
    "target_efficiency",
    "te_vs_batch",
    "acceptance_consecutive",
    "anchor_overlap",
    "heldout_acceptance",
]
FIGURES = ["overlap_by_distance", "per_layer_overlap", "te_vs_batch", "anchor_overlap"]


wildcard_constraints:
    model="[^/]+",
    drafter="[^/]+",
    k="[0-9]+",
    dataset="[^/]+",


def run_files(pattern):
    """`pattern` (with the RUN wildcards) expanded over every configured run."""
    return [pattern.format(**r) for r in RUNS]


def run_of(wildcards):
    """The run's identity as a plain dict."""
    return {
        "model": wildcards.model,
        "drafter": wildcards.drafter,
        "k": int(wildcards.k),
        "dataset": wildcards.dataset,
    }


def model_of(wildcards):
    return MODELS[wildcards.model]
