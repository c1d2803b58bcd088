# The measured side: serving sweeps (SD on/off per batch size) and kernel profiling, each an
# engine job of rule capture's body (workflow/rules/traces.smk): each block below overrides only
# what its kind changes (specmoe.kinds: inputs, settings and threads follow the rule's name), its
# outputs and the models it runs for; it keeps capture's environment, retries and script.
# A series is one engine serving every dataset of its model in turn (datasets do not change the
# engine); it writes one file per dataset and batch size under <output>.points/ as it goes, so a
# rerun after a crash resumes at the next unfinished point.


use rule capture as sweep_sd with:
    input:
        unpack(engine_inputs("sweep_sd")),
    output:
        P.SWEEP_SD,
    log:
        P.log_of(P.SWEEP_SD),
    benchmark:
        P.benchmark_of(P.SWEEP_SD)
    wildcard_constraints:
        model=one_of(CFG.swept + CFG.hf_swept),
    threads: engine_threads("sweep_sd")
    resources:
        **engine_resources("sweep_sd"),
    params:
        **engine_params("sweep_sd"),


use rule capture as sweep_ar with:
    input:
        unpack(engine_inputs("sweep_ar")),
    output:
        P.SWEEP_AR,
    log:
        P.log_of(P.SWEEP_AR),
    benchmark:
        P.benchmark_of(P.SWEEP_AR)
    wildcard_constraints:
        model=one_of(CFG.served),
    threads: engine_threads("sweep_ar")
    resources:
        **engine_resources("sweep_ar"),
    params:
        **engine_params("sweep_ar"),


use rule capture as profile with:
    input:
        unpack(engine_inputs("profile")),
    output:
        json=P.PROFILE,
        traces=directory(P.PROFILE_TRACES),
    log:
        P.log_of(P.PROFILE),
    benchmark:
        P.benchmark_of(P.PROFILE)
    wildcard_constraints:
        model=one_of([n for n in CFG.swept if n not in CFG.variants] + CFG.hf_swept),
    threads: engine_threads("profile")
    resources:
        **engine_resources("profile"),
    params:
        **engine_params("profile"),
