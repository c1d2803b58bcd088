"""Rule download_model: a Hugging Face repository into the HF cache; the output is its manifest."""

from specmoe.logs import logged
from specmoe.stages.study import download_model_stage

with logged(snakemake.log[0], "download"):
    r = snakemake.params.repo
    download_model_stage(
        r["names"],
        r["repo_id"],
        r["revision"],
        snakemake.wildcards.mode,
        r["trust_remote_code"],
        snakemake.output[0],
        snakemake.params.methods,
    )
