"""Rule speedup: speedup, acceptance, draft cost, TE from the sweep and the curve's shape."""

from specmoe.logs import logged, one
from specmoe.stages.analysis import speedup_stage

with logged(snakemake.log[0], "speedup"):
    i = snakemake.input
    speedup_stage(
        i.sd,
        i.ar,
        one(i.get("drafter")),  # none for EAGLE heads and MTP, which cannot be served alone
        snakemake.params.run,
        snakemake.params.margin,
        snakemake.output[0],
        timing=snakemake.params.timing,
        engine_log_sd=snakemake.params.engine_log_sd,
        engine_log_sd_df=snakemake.params.engine_log_sd_df,
    )
