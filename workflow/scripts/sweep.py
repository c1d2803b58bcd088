"""Rules sweep_ar / sweep_sd: one serving series (one engine) over the
sweep's batch sizes, for every dataset of its model."""

from pathlib import Path

from specmoe.logs import logged, one
from specmoe.stages.engines import engine_inputs, with_job_runtime
from specmoe.stages.measure import sweep_series_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "sweep"):
        i, p = snakemake.input, snakemake.params
        series = p.series
        target, drafter = engine_inputs(
            i.target, one(i.get("drafter")), p.method, p.gpu, f"sweep of {series['model']}"
        )
        # a downloaded dataset's prompt table is results/prompts/<dataset>.csv
        tables = {Path(f).stem: f for f in i.get("prompts", [])}
        sweep_series_stage(
            target,
            drafter,
            series["k"],
            series,
            with_job_runtime(p.sweep, snakemake.resources.get("runtime")),
            {ds: tables.get(ds, p.prompts) for ds in series["datasets"]},
            snakemake.output[0],
            engine_log=snakemake.log[0],
        )
