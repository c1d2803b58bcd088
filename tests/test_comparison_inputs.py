"""What the comparison with the study sets beside a published number: never that number fed back
in. The weight-model table's IPF column of a study model is fitted to the published overlaps
(sources.published.weight_model_overlaps, labelled so); its unique experts are then the study's own
uniform IPF number recomputed, which the replay reports (report/replay.py), not a reproduction."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from specmoe.checks.preflight import shipped_config_path
from specmoe.config import Config
from specmoe.contracts.report import WeightModelParams
from specmoe.report import tables
from specmoe.sources import published
from specmoe.stages.report import weight_model_stage
from wf import REPO

QWEN = ("qwen3-30b-fp8-tp1", "qwen3-30b-fp8-tp2", "qwen3-30b-bf16-tp1", "qwen3-30b-bf16-tp2",
        "qwen3-30b-fp8-tp1-b200", "qwen3-30b-fp8-tp2-b200")


def paper(edit=None) -> Config:
    cfg = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    if edit:
        edit(cfg)
    return Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")


def weight_table(cfg: Config, tmp_path) -> pd.DataFrame:
    """The weight-model stage on the configuration's Qwen3-30B models, each read from the
    package's config.json (the download's, offline)."""
    entries = []
    for e in WeightModelParams.from_config(cfg).entries:
        if e["name"] in QWEN:
            snap = tmp_path / e["repo_id"].replace("/", "--")
            snap.mkdir(exist_ok=True)
            shutil.copy(shipped_config_path(e["repo_id"]), snap / "config.json")
            entries.append({**{k: v for k, v in e.items() if k != "manifest"},
                            "config": str(snap / "config.json")})
    weight_model_stage(None, SimpleNamespace(tables=[tmp_path / "weight_model.csv"]),
                       WeightModelParams(entries))
    return tables.read_csv(tmp_path / "weight_model.csv")


def test_the_paper_configs_weight_model_lists_no_ipf_of_the_published_overlaps_as_reproduced(
        tmp_path):
    cfg = paper()
    df = weight_table(cfg, tmp_path)
    assert set(df["model"]) == set(QWEN)
    cmp = published.comparison({"weight_model": df}, cfg.study)
    assert set(cmp["model"]) >= set(QWEN)  # the bytes and shares are still compared
    assert not (cmp["quantity"] == "unique_ipf").any(), cmp[cmp["quantity"] == "unique_ipf"]
    # the IPF column is the published overlaps' fit (the study's own number), and says so
    k3 = df[df["K"] == 3]
    assert k3["unique_ipf"].notna().all() and (k3["overlaps_source"] == "published").all()
    pub = published.load("unique_experts_ipf").set_index("model").loc["Qwen3-30B", "uniform_ipf"]
    assert k3["unique_ipf"].to_numpy() == pytest.approx(pub, abs=0.01)


def test_a_configured_copy_of_the_published_overlaps_is_labelled_published(tmp_path):
    """Overlaps the configuration gives are the model's own (measured, say) and their fit is set
    beside the study's; a hand copy of the published row is the published row."""
    def own(values, ks=None):
        def edit(cfg):
            for m in cfg["models"]:
                if m["name"] in QWEN:
                    m["overlaps"] = values
                    if ks:
                        m["ks"] = ks
        return edit

    # the published row has 4 distances: a copy of it serves K <= 4 (fewer than K are refused)
    copied = weight_table(paper(own([0.431, 0.356, 0.328, 0.312], ks=[3])), tmp_path)
    assert (copied["overlaps_source"] == "published").all()
    measured = weight_table(paper(own([0.40, 0.33, 0.30, 0.29, 0.28, 0.27, 0.26])), tmp_path)
    assert (measured["overlaps_source"] == "configured").all()
    cmp = published.comparison({"weight_model": measured}, paper().study)
    ipf = cmp[cmp["quantity"] == "unique_ipf"]
    assert set(ipf["model"]) == set(QWEN)
    assert np.isfinite(ipf["difference"]).all() and (ipf["difference"].abs() > 0.1).all()
