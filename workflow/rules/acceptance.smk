# Deconfounded acceptance statistics (accepted vs first-rejected at the same draft position).


rule acceptance:
    input:
        rules.capture.output[0],
    output:
        P.ACCEPTANCE,
    log:
        P.log_of(P.ACCEPTANCE),
    benchmark:
        P.benchmark_of(P.ACCEPTANCE)
    conda:
        "../../envs/analysis.yaml"
    threads: 2
    params:
        heldout=[ds for ds, d in CFG.datasets.items() if d.get("heldout")],
    script:
        "../scripts/acceptance.py"
