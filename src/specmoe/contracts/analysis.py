"""The contracts of the analysis rules (workflow/rules/analysis.smk; their stages:
specmoe.stages.analysis). See specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from .. import paths as P
from . import run_of


@dataclass(frozen=True)
class SpeedupParams:
    """Rule speedup: one swept run's speedup, acceptance, draft cost, TE and the curve's shape
    (specmoe.stages.analysis.speedup_stage), from its series with and without SD (inputs sd, ar)
    and, for a separate draft model, the drafter's own series (drafter: none for EAGLE heads and
    MTP layers, which cannot be served alone); output json (results/speedup/<run>.json).

    It depends on the run and on the sweep section's analysis-only settings (SWEEP_KEYS: a change
    reruns this rule, no sweep)."""

    INPUTS = ("sd", "ar", "drafter")
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.speedup_stage"
    # field -> its key in the configuration's sweep section
    SWEEP_KEYS = {"margin": "shape_margin", "timing": "timing", "engine_log_sd": "engine_log_sd"}

    run: dict
    margin: float | None
    timing: str | None
    engine_log_sd: float | None

    @classmethod
    def from_config(cls, cfg, w) -> "SpeedupParams":
        return cls(run=run_of(w), **{f: cfg.sweep.get(key) for f, key in cls.SWEEP_KEYS.items()})

    @staticmethod
    def drafter_series(cfg, w) -> list[str]:
        """Input drafter: the drafter's own series where it is served alone (for the draft cost
        c; separate draft models only), else none. Inputs sd and ar are the outputs of rules
        sweep_sd and sweep_ar for the run's model (drafter and K)."""
        alone = cfg.drafters[w.drafter].served_alone
        return [P.SWEEP_AR.format(model=w.drafter)] if alone else []
