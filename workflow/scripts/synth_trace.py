"""Rule synth_trace (its contract: specmoe.contracts.analysis.SynthTraceParams)."""

from specmoe.contracts import run_rule
from specmoe.contracts.analysis import SynthTraceParams
from specmoe.stages.analysis import synth_trace_stage

run_rule(snakemake, synth_trace_stage, SynthTraceParams)
