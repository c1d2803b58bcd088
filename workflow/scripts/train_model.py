"""Rules train_model and random_model (their contract: specmoe.contracts.models.TrainParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.models import TrainParams
from specmoe.stages.models import train_stage

run_rule(snakemake, train_stage, TrainParams)
