"""Rule measured_tables: speedup vs batch, TE three ways, kernel time shares, three-step correction."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.measured import build_measured_tables
from specmoe.stages import write_tables

with logged(snakemake.log[0], "measured_tables"):
    i = snakemake.input
    dfs = build_measured_tables(i.speedup, i.profiles, i.costmodel)
    write_tables(dfs, Path(snakemake.output[0]).parent, provenance(snakemake.config))
