"""Rule weight_model: the weight-model table of every study model from its config.json."""

from specmoe.logs import logged
from specmoe.stages.report import weight_model_stage

with logged(snakemake.log[0], "weight_model"):
    weight_model_stage(
        snakemake.params.entries,
        snakemake.output[0].removesuffix(".csv"),
    )
