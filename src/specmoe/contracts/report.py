"""The contracts of the report rules (workflow/rules/report.smk; their stages:
specmoe.stages.report) and which tables and figures each reads: only those its rule declares,
from this configuration (a table another configuration left in results/tables/ is never read).
See specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from .. import paths as P
from ..provenance import config_hash
from ..report import registry


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
    depends on the configuration's hash, which the report names."""

    INPUTS = ("tables", "markdown", "figures")
    OUTPUTS = ("md", "html", "summary")
    STAGE = "specmoe.stages.report.report_index_stage"

    config_hash: str

    @classmethod
    def from_config(cls, cfg, w=None) -> "ReportIndexParams":
        return cls(config_hash=config_hash(cfg.raw))

    @staticmethod
    def inputs(cfg) -> dict[str, list[str]]:
        stems = report_tables(cfg)
        return {"tables": table_files(stems), "markdown": table_files(stems, "md"),
                "figures": figure_files()}
