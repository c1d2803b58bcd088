"""Rules train_model and random_model: one tiny model, trained or only initialised."""

from specmoe.logs import logged
from specmoe.stages.models import train_stage

with logged(snakemake.log[0], "train_model"):
    train_stage(
        snakemake.params.model,
        snakemake.params.tiny,
        snakemake.input[0],
        snakemake.output[0],
        trained=snakemake.params.trained,
    )
