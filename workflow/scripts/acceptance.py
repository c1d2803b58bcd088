"""Rule acceptance: accepted vs first-rejected overlap at each draft position."""

from specmoe.logs import logged
from specmoe.stages.analysis import acceptance_stage

with logged(snakemake.log[0], "acceptance"):
    acceptance_stage(snakemake.input[0], snakemake.output[0], threads=snakemake.threads,
                     heldout=snakemake.params.heldout)
