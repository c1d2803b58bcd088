"""Rule comparison: this run's numbers beside the study's published ones, from the tables the
rule declares."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.report.tables import by_stem
from specmoe.stages.report import comparison_stage

with logged(snakemake.log[0], "comparison"):
    out = Path(snakemake.output[0])
    comparison_stage(by_stem(snakemake.input.tables), out.with_suffix(""),
                     snakemake.params.study, provenance(snakemake.config))
