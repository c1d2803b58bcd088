"""The GPU plan of a configuration before it is submitted: GPU-hours per GPU job and in total, and
each job's SLURM runtime, from the schedule and the cost model's roofline.

An engine step at batch B takes the step model's time (specmoe.cost.stepmodel: each kernel class at its
own achieved bandwidth, or its FLOPs over the compute floor, with the parameters fitted to the
study's measurements); experts touched are the uniform-routing count, an upper bound. A series of
points runs ceil(prompts / B) waves of output_len tokens; with SD a wave takes output_len / tau
verification steps (each with the engine's work per sequence and the engine's SD loop, sd_loop_us
per iteration: vLLM's, from the same engine-level measurements the step model reads,
data/engine_overhead.csv) plus drafting; every request's prompt is prefilled once (one forward
pass over the dataset's mean prompt length, estimated as 4 characters per token before any
tokenizer runs: a 32k-token prompt costs as much as hundreds of decode steps), and every decode
or verification step after it reads that prompt's KV cache and half the output's. Every job also
starts an engine: a fixed start-up (CUDA graphs, compilation) plus
the weights over the loading bandwidth. The SLURM runtime of a job is `safety` times its estimate,
at least `min_runtime` minutes, with the SD loop at the top of its measured range (every row also
gives the hours the loop adds at its value and at that top: it is the one term of the bill
with a measured range).
"""

from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass, fields, replace
from functools import cached_property

from . import costmodel
from ..errors import InputError
from ..kinds import kind
from ..runs import dataset_parts
from . import steptables
from .stepmodel import CONTEXT, StepParams, fitted, step_time
from ..routing.unique import uniform_unique


@dataclass
class PlanAssumptions:
    """What the plan assumes before anything is measured (config section `plan`)."""

    tau: float = 2.5            # acceptance length (tokens per SD step)
    draft_cost: float = 0.1     # draft time per SD step over a decode step
    startup_s: float = 300.0    # engine start-up besides loading weights
    load_gbs: float = 2.0       # weight loading, GB/s per GPU
    safety: float = 2.0         # SLURM runtime = safety x estimate
    min_runtime: int = 15       # minutes
    prompt_tokens: float = 512.0  # mean prompt length of a dataset that states none

    @classmethod
    def from_dict(cls, d: dict | None) -> "PlanAssumptions":
        d = dict(d or {})
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise InputError(f"plan: unknown key(s) {', '.join(sorted(unknown))}")
        p = cls(**d)
        for f in fields(cls):
            if not getattr(p, f.name) > 0:
                raise InputError(f"plan.{f.name} must be > 0 (got {getattr(p, f.name)})")
        if p.tau < 1:
            raise InputError("plan: tau must be >= 1")
        return p


def step_s(dims: costmodel.ModelDims, hw: costmodel.Hardware, batch: int, window: int,
           params: StepParams, context: float = CONTEXT) -> float:
    """One forward pass of B sequences with `window` tokens each over a KV cache of `context`
    tokens per sequence (the step model)."""
    unique = uniform_unique(dims.num_experts, dims.top_k, batch * window)
    return step_time(dims, hw, batch, window, unique, params, context=context)


def weight_bytes(dims: costmodel.ModelDims) -> float:
    """Weights per GPU: every expert and dense weight of every layer (embeddings left out)."""
    return dims.num_moe_layers * (dims.c_dense + dims.c_dense_layers
                                  + dims.num_experts * dims.c_expert)


def startup_s(dims: costmodel.ModelDims, a: PlanAssumptions) -> float:
    return a.startup_s + weight_bytes(dims) / (a.load_gbs * 1e9)


CHARS_PER_TOKEN = 4.0


def decode_context(prompt_tokens: float, output_len: float) -> float:
    """The KV tokens per sequence a decode or verification step reads on average over a request:
    its prompt and half its output (the output grows from none to `output_len`). The GPU plan
    prices a series' steps at it, and rule predict the run it predicts
    (specmoe.contracts.analysis.PredictParams)."""
    return prompt_tokens + output_len / 2


def rows_prompt_tokens(rows) -> float | None:
    """The mean prompt length in tokens of prompt-table rows, estimated from their characters
    (CHARS_PER_TOKEN); None for no rows."""
    return sum(len(r.text) for r in rows) / len(rows) / CHARS_PER_TOKEN if rows else None


