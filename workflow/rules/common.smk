# Helpers shared by the rules: config validation, the list of runs, per-run paths.
from snakemake.utils import min_version, validate

min_version("9.0")


validate(config, "../../config/schema.yaml")


report: "../report/workflow.rst"


# Every model the runs refer to; a tiny target also runs untrained, as "<name>-random", and its
# cost model reads the architecture from the checkpoint the pipeline writes.
MODELS = {}
for _m in config["models"]:
    MODELS[_m["name"]] = _m
    if _m["source"] == "tiny":
        MODELS[_m["name"]] = {
            **_m,
            "hf_config": f"results/models/{_m['name']}/config.json",
        }
        _r = _m["name"] + "-random"
        MODELS[_r] = {**_m, "name": _r, "hf_config": f"results/models/{_r}/config.json"}
SYNTHETIC = [n for n, m in MODELS.items() if m["source"] == "synthetic"]
CAPTURED = [n for n, m in MODELS.items() if m["source"] == "tiny"]
RUNS = [
    {"model": name, "drafter": d, "k": k, "dataset": ds}
    for name, m in MODELS.items()
    for d in m["drafters"]
    for k in m.get("ks", config["ks"])
    for ds in m["datasets"]
]

# Tiny models built here: targets (each with an untrained "-random" control) and drafters.
TINY_TARGETS = {m["name"]: m for m in config["models"] if m["source"] == "tiny"}
TINY_DRAFTERS = {
    d["name"]: d for d in config.get("drafters", []) if d["source"] == "tiny"
}
TINY = {**TINY_TARGETS, **TINY_DRAFTERS}
if TINY_TARGETS and "tiny" not in config:
    raise ValueError("config: models with source 'tiny' need the 'tiny' section")
for _m in TINY_TARGETS.values():
    for _d in _m["drafters"]:
        if _d not in TINY_DRAFTERS:
            raise ValueError(
                f"config: model {_m['name']} names drafter '{_d}', which is not defined "
                "under 'drafters'"
            )
# Models measured by serving sweeps and kernel profiling: trained tiny targets (not the controls).
SWEPT = (
    [n for n, m in TINY_TARGETS.items() if m.get("sweep", True)]
    if "sweep" in config and "profiling" in config
    else []
)
SWEEP_RUNS = [r for r in RUNS if r["model"] in SWEPT]
SWEEP_MODELS = sorted(set(SWEPT) | {r["drafter"] for r in SWEEP_RUNS})
MEASURED_TABLES = [
    "speedup_vs_batch",
    "te_three_ways",
    "kernel_time_shares",
    "three_step_correction",
]
MEASURED_FIGURES = ["speedup_vs_batch"]
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


def tiny_params(*keys):
    """The named keys of the `tiny` config section (a rule's params, so that editing another key
    does not rerun it)."""
    tiny = config.get("tiny", {})
    return {k: tiny[k] for k in keys if k in tiny}


def tiny_outputs():
    """Directories of the tiny targets, their controls and drafters, and the SD checks."""
    if not TINY_TARGETS:
        return []
    sd = config["tiny"].get("sd_check", {})
    drafters = sorted({d for m in TINY_TARGETS.values() for d in m["drafters"]})
    out = [f"results/models/{name}" for name in [*TINY_TARGETS, *drafters]]
    out += [f"results/models/{name}-random" for name in TINY_TARGETS]
    out += [
        f"results/sd_check/{m}/{d}/K{sd.get('k', 3)}/{sd.get('dataset', 'tinybench')}.json"
        for m, cfg in TINY_TARGETS.items()
        for d in cfg["drafters"]
    ]
    return out


def all_outputs():
    return ["results/report/index.md"] + tiny_outputs()


def measure_threads():
    """Sweeps and profiles time things: on a local machine they take every core, so that no
    other job runs beside them (on a cluster each job has its own node anyway)."""
    cores = workflow.cores
    return cores if isinstance(cores, int) and 2 <= cores <= 512 else 2


def sweep_measure_params():
    """The sweep settings that change a measurement (not the analysis-only ones)."""
    return {
        k: v
        for k, v in config.get("sweep", {}).items()
        if k not in ("timing", "shape_margin")
    }


def sweep_files(pattern):
    """`pattern` (with the RUN wildcards) expanded over the runs that are swept and profiled."""
    return [pattern.format(**r) for r in SWEEP_RUNS]


def profile_dataset(wildcards):
    """Profiles use the prompts of the model's first dataset."""
    return MODELS[wildcards.model]["datasets"][0]


def measured_report_inputs():
    """The measured tables and figures, when the configuration sweeps any model."""
    if not SWEEP_RUNS:
        return []
    return expand("results/tables/{t}.md", t=MEASURED_TABLES) + expand(
        "results/figures/{f}.png", f=MEASURED_FIGURES
    )


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


def model_files(wildcards):
    """The checkpoint a run's cost model reads (none for synthetic models)."""
    m = MODELS[wildcards.model]
    return [f"results/models/{wildcards.model}"] if m["source"] == "tiny" else []
