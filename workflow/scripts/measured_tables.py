"""Rule measured_tables: speedup vs batch, TE three ways, kernel time shares, three-step correction."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.stages.report import measured_tables_stage

with logged(snakemake.log[0], "measured_tables"):
    i = snakemake.input
    measured_tables_stage(
        i.speedup,
        i.profiles,
        i.costmodel,
        Path(snakemake.output[0]).parent,
        provenance(snakemake.config),
    )
