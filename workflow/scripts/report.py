"""Rule report_index: results/report/index.md linking every table and figure."""

from pathlib import Path

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.stages.report import report_stage

with logged(snakemake.log[0], "report"):
    report_stage(
        Path(snakemake.input.tables[0]).parent,
        Path(snakemake.input.figures[0]).parent,
        snakemake.output[0],
        provenance(snakemake.config),
        run_root=".",
    )
