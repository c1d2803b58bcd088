"""Rule capture: a routing trace of every verification window from a real vLLM engine."""

from specmoe.logs import logged
from specmoe.modelstages import capture_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "capture"):
        capture_stage(
            snakemake.input.target,
            snakemake.input.drafter,
            int(snakemake.wildcards.k),
            snakemake.params.run,
            snakemake.params.capture,
            snakemake.params.prompts,
            snakemake.output[0],
            engine_log=snakemake.log[0],
        )
