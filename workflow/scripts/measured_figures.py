"""Rule measured_figures: the measured speedup curves."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.measured import write_measured_figures

with logged(snakemake.log[0], "measured_figures"):
    write_measured_figures(
        Path(snakemake.input[0]).parent,
        Path(snakemake.output[0]).parent,
        provenance(snakemake.config),
    )
