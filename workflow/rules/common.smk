# Helpers shared by the rules: config validation, the list of runs, per-run paths.
import json
import os
import re
import sys

from snakemake.io import report as report_item
from snakemake.utils import min_version

from specmoe.report import registry
from specmoe import prompts as prompt_table
from specmoe.config import for_workflow, repo_key, with_precision
from specmoe.errors import InputError
from specmoe.names import control_name
from specmoe.preflight import shipped_config
from specmoe.tiny import TrainSpec
from specmoe.published import study_entry

min_version("9.0")


report: "../report/workflow.rst"


# Rules that take seconds run where the workflow is launched, not as cluster jobs; so do the
# downloads, since compute nodes often have no network.
localrules:
    ipf,
    costmodel,
    speedup,
    tables,
    figures,
    measured_tables,
    report_index,
    replay,
    comparison,
    weight_model,
    predict,
    step_model,
    download_model,
    download_dataset,


def prompt_datasets(cfg):
    """Datasets of the prompt table the tiny models read (None when it cannot be read yet)."""
    try:
        source = (cfg.get("tiny") or {}).get("prompts")
        return {p.dataset for p in prompt_table.load(*[source] if source else [])}
    except Exception:
        return None


def main_process():
    try:
        return workflow.is_main_process
    except AttributeError:
        return True


# The configuration validated by its schema (its defaults filled in) and resolved once
# (specmoe.config): every key, cross-reference and pair of numbers that could contradict is
# checked, and every GPU job preflighted (specmoe.preflight), one line per problem, before any job
# starts (not again inside each job).
try:
    CFG, _notes = for_workflow(
        config,
        os.path.join(workflow.basedir, "config", "schema.yaml"),
        prompt_datasets(config),
        cache_dir=".snakemake/specmoe",
        preflight=main_process(),
    )
except InputError as exc:
    sys.exit(str(exc))
for _line in _notes:
    print(_line, file=sys.stderr)

# The study's models and drafters from the Hugging Face Hub (source: hf), the datasets downloaded
# for them, and the download manifests that later rules read (the HF cache is the store).
DRAFTERS = {n: dict(d.entry) for n, d in CFG.drafters.items()}
HF_MODELS = {n: dict(m.entry) for n, m in CFG.hf.items()}
DATASETS = CFG.datasets
REPOS = {}  # "owner--name" -> {repo_id, revision, trust_remote_code, names}
for _e in [
    *HF_MODELS.values(),
    *(d for d in DRAFTERS.values() if d["source"] == "hf"),
]:
    _r = REPOS.setdefault(
        repo_key(_e),
        {
            "repo_id": _e.get("repo_id"),
            "revision": _e.get("revision"),
            "trust_remote_code": False,
            "names": [],
        },
    )
    _r["trust_remote_code"] |= bool(_e["trust_remote_code"])
    _r["names"].append(_e["name"])

# Every model the runs refer to (a tiny target's untrained "<name>-random" control included), as
# the stages read it: a tiny model's cost model reads the checkpoint the pipeline writes, a study
# model's the config.json of its download (hf_config).
MODELS = {n: dict(m.entry) for n, m in CFG.models.items()}
SYNTHETIC = CFG.names("synthetic")
CAPTURED = CFG.names("tiny")
HF_RUN = CFG.names("hf")
RUNS = [r.as_dict() for r in CFG.runs()]
# Tiny models built here: targets (each with an untrained control) and drafters.
TINY_TARGETS = CFG.tiny_targets
TINY = [*TINY_TARGETS, *CFG.tiny_drafters]
# Models measured by serving sweeps and kernel profiling: trained tiny targets (not the controls),
# their variants (a tiny checkpoint served with other engine settings, swept only) and the study's
# models.
SWEPT = CFG.swept
HF_SWEPT = CFG.hf_swept
VARIANTS = {n: dict(m.entry) for n, m in CFG.variants.items()}
SWEEP_RUNS = [r.as_dict() for r in CFG.sweep_runs()]
# Engines of the series without SD: the swept models and the drafters served alone for the draft
# cost c (separate draft models only: EAGLE heads and MTP layers cannot run alone).
SERVED = sorted(
    set(SWEPT + HF_SWEPT)
    | {r["drafter"] for r in SWEEP_RUNS if CFG.drafters[r["drafter"]].served_alone}
)
TABLES = registry.written_by("tables")
MEASURED_TABLES = registry.written_by("measured_tables")
REPLAY_TABLES = registry.written_by("replay")
FIGURES = list(registry.FIGURES)
TABLE_FORMATS = ["csv", "md", "tex", "html"]
# Models whose results sit beside the study's published numbers (compare_with, or a study
# checkpoint): name -> the study model and the variant (precision, TP, hardware).
STUDY = {
    m["name"]: entry
    for m in config["models"]
    if (entry := study_entry(CFG.entry(m["name"]))) is not None
}


