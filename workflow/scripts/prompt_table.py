"""Rule prompt_table: a downloaded study dataset normalised into a prompt table."""

from specmoe.logs import logged
from specmoe.stages.study import prompt_table_stage

with logged(snakemake.log[0], "prompt_table"):
    prompt_table_stage(
        snakemake.wildcards.dataset,
        snakemake.params.spec,
        snakemake.input[0],
        snakemake.output[0],
    )
