# Tables, figures and the report index.


rule tables:
    input:
        overlap=run_files("results/overlap/{model}/{drafter}/K{k}/{dataset}.json"),
        ipf=run_files("results/ipf/{model}/{drafter}/K{k}/{dataset}.json"),
        costmodel=run_files("results/costmodel/{model}/{drafter}/K{k}/{dataset}.json"),
        acceptance=run_files("results/acceptance/{model}/{drafter}/K{k}/{dataset}.json"),
    output:
        expand("results/tables/{table}.{ext}", table=TABLES, ext=["csv", "md", "tex"]),
    log:
        "logs/report/tables.log",
    conda:
        "../../envs/report.yaml"
    script:
        "../scripts/tables.py"


rule figures:
    input:
        expand("results/tables/{table}.csv", table=TABLES),
    output:
        [
            report(
                f"results/figures/{fig}.png",
                caption=f"../report/{fig}.rst",
                category="Figures",
            )
            for fig in FIGURES
        ],
        expand("results/figures/{fig}.pdf", fig=FIGURES),
    log:
        "logs/report/figures.log",
    conda:
        "../../envs/report.yaml"
    script:
        "../scripts/figures.py"


rule report_index:
    input:
        tables=expand("results/tables/{table}.md", table=TABLES),
        figures=expand("results/figures/{fig}.png", fig=FIGURES),
        measured=measured_report_inputs(),
    output:
        report(
            "results/report/index.md",
            caption="../report/index.rst",
            category="Report",
        ),
    log:
        "logs/report/index.log",
    conda:
        "../../envs/report.yaml"
    script:
        "../scripts/report.py"
