# Read by every rules file, the configuration validated and resolved once (specmoe.config,
# CFG), the results/ patterns (specmoe.paths, P) and one-line input functions over them.
import os
import re
import sys

from snakemake.io import report as report_item
from snakemake.utils import min_version

from specmoe import paths as P
from specmoe.sources import prompts as prompt_table
from specmoe.config import CPU_ENGINE, for_workflow, repo_key
from specmoe.errors import InputError
from specmoe.names import control_name
from specmoe.cost.plan import planned_runtime
from specmoe.checks.preflight import shipped_config
from specmoe.report import registry

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


# The configuration validated by its schema (its defaults filled in) and resolved once: every
# key, cross-reference and pair of numbers that could contradict is checked, and every GPU job
# preflighted (specmoe.checks.preflight), one line per problem, before any job starts.
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

RUNS = [r.as_dict() for r in CFG.runs()]
SWEEP_RUNS = [r.as_dict() for r in CFG.sweep_runs()]
# Engines of the series without SD: the swept models and the drafters served alone for the draft
# cost c (separate draft models only: EAGLE heads and MTP layers cannot run alone).
SERVED = sorted(
    set(CFG.swept + CFG.hf_swept)
    | {r["drafter"] for r in SWEEP_RUNS if CFG.drafters[r["drafter"]].served_alone}
)
TABLES = registry.written_by("tables")
MEASURED_TABLES = registry.written_by("measured_tables")
REPLAY_TABLES = registry.written_by("replay")
FIGURES = list(registry.FIGURES)


wildcard_constraints:
    model="[^/]+",
    drafter="[^/]+",
    k="[0-9]+",
    dataset="[^/]+",


def one_of(names):
    """A wildcard constraint matching exactly these names (none: nothing)."""
    return "|".join(re.escape(n) for n in names) or "^$"


# --- what the run makes -------------------------------------------------------------------------


def all_outputs():
    """The report, and the tiny models with their controls and SD checks."""
    targets = CFG.tiny_targets
    drafters = sorted({d for m in targets.values() for d in m.drafters})
    k, dataset = CFG.sd_check_run()
    out = [P.model(n) for n in [*targets, *drafters]]
    out += [P.model(control_name(n)) for n in targets]
    out += [
        P.SD_CHECK.format(model=m, drafter=d, k=k, dataset=dataset)
        for m, target in targets.items()
        for d in target.drafters
    ]
    return [P.REPORT_MD] + (out if targets else [])


