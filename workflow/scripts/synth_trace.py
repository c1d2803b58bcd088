"""Rule synth_trace: draw a synthetic routing trace with known structure."""

from specmoe.logs import logged
from specmoe.stages.analysis import synth_trace

with logged(snakemake.log[0], "synth_trace"):
    synth_trace(snakemake.params.model, snakemake.params.run, snakemake.output[0])
