"""Rules sweep_ar / sweep_sd (and their _gpu forms): one serving series (one engine) over the
sweep's batch sizes."""

from specmoe.logs import logged, one
from specmoe.modelstages import rule_engine_inputs, sweep_series_stage, with_job_runtime

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "sweep"):
        i, p = snakemake.input, snakemake.params
        series = p.series
        target, drafter = rule_engine_inputs(i, p, f"sweep of {series['model']}")
        sweep_series_stage(
            target,
            drafter,
            series["k"],
            series,
            with_job_runtime(p.sweep, snakemake.resources.get("runtime")),
            one(i.get("prompts")) or p.prompts,
            snakemake.output[0],
            engine_log=snakemake.log[0],
        )
