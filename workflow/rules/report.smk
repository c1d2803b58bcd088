# Tables, the study's published numbers beside them, figures and the report.


rule tables:
    input:
        overlap=run_files("results/overlap/{model}/{drafter}/K{k}/{dataset}.json"),
        ipf=run_files("results/ipf/{model}/{drafter}/K{k}/{dataset}.json"),
        costmodel=run_files("results/costmodel/{model}/{drafter}/K{k}/{dataset}.json"),
        acceptance=run_files("results/acceptance/{model}/{drafter}/K{k}/{dataset}.json"),
    output:
        table_outputs(TABLES),
    log:
        "logs/report/tables.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tables.py"


rule replay:
    output:
        table_outputs(REPLAY_TABLES),
    log:
        "logs/report/replay.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/replay.py"


rule comparison:
    input:
        [f"results/tables/{t}.csv" for t in run_tables()],
    output:
        table_outputs(["comparison"]),
    log:
        "logs/report/comparison.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        study=STUDY,
    script:
        "../scripts/comparison.py"


rule figures:
    input:
        [f"results/tables/{t}.csv" for t in report_tables()],
    output:
        [
            report(
                f"results/figures/{fig}.png",
                caption=registry.path(fig, figure=True),
                category=registry.section_of(fig, "figures"),
                subcategory="Figures",
            )
            for fig in FIGURES
        ],
        expand("results/figures/{fig}.pdf", fig=FIGURES),
    log:
        "logs/report/figures.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        study=STUDY,
        variant_of={n: m["variant_of"] for n, m in VARIANTS.items()},
    script:
        "../scripts/figures.py"


rule report_index:
    input:
        tables=[f"results/tables/{t}.md" for t in report_tables()],
        figures=expand("results/figures/{fig}.png", fig=FIGURES),
    output:
        "results/report/index.md",
        report(
            "results/report/index.html",
            caption=registry.path("index"),
            category="Report",
        ),
        "results/report/summary.txt",
    log:
        "logs/report/index.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/report.py"


rule step_model:
    input:
        predict=expand("results/predict/{model}.json", model=PREDICTED),
        speedup=sweep_files("results/speedup/{model}/{drafter}/K{k}/{dataset}.json"),
    output:
        table_outputs(registry.written_by("step_model")),
    log:
        "logs/report/step_model.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/step_model.py"
