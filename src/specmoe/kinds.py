"""The engine jobs' kinds in one table: what each engine rule (capture, sweep_ar, sweep_sd,
profile) serves, with which settings and through which stage.

The engine rules (workflow/rules/traces.smk, measure.smk: one rule body), their script
(workflow/scripts/engine.py, which picks the stage), the configuration (specmoe.config: each job's
settings, its preflight and its prompts' check) and the GPU plan read it; a kind not in it is an
error, so a new engine rule names its kind here or does not run.
"""

from __future__ import annotations

from dataclasses import dataclass

# The stages an engine job runs (specmoe.stages): a routing trace of every verification window, a
# serving series over the sweep's batch sizes (an online server), or torch.profiler over decode and
# verify passes.
STAGES = ("capture", "series", "profile")
# An engine section's settings where the configuration leaves them out (capture, sweeps, profiles
# and the SD check read them through specmoe.stages.engines.setting; the runtime's engine too).
# They sit here, beside the kinds whose sections they fill, below both the configuration
# (specmoe.config) and the runtime (specmoe.runtime), which read them.
ENGINE_DEFAULTS = {"dtype": "auto", "kv_cache_mib": 512, "max_model_len": 1024,
                   "timeout_s": 1800.0, "repetition_penalty": 1.0}

# Parallel layouts under which a worker's routing rows are not the batch's rows in order (pipeline
# stages, data-parallel ranks and context-parallel shards each see part of a step): routing
# capture needs each of these at 1, as vLLM's own routed-experts capture does (vllm/config/vllm.py;
# specmoe.runtime.capture.check_layout), and every engine job is given its model's TP GPUs only,
# so the configuration refuses any of them above 1 (specmoe.checks.configcheck). The names are
# vLLM's ParallelConfig's and the engine arguments' alike.
ONE_RANK_SIZES = ("pipeline_parallel_size", "data_parallel_size",
                  "decode_context_parallel_size", "prefill_context_parallel_size")


def on_gpu_hardware(entry: dict | None) -> bool:
    """Whether a hardware entry's engines run on a GPU: its device, gpu where it names none."""
    return (entry or {}).get("device", "gpu") == "gpu"


def engine_arg(key) -> str:
    """An engine argument's name as vLLM reads it: its command line takes '-' for '_'
    (max-model-len is max_model_len). The configuration's engine_args are resolved to these
    names once (specmoe.config.Config), so that every reader finds a key under one name."""
    return str(key).replace("-", "_")


def engine_context(section: dict, default: int = ENGINE_DEFAULTS["max_model_len"]) -> int:
    """The context (max_model_len) an engine of a configuration section starts with, as the
    runtime's engine arguments give it (specmoe.runtime.engine.engine_kwargs: engine_args over
    the section's own key): its engine_args' max_model_len, else the section's, else `default`
    (the sections' default; a capture section has no key of its own)."""
    return int((section.get("engine_args") or {}).get("max_model_len")
               or section.get("max_model_len") or default)


# The prompts a job serves: its run's dataset, every dataset its model is swept on (a drafter served
# alone: those of the runs it drafts for), or its model's first dataset.
DATASETS = ("run", "swept", "first")


@dataclass(frozen=True)
class Kind:
    name: str      # its rule's name, and the first word of its jobs' labels
    section: str   # the configuration section its engine's settings come from
    stage: str     # one of STAGES
    sd: bool       # serves the target with a drafter (speculative decoding)
    datasets: str  # one of DATASETS
    timed: bool    # it times things: on a local machine it takes every core

    def __post_init__(self):
        if self.stage not in STAGES or self.datasets not in DATASETS:
            raise ValueError(f"engine job kind {self.name}: stage {self.stage!r} or datasets "
                             f"{self.datasets!r} unknown (stages: {', '.join(STAGES)}; datasets: "
                             f"{', '.join(DATASETS)})")

    @property
    def series(self) -> bool:
        return self.stage == "series"


KINDS = {k.name: k for k in (
    Kind("capture", "capture", "capture", sd=True, datasets="run", timed=False),
    Kind("sweep_ar", "sweep", "series", sd=False, datasets="swept", timed=True),
    Kind("sweep_sd", "sweep", "series", sd=True, datasets="swept", timed=True),
    Kind("profile", "profiling", "profile", sd=True, datasets="first", timed=True),
)}


def kind(name: str) -> Kind:
    """The kind of the engine rule `name`; an unknown one is an error."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown engine job kind {name!r} (known: {', '.join(KINDS)}; a new "
                         "engine rule adds its kind to specmoe.kinds.KINDS)") from None
