"""Rule plan: the GPU plan of the configuration (results/plan.md) and each GPU job's runtime."""

from specmoe.logs import logged
from specmoe.stages.report import plan_stage

with logged(snakemake.log[0], "plan"):
    plan_stage(
        snakemake.params.entries,
        snakemake.params.config,
        snakemake.output.md,
        snakemake.output.json,
        unplanned=snakemake.params.unplanned,
        prompt_tokens=snakemake.params.prompt_tokens,
    )
