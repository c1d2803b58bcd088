# Tables, the study's published numbers beside them, figures and the report; the weight-model
# table from each study model's config.json and the GPU plan (offline where the package ships
# the model's config.json).


# Its contract: specmoe.contracts.report.TablesParams.
rule tables:
    input:
        overlap=FILES.of_runs(P.OVERLAP),
        ipf=FILES.of_runs(P.IPF),
        costmodel=FILES.of_runs(P.COSTMODEL),
        acceptance=FILES.of_runs(P.ACCEPTANCE),
    output:
        tables=table_outputs(TABLES),
    log:
        P.report_log("tables"),
    benchmark:
        P.report_benchmark("tables")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(TablesParams),
    script:
        "../scripts/tables.py"


# Its contract: specmoe.contracts.report.MeasuredTablesParams.
rule measured_tables:
    input:
        speedup=FILES.of_swept_runs(P.SPEEDUP),
        profiles=FILES.profiles(),
        costmodel=FILES.of_swept_runs(P.COSTMODEL, variants=False),
    output:
        tables=table_outputs(MEASURED_TABLES),
    log:
        P.report_log("measured_tables"),
    benchmark:
        P.report_benchmark("measured_tables")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(MeasuredTablesParams),
    script:
        "../scripts/measured_tables.py"


# Its contract: specmoe.contracts.report.StepModelParams.
rule step_model:
    input:
        predict=[P.PREDICT.format(model=m) for m in CFG.predicted],
        speedup=FILES.of_swept_runs(P.SPEEDUP),
    output:
        tables=table_outputs(registry.written_by("step_model")),
    log:
        P.report_log("step_model"),
    benchmark:
        P.report_benchmark("step_model")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(StepModelParams),
    script:
        "../scripts/step_model.py"


# Its contract: specmoe.contracts.report.WeightModelParams.
rule weight_model:
    input:
        **WeightModelParams.inputs(CFG),
    output:
        tables=table_outputs(["weight_model"]),
    log:
        P.report_log("weight_model"),
    benchmark:
        P.report_benchmark("weight_model")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(WeightModelParams),
    script:
        "../scripts/weight_model.py"


# Its contract: specmoe.contracts.report.PlanParams.
rule plan:
    input:
        **PlanParams.inputs(CFG),
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
        **params_of(PlanParams),
    script:
        "../scripts/plan.py"


# Its contract: specmoe.contracts.report.ReplayParams (no parameter: the study's inputs only).
rule replay:
    output:
        tables=table_outputs(REPLAY_TABLES),
    log:
        P.report_log("replay"),
    benchmark:
        P.report_benchmark("replay")
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/replay.py"


# Its contract: specmoe.contracts.report.ComparisonParams.
rule comparison:
    input:
        **ComparisonParams.inputs(CFG),
    output:
        tables=table_outputs(["comparison"]),
    log:
        P.report_log("comparison"),
    benchmark:
        P.report_benchmark("comparison")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(ComparisonParams),
    script:
        "../scripts/comparison.py"


# Its contract: specmoe.contracts.report.FiguresParams.
rule figures:
    input:
        **FiguresParams.inputs(CFG),
    output:
        png=[
            report(
                P.figure(fig, "png"),
                caption=registry.path(fig, figure=True),
                category=registry.section_of(fig, "figures"),
                subcategory="Figures",
            )
            for fig in FIGURES
        ],
        pdf=[P.figure(fig, "pdf") for fig in FIGURES],
    log:
        P.report_log("figures"),
    benchmark:
        P.report_benchmark("figures")
    conda:
        "../../envs/analysis.yaml"
    params:
        **params_of(FiguresParams),
    script:
        "../scripts/figures.py"


# Its contract: specmoe.contracts.report.ReportIndexParams.
rule report_index:
    input:
        **ReportIndexParams.inputs(CFG, FILES),
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
        **params_of(ReportIndexParams, files=FILES),
    script:
        "../scripts/report.py"
