"""The contract of the engine rules (capture, sweep_ar, sweep_sd, profile: one rule body,
workflow/rules/traces.smk; each rule's kind in specmoe.kinds) and what each job serves. See
specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from .. import paths as P
from ..kinds import kind
from . import run_of


def served_datasets(cfg, rule: str, w) -> list[str]:
    """The datasets whose prompts a job of kind `rule` serves (specmoe.config.Config)."""
    return cfg.served_datasets(rule, w.model, w.get("dataset", ""))


@dataclass(frozen=True)
class EngineParams:
    """An engine job of kind `rule` (specmoe.kinds): what it serves, with which settings.

    Inputs (`inputs`): plan (the GPU plan, for a study model's GPU jobs' runtimes; else none),
    target (what the engine serves: a study model's download manifest or a tiny checkpoint),
    drafter (a kind with SD: the drafter's download or checkpoint; none for MTP) and prompts (the
    prompt tables of the downloaded datasets it serves; none: the embedded table `prompts`).
    Outputs: capture's trace (results/traces/<run>.parquet; its stage
    specmoe.stages.traces.capture_job_stage); the series' and profiles' are their rules'.
    """

    INPUTS = ("plan", "target", "drafter", "prompts")  # capture's; a kind without SD: no drafter
    OUTPUTS = ("trace",)  # capture's
    STAGE = "specmoe.stages.traces.capture_job_stage"

    job: dict  # model, drafter and k (kinds with SD), and its dataset (a series: its datasets)
    settings: dict  # the engine section of its kind for its model (Config.job_settings)
    method: str | None  # a study model's drafter's speculative method (none: a tiny drafter)
    gpu: bool  # does it run on a GPU (it stops at once without CUDA)
    prompts: str  # the tiny models' prompt table (tiny.prompts, else the embedded one)
    prompting: dict  # how the engine receives the prompts (Config.prompting)

    @classmethod
    def from_config(cls, cfg, w, rule: str = "capture") -> "EngineParams":
        what = kind(rule)
        datasets = served_datasets(cfg, rule, w)
        job = {"model": w.model,
               "drafter": w.drafter if what.sd else None,
               "k": int(w.k) if what.sd else None,
               **({"datasets": datasets} if what.series else {"dataset": datasets[0]})}
        method = (cfg.drafters[w.drafter].method
                  if what.sd and cfg.from_download(w.model) else None)
        return cls(job=job, settings=cfg.job_settings(rule, w.model), method=method,
                   gpu=cfg.on_gpu(w.model), prompts=cfg.prompts,
                   prompting=cfg.prompting(w.model, datasets))

    @staticmethod
    def inputs(cfg, files, w, rule: str = "capture") -> dict:
        """The job's named inputs (for unpack), from the run's files (specmoe.files.Files)."""
        out = {"plan": files.plan(w.model), "target": files.engine_target(w.model)}
        if kind(rule).sd:
            out["drafter"] = files.engine_drafter(w.model, w.drafter)
        out["prompts"] = files.prompts(served_datasets(cfg, rule, w))
        return out


@dataclass(frozen=True)
class CaptureControlParams:
    """Rule capture_control: an untrained control's trace (specmoe.stages.traces.
    control_capture_stage), its checkpoint (input control) reading its trained target's own
    windows (input trace: the target's trace of the same run), teacher-forced through the same
    engine settings (the tiny section's capture); output trace."""

    INPUTS = ("trace", "control")
    OUTPUTS = ("trace",)
    STAGE = "specmoe.stages.traces.control_capture_stage"

    run: dict
    settings: dict

    @classmethod
    def from_config(cls, cfg, w) -> "CaptureControlParams":
        return cls(run=run_of(w), settings=cfg.section("capture", tiny=True))

    @staticmethod
    def inputs(cfg, w) -> dict[str, str]:
        target = cfg.models[w.model].control_of
        return {"trace": P.TRACE.format(**{**run_of(w), "model": target}),
                "control": P.model(w.model)}