wildcard_constraints:
    model="[^/]+",
    drafter="[^/]+",
    k="[0-9]+",
    dataset="[^/]+",


def tiny_params(*keys):
    """The named keys of the `tiny` config section (a rule's params, so that editing another key
    does not rerun it)."""
    tiny = config.get("tiny", {})
    return canonical({k: tiny[k] for k in keys if k in tiny})


def tiny_outputs():
    """Directories of the tiny targets, their controls and drafters, and the SD checks."""
    if not TINY_TARGETS:
        return []
    sd = config["tiny"].get("sd_check", {})
    drafters = sorted({d for m in TINY_TARGETS.values() for d in m.drafters})
    out = [f"results/models/{name}" for name in [*TINY_TARGETS, *drafters]]
    out += [f"results/models/{control_name(name)}" for name in TINY_TARGETS]
    out += [
        f"results/sd_check/{m}/{d}/K{sd.get('k', 3)}/{sd.get('dataset', 'tinybench')}.json"
        for m, target in TINY_TARGETS.items()
        for d in target.drafters
    ]
    return out


def all_outputs():
    return ["results/report/index.md"] + tiny_outputs()


def table_outputs(names):
    """Each table in every format; its HTML page is an item of Snakemake's report, with the
    table's caption, in the study's section."""
    out = []
    for t in names:
        out += [f"results/tables/{t}.{ext}" for ext in TABLE_FORMATS[:-1]]
        out.append(
            report_item(
                f"results/tables/{t}.html",
                caption=registry.path(t),
                category=registry.section_of(t),
                subcategory="Tables",
            )
        )
    return out


def run_tables():
    """The tables of this configuration's own runs and models."""
    names = list(TABLES) if RUNS else []
    names += MEASURED_TABLES if SWEEP_RUNS else []
    names += registry.written_by("step_model") if PREDICTED else []
    return names + (["weight_model"] if HF_MODELS else [])


def report_tables():
    """Every table of the report: the runs', the comparison with the study and the replay."""
    return run_tables() + ["comparison"] + REPLAY_TABLES


def measure_threads():
    """Sweeps and profiles time things: on a local machine they take every core, so that no
    other job runs beside them. A cluster executor sets no total of cores (reading it raises):
    there each job asks for 2 CPUs and runs on its own allocation."""
    try:
        cores = workflow.cores
    except Exception:
        return 2
    return cores if isinstance(cores, int) and 2 <= cores <= 512 else 2


def canonical(obj):
    """A config value with every mapping's keys sorted: a job's params compare equal whatever
    order the configuration file wrote them in."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def training_recipe(name, trained=True):
    """What a tiny model's weights depend on: architecture, budget and seed (not its drafters,
    datasets, K or hardware, which only its runs use)."""
    m = CFG.entry(name)
    recipe = {
        "name": m["name"],
        "arch": m["arch"],
        "seed": m.get("seed", TrainSpec.seed),
    }
    if trained:
        recipe["steps"] = m["steps"]
    return canonical(recipe)


def train_settings(trained=True):
    """The tiny section's training settings, the thread count included (training adds in an
    order that depends on it, so the weights do too); an untrained control depends on the
    evaluation settings only."""
    tiny = config.get("tiny", {})
    train = dict(tiny.get("train") or {})
    if not trained:
        train = {
            k: v
            for k, v in train.items()
            if k in ("seq_len", "batch_size", "eval_batches")
        }
    return canonical({"vocab_size": tiny.get("vocab_size"), "train": train})


def train_threads():
    return int(
        (config.get("tiny", {}).get("train") or {}).get("threads", TrainSpec.threads)
    )


def synth_entry(wildcards):
    """What a synthetic trace depends on: the generator's parameters."""
    m = MODELS[wildcards.model]
    return canonical({k: m[k] for k in ("name", "source", "synthetic") if k in m})


def cost_entry(wildcards):
    """What a cost model depends on: the model's dimensions, checkpoint config, precision, TP and
    hardware name (not its drafters or datasets)."""
    m = MODELS[wildcards.model]
    keys = (
        "name",
        "source",
        "dims",
        "hf_config",
        "precision",
        "tp",
        "hardware",
        "revision",
    )
    return canonical({k: m[k] for k in keys if k in m})


def cost_hardware(wildcards):
    """The one hardware entry a cost model uses."""
    hw = CFG.model(wildcards.model).hardware
    return canonical({hw: CFG.hardware[hw]} if hw in CFG.hardware else {})


