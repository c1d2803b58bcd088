"""Rule replay: the study's model-derived tables recomputed from its published inputs alone."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.replay import write_replay

with logged(snakemake.log[0], "replay"):
    write_replay(Path(snakemake.output[0]).parent, snakemake.config)
