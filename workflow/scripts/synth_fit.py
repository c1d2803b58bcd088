"""Rule synth_fit (its contract: specmoe.contracts.analysis.SynthFitParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import SynthFitParams
from specmoe.stages.analysis import synth_fit_stage

run_rule(snakemake, synth_fit_stage, SynthFitParams)
