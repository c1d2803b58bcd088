"""Rule overlap (its contract: specmoe.contracts.analysis.OverlapParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import OverlapParams
from specmoe.stages.analysis import overlap_stage

run_rule(snakemake, overlap_stage, OverlapParams)
