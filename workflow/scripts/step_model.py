"""Rule step_model: the step model's prediction for every model beside the measured speedup."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.stages.report import step_model_stage

with logged(snakemake.log[0], "step_model"):
    i = snakemake.input
    step_model_stage(
        i.predict, i.speedup, Path(snakemake.output[0]).parent, provenance(snakemake.config)
    )
