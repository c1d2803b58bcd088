"""Rule tokenizer: byte-level BPE tokenizer and encoded corpora for the tiny models."""

from specmoe.logs import logged
from specmoe.stages.models import tokenizer_stage

with logged(snakemake.log[0], "tokenizer"):
    tokenizer_stage(snakemake.params.tiny, snakemake.output[0])
