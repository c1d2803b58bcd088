"""Rule predict: the step model's TE and speedup at every batch size for one model, before (or
beside) its measurement."""

from specmoe.logs import logged
from specmoe.stages.analysis import predict_stage

with logged(snakemake.log[0], "predict"):
    i, p = snakemake.input, snakemake.params
    predict_stage(
        p.model,
        p.hardware,
        p.k,
        p.method,
        p.batch_sizes,
        snakemake.output[0],
        overlap_json=i.get("overlap"),
        acceptance_json=i.get("acceptance"),
        draft_config=i.get("draft"),
        study_model=p.study,
    )
