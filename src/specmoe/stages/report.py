"""The report's stages (rules tables, measured_tables, step_model, weight_model, plan, replay,
comparison, figures, report_index; their contracts: specmoe.contracts.report): each takes its
job's inputs, outputs and parameters record by name, reads the results its rule declares, builds
its tables or figures with specmoe.report and writes them atomically with their provenance and
captions."""

from __future__ import annotations

from pathlib import Path

from dataclasses import asdict

from ..sources import published
from ..cost.plan import CHARS_PER_TOKEN, Planner, sd_loop, summary
from ..provenance import (CSV_PROVENANCE, measured_on, provenance, provenance_line, read_json,
                          write_json, write_text)
from ..report import figures, page, prose, registry, tables, timing
from ..report.html import to_html
from ..report.measured import build_measured_tables
from ..report.replay import replay_tables
from ..report.runs import build_tables
from ..cost.weights import weight_model_table


def table_dir(files) -> Path:
    """The folder of a rule's declared table (or figure) files: each table is written there in
    every format (tables.write_tables)."""
    dirs = {Path(f).parent for f in files}
    if len(dirs) != 1:
        raise ValueError(f"a rule's tables lie in one folder, not {sorted(map(str, dirs))}")
    return dirs.pop()


def config_provenance(params, **extra) -> dict:
    """The provenance of a report job's outputs: the configuration's hash its record declares."""
    return {**provenance(None, **extra), "config_hash": params.config_hash}


def measured_from(*inputs) -> list[str]:
    """Where the measurements behind a table job's input files were made (measured_on), one line
    each: the report job runs elsewhere (a SLURM job's login node), so its own hardware is not
    theirs."""
    return sorted({line for paths in inputs
                   for p in ([paths] if isinstance(paths, str) else paths)
                   for line in measured_on(read_json(p).get("provenance") or {})})


def sources_of(tables_in) -> dict:
    """Where the data of a job's declared tables (their CSVs) came from, as their provenance
    records say: the union of their `measured` lines and, where one holds it, the published
    source (the comparison's). A figure is drawn on the report's machine, not where its data
    was measured."""
    recs = [tables.read_provenance(p) for p in tables.by_stem(tables_in).values()]
    out: dict = {"measured": sorted({line for r in recs for line in r.get("measured", [])})}
    if published_from := sorted({r["published_source"] for r in recs
                                 if r.get("published_source")}):
        out["published_source"] = "; ".join(published_from)
    return out


def tables_stage(inputs, outputs, params) -> list[Path]:
    """Rule tables (its contract: specmoe.contracts.report.TablesParams): every table of the
    configuration's runs."""
    return tables.write_tables(build_tables(inputs.overlap, inputs.ipf, inputs.costmodel,
                                            inputs.acceptance),
                               table_dir(outputs.tables), config_provenance(
                                   params, measured=measured_from(inputs.overlap)))


def step_model_stage(inputs, outputs, params) -> list[Path]:
    """Rule step_model (its contract: specmoe.contracts.report.StepModelParams): the step model's
    prediction for every run of every predicted model beside that run's measured speedup."""
    from ..report.predicted import prediction_table

    return tables.write_tables({"step_model": prediction_table(inputs.predict, inputs.speedup)},
                               table_dir(outputs.tables), config_provenance(
                                   params, measured=measured_from(inputs.speedup)))


def measured_tables_stage(inputs, outputs, params) -> list[Path]:
    """Rule measured_tables (its contract: specmoe.contracts.report.MeasuredTablesParams): speedup
    vs batch, TE three ways, kernel time shares, three-step correction."""
    return tables.write_tables(build_measured_tables(inputs.speedup, inputs.profiles,
                                                     inputs.costmodel),
                               table_dir(outputs.tables), config_provenance(
                                   params, measured=measured_from(inputs.speedup,
                                                                  inputs.profiles)))


