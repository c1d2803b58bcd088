"""Rule capture: a routing trace of every verification window from a real vLLM
engine (a tiny model's directory, or a study model's download manifest)."""

from specmoe.logs import logged, one
from specmoe.stages.engines import engine_inputs, with_job_runtime
from specmoe.stages.traces import capture_stage

if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    with logged(snakemake.log[0], "capture"):
        i, p = snakemake.input, snakemake.params
        target, drafter = engine_inputs(
            i.target, one(i.get("drafter")), p.method, p.gpu, f"capture of {p.run['model']}"
        )
        capture_stage(
            target,
            drafter,
            int(snakemake.wildcards.k),
            p.run,
            with_job_runtime(p.capture, snakemake.resources.get("runtime")),
            one(i.get("prompts")) or p.prompts,
            snakemake.output[0],
            engine_log=snakemake.log[0],
        )