def series_s(dims, hw, schedule: list[tuple[int, int]], output_len: int, k: int | None,
             a: PlanAssumptions, params: StepParams, prompt_tokens: float = 0.0) -> float:
    """A serving series over the schedule, without (k None) or with SD, each request's prompt of
    `prompt_tokens` prefilled once. A step reads the KV cache it has: a prefill its prompt's
    half on average (causal attention), a decode or verification step the prompt and half the
    output (decode_context; the step model's CONTEXT where the prompt's length is unknown)."""
    total = 0.0
    prefill = (step_s(dims, hw, 1, max(int(round(prompt_tokens)), 1), params, prompt_tokens / 2)
               if prompt_tokens else 0.0)
    context = decode_context(prompt_tokens, output_len) if prompt_tokens else CONTEXT
    for batch, prompts in schedule:
        total += prompts * prefill
        waves = math.ceil(prompts / batch)
        decode = step_s(dims, hw, batch, 1, params, context)
        if k is None:
            total += waves * output_len * decode
        else:
            steps = math.ceil(output_len / a.tau)
            per = (step_s(dims, hw, batch, k + 1, params, context)
                   + batch * params.verify_seq_us * 1e-6 + params.sd_loop_us * 1e-6
                   + a.draft_cost * decode)
            total += waves * steps * per
    return total


# The keys of the engine sections that the bill reads (job_rows), the only ones rule plan's params
# carry (specmoe.contracts.report.PlanParams): a change to any other (an engine argument, the
# sweep's analysis-only settings) reruns no plan.
ENGINE_KEYS = {"sweep": ("repeats", "warmups", "output_len"),
               "capture": ("max_num_seqs", "max_tokens"),
               "profiling": ("max_tokens", "batch_sizes", "engines")}


def job_rows(name: str, model: dict, dims, hw, config: dict, a: PlanAssumptions,
             params: StepParams, prompt_tokens: dict[str, float] | None = None) -> list[dict]:
    """The estimates of one model's GPU jobs. config: the engine sections (their ENGINE_KEYS)
    and `hardware`; model: its `jobs` ({rule, drafter, k, dataset}, as
    the workflow's rules run them, specmoe.config.Config.engine_jobs), `datasets`, `schedules`
    (each dataset's (batch, prompts) points in its series, Config.sweep_schedule),
    `capture_prompts` (the prompts each capture's dataset gives it, Config.capture_prompts; None
    or absent: not known before the download), `runtime` (the runtime in minutes its jobs take
    where the plan has no estimate: `gpu.runtime`) and `gpus` (TP on a GPU, none on a CPU);
    prompt_tokens: each dataset's mean prompt length in tokens (prefill is left out for a dataset
    without one). A capture whose prompts are not known is not estimated: its row takes
    `runtime` as its runtime and hours, `estimated` False."""
    known = prompt_tokens or {}

    def ptok(ds: str) -> float:  # "a+b": the datasets together
        parts = [known[p] for p in dataset_parts(ds) if p in known]
        return sum(parts) / len(parts) if parts else 0.0

    sweep, cap, prof = (config.get(s) or {} for s in ENGINE_KEYS)  # their ENGINE_KEYS alone
    gpus = int(model["gpus"])
    boot = startup_s(dims, a)
    rows = []

    def warm(ds):  # a dataset's points in its series, each `repeats` times, with warm-up
        # requests before a batch size's first measurement
        return [(b, int(sweep["repeats"]) * n + max(int(sweep["warmups"]), b))
                for b, n in model["schedules"][ds]]

    def sweep_s(k, p):  # one engine serves every dataset of a series
        return sum(series_s(dims, hw, warm(ds), int(sweep["output_len"]), k, a, p, ptok(ds))
                   for ds in model["datasets"])

    def profile_s(k, p):  # two engines, `engines` starts each; the profiler slows steps down
        tokens = int(prof["max_tokens"])
        secs = sum(series_s(dims, hw, [(b, b)], tokens, None, a, p)
                   + series_s(dims, hw, [(b, b)], tokens, k, a, p)
                   for b in prof["batch_sizes"])
        return int(prof["engines"]) * (2 * boot + 3 * secs)

    def capture_s(k, ds, p):  # every distinct prompt once (Config.capture_prompts)
        seqs = int(cap["max_num_seqs"])
        return boot + series_s(dims, hw, [(seqs, int(model["capture_prompts"][ds]))],
                               int(cap["max_tokens"]), k, a, p, ptok(ds))

    loop = sd_loop()
    for j in model["jobs"]:
        rule, k = j["rule"], j["k"]
        what = kind(rule)
        if what.stage == "capture" and not (model.get("capture_prompts") or {}).get(j["dataset"]):
            rows.append(unestimated(name, j, gpus, int(model["runtime"])))
            continue

        # an SD series measures its target without SD too (specmoe.stages.measure.sweep_stage):
        # both arms' points, and on a GPU two start-ups, one engine after the other (the arms
        # run in blocks: specmoe.runtime.serving.arm_order)
        def job_s(p: StepParams) -> float:
            return {"series": lambda: (2 * boot + sweep_s(None, p) + sweep_s(int(k), p)
                                       if what.sd else boot + sweep_s(None, p)),
                    "capture": lambda: capture_s(int(k), j["dataset"], p),
                    "profile": lambda: profile_s(int(k), p)}[what.stage]()

        # the SD loop at the value `params` carry (the step model's) and at its range's top
        seconds, bare = job_s(params), job_s(replace(params, sd_loop_us=0.0))
        high = job_s(replace(params, sd_loop_us=loop.high))
        rows.append({"rule": rule, "model": name, "drafter": j["drafter"], "k": k,
                     "dataset": j["dataset"], "dtype": j.get("dtype", ""),
                     "tp": j.get("tp") or "", "gpus": gpus,
                     "hours": seconds / 3600,
                     "gpu_hours": seconds * gpus / 3600,
                     "sd_loop_hours": (seconds - bare) / 3600,
                     "sd_loop_hours_high": (high - bare) / 3600,
                     "runtime_min": max(a.min_runtime,
                                        math.ceil(a.safety * max(seconds, high) / 60)),
                     "estimated": True})
    return rows


