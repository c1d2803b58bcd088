"""Rule download_dataset (its contract: specmoe.contracts.study.DownloadDatasetParams): a study
dataset's files from the Hub into the HF cache (a manifest)."""

from specmoe.contracts import run_rule
from specmoe.contracts.study import DownloadDatasetParams
from specmoe.stages.study import download_dataset_stage

run_rule(snakemake, download_dataset_stage, DownloadDatasetParams)
