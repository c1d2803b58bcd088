# Routing traces: one Parquet file per (model, drafter, K, dataset).


rule synth_trace:
    output:
        "results/traces/{model}/{drafter}/K{k}/{dataset}.parquet",
    log:
        "logs/traces/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/traces/{model}/{drafter}/K{k}/{dataset}.tsv"
    wildcard_constraints:
        model="|".join(SYNTHETIC) or "^$",
    conda:
        "../../envs/analysis.yaml"
    params:
        model=model_of,
        run=run_of,
    script:
        "../scripts/synth_trace.py"
