# Routing traces: one Parquet file per (model, drafter, K, dataset).


rule synth_trace:
    output:
        "results/traces/{model}/{drafter}/K{k}/{dataset}.parquet",
    log:
        "logs/traces/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/traces/{model}/{drafter}/K{k}/{dataset}.tsv"
    wildcard_constraints:
        model=one_of(SYNTHETIC),
    conda:
        "../../envs/analysis.yaml"
    params:
        model=synth_entry,
        run=run_of,
    script:
        "../scripts/synth_trace.py"


rule capture:
    input:
        target="results/models/{model}",
        drafter="results/models/{drafter}",
    output:
        "results/traces/{model}/{drafter}/K{k}/{dataset}.parquet",
    log:
        "logs/traces/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/traces/{model}/{drafter}/K{k}/{dataset}.tsv"
    wildcard_constraints:
        model=one_of(CAPTURED),
    retries: 1
    conda:
        "../../envs/models.yaml"
    threads: 2
    resources:
        engine=1,
    params:
        run=run_of,
        capture=config.get("tiny", {}).get("capture", {}),
        prompts=config.get("tiny", {}).get("prompts", "builtin:v1"),
    script:
        "../scripts/capture.py"
