"""Rule figures: render every figure from the CSV tables the rule declares."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.report.tables import by_stem
from specmoe.stages.report import figures_stage

with logged(snakemake.log[0], "figures"):
    figures_stage(
        by_stem(snakemake.input.tables),
        Path(snakemake.output[0]).parent,
        provenance(snakemake.config),
        snakemake.params.study,
        snakemake.params.variant_of,
    )
