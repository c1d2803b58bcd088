"""Rule download_model (its contract: specmoe.contracts.study.DownloadModelParams): a Hugging Face
repository into the HF cache; the output is its manifest."""

from specmoe.contracts import run_rule
from specmoe.contracts.study import DownloadModelParams
from specmoe.stages.study import download_model_stage

run_rule(snakemake, download_model_stage, DownloadModelParams)
