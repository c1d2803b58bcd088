# Cost model: target efficiency at batch 1 and vs batch size under each routing assumption.


rule costmodel:
    input:
        overlap="results/overlap/{model}/{drafter}/K{k}/{dataset}.json",
        ipf="results/ipf/{model}/{drafter}/K{k}/{dataset}.json",
        checkpoint=model_files,
    output:
        "results/costmodel/{model}/{drafter}/K{k}/{dataset}.json",
    log:
        "logs/costmodel/{model}/{drafter}/K{k}/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        model=cost_entry,
        hardware=cost_hardware,
        draft=config["draft_cost"],
    script:
        "../scripts/costmodel.py"


rule predict:
    input:
        unpack(predict_inputs),
    output:
        "results/predict/{model}.json",
    log:
        "logs/predict/{model}.log",
    wildcard_constraints:
        model=one_of(PREDICTED),
    conda:
        "../../envs/analysis.yaml"
    params:
        model=cost_entry,
        hardware=lambda w: CFG.hardware,
        k=lambda w: CFG.models[w.model].ks[0],
        method=predict_method,
        batch_sizes=config["batch_sizes"],
        study=lambda w: (STUDY.get(w.model) or {}).get("study"),
    script:
        "../scripts/predict.py"
