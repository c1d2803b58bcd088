"""Rule report_index: results/report/index.md linking every table and figure the rule declares."""

from specmoe.logs import logged
from specmoe.provenance import provenance
from specmoe.report.tables import by_stem
from specmoe.stages.report import report_stage

i = snakemake.input
with logged(snakemake.log[0], "report"):
    report_stage(by_stem(i.tables), by_stem(i.markdown), by_stem(i.figures), snakemake.output[0],
                 provenance(snakemake.config), run_root=".")
