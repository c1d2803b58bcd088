"""Rule replay (its contract: specmoe.contracts.report.ReplayParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import ReplayParams
from specmoe.stages.report import replay_stage

run_rule(snakemake, replay_stage, ReplayParams)
