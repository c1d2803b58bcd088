"""Rule weight_model (its contract: specmoe.contracts.report.WeightModelParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import WeightModelParams
from specmoe.stages.report import weight_model_stage

run_rule(snakemake, weight_model_stage, WeightModelParams)
