# The study's models and datasets (source: hf): downloads from the Hugging Face Hub (the only
# networked rules) and each dataset's prompt table. Their engine jobs (capture, sweeps, profiles)
# are the engine rules' (traces.smk, measure.smk): each asks for Snakemake's `gpu` resource = TP
# and stops at once where no CUDA device is visible. Downloads and prompt tables have the gate
# priority (common.smk): every engine job waits for them.


# Its contract: specmoe.contracts.study.DownloadModelParams.
rule download_model:
    output:
        manifest=P.DOWNLOAD,
    log:
        P.log_of(P.DOWNLOAD),
    benchmark:
        P.benchmark_of(P.DOWNLOAD)
    wildcard_constraints:
        repo=one_of(CFG.repos),
        mode="full|config",
    priority: GATE_PRIORITY
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(DownloadModelParams),
    script:
        "../scripts/download_model.py"


# Its contract: specmoe.contracts.study.DownloadDatasetParams.
rule download_dataset:
    output:
        manifest=P.DATASET_DOWNLOAD,
    log:
        P.log_of(P.DATASET_DOWNLOAD),
    benchmark:
        P.benchmark_of(P.DATASET_DOWNLOAD)
    wildcard_constraints:
        dataset=one_of(CFG.datasets),
    priority: GATE_PRIORITY
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(DownloadDatasetParams),
    script:
        "../scripts/download_dataset.py"


# Its contract: specmoe.contracts.study.PromptTableParams.
rule prompt_table:
    input:
        manifest=rules.download_dataset.output.manifest,
    output:
        csv=P.PROMPTS,
    log:
        P.log_of(P.PROMPTS),
    benchmark:
        P.benchmark_of(P.PROMPTS)
    wildcard_constraints:
        dataset=one_of(CFG.datasets),
    priority: GATE_PRIORITY
    conda:
        "../../envs/models.yaml"
    params:
        **params_of(PromptTableParams),
    script:
        "../scripts/prompt_table.py"
