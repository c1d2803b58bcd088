# Helpers shared by the rules: config validation, the list of runs, per-run paths.
import json
import os
import re
import sys

from snakemake.io import report as report_item
from snakemake.utils import min_version, validate

from specmoe import captions
from specmoe import prompts as prompt_table
from specmoe.configcheck import check as check_config
from specmoe.published import study_entry

min_version("9.0")


validate(config, "../../config/schema.yaml")


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
    download_model,
    download_dataset,


def prompt_datasets(cfg):
    """Datasets of the prompt table the tiny models read (None when it cannot be read yet)."""
    try:
        source = (cfg.get("tiny") or {}).get("prompts", "builtin:v1")
        return {p.dataset for p in prompt_table.load(source)}
    except Exception:
        return None


# Every cross-reference and pair of numbers that could contradict: one line each, before any job.
check_config(config, prompt_datasets(config))


def repo_key(entry):
    """The file name of a model's or drafter's download: owner--name of its repo id."""
    repo = entry.get("repo_id")
    return re.sub(r"[/]", "--", repo) if repo else f"unset--{entry['name']}"


# The study's models and drafters from the Hugging Face Hub (source: hf), the datasets downloaded
# for them, and the download manifests that later rules read (the HF cache is the store).
DRAFTERS = {d["name"]: d for d in config.get("drafters", [])}
HF_DRAFTERS = {n: d for n, d in DRAFTERS.items() if d["source"] in ("hf", "self")}
HF_MODELS = {m["name"]: m for m in config["models"] if m["source"] == "hf"}
DATASETS = config.get("datasets") or {}
REPOS = {}  # "owner--name" -> {repo_id, revision, trust_remote_code, names}
for _e in [*HF_MODELS.values(), *HF_DRAFTERS.values()]:
    if _e["source"] == "self":
        continue
    _key = repo_key(_e)
    _r = REPOS.setdefault(
        _key,
        {
            "repo_id": _e.get("repo_id"),
            "revision": _e.get("revision"),
            "trust_remote_code": False,
            "names": [],
        },
    )
    _r["trust_remote_code"] |= bool(_e.get("trust_remote_code", False))
    _r["names"].append(_e["name"])
_unset = [n for r in REPOS.values() if not r["repo_id"] for n in r["names"]]
if _unset:
    print(
        f"config: no repo_id for {', '.join(_unset)} (the study names none): fill it in "
        "before their downloads run; the DAG below includes them",
        file=sys.stderr,
    )

# Every model the runs refer to; a tiny target also runs untrained, as "<name>-random", and its
# cost model reads the architecture from the checkpoint the pipeline writes; a study model's cost
# model reads the config.json of its download.
MODELS = {}
for _m in config["models"]:
    if _m["source"] == "variant":
        continue  # swept only: VARIANTS below
    MODELS[_m["name"]] = _m
    if _m["source"] == "hf":
        MODELS[_m["name"]] = {
            **_m,
            "hf_config": f"results/downloads/{repo_key(_m)}.config.json",
        }
        if _m.get("cost_only"):
            del MODELS[_m["name"]]  # no runs: the weight-model table only
    if _m["source"] == "tiny":
        MODELS[_m["name"]] = {
            **_m,
            "hf_config": f"results/models/{_m['name']}/config.json",
        }
        # the untrained control runs at the model's first K and dataset: the routing baseline
        _r = _m["name"] + "-random"
        MODELS[_r] = {
            **_m,
            "name": _r,
            "hf_config": f"results/models/{_r}/config.json",
            "ks": _m.get("ks", config["ks"])[:1],
            "datasets": _m["datasets"][:1],
        }
