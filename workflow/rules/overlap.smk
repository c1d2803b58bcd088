# Overlap statistics, unique experts and the maximum-entropy IPF prediction.


rule overlap:
    input:
        "results/traces/{model}/{drafter}/K{k}/{dataset}.parquet",
    output:
        "results/overlap/{model}/{drafter}/K{k}/{dataset}.json",
    log:
        "logs/overlap/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/overlap/{model}/{drafter}/K{k}/{dataset}.tsv"
    conda:
        "../../envs/analysis.yaml"
    threads: 2
    params:
        batch_sizes=config["batch_sizes"],
        shuffle_seed=config["shuffle_seed"],
    script:
        "../scripts/overlap.py"


rule ipf:
    input:
        "results/overlap/{model}/{drafter}/K{k}/{dataset}.json",
    output:
        "results/ipf/{model}/{drafter}/K{k}/{dataset}.json",
    log:
        "logs/ipf/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/ipf/{model}/{drafter}/K{k}/{dataset}.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        batch_sizes=config["batch_sizes"],
    script:
        "../scripts/ipf.py"
