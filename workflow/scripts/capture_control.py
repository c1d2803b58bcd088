"""Rule capture_control: the untrained control's trace, read from its target's own windows."""

from specmoe.logs import logged
from specmoe.stages.engines import with_job_runtime
from specmoe.stages.traces import control_capture_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    log = snakemake.log[0]
    with logged(log, "capture_control"):
        control_capture_stage(
            snakemake.input.control,
            snakemake.input.trace,
            snakemake.params.run,
            with_job_runtime(snakemake.params.settings, snakemake.resources.get("runtime")),
            snakemake.output[0],
            engine_log=log,
        )