def unestimated(name: str, job: dict, gpus: int, runtime_min: int) -> dict:
    """The row of a job the plan cannot estimate (a capture of a dataset whose size is not known
    before its download): the runtime it falls back to (`gpu.runtime`) as its runtime, and as
    its hours the most it may take, with no SD loop hours apart."""
    hours = runtime_min / 60
    return {"rule": job["rule"], "model": name, "drafter": job["drafter"], "k": job["k"],
            "dataset": job["dataset"], "dtype": job.get("dtype", ""),
            "tp": job.get("tp") or "", "gpus": gpus,
            "hours": hours, "gpu_hours": hours * gpus,
            "sd_loop_hours": None, "sd_loop_hours_high": None, "runtime_min": runtime_min,
            "estimated": False}


PLAN_ENGINE = "vllm"  # the engine the workflow serves every model with


def sd_loop() -> steptables.EngineOverhead:
    """The SD loop per iteration the bill prices: the workflow's engine's, from the same table
    the step model reads (data/engine_overhead.csv), with its range."""
    return steptables.engine_overheads()[PLAN_ENGINE]


def summary(rows: list[dict]) -> dict:
    by_model: dict[str, float] = {}
    for r in rows:
        by_model[r["model"]] = by_model.get(r["model"], 0.0) + r["gpu_hours"]
    return {"gpu_hours_by_model": by_model, "gpu_hours": sum(by_model.values())}


def table_prompt_tokens(source: str, dataset: str) -> float | None:
    """A dataset's mean prompt length in tokens in a prompt table (the embedded one, or a CSV),
    estimated from its characters; None where the table does not have it or cannot be read."""
    from ..sources import prompts as prompt_table

    try:
        rows = prompt_table.load(source, [dataset])
    except (InputError, OSError):
        return None
    return rows_prompt_tokens(rows)


