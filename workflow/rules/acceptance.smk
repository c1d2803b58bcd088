# Deconfounded acceptance statistics (accepted vs first-rejected at the same draft position).


rule acceptance:
    input:
        "results/traces/{model}/{drafter}/K{k}/{dataset}.parquet",
    output:
        "results/acceptance/{model}/{drafter}/K{k}/{dataset}.json",
    log:
        "logs/acceptance/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/acceptance/{model}/{drafter}/K{k}/{dataset}.tsv"
    conda:
        "../../envs/analysis.yaml"
    threads: 2
    params:
        heldout=[ds for ds, d in DATASETS.items() if d.get("heldout")],
    script:
        "../scripts/acceptance.py"
