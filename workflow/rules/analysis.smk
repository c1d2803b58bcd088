# The analysis of traces and series (no engine): synthetic traces, overlap statistics and the
# maximum-entropy IPF prediction, the cost model and the step model's prediction, deconfounded
# acceptance statistics (accepted vs first-rejected at the same draft position) and each run's
# speedup from its serving series.


# The fit of a synthetic model's process to its fit_to's published curve: once per model, read
# by each of its traces (one per K). Its contract: specmoe.contracts.analysis.SynthFitParams.
rule synth_fit:
    output:
        json=P.SYNTH_FIT,
    log:
        P.log_of(P.SYNTH_FIT),
    benchmark:
        P.benchmark_of(P.SYNTH_FIT)
    wildcard_constraints:
        model=one_of(CFG.names("synthetic")),
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(SynthFitParams),
    script:
        "../scripts/synth_fit.py"


# Its contract: specmoe.contracts.analysis.SynthTraceParams.
rule synth_trace:
    input:
        unpack(lambda w: SynthTraceParams.inputs(CFG, w)),
    output:
        trace=P.TRACE,
    log:
        P.log_of(P.TRACE),
    benchmark:
        P.benchmark_of(P.TRACE)
    wildcard_constraints:
        model=one_of(CFG.names("synthetic")),
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(SynthTraceParams),
    script:
        "../scripts/synth_trace.py"


# Its contract: specmoe.contracts.analysis.OverlapParams.
rule overlap:
    input:
        trace=rules.capture.output[0],
        # an untrained control's trained target: the two compared request by request
        target=lambda w: OverlapParams.target_trace(CFG, w),
    output:
        json=P.OVERLAP,
    log:
        P.log_of(P.OVERLAP),
    benchmark:
        P.benchmark_of(P.OVERLAP)
    conda:
        "../../envs/analysis.yaml"
    threads: analysis_threads()
    params:
        **params_of(OverlapParams),
    script:
        "../scripts/overlap.py"


# Its contract: specmoe.contracts.analysis.IpfParams.
rule ipf:
    input:
        overlap=rules.overlap.output[0],
    output:
        json=P.IPF,
    log:
        P.log_of(P.IPF),
    benchmark:
        P.benchmark_of(P.IPF)
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(IpfParams),
    script:
        "../scripts/ipf.py"


# Its contract: specmoe.contracts.analysis.CostmodelParams.
rule costmodel:
    input:
        overlap=rules.overlap.output[0],
        ipf=rules.ipf.output[0],
        checkpoint=lambda w: FILES.checkpoint(w.model),
    output:
        json=P.COSTMODEL,
    log:
        P.log_of(P.COSTMODEL),
    benchmark:
        P.benchmark_of(P.COSTMODEL)
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(CostmodelParams),
    script:
        "../scripts/costmodel.py"


# Its contract: specmoe.contracts.analysis.PredictParams.
rule predict:
    input:
        unpack(lambda w: FILES.predict_inputs(w.model)),
    output:
        json=P.PREDICT,
    log:
        P.log_of(P.PREDICT),
    benchmark:
        P.benchmark_of(P.PREDICT)
    wildcard_constraints:
        model=one_of(CFG.predicted),
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(PredictParams, files=FILES),
    script:
        "../scripts/predict.py"


# Its contract: specmoe.contracts.analysis.AcceptanceParams.
rule acceptance:
    input:
        trace=rules.capture.output[0],
    output:
        json=P.ACCEPTANCE,
    log:
        P.log_of(P.ACCEPTANCE),
    benchmark:
        P.benchmark_of(P.ACCEPTANCE)
    conda:
        "../../envs/analysis.yaml"
    threads: analysis_threads()
    params:
        **params_of(AcceptanceParams),
    script:
        "../scripts/acceptance.py"


# Its contract: specmoe.contracts.analysis.SpeedupParams.
rule speedup:
    input:
        sd=rules.sweep_sd.output[0],
        drafter=lambda w: SpeedupParams.drafter_series(CFG, w),
    output:
        json=P.SPEEDUP,
    log:
        P.log_of(P.SPEEDUP),
    benchmark:
        P.benchmark_of(P.SPEEDUP)
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(SpeedupParams),
    script:
        "../scripts/speedup.py"