def figures_stage(inputs, outputs, params) -> list[Path]:
    """Rule figures (its contract: specmoe.contracts.report.FiguresParams): every figure of the
    report (PNG and PDF) from the tables its rule declares (input tables, their CSVs; no other
    table is read)."""
    outdir = table_dir(outputs.png)
    prov = config_provenance(params, **sources_of(inputs.tables))
    paths = []
    frames = figures.figure_frames(tables.by_stem(inputs.tables), params.study, params.variant_of)
    for stem, (fn, *args) in frames.items():
        paths += figures.save(fn(*args), outdir / stem, prov)
    return paths


def comparison_stage(inputs, outputs, params) -> list[Path]:
    """Rule comparison (its contract: specmoe.contracts.report.ComparisonParams): the comparison
    table from the tables its rule declares (input tables) among those the study publishes; no
    other table is read."""
    td = tables.Tables.of(tables.by_stem(inputs.tables))
    dfs = {spec: td.read(spec)
           for spec in [s.table for s in published.SPECS] + ["three_step_correction"]
           if spec in td}
    df = published.comparison(dfs, params.study)
    return tables.write_table(df, table_dir(outputs.tables) / "comparison",
                              config_provenance(params, published_source=published.SOURCE,
                                                measured=sources_of(inputs.tables)["measured"]),
                              registry.text("comparison"))


METHOD = "../../docs/method.md"  # from results/report/ to the project's method


def _details(td: tables.Tables) -> list[str]:
    """The details after the first page: routing run by run, the measurements, the comparison
    with the study, the caveats."""
    lines = []
    findings = prose.report_findings(td)
    if findings:
        # what the untrained controls do against independence, from their intervals (nothing
        # where the run has no control)
        controls = prose.control_independence(td)
        lines += ["### What the routing shows, run by run", "",
                  "Temporal overlap is what the study's argument rests on: overlap above the "
                  "independence baseline that decays with step distance. Step 1 above the "
                  "within-window shuffle null (its exact expectation) is a weighted mean of the "
                  "decays from d = 1 inside windows, so it is not a second finding: where its "
                  "interval lies above 0 it is given as the share of the temporal overlap it "
                  "certifies as within-window ordering, else as the difference with nothing "
                  "certified. " + (f"{controls} " if controls else "")
                  + "Weak models decoding greedily repeat tokens, which route alike, so overlap "
                  "is also given without such windows. Every interval is a 95% bootstrap over "
                  "requests.", "", *[f"- {f}" for f in findings], ""]
    measured = (prose.measured_findings(td) + prose.draft_cost_findings(td)
                + prose.prediction_findings(td))
    if measured:
        lines += ["### What the measurements show", "", *[f"- {f}" for f in measured], ""]
    compared = prose.comparison_findings(td) + prose.calibration_findings(td)
    if compared:
        lines += ["### How it compares with the study", "",
                  f"Published numbers: {published.SOURCE}. Tiny and synthetic models are compared "
                  "with the study model of the same shape (k of N experts): analogues, not "
                  "reproductions.", "", *[f"- {f}" for f in compared], ""]
    caveats = prose.report_caveats(td)
    if caveats:
        lines += ["### Caveats", "", *[f"- {c}" for c in caveats], ""]
    return lines


