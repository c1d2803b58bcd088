# The measured side: serving sweeps (SD on/off per batch size) and kernel profiling, each an
# engine job of rule capture's body (workflow/rules/traces.smk) with its own outputs and settings.
# A series is one engine serving every dataset of its model in turn (datasets do not change the
# engine); it writes one file per dataset and batch size under <output>.points/ as it goes, so a
# rerun after a crash resumes at the next unfinished point.


use rule capture as sweep_sd with:
    input:
        plan=plan_input,
        target=engine_target,
        drafter=engine_drafter,
        prompts=lambda w: FILES.prompts(CFG.sweep_datasets(w.model)),
    output:
        P.SWEEP_SD,
    log:
        P.log_of(P.SWEEP_SD),
    benchmark:
        P.benchmark_of(P.SWEEP_SD)
    wildcard_constraints:
        model=one_of(CFG.swept + CFG.hf_swept),
    threads: measure_threads()
    resources:
        **engine_resources("sweep_sd"),
    params:
        job=lambda w: {
            "model": w.model,
            "drafter": w.drafter,
            "k": int(w.k),
            "datasets": CFG.sweep_datasets(w.model),
        },
        settings=engine_section("sweep", lambda w: CFG.sweep_params(w.model)),
        prompting=lambda w: CFG.prompting(w.model, CFG.sweep_datasets(w.model)),


use rule sweep_sd as sweep_ar with:
    input:
        plan=plan_input,
        target=engine_target,
        prompts=lambda w: FILES.prompts(CFG.sweep_datasets(w.model)),
    output:
        P.SWEEP_AR,
    log:
        P.log_of(P.SWEEP_AR),
    benchmark:
        P.benchmark_of(P.SWEEP_AR)
    wildcard_constraints:
        model=one_of(CFG.served),
    resources:
        **engine_resources("sweep_ar"),
    params:
        job=lambda w: {
            "model": w.model,
            "drafter": None,
            "k": None,
            "datasets": CFG.sweep_datasets(w.model),
        },
        method=None,


use rule capture as profile with:
    input:
        plan=plan_input,
        target=engine_target,
        drafter=engine_drafter,
        prompts=lambda w: FILES.prompts(CFG.models[w.model].datasets[:1]),
    output:
        json=P.PROFILE,
        traces=directory(P.PROFILE_TRACES),
    log:
        P.log_of(P.PROFILE),
    benchmark:
        P.benchmark_of(P.PROFILE)
    wildcard_constraints:
        model=one_of([n for n in CFG.swept if n not in CFG.variants] + CFG.hf_swept),
    threads: measure_threads()
    resources:
        **engine_resources("profile"),
    params:
        job=lambda w: {
            "model": w.model,
            "drafter": w.drafter,
            "k": int(w.k),
            "dataset": CFG.models[w.model].datasets[0],
        },
        settings=engine_section("profiling", lambda w: CFG.section("profiling")),
        prompting=lambda w: CFG.prompting(w.model, CFG.models[w.model].datasets[:1]),
