"""Rule figures (its contract: specmoe.contracts.report.FiguresParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.report import FiguresParams
from specmoe.stages.report import figures_stage

run_rule(snakemake, figures_stage, FiguresParams)
