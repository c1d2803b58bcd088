# Read by every rules file, the configuration validated and resolved once (specmoe.config,
# CFG), the results/ patterns (specmoe.paths, P), the files each job reads (specmoe.files,
# FILES) and one-line input functions over them; a rule with a contract record
# (specmoe.contracts) takes its params from it (params_of).
import functools
import os
import re
import sys

from snakemake.io import report as report_item
from snakemake.utils import min_version

from specmoe import paths as P
from specmoe.config import CPU_ENGINE, for_workflow
from specmoe.contracts import snakemake_params
from specmoe.contracts.analysis import (
    AcceptanceParams,
    CostmodelParams,
    IpfParams,
    OverlapParams,
    PredictParams,
    SpeedupParams,
    SynthFitParams,
    SynthTraceParams,
)
from specmoe.contracts.engines import (
    CaptureControlParams,
    CaptureParams,
    ProfileParams,
    SweepArParams,
    SweepSdParams,
)
from specmoe.contracts.models import SdCheckParams, TokenizerParams, TrainParams
from specmoe.contracts.report import (
    ComparisonParams,
    FiguresParams,
    MeasuredTablesParams,
    PlanParams,
    ReportIndexParams,
    StepModelParams,
    TablesParams,
    WeightModelParams,
)
from specmoe.contracts.study import (
    DownloadDatasetParams,
    DownloadModelParams,
    PromptTableParams,
)
from specmoe.cost.plan import Planner
from specmoe.errors import InputError
from specmoe.files import Files
from specmoe.kinds import kind
from specmoe.names import control_name
from specmoe.report import registry

min_version("9.0")


report: "../report/workflow.rst"


# Rules that take seconds run where the workflow is launched, not as cluster jobs (the GPU plan
# among them); so do the downloads, since compute nodes often have no network.
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
    plan,
    download_model,
    download_dataset,


def main_process():
    try:
        return workflow.is_main_process
    except AttributeError:
        return True


# The configuration files read again strictly (a key given twice is an error; Snakemake keeps
# the last), the configuration validated by its schema (its defaults filled in) against its
# prompt table and resolved once: every key, cross-reference and pair of numbers that could
# contradict is checked, and every GPU job preflighted (specmoe.checks.preflight), one line per
# problem, before any job starts.
try:
    CFG, _notes = for_workflow(
        config,
        os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"),
        cache_dir=".snakemake/specmoe",
        preflight=main_process(),
        files=workflow.configfiles,
    )
except InputError as exc:
    sys.exit(str(exc))
for _line in _notes:
    print(_line, file=sys.stderr)

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


# --- what the run makes and what each job reads (specmoe.files) --------------------------------

FILES = Files(CFG)


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


def params_of(record, **extra):
    """A rule's parameters record (specmoe.contracts) as its params: one per field."""
    return snakemake_params(record, CFG, **extra)


# --- engine jobs (capture, sweeps, profiles): one rule body, whatever the hardware --------------
# Each engine rule is a kind of engine job (specmoe.kinds.KINDS, by the rule's name), whose row
# says whether it serves a drafter, which datasets' prompts, its configuration section and whether
# it times things. The study's models (source hf) are served from their downloads with the study's
# engine settings; tiny models from their trained checkpoints with the tiny settings. Where a job
# runs follows the model's hardware: a GPU (vLLM's CUDA build, GPU resources) or, for hardware
# whose device is cpu, this machine's cores (vLLM for CPUs).


def local_cores():
    """The cores of a run on this machine (Snakemake's local executor), else None: a cluster
    executor runs each job on its own allocation. Its total of cores says nothing there (the
    workflow profile's `cores: all` gives it the launcher's), and a run without one raises.
    The executor is known once the workflow runs, not while it is parsed: the rules' threads
    are functions, read when each job is made."""
    try:
        cores = workflow.cores if workflow.local_exec else None
    except Exception:
        return None
    return cores if isinstance(cores, int) and 2 <= cores <= 512 else None


def measure_threads():
    """Sweeps and profiles time things: on a local machine they take every core, so that no
    other job runs beside them; on a cluster each asks for 2 CPUs."""
    return local_cores() or 2


def local_claim(threads):
    """The cores that a job which runs `threads` threads claims from the scheduler where they
    do not change its numbers: on a local machine one less (at least one), so that a second
    such job or an analysis job uses the rest instead of waiting; on a cluster all of them.
    """
    return max(1, threads - 1) if local_cores() else threads


def train_threads():
    """A training job's cores as the scheduler counts them. Training runs on the config's
    threads whatever this says (tiny.train.threads: the weights follow them), but keeps about
    1.2 to 1.6 of its 2 threads' cores busy (the default run's benchmark files), and two
    trainings side by side cost no more CPU a step than apart (bench/train_pairs.py): it
    claims one core less (local_claim). Snakemake exports the claim as OMP_NUM_THREADS;
    torch's own count (set by the training) wins, and the weights are the same bit for bit.
    """
    threads = TrainParams.threads(CFG)
    return lambda wildcards: local_claim(threads)


