# Routing traces from a real engine: one Parquet file per (model, drafter, K, dataset). Rule capture
# is the engine rule body that the sweeps and profiles reuse (measure.smk: `use rule capture`); what
# each engine rule serves follows its kind (specmoe.kinds, by the rule's name).


# Its contract: specmoe.contracts.engines.CaptureParams.
rule capture:
    input:
        unpack(lambda w: CaptureParams.inputs(CFG, FILES, w)),
    output:
        trace=P.TRACE,
    log:
        P.log_of(P.TRACE),
    benchmark:
        P.benchmark_of(P.TRACE)
    wildcard_constraints:
        model=one_of(CFG.captured),
    priority: ENGINE_PRIORITY
    retries: 1
    conda:
        engine_env
    threads: engine_threads("capture")
    resources:
        **engine_resources("capture"),
    params:
        **params_of(CaptureParams),
    script:
        "../scripts/engine.py"


# The untrained control reads its trained target's own windows, teacher-forced through the same
# engine settings: each routing statistic of the
# two compares routing of identical inputs.
# Its contract: specmoe.contracts.engines.CaptureControlParams.
rule capture_control:
    input:
        unpack(lambda w: CaptureControlParams.inputs(CFG, w)),
    output:
        trace=P.TRACE,
    log:
        P.log_of(P.TRACE),
    benchmark:
        P.benchmark_of(P.TRACE)
    wildcard_constraints:
        model=one_of(CFG.controls),
    priority: ENGINE_PRIORITY
    retries: 1
    conda:
        "../../envs/models.yaml"
    threads: engine_threads("capture")
    resources:
        **engine_resources("capture"),
    params:
        **params_of(CaptureControlParams),
    script:
        "../scripts/capture_control.py"
