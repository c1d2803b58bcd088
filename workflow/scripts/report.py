"""Rule report_index (its contract: specmoe.contracts.report.ReportIndexParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import ReportIndexParams
from specmoe.stages.report import report_index_stage

run_rule(snakemake, report_index_stage, ReportIndexParams)
