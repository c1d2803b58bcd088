"""Where the pipeline writes: every pattern under results/ once, for the rules and the stages.

A pattern holds Snakemake wildcards in braces; `.format(**run)` fills them for one run. A job's
log and benchmark mirror its output's path under logs/ and benchmarks/ (`log_of`, `benchmark_of`).
"""

from __future__ import annotations

from .runs import path_of

# one run (specmoe.runs.Run, its path form): a target, its drafter, K and a dataset
RUN = path_of("{model}", "{drafter}", "{k}", "{dataset}")
SERIES = path_of("{model}", "{drafter}", "{k}")  # one engine serving a target with its drafter at K

TABLE_FORMATS = ("csv", "md", "tex", "html")  # every table is written in each

TOKENIZER = "results/models/tokenizer"
SD_CHECK = f"results/sd_check/{RUN}.json"
TRACE = f"results/traces/{RUN}.parquet"
SYNTH_FIT = "results/synth/{model}/fit.json"  # a synthetic model's process fitted once, for every K
OVERLAP = f"results/overlap/{RUN}.json"
IPF = f"results/ipf/{RUN}.json"
COSTMODEL = f"results/costmodel/{RUN}.json"
ACCEPTANCE = f"results/acceptance/{RUN}.json"
SPEEDUP = f"results/speedup/{RUN}.json"
# a drafter served alone, without SD, in one dtype and TP of the SD series it drafts in (its draft
# cost c divides times of that precision and sharding: specmoe.config.Config.drafter_serving)
SWEEP_AR = "results/sweeps/{model}/ar-{dtype}-tp{tp}.json"
SWEEP_SD = f"results/sweeps/{SERIES}.json"
PROFILE = f"results/profiles/{SERIES}.json"
PROFILE_TRACES = f"results/profiles/{SERIES}.traces"
PREDICT = "results/predict/{model}.json"
DOWNLOAD = "results/downloads/{repo}.{mode}.json"  # mode: full or config
DATASET_DOWNLOAD = "results/downloads/datasets/{dataset}.json"
PROMPTS = "results/prompts/{dataset}.csv"
PLAN_MD = "results/plan.md"
PLAN_JSON = "results/plan.json"
REPORT_MD = "results/report/index.md"
REPORT_HTML = "results/report/index.html"
REPORT_SUMMARY = "results/report/summary.txt"


def model(name: str) -> str:
    """A tiny model's checkpoint directory (the tokenizer's too); `name` may be a wildcard."""
    return f"results/models/{name}"


def model_config(name: str) -> str:
    return f"{model(name)}/config.json"


def download(repo_key: str, mode: str = "full") -> str:
    return DOWNLOAD.format(repo=repo_key, mode=mode)


def prompts(dataset: str) -> str:
    return PROMPTS.format(dataset=dataset)


def table(name: str, ext: str) -> str:
    return f"results/tables/{name}.{ext}"


def figure(name: str, ext: str) -> str:
    return f"results/figures/{name}.{ext}"


def _mirror(path: str, root: str, ext: str) -> str:
    """root/<path under results/>.ext: a file output's extension replaced; a checkpoint (model:
    results/models/<name>, the tokenizer's too) is a directory, whose name has no extension
    though it may hold a dot (tiny-fine-1.5), so it is kept whole."""
    if not path.startswith("results/"):
        raise ValueError(f"not a results path: {path}")
    head, _, last = path[len("results/"):].rpartition("/")
    directory = path == model(last)
    stem = last.rsplit(".", 1)[0] if "." in last and not directory else last
    return f"{root}/{head}/{stem}.{ext}" if head else f"{root}/{stem}.{ext}"


def log_of(path: str) -> str:
    """The log of the job writing `path`: logs/<its path under results/>.log."""
    return _mirror(path, "logs", "log")


def benchmark_of(path: str) -> str:
    """The benchmark of the job writing `path`: benchmarks/<its path under results/>.tsv."""
    return _mirror(path, "benchmarks", "tsv")


def report_log(name: str) -> str:
    """The log of a report rule (tables, figures, the index, the GPU plan ...)."""
    return f"logs/report/{name}.log"


def report_benchmark(name: str) -> str:
    """The benchmark of a report rule: benchmarks/report/<name>.tsv."""
    return f"benchmarks/report/{name}.tsv"
