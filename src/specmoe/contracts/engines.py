"""The contracts of the engine rules (capture, sweep_ar, sweep_sd, profile: one rule body,
workflow/rules/traces.smk and measure.smk; each rule's kind in specmoe.kinds, its record here) and
of capture_control. See specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from .. import paths as P
from ..kinds import kind
from ..runs import draft_length
from . import run_of


def served_datasets(cfg, rule: str, w) -> list[str]:
    """The datasets whose prompts a job of kind `rule` serves (specmoe.config.Config)."""
    return cfg.served_datasets(rule, w.model, w.get("dataset", ""), w.get("dtype", ""),
                               int(w.get("tp", 0)))


def reads_tiny_prompts(cfg, datasets) -> bool:
    """Does a job serving `datasets` read the tiny models' prompt table: is one of them not a
    downloaded dataset (whose own table it reads: specmoe.files.Files.prompts)?"""
    return any(ds not in cfg.datasets for ds in datasets)


@dataclass(frozen=True)
class EngineParams:
    """What an engine job serves, with which settings: the fields every engine rule's record
    shares (CaptureParams, SweepSdParams, SweepArParams, ProfileParams: one per kind, its KIND
    the rule's name in specmoe.kinds, which decides what it serves).

    Inputs: config (a study model's config-only download on a GPU where the package ships no
    config.json of it: its job's SLURM runtime is the GPU plan's estimate, computed from it,
    specmoe.cost.plan.Planner; else none), target (what the engine serves: a study model's
    download manifest or a tiny checkpoint), drafter (a kind with SD: the drafter's download or
    checkpoint; none for MTP), prompts (the prompt tables of the downloaded datasets it serves)
    and tiny_prompts (the tiny models' table, for the others, where it is a file of the user's;
    none: the embedded table that `prompts` names; neither where it serves downloaded datasets
    only: a new tiny table reruns no study model's job). Not the GPU plan itself: a new plan (its
    assumptions, another model's entry) would rerun every measurement.
    """

    KIND = None  # its rule's name (specmoe.kinds.KINDS); each engine rule's record sets it
    INPUTS = ("config", "target", "drafter", "prompts", "tiny_prompts")  # without SD: no drafter

    job: dict  # model, drafter and k (kinds with SD), and its dataset (a series: its datasets)
    settings: dict  # the engine section of its kind for its model (Config.job_settings)
    method: str | None  # a study model's drafter's speculative method (none: a tiny drafter)
    gpu: bool  # does it run on a GPU (it stops at once without CUDA)
    # the tiny models' prompt table (tiny.prompts, else the embedded one) where it serves a
    # dataset of it (reads_tiny_prompts; None: it serves downloaded datasets only)
    prompts: str | None
    # how the engine receives the prompts (Config.prompting); the tokens kept free for drafts
    # (draft_slack, Config.draft_slack: K+1 at the model's largest swept K) a series' alone,
    # which measures its prompts with and without SD alike: a capture or profile keeps its own
    # K+1 free
    prompting: dict
    # the hardware entry it runs on where that is a GPU: another GPU measures again (None on this
    # machine's cores, whose measurements do not depend on the entry)
    hardware: str | None = None

    @classmethod
    def from_config(cls, cfg, w) -> "EngineParams":
        what = kind(cls.KIND)
        datasets = served_datasets(cfg, cls.KIND, w)
        job = {"model": w.model,
               "drafter": w.drafter if what.sd else None,
               "k": draft_length(w.k, "wildcard k") if what.sd else None,
               **({"datasets": datasets} if what.series else {"dataset": datasets[0]})}
        method = (cfg.drafters[w.drafter].method
                  if what.sd and cfg.from_download(w.model) else None)
        gpu = cfg.on_gpu(w.model)
        prompting = cfg.prompting(w.model, datasets)
        if what.series:
            prompting["draft_slack"] = cfg.draft_slack(w.model)
        settings = cfg.job_settings(cls.KIND, w.model, w.get("dtype", ""), int(w.get("tp", 0)))
        return cls(job=job, settings=settings, method=method,
                   gpu=gpu, prompts=cfg.prompts if reads_tiny_prompts(cfg, datasets) else None,
                   prompting=prompting,
                   hardware=cfg.hardware_of(w.model) if gpu else None)

    @classmethod
    def inputs(cls, cfg, files, w) -> dict:
        """The job's named inputs (for unpack), from the run's files (specmoe.files.Files)."""
        from .report import plan_config

        out = {"config": plan_config(cfg, w.model) if cfg.on_gpu(w.model) else [],
               "target": files.engine_target(w.model)}
        if kind(cls.KIND).sd:
            out["drafter"] = files.engine_drafter(w.model, w.drafter)
        datasets = served_datasets(cfg, cls.KIND, w)
        out["prompts"] = files.prompts(datasets)
        out["tiny_prompts"] = files.tiny_prompts() if reads_tiny_prompts(cfg, datasets) else []
        return out

    @property
    def label(self) -> str:
        """The job, for its messages: its kind and model."""
        return f"{self.KIND} of {self.job['model']}"


@dataclass(frozen=True)
class CaptureParams(EngineParams):
    """Rule capture: a routing trace of every verification window of the run's target with its
    drafter (specmoe.stages.traces.capture_stage), over its dataset's prompts, with the capture
    settings (a tiny model: the tiny section's); output trace (results/traces/<run>.parquet)."""

    KIND = "capture"
    OUTPUTS = ("trace",)
    STAGE = "specmoe.stages.traces.capture_stage"


@dataclass(frozen=True)
class SweepSdParams(EngineParams):
    """Rule sweep_sd: one serving series of the target with its drafter at one K, beside its
    target without SD point by point (specmoe.stages.measure.sweep_stage), over the sweep's batch
    sizes for every dataset its model is swept on; output json (the series; its points under
    <json without .json>.points/ and .nosd.points/)."""

    KIND = "sweep_sd"
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.measure.sweep_stage"


@dataclass(frozen=True)
class SweepArParams(EngineParams):
    """Rule sweep_ar: one serving series of a model without SD (a target, or a drafter served
    alone for its draft cost; specmoe.stages.measure.sweep_stage); no drafter input; output json
    (the series; its points under <json without .json>.points/)."""

    KIND = "sweep_ar"
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.measure.sweep_stage"


@dataclass(frozen=True)
class ProfileParams(EngineParams):
    """Rule profile: torch.profiler over the target's decode and verify passes with its drafter
    at the model's first K (specmoe.stages.measure.profile_stage), on its first dataset's prompts
    at the profiling section's batch sizes; outputs json (the kernel table) and traces (the
    profiler's trace files)."""

    KIND = "profile"
    OUTPUTS = ("json", "traces")
    STAGE = "specmoe.stages.measure.profile_stage"


# Each engine rule's record, by its kind's name (specmoe.kinds.KINDS: every kind has one)
ENGINE_RECORDS = {r.KIND: r for r in (CaptureParams, SweepSdParams, SweepArParams, ProfileParams)}


def engine_record(rule: str) -> type[EngineParams]:
    """The record of the engine rule `rule`; an unknown kind, or a kind without a record, is an
    error."""
    kind(rule)
    try:
        return ENGINE_RECORDS[rule]
    except KeyError:
        raise ValueError(f"engine job kind {rule!r} has no record in "
                         "specmoe.contracts.engines.ENGINE_RECORDS") from None


@dataclass(frozen=True)
class CaptureControlParams:
    """Rule capture_control: an untrained control's trace (specmoe.stages.traces.
    control_capture_stage), its checkpoint (input control) reading its trained target's own
    windows (input trace: the target's trace of the same run), teacher-forced through the same
    engine settings (its target's capture settings: the tiny section's capture in the target's
    precision); output trace."""

    INPUTS = ("trace", "control")
    OUTPUTS = ("trace",)
    STAGE = "specmoe.stages.traces.control_capture_stage"

    run: dict
    settings: dict

    @classmethod
    def from_config(cls, cfg, w) -> "CaptureControlParams":
        return cls(run=run_of(w), settings=cfg.job_settings("capture", w.model))

    @staticmethod
    def inputs(cfg, w) -> dict[str, str]:
        target = cfg.models[w.model].control_of
        return {"trace": P.TRACE.format(**{**run_of(w), "model": target}),
                "control": P.model(w.model)}
