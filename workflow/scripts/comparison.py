"""Rule comparison: this run's numbers beside the study's published ones."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.stages.report import comparison_stage

with logged(snakemake.log[0], "comparison"):
    out = Path(snakemake.output[0])
    comparison_stage(
        out.parent, out.with_suffix(""), snakemake.params.study, provenance(snakemake.config)
    )
