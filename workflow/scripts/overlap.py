"""Rule overlap: overlap by distance, baselines, shuffle null and unique experts of one trace."""

from specmoe.logs import logged
from specmoe.stages.analysis import overlap_stage

target = snakemake.input.get("target")  # none, or an untrained control's target's trace
target = [target] if isinstance(target, str) else list(target or [])

with logged(snakemake.log[0], "overlap"):
    overlap_stage(
        snakemake.input.trace,
        snakemake.output[0],
        snakemake.params.batch_sizes,
        snakemake.params.shuffle_seed,
        threads=snakemake.threads,
        target_trace=target[0] if target else None,
    )
