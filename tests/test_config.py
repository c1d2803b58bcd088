"""The configuration resolved once (specmoe.config): defaults filled in one place, variants and
controls as the rules and the GPU bill see them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specmoe.config import Config
from specmoe.costmodel import DEFAULT_HARDWARE
from specmoe.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def resolved(path="config.yaml", edit=None) -> Config:
    cfg = yaml.safe_load((REPO / path).read_text())
    if edit:
        edit(cfg)
    return Config.load(cfg, REPO / "config/schema.yaml")


def test_a_variant_runs_on_its_targets_hardware():
    """A variant names no hardware: it is its target's (the schema's default used to override it)."""
    c = resolved()
    assert c.models["tiny-fine"].hardware == "CPU"
    assert c.variants["tiny-fine-bf16"].hardware == "CPU"
    assert c.variants["tiny-fine-bf16"].precision == "bf16"
    assert c.models["synth-fine"].hardware == DEFAULT_HARDWARE


def test_an_untrained_control_runs_at_its_targets_first_k_and_dataset():
    def more(cfg):
        cfg["models"][0]["ks"] = [5, 3]
        cfg["models"][0]["datasets"] = ["heldout-code", "tinybench"]

    c = resolved(edit=more)
    name = c.raw["models"][0]["name"]
    ctl = c.models[f"{name}-random"]
    assert (ctl.ks, ctl.datasets, ctl.control_of) == ((5,), ("heldout-code",), name)
    assert name not in c.swept or f"{name}-random" not in c.swept


def test_a_study_model_takes_the_top_level_ks_and_the_bill_its_jobs():
    c = resolved("config/paper.yaml")
    written = {m["name"]: m for m in c.raw["models"]}
    name = next(n for n in c.hf_swept if "ks" not in written[n])
    m = c.models[name]
    assert m.ks == c.ks
    rules = [j.rule for j in c.engine_jobs(name)]
    assert rules.count("sweep_ar") == 1
    assert rules.count("sweep_sd") == len(m.drafters) * len(m.ks)
    assert rules.count("profile") == len(m.drafters)
    assert rules.count("capture") == len(m.runs())


def test_contradictions_stop_the_resolution():
    def bad(cfg):
        cfg["models"][0]["hardware"] = "TPU"

    with pytest.raises(InputError, match="hardware 'TPU' is not defined"):
        resolved(edit=bad)


@pytest.mark.parametrize("literal", ['"H100"', '"builtin:v1"'])
def test_each_default_is_written_once(literal):
    """The default hardware and prompt table: one definition in the library, none in the rules
    or the schema."""
    files = [*(REPO / "src/specmoe").rglob("*.py"), *(REPO / "workflow").rglob("*.smk"),
             REPO / "config/schema.yaml"]
    hits = [f"{f.name}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines())
            if re.search(re.escape(literal), line)]
    assert len(hits) == 1, hits
