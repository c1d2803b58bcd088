"""Rule profile: torch.profiler over the target's decode and verify forward
passes."""

from specmoe.logs import logged, one
from specmoe.stages.engines import engine_inputs, with_job_runtime
from specmoe.stages.measure import profile_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "profile"):
        i, p = snakemake.input, snakemake.params
        run = p.run
        target, drafter = engine_inputs(
            i.target, one(i.get("drafter")), p.method, p.gpu, f"profile of {run['model']}"
        )
        profile_stage(
            target,
            drafter,
            run["k"],
            run,
            with_job_runtime(p.profiling, snakemake.resources.get("runtime")),
            one(i.get("prompts")) or p.prompts,
            snakemake.output.json,
            snakemake.output.traces,
            engine_log=snakemake.log[0],
        )
