"""Rule step_model (its contract: specmoe.contracts.report.StepModelParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import StepModelParams
from specmoe.stages.report import step_model_stage

run_rule(snakemake, step_model_stage, StepModelParams)
