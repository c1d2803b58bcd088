# Tables, the study's published numbers beside them, figures and the report; the weight-model
# table from each study model's config.json and the GPU plan (offline where the package ships
# the model's config.json).


rule tables:
    input:
        overlap=FILES.of_runs(P.OVERLAP),
        ipf=FILES.of_runs(P.IPF),
        costmodel=FILES.of_runs(P.COSTMODEL),
        acceptance=FILES.of_runs(P.ACCEPTANCE),
    output:
        table_outputs(TABLES),
    log:
        P.report_log("tables"),
    benchmark:
        P.report_benchmark("tables")
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tables.py"


rule measured_tables:
    input:
        speedup=FILES.of_swept_runs(P.SPEEDUP),
        profiles=FILES.profiles(),
        costmodel=FILES.of_swept_runs(P.COSTMODEL, variants=False),
    output:
        table_outputs(MEASURED_TABLES),
    log:
        P.report_log("measured_tables"),
    benchmark:
        P.report_benchmark("measured_tables")
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/measured_tables.py"


rule step_model:
    input:
        predict=[P.PREDICT.format(model=m) for m in CFG.predicted],
        speedup=FILES.of_swept_runs(P.SPEEDUP),
    output:
        table_outputs(registry.written_by("step_model")),
    log:
        P.report_log("step_model"),
    benchmark:
        P.report_benchmark("step_model")
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/step_model.py"


rule weight_model:
    input:
        [FILES.download(n, "config") for n, m in CFG.hf.items() if m.entry["repo_id"]],
    output:
        table_outputs(["weight_model"]),
    log:
        P.report_log("weight_model"),
    benchmark:
        P.report_benchmark("weight_model")
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=[
            {
                "name": n,
                "repo_id": m.entry["repo_id"],
                "manifest": FILES.download(n, "config"),
                "precision": m.precision,
                "tp": m.tp,
                "hardware": m.hardware,
                "ks": list(m.ks),
                **(
                    {"overlaps": m.entry["overlaps"]}
                    if m.entry.get("overlaps")
                    else {}
                ),
            }
            for n, m in CFG.hf.items()
            if m.entry["repo_id"]
        ],
    script:
        "../scripts/weight_model.py"


rule plan:
    input:
        manifests=FILES.plan_inputs(),
    output:
        md=P.PLAN_MD,
        json=P.PLAN_JSON,
    log:
        P.report_log("plan"),
    benchmark:
        P.report_benchmark("plan")
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=[
            {**CFG.plan_entry(n), "manifest": FILES.download(n, "config")}
            for n in CFG.planned
        ],
        config=CFG.plan_settings,
        unplanned=[n for n in CFG.names("hf") if n not in CFG.planned],
        prompt_tokens={ds: CFG.prompt_tokens(ds) for ds in CFG.planned_datasets},
    script:
        "../scripts/plan.py"


rule replay:
    output:
        table_outputs(REPLAY_TABLES),
    log:
        P.report_log("replay"),
    benchmark:
        P.report_benchmark("replay")
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/replay.py"


rule comparison:
    input:
        tables=table_files(run_tables(CFG)),
    output:
        table_outputs(["comparison"]),
    log:
        P.report_log("comparison"),
    benchmark:
        P.report_benchmark("comparison")
    conda:
        "../../envs/analysis.yaml"
    params:
        study=CFG.study,
    script:
        "../scripts/comparison.py"


rule figures:
    input:
        tables=table_files(report_tables(CFG)),
    output:
        [
            report(
                P.figure(fig, "png"),
                caption=registry.path(fig, figure=True),
                category=registry.section_of(fig, "figures"),
                subcategory="Figures",
            )
            for fig in FIGURES
        ],
        [P.figure(fig, "pdf") for fig in FIGURES],
    log:
        P.report_log("figures"),
    benchmark:
        P.report_benchmark("figures")
    conda:
        "../../envs/analysis.yaml"
    params:
        study=CFG.study,
        variant_of={n: m.variant_of for n, m in CFG.variants.items()},
    script:
        "../scripts/figures.py"


# Its contract: specmoe.contracts.report.ReportIndexParams.
rule report_index:
    input:
        **ReportIndexParams.inputs(CFG),
    output:
        md=P.REPORT_MD,
        html=report(P.REPORT_HTML, caption=registry.path("index"), category="Report"),
        summary=P.REPORT_SUMMARY,
    log:
        P.report_log("index"),
    benchmark:
        P.report_benchmark("index")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(ReportIndexParams),
    script:
        "../scripts/report.py"
