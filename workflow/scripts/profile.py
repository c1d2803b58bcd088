"""Rule profile: torch.profiler over the target's decode and verify forward passes."""

from specmoe.logs import logged
from specmoe.modelstages import profile_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "profile"):
        run = snakemake.params.run
        profile_stage(
            snakemake.input.target,
            snakemake.input.drafter,
            run["k"],
            run,
            snakemake.params.profiling,
            snakemake.params.prompts,
            snakemake.output.json,
            snakemake.output.traces,
            engine_log=snakemake.log[0],
        )
