"""Rule download_dataset: a study dataset's files from the Hub into the HF cache (a manifest)."""

from specmoe.logs import logged
from specmoe.stages.study import download_dataset_stage

with logged(snakemake.log[0], "download_dataset"):
    download_dataset_stage(
        snakemake.wildcards.dataset, snakemake.params.spec, snakemake.output[0]
    )
