"""Rule comparison (its contract: specmoe.contracts.report.ComparisonParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import ComparisonParams
from specmoe.stages.report import comparison_stage

run_rule(snakemake, comparison_stage, ComparisonParams)