def sweep_measure_params():
    """The sweep settings that change a measurement (not the analysis-only ones)."""
    return {
        k: v
        for k, v in config.get("sweep", {}).items()
        if k not in ("timing", "shape_margin", "engine_log_sd")
    }


def sweep_files(pattern, variants=True):
    """`pattern` (with the RUN wildcards) expanded over the runs that are swept (and, without
    variants, profiled and captured)."""
    return [
        pattern.format(**r)
        for r in SWEEP_RUNS
        if variants or r["model"] not in VARIANTS
    ]


def profile_files():
    """Kernel profiles: one per target and drafter, at the model's first K (specmoe.config)."""
    return sorted(
        {
            "results/profiles/{model}/{drafter}/K{k}.json".format(**vars(j))
            for j in CFG.profiled()
        }
    )


# Models the step model predicts: every model with runs but the untrained controls.
PREDICTED = [n for n, m in CFG.models.items() if not m.control_of]


def predict_inputs(wildcards):
    """A study model's config.json (its download); a model with a trace of its own: its first
    run's overlaps and acceptance length (and a tiny target's checkpoint, a separate draft
    model's config.json)."""
    m = CFG.models[wildcards.model]
    out = {}
    if m.source == "hf":
        out["config"] = download_manifest(m.name, "config")
    else:
        r = m.runs()[0].as_dict()
        out["overlap"] = "results/overlap/{model}/{drafter}/K{k}/{dataset}.json".format(
            **r
        )
        out["acceptance"] = (
            "results/acceptance/{model}/{drafter}/K{k}/{dataset}.json".format(**r)
        )
        out["checkpoint"] = model_files(wildcards)
    d = CFG.drafters.get(m.drafters[0])
    if d is not None and d.method == "draft_model":
        out["draft"] = (
            f"results/models/{d.name}"
            if d.source == "tiny"
            else download_manifest(d.name, "config")
        )
    return out


def predict_method(wildcards):
    """The speculative method of the model's first drafter; a synthetic model's drafter is a
    one-layer head (EAGLE-3, the study's most common)."""
    d = CFG.drafters.get(CFG.models[wildcards.model].drafters[0])
    return d.method if d is not None else "eagle3"


def model_dir(wildcards):
    """The checkpoint a tiny target or drafter is served from (a variant's: its target's)."""
    name = VARIANTS.get(wildcards.model, {}).get("variant_of", wildcards.model)
    return f"results/models/{name}"


def sweep_params(wildcards):
    """The sweep settings that change a measurement, in the model's precision."""
    m = VARIANTS.get(wildcards.model) or MODELS.get(wildcards.model) or {}
    return with_precision(sweep_measure_params(), m)


def sweep_datasets(name):
    """The datasets one served engine measures: its model's swept datasets, or for a drafter
    served alone, those of the runs it drafts for."""
    return sorted(
        {
            r["dataset"]
            for r in SWEEP_RUNS
            if r["model"] == name
            or (r["drafter"] == name and CFG.drafters[name].served_alone)
        }
    )


def sd_series(wildcards):
    """An SD series: one engine (target, drafter, K) over its model's swept datasets."""
    return {
        "model": wildcards.model,
        "drafter": wildcards.drafter,
        "k": int(wildcards.k),
        "datasets": sweep_datasets(wildcards.model),
    }


def sweep_prompts(wildcards):
    """The prompt tables of a series' downloaded datasets (none: the embedded table)."""
    return [
        f"results/prompts/{ds}.csv"
        for ds in sweep_datasets(wildcards.model)
        if ds in DATASETS
    ]


def profile_dataset(wildcards):
    """Profiles use the prompts of the model's first dataset."""
    return MODELS[wildcards.model]["datasets"][0]


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


def model_files(wildcards):
    """The checkpoint a run's cost model reads (none for synthetic models)."""
    m = MODELS[wildcards.model]
    if m["source"] == "hf":
        return [m["hf_config"]]
    return [f"results/models/{wildcards.model}"] if m["source"] == "tiny" else []


# --- the study's models (source: hf) ----------------------------------------------------------


def download_manifest(name, mode="full"):
    return f"results/downloads/{repo_key(CFG.entry(name))}.{mode}.json"


# Study models whose GPU jobs the plan estimates (a repo id is needed to read their config.json).
PLANNED = [n for n in HF_RUN if MODELS[n]["repo_id"]]

PLANNED_DATASETS = sorted(
    {d for n in PLANNED for name in MODELS[n]["datasets"] for d in name.split("+")}
)


def shipped(name):
    """Does the package ship this model's config.json (no download for the GPU bill)?"""
    return shipped_config(MODELS[name]["repo_id"]) is not None


def plan_input(wildcards):
    return ["results/plan.json"] if wildcards.model in PLANNED else []


