# Routing traces from a real engine: one Parquet file per (model, drafter, K, dataset). Rule capture
# is the engine rule body that the sweeps and profiles reuse (measure.smk: `use rule capture`); what
# each engine rule serves follows its kind (specmoe.kinds, by the rule's name).


rule capture:
    input:
        unpack(engine_inputs("capture")),
    output:
        P.TRACE,
    log:
        P.log_of(P.TRACE),
    benchmark:
        P.benchmark_of(P.TRACE)
    wildcard_constraints:
        model=one_of(CFG.names("tiny") + CFG.names("hf")),
    retries: 1
    conda:
        engine_env
    threads: engine_threads("capture")
    resources:
        **engine_resources("capture"),
    params:
        **engine_params("capture"),
    script:
        "../scripts/engine.py"
