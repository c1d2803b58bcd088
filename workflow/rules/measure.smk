# The measured side: serving sweeps (SD on/off per batch size) and kernel profiling.
# A series is one engine serving every dataset of its model in turn (datasets do not change the
# engine); it writes one file per dataset and batch size under <output>.points/ as it goes, so a
# rerun after a crash resumes at the next unfinished point.


rule sweep_ar:
    input:
        plan=plan_input,
        target=engine_target,
        prompts=sweep_prompts,
    output:
        "results/sweeps/{model}/ar.json",
    log:
        "logs/sweeps/{model}/ar.log",
    benchmark:
        "benchmarks/sweeps/{model}/ar.tsv"
    wildcard_constraints:
        model=one_of(SERVED),
    retries: 1
    conda:
        engine_env
    threads: measure_threads()
    resources:
        gpu=engine_gpus,
        gpu_model=engine_gpu_model,
        mem_mb=engine_mem_mb,
        runtime=engine_runtime("sweep_ar"),
        engine=1,
    params:
        series=lambda w: {
            "model": w.model,
            "drafter": None,
            "k": None,
            "datasets": sweep_datasets(w.model),
        },
        sweep=engine_section("sweep", sweep_params),
        method=None,
        gpu=lambda w: on_gpu(w.model),
        prompts=CFG.prompts,
    script:
        "../scripts/sweep.py"


rule sweep_sd:
    input:
        plan=plan_input,
        target=engine_target,
        drafter=engine_drafter,
        prompts=sweep_prompts,
    output:
        "results/sweeps/{model}/{drafter}/K{k}.json",
    log:
        "logs/sweeps/{model}/{drafter}/K{k}.log",
    benchmark:
        "benchmarks/sweeps/{model}/{drafter}/K{k}.tsv"
    wildcard_constraints:
        model=one_of(SWEPT + HF_SWEPT),
    retries: 1
    conda:
        engine_env
    threads: measure_threads()
    resources:
        gpu=engine_gpus,
        gpu_model=engine_gpu_model,
        mem_mb=engine_mem_mb,
        runtime=engine_runtime("sweep_sd"),
        engine=1,
    params:
        series=sd_series,
        sweep=engine_section("sweep", sweep_params),
        method=engine_method,
        gpu=lambda w: on_gpu(w.model),
        prompts=CFG.prompts,
    script:
        "../scripts/sweep.py"


rule speedup:
    input:
        sd="results/sweeps/{model}/{drafter}/K{k}.json",
        ar="results/sweeps/{model}/ar.json",
        drafter=speedup_drafter,
    output:
        "results/speedup/{model}/{drafter}/K{k}/{dataset}.json",
    log:
        "logs/speedup/{model}/{drafter}/K{k}/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        run=run_of,
        margin=CFG.sweep.get("shape_margin"),
        timing=CFG.sweep.get("timing"),
        engine_log_sd=CFG.sweep.get("engine_log_sd"),
    script:
        "../scripts/speedup.py"


rule profile:
    input:
        plan=plan_input,
        target=engine_target,
        drafter=engine_drafter,
        prompts=profile_prompts,
    output:
        json="results/profiles/{model}/{drafter}/K{k}.json",
        traces=directory("results/profiles/{model}/{drafter}/K{k}.traces"),
    log:
        "logs/profiles/{model}/{drafter}/K{k}.log",
    benchmark:
        "benchmarks/profiles/{model}/{drafter}/K{k}.tsv"
    wildcard_constraints:
        model=one_of([n for n in SWEPT if n not in VARIANTS] + HF_SWEPT),
    retries: 1
    conda:
        engine_env
    threads: measure_threads()
    resources:
        gpu=engine_gpus,
        gpu_model=engine_gpu_model,
        mem_mb=engine_mem_mb,
        runtime=engine_runtime("profile"),
        engine=1,
    params:
        run=lambda w: {
            "model": w.model,
            "drafter": w.drafter,
            "k": int(w.k),
            "dataset": profile_dataset(w),
        },
        profiling=engine_section("profiling", lambda w: config.get("profiling", {})),
        method=engine_method,
        gpu=lambda w: on_gpu(w.model),
        prompts=CFG.prompts,
    script:
        "../scripts/profile.py"


rule measured_tables:
    input:
        speedup=sweep_files("results/speedup/{model}/{drafter}/K{k}/{dataset}.json"),
        profiles=profile_files(),
        costmodel=sweep_files(
            "results/costmodel/{model}/{drafter}/K{k}/{dataset}.json", False
        ),
    output:
        table_outputs(MEASURED_TABLES),
    log:
        "logs/report/measured_tables.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/measured_tables.py"
