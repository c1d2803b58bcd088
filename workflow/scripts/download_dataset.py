"""Rule download_dataset: a study dataset from the Hub, normalised into a prompt table."""

from specmoe.logs import logged
from specmoe.stages_study import download_dataset_stage

with logged(snakemake.log[0], "download_dataset"):
    download_dataset_stage(
        snakemake.wildcards.dataset,
        snakemake.params.spec,
        snakemake.output.prompts,
        snakemake.output.manifest,
    )
