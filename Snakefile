# specmoe: why speculative decoding works better than predicted on sparse MoE models.
# Run `snakemake --cores all`; see README.md for the stages and workflow/schemas/config.schema.yaml
# for the configuration.


import time

from specmoe.report.summary import end_of_run

START = time.time()


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/study.smk"
include: "workflow/rules/traces.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        FILES.targets(),


onsuccess:
    print(end_of_run(P.REPORT_SUMMARY, START, root=".", controls=CFG.controls))
