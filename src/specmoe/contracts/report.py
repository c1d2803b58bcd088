"""The contracts of the report rules (workflow/rules/report.smk; their stages:
specmoe.stages.report) and which tables and figures each reads: only those its rule declares,
from this configuration (a table another configuration left in results/tables/ is never read).
See specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from .. import paths as P
from ..kinds import kind
from ..provenance import config_hash
from ..report import registry
from ..runs import datasets_in


def run_tables(cfg) -> list[str]:
    """The stems of the tables of this configuration's own runs and models."""
    names = registry.written_by("tables") if cfg.runs() else []
    names += registry.written_by("measured_tables") if cfg.sweep_runs() else []
    names += registry.written_by("step_model") if cfg.predicted else []
    return names + (["weight_model"] if cfg.hf else [])


def report_tables(cfg) -> list[str]:
    """The stems of every table of the report: the runs', the comparison with the study and the
    replay."""
    return run_tables(cfg) + ["comparison"] + registry.written_by("replay")


def table_files(stems, ext: str = "csv") -> list[str]:
    """The files of these tables in one format (the stages key them by stem)."""
    return [P.table(t, ext) for t in stems]


def figure_files(ext: str = "png") -> list[str]:
    """Every figure of the report in one format."""
    return [P.figure(f, ext) for f in registry.FIGURES]


@dataclass(frozen=True)
class ReportIndexParams:
    """Rule report_index: results/report/index.md, index.html and summary.txt (outputs md, html,
    summary; specmoe.stages.report.report_index_stage): every table of the report (inputs tables,
    their CSVs, and markdown) and every figure (input figures, PNG), as `inputs` lists them. It
    depends on the configuration's hash, which the report names, and on the benchmark files of
    every job the configuration declares but its own (`benchmarks`: specmoe.files.Files.
    benchmarks and the report rules'): its time breakdown counts only those, not the files a
    dropped model, K or dataset, or another configuration's run, left in benchmarks/, nor its
    own job's previous file (Snakemake replaces it only once the job ends). Its train jobs are
    told apart by the configuration's untrained controls (`controls`, Config.controls), not by
    their names' end: a trained drafter may be named "...-random" too.

    Every job of `benchmarks` is upstream of it, so that its benchmark file is this run's by the
    time the breakdown reads it: besides the tables' and figures' jobs, input records (the
    outputs of the engine jobs whose start the breakdown splits off: SD checks, which no table
    reads, serving series, traces and profiles; specmoe.report.timing.record_of), which the
    stage reads, and input plan (the GPU plan, which no job reads, where there is one: its job's
    time is counted). Not the benchmark files themselves: a job whose output is there but whose
    benchmark file is not (deleted, or never written) would run again for it."""

    INPUTS = ("tables", "markdown", "figures", "records", "plan")
    OUTPUTS = ("md", "html", "summary")
    STAGE = "specmoe.stages.report.report_index_stage"

    config_hash: str
    benchmarks: tuple[str, ...] | None = None
    controls: tuple[str, ...] | None = None

    @classmethod
    def from_config(cls, cfg, w, files) -> "ReportIndexParams":
        """files: the run's files (specmoe.files.Files), whose jobs' benchmarks it lists."""
        rules = {registry.TABLES[t][1] for t in report_tables(cfg)} | {"figures"}
        rules |= {"plan"} if cfg.planned else set()  # a target of its own (Files.targets)
        return cls(config_hash=config_hash(cfg.raw), benchmarks=tuple(sorted(
            [*files.benchmarks(), *(P.report_benchmark(r) for r in rules)])),
            controls=tuple(sorted(cfg.controls)))

    @staticmethod
    def inputs(cfg, files) -> dict[str, list[str]]:
        """files: the run's files (specmoe.files.Files), whose jobs' records it reads."""
        from ..report.timing import record_of

        stems = report_tables(cfg)
        return {"tables": table_files(stems), "markdown": table_files(stems, "md"),
                "figures": figure_files(),
                "records": sorted({r for b in files.benchmarks() if (r := record_of(b))}),
                "plan": [P.PLAN_MD] if cfg.planned else []}


def config_json(cfg, name: str) -> str:
    """A study model's config-only download manifest (its config.json; specmoe.paths.download)."""
    return cfg.hf[name].entry["hf_config"]


def plan_config(cfg, model: str) -> list[str]:
    """The config-only download the GPU plan (and each GPU job's runtime, its estimate) sizes a
    planned study model from, where the package ships no config.json of it or the model pins a
    revision (none: the package's is read, and a draft model served alone is read from the
    Hugging Face cache, as the preflight reads it; preflight.offline_config)."""
    from ..checks.preflight import shipped_config_path

    m = cfg.hf.get(model)
    if model not in cfg.planned or m is None or shipped_config_path(
            m.entry["repo_id"], m.entry.get("revision")) is not None:
        return []
    return [config_json(cfg, model)]


