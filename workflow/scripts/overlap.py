"""Rule overlap: overlap by distance, baselines, shuffle null and unique experts of one trace."""

from specmoe.logs import logged
from specmoe.stages.analysis import overlap_stage

with logged(snakemake.log[0], "overlap"):
    overlap_stage(
        snakemake.input[0],
        snakemake.output[0],
        snakemake.params.batch_sizes,
        snakemake.params.shuffle_seed,
        threads=snakemake.threads,
    )