def table_outputs(names):
    """Each table in every format; its HTML page is an item of Snakemake's report, with the
    table's caption, in the study's section."""
    out = []
    for t in names:
        out += [P.table(t, ext) for ext in P.TABLE_FORMATS if ext != "html"]
        out.append(
            report_item(
                P.table(t, "html"),
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
    names += registry.written_by("step_model") if CFG.predicted else []
    return names + (["weight_model"] if CFG.hf else [])


def report_tables():
    """Every table of the report: the runs', the comparison with the study and the replay."""
    return run_tables() + ["comparison"] + REPLAY_TABLES


def run_files(pattern):
    """`pattern` (with the run's wildcards) expanded over every configured run."""
    return [pattern.format(**r) for r in RUNS]


def sweep_files(pattern, variants=True):
    """`pattern` expanded over the runs that are swept (without variants: profiled, captured)."""
    return [
        pattern.format(**r)
        for r in SWEEP_RUNS
        if variants or r["model"] not in CFG.variants
    ]


def profile_files():
    """Kernel profiles: one per target and drafter, at the model's first K (specmoe.config)."""
    return sorted({P.PROFILE.format(**vars(j)) for j in CFG.profiled()})


# --- one job's identity and inputs ----------------------------------------------------------------


def run_of(w):
    """The run's identity as a plain dict."""
    return {"model": w.model, "drafter": w.drafter, "k": int(w.k), "dataset": w.dataset}


def model_dir(w):
    """The checkpoint a tiny target or drafter is served from (a variant's: its target's)."""
    variant = CFG.variants.get(w.model)
    return P.model(variant.variant_of if variant else w.model)


def model_files(w):
    """The checkpoint a run's cost model reads (none for synthetic models)."""
    m = CFG.models[w.model]
    if m.source == "hf":
        return [m.entry["hf_config"]]
    return [P.model(w.model)] if m.source == "tiny" else []


def download_manifest(name, mode="full"):
    return P.download(repo_key(CFG.entry(name)), mode)


def prompts_of(datasets):
    """The prompt tables of the downloaded ones among `datasets` (none: the embedded table)."""
    return [P.prompts(ds) for ds in datasets if ds in CFG.datasets]


def predict_inputs(w):
    """A study model's config.json (its download); a model with a trace of its own: its first
    run's overlaps and acceptance length (and a tiny target's checkpoint, a separate draft
    model's config.json)."""
    m = CFG.models[w.model]
    out = {}
    if m.source == "hf":
        out["config"] = download_manifest(m.name, "config")
    else:
        r = m.runs()[0].as_dict()
        out["overlap"] = P.OVERLAP.format(**r)
        out["acceptance"] = P.ACCEPTANCE.format(**r)
        out["checkpoint"] = model_files(w)
    d = CFG.drafters.get(m.drafters[0])
    if d is not None and d.method == "draft_model":
        out["draft"] = (
            P.model(d.name)
            if d.source == "tiny"
            else download_manifest(d.name, "config")
        )
    return out


def speedup_drafter(w):
    """The drafter's own series, for the draft cost c (separate draft models only)."""
    if CFG.drafters[w.drafter].served_alone:
        return [P.SWEEP_AR.format(model=w.drafter)]
    return []


def shipped(name):
    """Does the package ship this model's config.json (no download for the GPU bill)?"""
    return shipped_config(CFG.models[name].entry["repo_id"]) is not None


# --- engine jobs (capture, sweeps, profiles): one rule body, whatever the hardware --------------
# The study's models (source hf) are served from their downloads with the study's engine settings;
# tiny models from their trained checkpoints with the tiny settings. Where a job runs follows the
# model's hardware: a GPU (vLLM's CUDA build, GPU resources) or, for hardware whose device is cpu,
# this machine's cores (vLLM for CPUs).


def measure_threads():
    """Sweeps and profiles time things: on a local machine they take every core, so that no
    other job runs beside them. A cluster executor sets no total of cores (reading it raises):
    there each job asks for 2 CPUs and runs on its own allocation."""
    try:
        cores = workflow.cores
    except Exception:
        return 2
    return cores if isinstance(cores, int) and 2 <= cores <= 512 else 2


def engine_env(w):
    return "../../envs/gpu.yaml" if CFG.on_gpu(w.model) else "../../envs/models.yaml"


def engine_resources(rule_name):
    """An engine job's resources: TP GPUs, the GPU model and memory of a study model on a GPU,
    CPU_ENGINE's memory on a CPU; its runtime in minutes is the GPU bill's estimate for GPU jobs
    (the model's `gpu.runtime` where the bill has none) and CPU_ENGINE's else, doubled on each
    retry."""

    def runtime(wildcards, input, attempt):
        if not CFG.on_gpu(wildcards.model):
            return CPU_ENGINE["runtime"] * attempt
        plan = input.get("plan") or []
        plan = [plan] if isinstance(plan, str) else list(plan)
        planned = planned_runtime(
            plan[0] if plan else None, rule_name, dict(wildcards.items())
        )
        return (planned or CFG.gpu_resources(wildcards.model)["runtime"]) * attempt

    return {
        "gpu": lambda w: CFG.gpus(w.model),
        "gpu_model": lambda w: CFG.gpu_model(w.model),
        "mem_mb": lambda w: CFG.engine_mem_mb(w.model),
        "runtime": runtime,
        "engine": 1,
    }


def plan_input(w):
    return [P.PLAN_JSON] if w.model in CFG.planned else []


def engine_target(w):
    """What the engine serves: a study model's download manifest, or a tiny checkpoint (a
    variant's: its target's)."""
    return download_manifest(w.model) if CFG.from_download(w.model) else model_dir(w)


def engine_drafter(w):
    """The drafter's download (none for MTP, which uses the target's own layers), or a tiny
    drafter's checkpoint."""
    if not CFG.from_download(w.model):
        return [P.model(w.drafter)]
    if CFG.drafters[w.drafter].source == "self":
        return []
    return [download_manifest(w.drafter)]


def engine_method(w):
    return CFG.drafters[w.drafter].method if CFG.from_download(w.model) else None


def engine_section(section, tiny_section):
    """A rule's engine settings: the study's section with the model's TP, precision and engine
    arguments, or the tiny models' section (sweeps in the model's precision)."""

    def settings(w):
        if CFG.from_download(w.model):
            return CFG.engine_settings(w.model, section)
        return tiny_section(w)

    return settings
