"""Rules sweep_ar / sweep_sd: one serving series (one engine) over the
sweep's batch sizes, for every dataset of its model."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.modelstages import rule_engine_inputs, sweep_series_stage, with_job_runtime

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "sweep"):
        i, p = snakemake.input, snakemake.params
        series = p.series
        target, drafter = rule_engine_inputs(i, p, f"sweep of {series['model']}")
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
