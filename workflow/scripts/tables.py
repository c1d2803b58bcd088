"""Rule tables: every table of the report as CSV, Markdown and LaTeX."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.stages.report import tables_stage

with logged(snakemake.log[0], "tables"):
    i = snakemake.input
    tables_stage(
        i.overlap,
        i.ipf,
        i.costmodel,
        i.acceptance,
        Path(snakemake.output[0]).parent,
        provenance(snakemake.config),
    )