def report_index_stage(inputs, outputs, params, run_root=".") -> None:
    """Rule report_index (its contract: specmoe.contracts.report.ReportIndexParams): the report
    into outputs md, html and summary: a paragraph of what the run shows, the findings table, the
    details, then every figure and table with its caption, grouped by the study's sections, with
    the configuration's hash (params.config_hash). It reads only what its rule declares: the
    tables' CSVs (inputs.tables), their Markdown (inputs.markdown) and the figures' PNGs
    (inputs.figures), each a list of paths or {stem: path}; with run_root (the run's working
    directory, where the job runs; None: none), a provenance section with where the run's time
    went, from the jobs' benchmark files (specmoe.report.timing: timing, not a table of
    results)."""
    prov = config_provenance(params, timed=True)  # it reports timings: when it was made
    out, html = Path(outputs.md), Path(outputs.html)
    td = tables.Tables.of(tables.by_stem(inputs.tables))
    md, fd = tables.by_stem(inputs.markdown), tables.by_stem(inputs.figures)
    if set(md) - set(td):
        raise ValueError(f"tables without their CSV: {', '.join(sorted(set(md) - set(td)))}")
    rel = lambda p: Path(p).resolve().relative_to(out.parent.resolve().parent)  # noqa: E731
    lines = ["# specmoe report", "",
             f"Configuration hash `{prov.get('config_hash')}`, created {prov.get('created')}. "
             f"Every quantity is defined in the project's method ([docs/method.md]({METHOD})).",
             ""]
    opening = prose.opening(td)
    if opening:
        lines += ["## What this run shows", "", opening, ""]
    targets = prose.routing_targets(td)
    if not targets.empty:
        lines += ["## Findings", "",
                  "Each finding of the study at each tiny target's first run, decided by 95% "
                  "intervals (bootstrap over requests) where the quantity has one, beside the "
                  "same quantity of the target's untrained control (its architecture, not "
                  f"trained). {prose.LEARNED_RULE} {prose.timing_note(targets)}".rstrip(),
                  "", *prose.findings_table(targets),
                  ""]
        loops = prose.repetition_notes(td, list(dict.fromkeys(targets["model"])))
        if loops:
            lines += [" ".join(loops), ""]
    details = _details(td)
    if details:
        lines += ["## Details", "", *details]
    for section, items in registry.SECTIONS.items():
        block = []
        for stem in items["figures"]:
            if stem in fd:
                block += _figure_block(Path(fd[stem]), rel, td)
        for stem in items["tables"]:
            if stem in md:
                block += page.table_block(Path(md[stem]), td.read(stem), rel)
        if block:
            lines += [f"## {section}", "", *block]
    lines += provenance_section(prov, sources_of(inputs.tables)["measured"], run_root,
                                params.benchmarks, inputs.get("records"), params.controls)
    text = "\n".join(lines)
    write_text(out, text + f"\n\n{tables.provenance_comment(prov)}\n")
    write_text(html, to_html(text, out.parent) + f"{tables.provenance_comment(prov, html=True)}\n")
    # its last line: the end of the run prints the rest (report.summary)
    write_text(outputs.summary, run_summary(out, opening, html)
               + f"{CSV_PROVENANCE}{provenance_line(prov)}\n")


def _figure_block(png: Path, rel, td: tables.Tables) -> list[str]:
    """A figure in the report (page.figure_block) with its caption as figures.caption builds it
    from the run's tables, in place of the caption file's text with its placeholders."""
    block = page.figure_block(png, rel)
    fixed, built = (page.md_text(t) for t in (registry.text(png.stem, figure=True),
                                              figures.caption(png.stem, td)))
    if fixed == built:
        return block
    if block.count(fixed) != 1:
        raise ValueError(f"figure {png.stem}: its caption is not a line of its block")
    return [built if line == fixed else line for line in block]


def provenance_section(prov: dict, measured: list[str], run_root,
                       benchmarks: tuple[str, ...] | None = None,
                       records: list[str] | None = None,
                       controls: tuple[str, ...] | None = None) -> list[str]:
    """How the run was made: its configuration, where its measurements were made (measured:
    the tables' `measured` lines), the report job's packages and machine, and, with run_root,
    where its time went, by stage, from the jobs' benchmark files under run_root/benchmarks
    (those of `benchmarks`, the jobs the configuration declares, this report's own job excepted:
    it is still running; where not given, every file there) and the engine starts their
    outputs record (those of `records`, the job's inputs, where given: timing.collect), its
    trained models told from the configuration's untrained controls (`controls`)."""
    hw = prov.get("hardware") or {}
    lines = ["## Provenance", "",
             f"Configuration hash `{prov.get('config_hash')}`, created {prov.get('created')}.",
             "", "Measured on (model@revision, machine, engine):", "",
             *([f"- {m}" for m in measured] or ["- no measurement among this report's tables"]),
             "", "Analysis and report: " + ", ".join(
                 f"{k} {v}" for k, v in (prov.get("packages") or {}).items())
             + f"; on {', '.join(hw.get('gpus') or []) or hw.get('cpu', 'an unnamed CPU')} "
               f"({hw.get('cpu_count', '?')} cores, {hw.get('mem_gib', '?')} GiB), "
               f"Python {hw.get('python', '?')}.", ""]
    if run_root is None:
        return lines
    return [*lines, "### Where the time went", "",
            "Each job's wall time from its Snakemake benchmark file (benchmarks/), summed by "
            "stage, with engine start-up split off where the job's output records it; the "
            "report's own job is still running and is not counted.", "",
            *timing.markdown(timing.collect(run_root, benchmarks=benchmarks, records=records,
                                            controls=controls))]


