"""Rule costmodel (its contract: specmoe.contracts.analysis.CostmodelParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import CostmodelParams
from specmoe.stages.analysis import costmodel_stage

run_rule(snakemake, costmodel_stage, CostmodelParams)
