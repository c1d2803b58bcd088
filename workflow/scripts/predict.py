"""Rule predict (its contract: specmoe.contracts.analysis.PredictParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import PredictParams
from specmoe.stages.analysis import predict_stage

run_rule(snakemake, predict_stage, PredictParams)
