"""Rules sweep_ar / sweep_sd: one serving series (one engine) over the sweep's batch sizes."""

from specmoe.logs import logged
from specmoe.modelstages import sweep_series_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "sweep"):
        i, series = snakemake.input, snakemake.params.series
        sweep_series_stage(
            i.target,
            i.get("drafter"),
            series["k"],
            series,
            snakemake.params.sweep,
            snakemake.params.prompts,
            snakemake.output[0],
            engine_log=snakemake.log[0],
        )
