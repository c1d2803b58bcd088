"""Rule replay: the study's model-derived tables recomputed from its published inputs alone."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.stages.report import replay_stage

with logged(snakemake.log[0], "replay"):
    replay_stage(Path(snakemake.output[0]).parent, snakemake.config)