SYNTHETIC = [n for n, m in MODELS.items() if m["source"] == "synthetic"]
CAPTURED = [n for n, m in MODELS.items() if m["source"] == "tiny"]
HF_RUN = [n for n, m in MODELS.items() if m["source"] == "hf"]
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
# Models measured by serving sweeps and kernel profiling: trained tiny targets (not the controls)
# and the study's models.
SWEPT = (
    [n for n, m in TINY_TARGETS.items() if m.get("sweep", True)]
    if "sweep" in config and "profiling" in config
    else []
)
HF_SWEPT = (
    [n for n in HF_RUN if MODELS[n].get("sweep", True)]
    if "sweep" in config and "profiling" in config
    else []
)
# Variants of a tiny target (source: variant): its checkpoint served with other engine settings
# (precision), swept only (its routing and kernels are the target's). The study's variants are
# model entries of their own, sharing a download.
VARIANTS = {
    m["name"]: {**TINY_TARGETS[m["variant_of"]], **m}
    for m in config["models"]
    if m["source"] == "variant"
}
VARIANT_RUNS = [
    {"model": name, "drafter": d, "k": k, "dataset": ds}
    for name, m in VARIANTS.items()
    for d in m["drafters"]
    for k in m.get("ks", config["ks"])
    for ds in m["datasets"]
]
if "sweep" in config and "profiling" in config:
    SWEPT += [n for n, m in VARIANTS.items() if m.get("sweep", True)]
