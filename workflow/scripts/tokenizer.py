"""Rule tokenizer (its contract: specmoe.contracts.models.TokenizerParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.models import TokenizerParams
from specmoe.stages.models import tokenizer_stage

run_rule(snakemake, tokenizer_stage, TokenizerParams)
