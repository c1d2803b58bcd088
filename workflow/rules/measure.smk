# The measured side: serving sweeps (SD on/off per batch size) and kernel profiling, each an
# engine job of rule capture's body (workflow/rules/traces.smk): each block below overrides only
# what its kind changes (its record, specmoe.contracts.engines: inputs and params; threads and
# resources follow the rule's kind, specmoe.kinds), its outputs and the models it runs for; it
# keeps capture's environment, retries and script.
# A series is one engine serving every dataset of its model in turn (datasets do not change the
# engine); it writes one file per dataset and batch size under <output>.points/ as it goes, so a
# rerun after a crash resumes at the next unfinished point.


# Its contract: specmoe.contracts.engines.SweepSdParams.
use rule capture as sweep_sd with:
    input:
        unpack(lambda w: SweepSdParams.inputs(CFG, FILES, w)),
    output:
        json=P.SWEEP_SD,
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
        **params_of(SweepSdParams),


# Its contract: specmoe.contracts.engines.SweepArParams.
use rule capture as sweep_ar with:
    input:
        unpack(lambda w: SweepArParams.inputs(CFG, FILES, w)),
    output:
        json=P.SWEEP_AR,
    log:
        P.log_of(P.SWEEP_AR),
    benchmark:
        P.benchmark_of(P.SWEEP_AR)
    wildcard_constraints:
        model=one_of(CFG.served),
        dtype=one_of(sorted({j.dtype for j in CFG.alone_jobs()})),
        tp=one_of(sorted({str(j.tp) for j in CFG.alone_jobs()})),
    threads: engine_threads("sweep_ar")
    resources:
        **engine_resources("sweep_ar"),
    params:
        **params_of(SweepArParams),


# Its contract: specmoe.contracts.engines.ProfileParams.
use rule capture as profile with:
    input:
        unpack(lambda w: ProfileParams.inputs(CFG, FILES, w)),
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
        **params_of(ProfileParams),
