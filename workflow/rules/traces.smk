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
        plan=plan_input,
        target=engine_target,
        drafter=engine_drafter,
        prompts=prompts_for,
    output:
        "results/traces/{model}/{drafter}/K{k}/{dataset}.parquet",
    log:
        "logs/traces/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/traces/{model}/{drafter}/K{k}/{dataset}.tsv"
    wildcard_constraints:
        model=one_of(CAPTURED + HF_RUN),
    retries: 1
    conda:
        engine_env
    threads: 2
    resources:
        gpu=engine_gpus,
        gpu_model=engine_gpu_model,
        mem_mb=engine_mem_mb,
        runtime=engine_runtime("capture"),
        engine=1,
    params:
        run=run_of,
        capture=engine_section(
            "capture", lambda w: config.get("tiny", {}).get("capture", {})
        ),
        method=engine_method,
        gpu=lambda w: on_gpu(w.model),
        prompts=CFG.prompts,
    script:
        "../scripts/capture.py"