SWEEP_RUNS = [r for r in RUNS + VARIANT_RUNS if r["model"] in SWEPT + HF_SWEPT]
# Drafters served alone for the draft cost c: separate draft models only (EAGLE heads and MTP
# layers cannot run alone).
SWEEP_MODELS = sorted(
    set(SWEPT) | {r["drafter"] for r in SWEEP_RUNS if r["model"] in SWEPT}
)
HF_SWEEP_MODELS = sorted(
    set(HF_SWEPT)
    | {
        r["drafter"]
        for r in SWEEP_RUNS
        if r["model"] in HF_SWEPT and DRAFTERS[r["drafter"]]["method"] == "draft_model"
    }
)
MEASURED_TABLES = [
    "speedup_vs_batch",
    "te_three_ways",
    "kernel_time_shares",
    "three_step_correction",
]
TABLES = [
    "overlap_decomposition_step1",
    "overlap_by_distance",
    "overlap_by_status",
    "per_layer_overlap",
    "heldout_overlap",
    "unique_experts",
    "target_efficiency",
    "te_vs_batch",
    "draft_ratio_model",
    "acceptance_consecutive",
    "anchor_overlap",
    "heldout_acceptance",
]
REPLAY_TABLES = ["replay_unique_experts", "replay_weight_model", "replay_three_step"]
FIGURES = [f for sec in captions.SECTIONS.values() for f in sec["figures"]]
TABLE_FORMATS = ["csv", "md", "tex", "html"]
# Models whose results sit beside the study's published numbers (compare_with, or a study
# checkpoint): name -> the study model and the variant (precision, TP, hardware).
STUDY = {
    m["name"]: entry
    for m in config["models"]
    if (entry := study_entry(VARIANTS.get(m["name"], m))) is not None
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


def table_outputs(names):
    """Each table in every format; its HTML page is an item of Snakemake's report, with the
    table's caption, in the study's section."""
    out = []
    for t in names:
        out += [f"results/tables/{t}.{ext}" for ext in TABLE_FORMATS[:-1]]
        out.append(
            report_item(
                f"results/tables/{t}.html",
                caption=captions.path(t),
                category=captions.section_of(t),
                subcategory="Tables",
            )
        )
    return out


def run_tables():
    """The tables of this configuration's own runs and models."""
    names = list(TABLES) if RUNS else []
    names += MEASURED_TABLES if SWEEP_RUNS else []
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
    m = TINY[name]
    recipe = {"name": m["name"], "arch": m["arch"], "seed": m.get("seed", 0)}
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
    return int((config.get("tiny", {}).get("train") or {}).get("threads", 2))


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
    hw = MODELS[wildcards.model].get("hardware", "H100")
    return canonical({hw: config["hardware"][hw]} if hw in config["hardware"] else {})


def sweep_measure_params():
    """The sweep settings that change a measurement (not the analysis-only ones)."""
    return {
        k: v
        for k, v in config.get("sweep", {}).items()
        if k not in ("timing", "shape_margin")
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
    """Kernel profiles: one per target and drafter, at the model's first K. The decode profile
    does not depend on K, and the study profiles one K (at batch 1)."""
    return sorted(
        {
            "results/profiles/{model}/{drafter}/K{k}.json".format(**r)
            for r in SWEEP_RUNS
            if r["model"] in MODELS
            and r["k"] == MODELS[r["model"]].get("ks", config["ks"])[0]
        }
    )


def model_dir(wildcards):
    """The checkpoint a tiny target or drafter is served from (a variant's: its target's)."""
    name = VARIANTS.get(wildcards.model, {}).get("variant_of", wildcards.model)
    return f"results/models/{name}"


PRECISION_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def with_precision(section, m):
    """An engine config section with the model's precision (bf16, fp16, fp32) as its dtype."""
    if m.get("precision") in PRECISION_DTYPE:
        section["dtype"] = PRECISION_DTYPE[m["precision"]]
    return section


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
            if r["model"] == name or (r["drafter"] == name and served_alone(name))
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


def model_of(wildcards):
    return MODELS[wildcards.model]


def model_files(wildcards):
    """The checkpoint a run's cost model reads (none for synthetic models)."""
    m = MODELS[wildcards.model]
    if m["source"] == "hf":
        return [m["hf_config"]]
    return [f"results/models/{wildcards.model}"] if m["source"] == "tiny" else []


# --- the study's models (source: hf) ----------------------------------------------------------


def hf_model(name):
    return MODELS.get(name) or HF_MODELS.get(name) or DRAFTERS[name]


def download_manifest(name, mode="full"):
    return f"results/downloads/{repo_key(hf_model(name))}.{mode}.json"


# Study models whose GPU jobs the plan estimates (a repo id is needed to read their config.json).
PLANNED = [n for n in HF_RUN if MODELS[n].get("repo_id")]
PLANNED_DATASETS = sorted(
    {d for n in PLANNED for name in MODELS[n]["datasets"] for d in name.split("+")}
)


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


def spec_method(wildcards):
    return DRAFTERS[wildcards.drafter]["method"]


def gpu_resources(name):
    """Snakemake's standard resources of the GPU jobs of one model (gpu = TP), memory and hours from
    the model's `gpu` entry over the config's defaults."""
    m = hf_model(name)
    g = {**(config.get("gpu") or {}), **(m.get("gpu") or {})}
    hw = config["hardware"].get(m.get("hardware", "H100"), {})
    return {
        "gpu": int(m.get("tp", 1)),
        "gpu_model": g.get("constraint") or hw.get("gpu_model") or "",
        "mem_mb": int(g.get("mem_mb", 64000)),
        "runtime": int(g.get("runtime", 120)),
    }


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


def served_alone(drafter):
    """Is this drafter served alone for the draft cost c? Separate draft models only (EAGLE heads
    and MTP layers cannot run alone)."""
    d = DRAFTERS.get(drafter, {})
    return d.get("source") == "tiny" or d.get("method") == "draft_model"


def speedup_drafter(wildcards):
    """The drafter's own series, for the draft cost c (separate draft models only)."""
    if served_alone(wildcards.drafter):
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


def from_download(name):
    """Is this model (or drafter served alone) a study model, served from its download?"""
    return name in HF_MODELS or name in HF_DRAFTERS


def hardware_of(name):
    """A model's hardware entry; a drafter runs on its first target's."""
    m = hf_model(name)
    if "hardware" not in m:
        m = next((t for t in config["models"] if name in t["drafters"]), m)
    return m.get("hardware", "H100")


def on_gpu(name):
    """Does this model's engine run on a GPU? A study model does unless its hardware is a CPU."""
    if not from_download(name):
        return False
    return config["hardware"].get(hardware_of(name), {}).get("device", "gpu") == "gpu"


def engine_env(wildcards):
    return (
        "../../envs/gpu.yaml" if on_gpu(wildcards.model) else "../../envs/models.yaml"
    )


def engine_gpus(wildcards):
    return gpu_resources(wildcards.model)["gpu"] if on_gpu(wildcards.model) else 0


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
    return spec_method(wildcards) if from_download(wildcards.model) else None


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
    m = hf_model(name)
    base = dict(config.get(section) or {})
    extra = {**(base.get("engine_args") or {}), **(m.get("engine_args") or {})}
    extra["tensor_parallel_size"] = int(m.get("tp", 1))
    if m.get("precision", "auto") == "fp8":
        extra["quantization"] = "fp8"
    with_precision(base, m)
    if m.get("trust_remote_code"):
        extra["trust_remote_code"] = True
    base["engine_args"] = extra
    return base
