"""Rule costmodel: target efficiency at batch 1 and vs batch size."""

from specmoe.logs import logged
from specmoe.stages.analysis import costmodel_stage

with logged(snakemake.log[0], "costmodel"):
    costmodel_stage(
        snakemake.params.model,
        snakemake.params.hardware,
        snakemake.input.overlap,
        snakemake.input.ipf,
        snakemake.output[0],
        snakemake.params.draft,
    )