def run_summary(index: Path, opening: str, html=None) -> str:
    """What the end of a run prints: where the report is (its HTML page; beside index.md unless
    given) and its opening paragraph."""
    import textwrap

    html = Path(html or Path(index).with_suffix(".html")).resolve()
    body = textwrap.fill(opening, 100) if opening else "(no runs with results in this report)"
    return f"Report: {html}\n\n{body}\n"


def replay_stage(inputs, outputs, params) -> list[Path]:
    """Rule replay (its contract: specmoe.contracts.report.ReplayParams): the study's
    model-derived tables from its published inputs alone."""
    prov = provenance(None, stage="replay", source=published.SOURCE)
    outdir, paths = table_dir(outputs.tables), []
    for stem, df in replay_tables().items():
        paths += tables.write_table(df, outdir / stem, prov, registry.text(stem))
    return paths


def weight_model_stage(inputs, outputs, params) -> list[Path]:
    """Rule weight_model (its contract: specmoe.contracts.report.WeightModelParams): the
    weight-model table of the study models its entries name, with each download's commit and,
    per row, where the overlaps of its IPF column come from (overlaps_source: configured,
    published or empty for none)."""
    entries = params.entries
    df = weight_model_table(entries)
    commits = {}
    for e in entries:
        if "manifest" in e:
            man = read_json(e["manifest"])
            commits[e["name"]] = man.get("commit")
    prov = provenance(entries, stage="weight_model", revisions=commits)
    return tables.write_table(df, table_dir(outputs.tables) / "weight_model", prov,
                              registry.text("weight_model"))


def plan_stage(inputs, outputs, params) -> dict:
    """Rule plan (its contract: specmoe.contracts.report.PlanParams): the GPU plan into outputs md
    and json, from its entries (one per study model that runs and per draft model served alone,
    with the `manifest` of its config-only download, read where the package ships no
    config.json or the model pins a revision, else the Hugging Face cache), its settings (config),
    the models it cannot size (unplanned) and each dataset's prompt tokens (prompt_tokens: mean
    and where the number comes from, for the prefill term). Reads nothing else: no dataset, no
    download of a model whose config.json the package ships and that pins no revision. Its
    provenance names where each model's config.json came from (config_sources: package,
    download or cache; preflight.offline_config)."""
    from ..checks import preflight

    entries, unplanned = params.entries, params.unplanned
    planner = Planner(entries, params.config, params.prompt_tokens)
    config, a, ptok = planner.config, planner.assumptions, planner.prompt_tokens
    rows, engines, manifests = [], [], {}
    for e in entries:
        rows += planner.rows(e["name"])
        manifests[e["repo_id"]] = e.get("manifest")
        engines += [preflight.Engine(**x) for x in e.get("engines") or []]
    report = preflight.run(engines, with_vllm=False, manifests=manifests)
    for r in rows:
        m = report.memory.get(_label(r))
        r.update(weights_gib=m.weights / preflight.GIB if m else None,
                 kv_sequences=m.sequences if m else None,
                 headroom_gib=m.headroom / preflight.GIB if m else None)
    s = summary(rows)
    prov = provenance(config, stage="plan",
                      config_sources={e["name"]: planner.config_source(e["name"]) for e in entries})
    write_json(outputs.json, {"assumptions": asdict(a), "sd_loop_us": asdict(sd_loop()), **s,
                              "jobs": rows, "unplanned": list(unplanned), "prompt_tokens": ptok,
                              "preflight": [f.line() for f in report.findings]}, prov)
    write_text(outputs.md, _plan_markdown(rows, s, a, ptok, params.prompt_tokens or {},
                                          unplanned, report, prov))
    return s


