# The study's models (source: hf): downloads from the Hugging Face Hub (the only networked rules),
# the weight-model table from each config.json, the GPU bill (offline where the package ships the
# model's config.json) and the GPU rules (capture, sweeps, profiles) that run them with vLLM's CUDA
# build. Each GPU rule asks for Snakemake's `gpu` resource = TP and stops at once where no CUDA
# device is visible.


rule download_model:
    output:
        "results/downloads/{repo}.{mode}.json",
    log:
        "logs/downloads/{repo}.{mode}.log",
    benchmark:
        "benchmarks/downloads/{repo}.{mode}.tsv"
    wildcard_constraints:
        repo=one_of(REPOS),
        mode="full|config",
    conda:
        "../../envs/analysis.yaml"
    params:
        repo=lambda w: REPOS[w.repo],
    script:
        "../scripts/download_model.py"


rule download_dataset:
    output:
        "results/downloads/datasets/{dataset}.json",
    log:
        "logs/downloads/datasets/{dataset}.log",
    benchmark:
        "benchmarks/downloads/datasets/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(DATASETS),
    conda:
        "../../envs/analysis.yaml"
    params:
        spec=lambda w: DATASETS[w.dataset],
    script:
        "../scripts/download_dataset.py"


rule prompt_table:
    input:
        "results/downloads/datasets/{dataset}.json",
    output:
        "results/prompts/{dataset}.csv",
    log:
        "logs/prompts/{dataset}.log",
    benchmark:
        "benchmarks/prompts/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(DATASETS),
    conda:
        "../../envs/models.yaml"
    params:
        spec=lambda w: DATASETS[w.dataset],
    script:
        "../scripts/prompt_table.py"


rule weight_model:
    input:
        [download_manifest(n, "config") for n in HF_MODELS if HF_MODELS[n]["repo_id"]],
    output:
        table_outputs(["weight_model"]),
    log:
        "logs/report/weight_model.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=[
            {
                "name": n,
                "repo_id": m.entry["repo_id"],
                "manifest": download_manifest(n, "config"),
                "precision": m.precision,
                "tp": m.tp,
                "hardware": m.hardware,
                "ks": list(m.ks),
                **(
                    {"overlaps": m.entry["overlaps"]}
                    if m.entry.get("overlaps")
                    else {}
                ),
            }
            for n, m in CFG.hf.items()
            if m.entry["repo_id"]
        ],
    script:
        "../scripts/weight_model.py"


rule plan:
    input:
        manifests=[download_manifest(n, "config") for n in PLANNED if not shipped(n)],
    output:
        md="results/plan.md",
        json="results/plan.json",
    log:
        "logs/report/plan.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=[
            {**CFG.plan_entry(n), "manifest": download_manifest(n, "config")}
            for n in PLANNED
        ],
        config={
            **{
                k: config[k]
                for k in ("sweep", "capture", "profiling", "plan", "ks")
                if k in config
            },
            "hardware": CFG.hardware,
        },
        unplanned=[n for n in HF_RUN if n not in PLANNED],
        prompt_tokens={ds: CFG.prompt_tokens(ds) for ds in PLANNED_DATASETS},
    script:
        "../scripts/plan.py"
