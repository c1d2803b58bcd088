"""Rule prompt_table (its contract: specmoe.contracts.study.PromptTableParams): a downloaded study
dataset normalised into a prompt table."""

from specmoe.contracts import run_rule
from specmoe.contracts.study import PromptTableParams
from specmoe.stages.study import prompt_table_stage

run_rule(snakemake, prompt_table_stage, PromptTableParams)
