"""Rule tables: every table of the report as CSV, Markdown and LaTeX."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.stages import build_tables, write_tables

with logged(snakemake.log[0], "tables"):
    i = snakemake.input
    dfs = build_tables(i.overlap, i.ipf, i.costmodel, i.acceptance)
    write_tables(dfs, Path(snakemake.output[0]).parent, provenance(snakemake.config))
