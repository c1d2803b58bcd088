"""Configuration values the pipeline would read as something else than written: empty strings,
keys a model's source never reads, a check that could not run, a seed that changes nothing."""

from __future__ import annotations

import yaml
import pytest
from snakemake.utils import update_config

from specmoe.config import Config, for_workflow
from specmoe.errors import InputError
from wf import REPO

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def raw(*files: str) -> dict:
    cfg: dict = {}
    for f in ("config.yaml", *files):
        update_config(cfg, yaml.safe_load((REPO / f).read_text()))
    return cfg


def entry(cfg: dict, name: str, section: str = "models") -> dict:
    return next(e for e in cfg[section] if e["name"] == name)


def refused(cfg: dict) -> str:
    with pytest.raises(InputError) as exc:
        Config.load(cfg, SCHEMA)
    return str(exc.value)


# --- an empty string is not "left out": it was read as the default ---

@pytest.mark.parametrize("edit,where", [
    (lambda c: entry(c, "tiny-coarse").update(hardware=""), "hardware"),
    (lambda c: entry(c, "synth-fine").update(compare_with=""), "compare_with"),
    (lambda c: c["hardware"]["CPU"].update(gpu_model=""), "gpu_model"),
    (lambda c: entry(c, "synth-fine")["synthetic"].update(fit_to=""), "fit_to"),
])
def test_an_empty_string_is_refused_not_read_as_the_default(edit, where):
    cfg = raw()
    edit(cfg)
    msg = refused(cfg)
    assert where in msg and "must not be empty" in msg, msg