@dataclass(frozen=True)
class TablesParams:
    """Rule tables: every table of the configuration's runs (registry.written_by("tables"), output
    tables: each in every format; specmoe.stages.report.tables_stage) from every run's overlaps,
    IPF fit, cost model and acceptance (inputs overlap, ipf, costmodel, acceptance: one file per
    run). It depends on the configuration's hash, which the tables' provenance names."""

    INPUTS = ("overlap", "ipf", "costmodel", "acceptance")
    OUTPUTS = ("tables",)
    STAGE = "specmoe.stages.report.tables_stage"

    config_hash: str

    @classmethod
    def from_config(cls, cfg, w=None) -> "TablesParams":
        return cls(config_hash=config_hash(cfg.raw))


@dataclass(frozen=True)
class MeasuredTablesParams(TablesParams):
    """Rule measured_tables: speedup vs batch, TE three ways, kernel time shares and the three-step
    correction (registry.written_by("measured_tables"), output tables;
    specmoe.stages.report.measured_tables_stage) from every swept run's speedup (input speedup),
    the kernel profiles (input profiles) and the swept runs' cost models (input costmodel;
    variants have none of their own). It depends on the configuration's hash."""

    INPUTS = ("speedup", "profiles", "costmodel")
    STAGE = "specmoe.stages.report.measured_tables_stage"


@dataclass(frozen=True)
class StepModelParams(TablesParams):
    """Rule step_model: the step model's prediction for every run of every predicted model beside
    the run's measured speedup (registry.written_by("step_model"), output tables;
    specmoe.stages.report.step_model_stage) from each model's predictions, one per run (input
    predict), and every swept run's speedup (input speedup). It depends on the configuration's
    hash."""

    INPUTS = ("predict", "speedup")
    STAGE = "specmoe.stages.report.step_model_stage"


@dataclass(frozen=True)
class ReplayParams:
    """Rule replay: the study's model-derived tables recomputed from its published inputs alone
    (registry.written_by("replay"), output tables; specmoe.stages.report.replay_stage). No input,
    and it depends on nothing of the configuration."""

    INPUTS = ()
    OUTPUTS = ("tables",)
    STAGE = "specmoe.stages.report.replay_stage"

    @classmethod
    def from_config(cls, cfg=None, w=None) -> "ReplayParams":
        return cls()


@dataclass(frozen=True)
class ComparisonParams:
    """Rule comparison: this configuration's numbers beside the study's published ones (output
    tables: the comparison table; specmoe.stages.report.comparison_stage) from the tables of its
    own runs that the study publishes (input tables: run_tables' CSVs; no other table is read).
    It depends on which study model each model stands beside (Config.study) and the
    configuration's hash."""

    INPUTS = ("tables",)
    OUTPUTS = ("tables",)
    STAGE = "specmoe.stages.report.comparison_stage"

    study: dict
    config_hash: str

    @classmethod
    def from_config(cls, cfg, w=None) -> "ComparisonParams":
        return cls(study=cfg.study, config_hash=config_hash(cfg.raw))

    @staticmethod
    def inputs(cfg) -> dict[str, list[str]]:
        return {"tables": table_files(run_tables(cfg))}


@dataclass(frozen=True)
class FiguresParams:
    """Rule figures: every figure of the report (registry.FIGURES; outputs png and pdf;
    specmoe.stages.report.figures_stage) from every table of the report (input tables: their
    CSVs; a figure whose table is not declared is drawn empty). It depends on which study model
    each model stands beside (Config.study), which tiny model each variant is of, and the
    configuration's hash."""

    INPUTS = ("tables",)
    OUTPUTS = ("png", "pdf")
    STAGE = "specmoe.stages.report.figures_stage"

    study: dict
    variant_of: dict
    config_hash: str

    @classmethod
    def from_config(cls, cfg, w=None) -> "FiguresParams":
        return cls(study=cfg.study,
                   variant_of={n: m.variant_of for n, m in cfg.variants.items()},
                   config_hash=config_hash(cfg.raw))

    @staticmethod
    def inputs(cfg) -> dict[str, list[str]]:
        return {"tables": table_files(report_tables(cfg))}


@dataclass(frozen=True)
class WeightModelParams:
    """Rule weight_model: the weight-model table of every study model with a repository (output
    tables; specmoe.stages.report.weight_model_stage) from each one's config.json (input
    manifests: its config-only download). entries: per model, what the table reads of it (name,
    repository, manifest, precision, TP, hardware, Ks, and its overlaps by step distance where it
    has some, with where they come from: published.weight_model_overlaps)."""

    INPUTS = ("manifests",)
    OUTPUTS = ("tables",)
    STAGE = "specmoe.stages.report.weight_model_stage"

    entries: list

    @classmethod
    def from_config(cls, cfg, w=None) -> "WeightModelParams":
        from ..sources.published import weight_model_overlaps

        def overlaps(entry: dict) -> dict:
            ov, source = weight_model_overlaps(entry)
            return {"overlaps": ov, "overlaps_source": source} if ov else {}

        return cls(entries=[
            {"name": n, "repo_id": m.entry["repo_id"], "manifest": config_json(cfg, n),
             "precision": m.precision, "tp": m.tp, "hardware": m.hardware, "ks": list(m.ks),
             **overlaps(m.entry)}
            for n, m in cfg.hf.items() if m.entry["repo_id"]])

    @staticmethod
    def inputs(cfg) -> dict[str, list[str]]:
        return {"manifests": [config_json(cfg, n) for n, m in cfg.hf.items()
                              if m.entry["repo_id"]]}


