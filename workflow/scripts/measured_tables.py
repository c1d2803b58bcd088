"""Rule measured_tables (its contract: specmoe.contracts.report.MeasuredTablesParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import MeasuredTablesParams
from specmoe.stages.report import measured_tables_stage

run_rule(snakemake, measured_tables_stage, MeasuredTablesParams)
