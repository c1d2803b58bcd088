"""Rule acceptance (its contract: specmoe.contracts.analysis.AcceptanceParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import AcceptanceParams
from specmoe.stages.analysis import acceptance_stage

run_rule(snakemake, acceptance_stage, AcceptanceParams)
