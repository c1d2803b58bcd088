"""Rule sd_check (its contract: specmoe.contracts.models.SdCheckParams): speculative vs plain
greedy decoding on a real vLLM engine."""

from specmoe.contracts import run_rule
from specmoe.contracts.models import SdCheckParams
from specmoe.stages.models import sd_check_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    run_rule(snakemake, sd_check_stage, SdCheckParams)
