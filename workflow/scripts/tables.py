"""Rule tables (its contract: specmoe.contracts.report.TablesParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import TablesParams
from specmoe.stages.report import tables_stage

run_rule(snakemake, tables_stage, TablesParams)