def planned_runtime(rule_name):
    """A GPU job's SLURM runtime (minutes): the plan's estimate times its safety factor, doubled on
    each retry; the model's `gpu.runtime` (or the config's) where the plan has no estimate.
    """

    def runtime(wildcards, input, attempt):
        fallback = gpu_resources(wildcards.model)["runtime"]
        plan = input.get("plan") or []
        plan = [plan] if isinstance(plan, str) else list(plan)
        if not plan or not os.path.exists(plan[0]):  # a dry-run before the plan exists
            return fallback * attempt
        with open(plan[0]) as fh:
            jobs = json.load(fh)["jobs"]
        want = {
            k: str(v)
            for k, v in wildcards.items()
            if k in ("model", "drafter", "k", "dataset")
        }
        for j in jobs:
            if j["rule"] == rule_name and all(str(j[k]) == v for k, v in want.items()):
                return int(j["runtime_min"]) * attempt
        return fallback * attempt

    return runtime


def gpu_resources(name):
    return CFG.gpu_resources(name)


def one_of(names):
    """A wildcard constraint matching exactly these names (none: nothing)."""
    return "|".join(re.escape(n) for n in names) or "^$"


def prompts_for(wildcards):
    """The prompt table of a downloaded study dataset (none: the embedded table)."""
    if wildcards.dataset in DATASETS:
        return [f"results/prompts/{wildcards.dataset}.csv"]
    return []


def profile_prompts(wildcards):
    """Profiles use the prompts of the model's first dataset."""
    ds = profile_dataset(wildcards)
    return [f"results/prompts/{ds}.csv"] if ds in DATASETS else []


def speedup_drafter(wildcards):
    """The drafter's own series, for the draft cost c (separate draft models only)."""
    if CFG.drafters[wildcards.drafter].served_alone:
        return [f"results/sweeps/{wildcards.drafter}/ar.json"]
    return []


# --- engine stages (capture, sweeps, profiles): one rule each, whatever the hardware ------------
# The study's models (source hf) are served from their downloads with the study's engine settings;
# tiny models from their trained checkpoints with the tiny settings. Where a job runs follows the
# model's hardware: a GPU (vLLM's CUDA build, GPU resources) or, for hardware whose device is cpu,
# this machine's cores (vLLM for CPUs).

# A vLLM engine on a CPU serving a tiny model: resident memory stays near 3.3 GB (the sweeps'
# benchmarks), a job ends within minutes.
CPU_ENGINE = {"mem_mb": 8000, "runtime": 60}


from_download = CFG.from_download
on_gpu = CFG.on_gpu


def engine_env(wildcards):
    return (
        "../../envs/gpu.yaml" if on_gpu(wildcards.model) else "../../envs/models.yaml"
    )


def engine_gpus(wildcards):
    return CFG.gpus(wildcards.model)


def engine_gpu_model(wildcards):
    return (
        gpu_resources(wildcards.model)["gpu_model"] if on_gpu(wildcards.model) else ""
    )


def engine_mem_mb(wildcards):
    if on_gpu(wildcards.model):
        return gpu_resources(wildcards.model)["mem_mb"]
    return CPU_ENGINE["mem_mb"]


def engine_runtime(rule_name):
    """A job's runtime in minutes: the GPU bill's for GPU jobs, CPU_ENGINE's else."""
    planned = planned_runtime(rule_name)

    def runtime(wildcards, input, attempt):
        if on_gpu(wildcards.model):
            return planned(wildcards, input, attempt)
        return CPU_ENGINE["runtime"] * attempt

    return runtime


def engine_target(wildcards):
    """What the engine serves: a study model's download manifest, or a tiny checkpoint (a
    variant's: its target's)."""
    if from_download(wildcards.model):
        return download_manifest(wildcards.model)
    return model_dir(wildcards)


def engine_drafter(wildcards):
    """The drafter's download (none for MTP, which uses the target's own layers), or a tiny
    drafter's checkpoint."""
    if not from_download(wildcards.model):
        return [f"results/models/{wildcards.drafter}"]
    if DRAFTERS[wildcards.drafter]["source"] == "self":
        return []
    return [download_manifest(wildcards.drafter)]


def engine_method(wildcards):
    if from_download(wildcards.model):
        return CFG.drafters[wildcards.drafter].method
    return None


def engine_section(section, tiny_section):
    """A rule's engine settings: the study's section with the model's TP, precision and engine
    arguments, or the tiny models' section (sweeps in the model's precision)."""

    def settings(wildcards):
        if from_download(wildcards.model):
            return engine_settings(wildcards.model, section)
        return tiny_section(wildcards)

    return settings


def engine_settings(name, section):
    """A sweep/profiling/capture section with the model's TP, precision and engine arguments."""
    return CFG.engine_settings(name, section)