@dataclass(frozen=True)
class PlanParams:
    """Rule plan: the GPU plan (outputs md, json: results/plan.md and each GPU job's hours and
    runtime, the one its job asks for: specmoe.cost.plan.Planner computes both;
    specmoe.stages.report.plan_stage) from the config.json of each planned study model that the
    package does not ship or that pins a revision (input manifests; the others, and the draft
    models served alone, are read offline, as the preflight reads them).

    entries: per planned model or draft model served alone (Config.planned), its engine jobs as
    the rules run them and, on a GPU, each job's engine (for its memory headroom), with its
    config-only `manifest` where it reads one (plan_config; None: the package's config.json,
    or the Hugging Face cache's); config: what the bill reads of the configuration, only that
    (a change to anything else reruns no plan): the keys of the engine sections it reads
    (specmoe.cost.plan.ENGINE_KEYS), `plan` and the resolved hardware its entries run on;
    unplanned: those it cannot size (no repo id); prompt_tokens: {dataset: (mean prompt tokens,
    where the number comes from)} of the planned engines' datasets."""

    INPUTS = ("manifests",)
    OUTPUTS = ("md", "json")
    STAGE = "specmoe.stages.report.plan_stage"

    entries: list
    config: dict
    unplanned: list
    prompt_tokens: dict

    @classmethod
    def from_config(cls, cfg, w=None) -> "PlanParams":
        from ..cost.plan import ENGINE_KEYS  # here: the step model's imports take seconds

        entries = [plan_entry(cfg, n) for n in cfg.planned]
        datasets = datasets_in(ds for e in entries for ds in e["datasets"])
        engines = {s: {k: v for k, v in cfg.section(s).items() if k in keys}
                   for s, keys in ENGINE_KEYS.items()}
        hardware = {h: cfg.hardware[h] for h in sorted({e["hardware"] for e in entries})
                    if h in cfg.hardware}  # one it does not know: the bill names it
        return cls(entries=[{**e, "manifest": (plan_config(cfg, e["name"]) or [None])[0]}
                            for e in entries],
                   config={**engines, "plan": cfg.section("plan"), "hardware": hardware},
                   unplanned=[n for n in cfg.plan_engines if n not in cfg.planned],
                   prompt_tokens={ds: cfg.prompt_tokens(ds) for ds in datasets})

    @staticmethod
    def inputs(cfg) -> dict[str, list[str]]:
        return {"manifests": [f for n in cfg.planned for f in plan_config(cfg, n)]}


def plan_entry(cfg, name: str) -> dict:
    """What the GPU plan needs of one study model, or of a draft model served alone (`dense`: its
    own config.json, in its checkpoint's format, on its first target's hardware, each series at
    its job's TP, the SD series' it drafts in: `tp` 1 stands for none): its engine
    jobs as the rules run them, the datasets they serve, the prompts each capture runs
    (Config.capture_prompts; None where not known before the download, and then the runtime its
    jobs fall back to, `gpu.runtime`) and, on a GPU, each job's engine (for its memory
    headroom)."""
    from dataclasses import asdict

    jobs, entry = cfg.engine_jobs(name), cfg.entry(name)
    if name in cfg.drafters:
        what = {"precision": "auto", "tp": 1, "hardware": cfg.hardware_of(name),
                "datasets": cfg.sweep_datasets(name), "dense": True}
    else:
        m = cfg.models[name]
        what = {"precision": m.precision, "tp": m.tp, "hardware": m.hardware,
                "datasets": list(m.datasets), "dense": False}
    return {"name": name, "repo_id": entry.get("repo_id"), "revision": entry.get("revision"),
            **what,
            "schedules": {ds: [list(p) for p in cfg.sweep_schedule(ds)]
                          for ds in what["datasets"]},
            "capture_prompts": {j.dataset: cfg.capture_prompts(name, j.dataset) for j in jobs
                                if kind(j.rule).stage == "capture"},
            "runtime": cfg.gpu_resources(name)["runtime"],
            "gpus": cfg.gpus(name), "jobs": [vars(j) for j in jobs],
            "engines": [asdict(cfg.engine_of(j)) for j in jobs] if cfg.on_gpu(name) else []}
