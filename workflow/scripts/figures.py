"""Rule figures: render every figure from the CSV tables."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.report import write_figures

with logged(snakemake.log[0], "figures"):
    write_figures(
        Path(snakemake.input[0]).parent,
        Path(snakemake.output[0]).parent,
        provenance(snakemake.config),
        snakemake.params.study,
        snakemake.params.variant_of,
    )
