# The study's models and datasets (source: hf): downloads from the Hugging Face Hub (the only
# networked rules) and each dataset's prompt table. Their engine jobs (capture, sweeps, profiles)
# are the engine rules' (traces.smk, measure.smk): each asks for Snakemake's `gpu` resource = TP
# and stops at once where no CUDA device is visible.


rule download_model:
    output:
        P.DOWNLOAD,
    log:
        P.log_of(P.DOWNLOAD),
    benchmark:
        P.benchmark_of(P.DOWNLOAD)
    wildcard_constraints:
        repo=one_of(CFG.repos),
        mode="full|config",
    conda:
        "../../envs/analysis.yaml"
    params:
        repo=lambda w: CFG.repos[w.repo],
        methods=lambda w: CFG.drafter_methods(w.repo),
    script:
        "../scripts/download_model.py"


rule download_dataset:
    output:
        P.DATASET_DOWNLOAD,
    log:
        P.log_of(P.DATASET_DOWNLOAD),
    benchmark:
        P.benchmark_of(P.DATASET_DOWNLOAD)
    wildcard_constraints:
        dataset=one_of(CFG.datasets),
    conda:
        "../../envs/analysis.yaml"
    params:
        spec=lambda w: CFG.datasets[w.dataset],
    script:
        "../scripts/download_dataset.py"


rule prompt_table:
    input:
        rules.download_dataset.output[0],
    output:
        P.PROMPTS,
    log:
        P.log_of(P.PROMPTS),
    benchmark:
        P.benchmark_of(P.PROMPTS)
    wildcard_constraints:
        dataset=one_of(CFG.datasets),
    conda:
        "../../envs/models.yaml"
    params:
        spec=lambda w: CFG.datasets[w.dataset],
    script:
        "../scripts/prompt_table.py"
