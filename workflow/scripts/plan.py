"""Rule plan (its contract: specmoe.contracts.report.PlanParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import PlanParams
from specmoe.stages.report import plan_stage

run_rule(snakemake, plan_stage, PlanParams)
