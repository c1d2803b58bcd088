"""Rule ipf: maximum-entropy IPF prediction of unique experts (uniform and skewed)."""

from specmoe.logs import logged
from specmoe.stages.analysis import ipf_stage

with logged(snakemake.log[0], "ipf"):
    ipf_stage(snakemake.input[0], snakemake.output[0], snakemake.params.batch_sizes)
