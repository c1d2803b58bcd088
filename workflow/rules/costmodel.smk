# Cost model: target efficiency at batch 1 and vs batch size under each routing assumption.


rule costmodel:
    input:
        overlap=rules.overlap.output[0],
        ipf=rules.ipf.output[0],
        checkpoint=model_files,
    output:
        P.COSTMODEL,
    log:
        P.log_of(P.COSTMODEL),
    conda:
        "../../envs/analysis.yaml"
    params:
        model=lambda w: CFG.cost_entry(w.model),
        hardware=lambda w: CFG.cost_hardware(w.model),
        draft=config["draft_cost"],
    script:
        "../scripts/costmodel.py"


rule predict:
    input:
        unpack(predict_inputs),
    output:
        P.PREDICT,
    log:
        P.log_of(P.PREDICT),
    wildcard_constraints:
        model=one_of(CFG.predicted),
    conda:
        "../../envs/analysis.yaml"
    params:
        model=lambda w: CFG.cost_entry(w.model),
        hardware=lambda w: CFG.hardware,
        k=lambda w: CFG.models[w.model].ks[0],
        method=lambda w: CFG.predict_method(w.model),
        batch_sizes=config["batch_sizes"],
        study=lambda w: (CFG.study.get(w.model) or {}).get("study"),
    script:
        "../scripts/predict.py"