def _label(row: dict) -> str:
    from ..names import job_label

    return job_label(row["rule"], row["model"], row["drafter"], row["k"], row["dataset"],
                     row.get("dtype") or "", row.get("tp") or "")


def _plan_markdown(rows, s, a, ptok, sources, unplanned, report, prov) -> str:
    import pandas as pd

    df = pd.DataFrame(rows)
    by_model = pd.DataFrame([{"model": m, "gpu_hours": h}
                             for m, h in s["gpu_hours_by_model"].items()])
    on_cpu = sorted({r["model"] for r in rows if not r["gpus"]})
    unestimated = [_label(r) for r in rows if not r["estimated"]]
    gpu_jobs = sum(1 for r in rows if r["gpus"])
    prompts = ", ".join(f"{ds} {t:,.0f} ({sources[ds][1]})" for ds, t in ptok.items())
    lines = ["# GPU plan of this configuration", "",
             f"**{s['gpu_hours']:,.0f} GPU-hours** in {gpu_jobs} GPU jobs, estimated from the "
             "schedule and the step model (docs/method.md, Step model) before anything is measured. "
             "Assumptions "
             f"(config section `plan`): {', '.join(f'{k} {v}' for k, v in asdict(a).items())}. "
             f"Each job's SLURM runtime is {a.safety}x its estimate (at least {a.min_runtime} "
             "min). Each request's prompt is prefilled once, at its dataset's mean length in "
             f"tokens ({prompts or 'no dataset'}; configured: `datasets.<name>.prompt_tokens`, "
             f"prompt table: its characters / {CHARS_PER_TOKEN:g}, assumed: `plan.prompt_tokens`).",
             "",
             f"Every SD verification step pays {sd_loop().engine}'s SD loop, "
             f"{sd_loop().value:,.0f} us per iteration (measured range {sd_loop().low:,.0f}-"
             f"{sd_loop().high:,.0f} us, data/engine_overhead.csv): `sd_loop_hours` is what it "
             "adds to a job at that value, `sd_loop_hours_high` at the range's top, which the "
             "runtime covers.", "",
             "Memory per GPU (the preflight, specmoe.checks.preflight): `weights_gib` the weights (and "
             "drafter) on each GPU, `kv_sequences` the sequences its KV cache holds of the "
             "dataset that takes the most of it (its prompts at the largest batch the job runs "
             "them at: up to a dataset's `max_batch`), `headroom_gib` what is left with that batch "
             "in it (below 0: vLLM queues part of that batch).", "",
             *([f"Not in this plan: {', '.join(unplanned)} (no `repo_id`, so no config.json to "
                "size them from); they cannot run until one is set.", ""] if unplanned else []),
             *([f"Not estimated: {', '.join(unestimated)} (a capture runs every distinct prompt "
                "of its dataset, whose size is not known before the download: set "
                "`capture.prompts` or the dataset's `max_prompts`); each takes its model's "
                "`gpu.runtime` as its runtime, and as its hours the most it may take (`estimated` "
                "false).", ""] if unestimated else []),
             *([f"On a CPU, no GPU: {', '.join(on_cpu)} (hardware whose device is cpu); their "
                "jobs are listed with 0 GPUs and the hours of the step model on that hardware.", ""]
               if on_cpu else []),
             "## By model", "", tables.to_markdown(by_model, 1), "## By job", "",
             tables.to_markdown(df, 2),
             "## Preflight", "", *(f"- {ln}" for ln in report.lines(True) + report.lines(False)),
             *([] if report.findings else ["Every GPU job passes."]), "",
             tables.provenance_comment(prov), ""]
    return "\n".join(lines)