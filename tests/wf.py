"""A copy of the workflow in a temporary folder, for real Snakemake runs in the tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def copy_workflow(dest: Path, config: dict | None = None, name: str = "case.yaml") -> Path:
    """The Snakefile, default config, config/, workflow/, profiles/, envs/, .test/ and docs/ (the
    report links to docs/method.md) under dest; `config`, if given, written there as `name` for --configfile."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / f, dest / f)
    for d in ("config", "workflow", "profiles", "envs", ".test", "docs"):
        shutil.copytree(REPO / d, dest / d)
    if config is not None:
        (dest / name).write_text(yaml.safe_dump(config))
    return dest


def h100(**overrides):
    """The H100 the package ships (its datasheet numbers), with `overrides` to its entry."""
    from specmoe.costmodel import Hardware
    from specmoe.published import gpus

    return Hardware.from_config("H100", {**gpus()["H100"], **overrides})