# Jobs that engine jobs wait for and that take seconds (the tokenizer, the study's downloads and
# prompt tables): before any other ready job. In the study's CPU case the scheduler
# otherwise ran a prompt table 59 s after its download, behind the analysis, and the capture
# that reads it waited as long.
GATE_PRIORITY = 10


def train_priority(w):
    """A training's priority: above every job that could wait (GATE_PRIORITY), and higher
    the more runs serve its checkpoint (Config.runs_served_by): on two cores the drafter and
    the target with the most engine jobs train first, and those jobs run beside the last
    training (the scheduler otherwise trained tiny-coarse first and left tiny-fine's captures
    to wait for the end of every training)."""
    return GATE_PRIORITY + CFG.runs_served_by(w.tiny)


# Engine jobs (and the SD check) before any other job that is ready beside them: two at a time
# at most (resource `engine`; a timed one alone, on every core), after the trainings, and every
# other job fits beside them or beside a training; the scheduler otherwise gave the core that tiny-coarse's training left
# free to the synthetic traces and their analysis while tiny-fine's captures waited.
ENGINE_PRIORITY = 1


def engine_threads(rule_name):
    """Timed engine jobs (sweeps, profiles) take every core (measure_threads); the others
    (captures and SD checks) time nothing, and their engines run vLLM's own thread settings
    whatever the claim (specmoe.runtime.engine.engine_env drops the ones Snakemake sets): their
    traces and tokens are the same beside another job, and they claim one core less
    (local_claim), so that a capture runs beside a training or an analysis job."""
    timed = kind(rule_name).timed
    return lambda wildcards: measure_threads() if timed else local_claim(2)


def analysis_threads():
    """The threads of rules overlap and acceptance, whose numba-parallel passes run on the
    job's claim and give the same numbers on one thread as on two (tests/test_overlap.py): two,
    and on a local machine one less (local_claim), so that they run beside a training or a
    capture instead of after it."""
    return lambda wildcards: local_claim(2)


def engine_claim(wildcards):
    """An engine job's share of the workflow profile's `engine` slots (two engines at a time on
    one machine: their memory and cores): one on a local machine, none on a cluster, where each
    job has its own allocation and Snakemake counts the slots across all of its jobs."""
    return 1 if workflow.local_exec else 0


def engine_env(w):
    return "../../envs/gpu.yaml" if CFG.on_gpu(w.model) else "../../envs/models.yaml"


@functools.cache
def gpu_plan():
    """The GPU plan's estimates (specmoe.cost.plan.Planner, the one rule plan writes), made when
    a GPU job's runtime is first asked for: a run without GPU jobs never fits the step model.
    """
    plan = PlanParams.from_config(CFG)
    return Planner(plan.entries, plan.config, plan.prompt_tokens)


def engine_resources(rule_name):
    """An engine job's resources: TP GPUs, the GPU model, SLURM constraint (where the `gpu` entries
    set one) and memory of a study model on a GPU, CPU_ENGINE's memory on a CPU; its runtime in
    minutes is the GPU plan's estimate for GPU jobs (gpu_plan, computed here, not read from
    results/plan.json: a new plan reruns no measurement; the model's `gpu.runtime` where the plan
    has none) and CPU_ENGINE's else, doubled on each retry. A study model's estimate reads its
    config-only download where the package ships no config.json (the job's input `config`):
    until it exists, Snakemake leaves the runtime to be decided (FileNotFoundError naming it)
    and asks again before it submits the job. On a cluster a GPU job asks for CPUs that
    follow its TP (cpus_per_task, SLURM's --cpus-per-task; Config.gpu_cpus): its engine's
    processes each keep a core busy. Its threads would not do: Snakemake caps them at the
    launcher's cores (the workflow profile's `cores: all`); elsewhere it asks for its threads.
    """
    timed = kind(rule_name).timed

    def cpus_per_task(wildcards, threads):
        if CFG.on_gpu(wildcards.model) and not workflow.local_exec:
            return CFG.gpu_cpus(wildcards.model, timed, wildcards.get("tp"))
        return threads

    # `input`, unread: Snakemake leaves the runtime to be decided only where the function takes
    # the job's input and the missing file is in it
    def runtime(wildcards, input, attempt):
        if not CFG.on_gpu(wildcards.model):
            return CPU_ENGINE["runtime"] * attempt
        planned = gpu_plan().runtime(rule_name, dict(wildcards.items()))
        return (planned or CFG.gpu_resources(wildcards.model)["runtime"]) * attempt

    return {
        "gpu": lambda w: CFG.gpus(w.model, w.get("tp")),
        "gpu_model": lambda w: CFG.gpu_model(w.model),
        "constraint": lambda w: CFG.gpu_constraint(w.model),
        "mem_mb": lambda w: CFG.engine_mem_mb(w.model),
        "runtime": runtime,
        "engine": engine_claim,
        "cpus_per_task": cpus_per_task,
    }
