"""Rule speedup (its contract: specmoe.contracts.analysis.SpeedupParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import SpeedupParams
from specmoe.stages.analysis import speedup_stage

run_rule(snakemake, speedup_stage, SpeedupParams)
