# The study's models (source: hf): downloads from the Hugging Face Hub (the only networked rules),
# the weight-model table from each config.json and the GPU bill (offline where the package ships
# the model's config.json). Their engine jobs (capture, sweeps, profiles) are the engine rules'
# (traces.smk, measure.smk): each asks for Snakemake's `gpu` resource = TP and stops at once where
# no CUDA device is visible.


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


rule weight_model:
    input:
        [
            download_manifest(n, "config")
            for n, m in CFG.hf.items()
            if m.entry["repo_id"]
        ],
    output:
        table_outputs(["weight_model"]),
    log:
        P.report_log("weight_model"),
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
        manifests=[
            download_manifest(n, "config") for n in CFG.planned if not shipped(n)
        ],
    output:
        md=P.PLAN_MD,
        json=P.PLAN_JSON,
    log:
        P.report_log("plan"),
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=[
            {**CFG.plan_entry(n), "manifest": download_manifest(n, "config")}
            for n in CFG.planned
        ],
        config={
            **{
                k: config[k]
                for k in ("sweep", "capture", "profiling", "plan", "ks")
                if k in config
            },
            "hardware": CFG.hardware,
        },
        unplanned=[n for n in CFG.names("hf") if n not in CFG.planned],
        prompt_tokens={ds: CFG.prompt_tokens(ds) for ds in CFG.planned_datasets},
    script:
        "../scripts/plan.py"