def model_config(entry: dict) -> tuple[dict, str]:
    """(config.json, where it came from: package, download or cache) of one planned model, read
    offline (preflight.offline_config) from an entry of the plan. Its config-only download
    (`manifest`, set where the package ships no config.json or the model pins a revision) must
    exist: FileNotFoundError naming it else (a GPU job's runtime that reads it is left to be
    decided once it does)."""
    from ..checks.preflight import offline_config

    name, manifest = entry["name"], entry.get("manifest")
    if manifest and not os.path.exists(manifest):
        raise FileNotFoundError(errno.ENOENT, f"model {name}: no config-only download yet",
                                manifest)
    cfg, why = offline_config({"repo_id": entry["repo_id"], "revision": entry.get("revision")},
                              manifest)
    if cfg is None:
        raise InputError(f"model {name}: {why}")
    return cfg, why


def model_rows(entry: dict, config: dict, a: PlanAssumptions, params: StepParams,
               prompt_tokens: dict[str, float]) -> list[dict]:
    """The estimates of one planned model's GPU jobs (job_rows), from an entry of the plan
    (specmoe.contracts.report.PlanParams.entries) and its config.json (model_config)."""
    from .hfconfig import check_precision, dense_dims_from_config, dims_from_config

    name = entry["name"]
    cfg, _ = model_config(entry)
    try:  # a config.json downloaded after the configuration check ran
        check_precision(cfg, entry["precision"])
    except InputError as exc:
        raise InputError(f"model {name}: {exc}") from None
    hw_name = entry["hardware"]
    if hw_name not in config["hardware"]:
        raise InputError(f"model {name}: unknown hardware '{hw_name}'")
    hw = costmodel.Hardware.from_config(hw_name, config["hardware"][hw_name])

    def dims_at(tp: int):
        return (dense_dims_from_config(cfg, tp=tp) if entry.get("dense") else
                dims_from_config(cfg, dtype=None if entry["precision"] in (None, "auto")
                                 else entry["precision"], tp=tp))

    # a drafter served alone runs each series at the TP of the SD series it drafts in (its jobs'
    # `tp`), on as many GPUs: its jobs are estimated at each TP apart
    rows = []
    for tp in sorted({int(j.get("tp") or entry["tp"]) for j in entry["jobs"]}):
        jobs = [j for j in entry["jobs"] if int(j.get("tp") or entry["tp"]) == tp]
        at = {**entry, "jobs": jobs,
              "gpus": tp if int(entry["gpus"]) and jobs[0].get("tp") else entry["gpus"]}
        rows += job_rows(name, at, dims_at(tp), hw, config, a, params, prompt_tokens)
    return rows


class Planner:
    """The GPU plan's estimates, model by model, from its params (PlanParams: entries, config,
    prompt_tokens): rule plan writes them all, and each GPU job's SLURM runtime is its row's
    (workflow/rules/common.smk), so that the two agree by construction and the engine jobs need
    not wait for the plan (a new plan reruns no measurement). The step model is fitted, and a
    model's rows computed, once, when first asked for."""

    def __init__(self, entries: list[dict], config: dict, prompt_tokens: dict | None):
        self.entries = {e["name"]: e for e in entries}
        self.config = config
        self.assumptions = PlanAssumptions.from_dict(config.get("plan"))
        self.prompt_tokens = {ds: float(t) for ds, (t, _) in (prompt_tokens or {}).items()}
        self._rows: dict[str, list[dict]] = {}

    @cached_property
    def params(self) -> StepParams:
        return fitted()

    def rows(self, name: str) -> list[dict]:
        """The estimates of a planned model's GPU jobs (model_rows)."""
        if name not in self._rows:
            self._rows[name] = model_rows(self.entries[name], self.config, self.assumptions,
                                          self.params, self.prompt_tokens)
        return self._rows[name]

    def config_source(self, name: str) -> str:
        """Where a planned model's config.json came from (model_config): package, download or
        cache."""
        return model_config(self.entries[name])[1]

    def runtime(self, rule: str, job: dict) -> int | None:
        """A GPU job's SLURM runtime in minutes, its row's; None where the plan has no such job
        (a model it cannot size). `job`: the job's wildcards (model, and drafter, k, dataset
        or a drafter served alone's dtype and TP, where the rule has them)."""
        if job.get("model") not in self.entries:
            return None
        want = {k: str(v) for k, v in job.items()
                if k in ("model", "drafter", "k", "dataset", "dtype", "tp")}
        return next((int(r["runtime_min"]) for r in self.rows(job["model"])
                     if r["rule"] == rule and all(str(r[k]) == v for k, v in want.items())),
                    None)
