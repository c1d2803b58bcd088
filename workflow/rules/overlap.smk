# Overlap statistics, unique experts and the maximum-entropy IPF prediction.


rule overlap:
    input:
        rules.capture.output[0],
    output:
        P.OVERLAP,
    log:
        P.log_of(P.OVERLAP),
    benchmark:
        P.benchmark_of(P.OVERLAP)
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
        rules.overlap.output[0],
    output:
        P.IPF,
    log:
        P.log_of(P.IPF),
    benchmark:
        P.benchmark_of(P.IPF)
    conda:
        "../../envs/analysis.yaml"
    params:
        batch_sizes=config["batch_sizes"],
    script:
        "../scripts/ipf.py"
