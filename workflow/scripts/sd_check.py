"""Rule sd_check: speculative vs plain greedy decoding on a real vLLM engine."""

from specmoe.logs import logged
from specmoe.stages.models import sd_check_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "sd_check"):
        sd_check_stage(
            snakemake.input.target,
            snakemake.input.drafter,
            int(snakemake.wildcards.k),
            snakemake.params.sd,
            snakemake.params.prompts,
            snakemake.wildcards.dataset,
            snakemake.output[0],
            engine_log=snakemake.log[0],
        )
