"""The SD check's output says which checkpoints it ran: the trained target's revision (its training
manifest's seed and steps) and the drafter's identity, as every other engine job records them
(stages.engines.model_provenance, model_identity), so that provenance.measured_on reads
'tiny-fine@seed0-steps1800', not 'tiny-fine@unpinned'."""

from __future__ import annotations

import json

from specmoe import provenance as prov_mod
from specmoe.contracts import Named
from specmoe.contracts.models import SdCheckParams
from specmoe.runtime import engine as engine_mod
from specmoe.sources import prompts as prompt_table
from specmoe.stages.engines import model_identity
from specmoe.stages.models import sd_check_stage


def checkpoint(folder, name: str, revision: str):
    """A tiny checkpoint as train_stage leaves it: its files and the manifest whose provenance
    names its revision."""
    d = folder / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"hidden_size": 32, "name": name}))
    (d / "model.safetensors").write_bytes(name.encode() * 8)
    (d / "manifest.json").write_text(json.dumps({
        "name": name, "trained": True,
        "provenance": {"model": {"name": name, "source": "tiny", "revision": revision}}}))
    return d


def test_the_sd_checks_record_names_its_target_revision_and_its_drafter(tmp_path, monkeypatch):
    target = checkpoint(tmp_path, "tiny-fine", "seed0-steps1800")
    drafter = checkpoint(tmp_path, "tiny-drafter", "seed1-steps600")
    monkeypatch.setattr(engine_mod, "sd_check", lambda *a, **kw: {
        "sd_equals_plain": True, "spec": {"acceptance_length": 2.0}, "sd_startup_s": 1.0,
        "plain_startup_s": 1.0})
    monkeypatch.setattr(engine_mod, "check_inputs", lambda *a: None)
    out = tmp_path / "sd.json"
    sd_check_stage(Named({"target": str(target), "drafter": str(drafter), "prompts": []}),
                   Named({"json": str(out)}),
                   SdCheckParams(k=3, sd={"prompts": 2, "max_tokens": 8}, dataset="tinybench",
                                 prompts=prompt_table.DEFAULT_SOURCE))
    rec = prov_mod.read_json(out)["provenance"]
    assert rec["model"] == {"name": "tiny-fine", "source": "tiny", "revision": "seed0-steps1800"}
    assert rec["drafter"] == model_identity(drafter)
    assert rec["drafter"]["revision"] == "seed1-steps600"
    assert prov_mod.measured_on(rec)[0].startswith("tiny-fine@seed0-steps1800 on ")
