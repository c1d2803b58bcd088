"""The study side by side (published data, comparison, replay) and the report: every figure and
table present, captions valid reStructuredText, the HTML report opened in a real headless browser."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from browser import open_page
from specmoe import published
from specmoe.report import figures, prose, registry, replay, tables
from specmoe.stages import report
from wf import copy_workflow

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"
VARIANT_OF = {"tiny-fine-bf16": "tiny-fine"}  # the fixture run's variant (config.yaml)
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def test_published_tables_are_the_studys_as_copied():
    models = published.load("models")
    assert "Qwen/Qwen3-30B-A3B-FP8" in set(models["hf_target"])
    ob = published.load("overlap_by_distance").set_index("model")
    assert ob.loc["Qwen3-30B", "step1"] == pytest.approx(0.431)
    with pytest.raises(FileNotFoundError):
        published.load("no_such_table")


def test_study_model_by_compare_with_or_checkpoint():
    assert published.study_entry({"name": "x", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "tp": 1,
                                  "hardware": "H100"}) == {
        "study": "Qwen3-30B", "precision": "fp8", "tp": 1, "gpu": "H100"}
    bf16 = published.study_entry({"name": "x", "repo_id": "Qwen/Qwen2-57B-A14B-Instruct",
                                  "tp": 2, "precision": "auto"})
    assert bf16["study"] == "Qwen2-57B" and bf16["precision"] == "bf16"
    assert published.study_entry({"name": "x", "repo_id": "someone/else"}) is None
    assert published.study_entry({"name": "x", "source": "tiny"}) is None
    assert published.study_entry({"name": "x", "compare_with": "Mixtral-8x7B"})["study"] == \
        "Mixtral-8x7B"


def test_comparison_puts_each_quantity_beside_the_published_one():
    run = {"drafter": "d", "k": 3, "dataset": "x"}
    # the study's overlaps are along the committed sequence: compared with seq<d>, not step<d>
    ob = pd.DataFrame([{"model": "mine", **run, "step1": 0.7, "seq1": 0.5, "seq2": 0.4,
                        "seq3": 0.3, "seq4": np.nan, "independent": 0.1},
                       {"model": "other", **run, "step1": 0.9, "seq1": 0.9, "seq2": 0.9,
                        "seq3": 0.9, "seq4": np.nan, "independent": 0.9}])
    te = pd.DataFrame([{"model": "mine", **run, "batch": b, "te_sweep": 0.8} for b in (1, 4)])
    study = {"mine": {"study": "Qwen3-30B", "precision": "fp8", "tp": 2, "gpu": "H100"}}
    df = published.comparison({"overlap_by_distance": ob, "te_three_ways": te}, study)
    assert set(df["model"]) == {"mine"}  # unmatched models are left out
    s1 = df[(df["table"] == "overlap_by_distance") & (df["quantity"] == "seq1")].iloc[0]
    assert (s1["published"], s1["reproduced"]) == (0.431, 0.5)
    assert s1["difference"] == pytest.approx(0.069)
    assert not {"step1", "seq4"} & set(df["quantity"])  # within windows; not measured
    t = df[df["table"] == "te_three_ways"]
    assert len(t) == 1 and t["published"].iloc[0] == 0.860  # fp8 TP2 only, batch 1 only
    study["mine"]["tp"] = 1  # no published TE for this variant
    df = published.comparison({"te_three_ways": te}, study)
    assert df.empty


def test_replay_reproduces_the_published_model_derived_tables():
    t0 = time.perf_counter()
    out = replay.replay_tables()
    assert time.perf_counter() - t0 < 30
    ue = out["replay_unique_experts"]
    assert ue["unique_uniform_diff"].abs().max() < 0.05  # published to one decimal
    have = ue[ue["overlaps_published"]]
    assert len(have) == 5 and have["uniform_ipf_diff"].abs().max() < 0.01
    assert np.isnan(ue.set_index("model").loc["Kimi-K2.5", "uniform_ipf_replayed"])
    wm = out["replay_weight_model"]
    assert wm["te_predicted_diff"].abs().max() < 0.001
    assert np.allclose(wm["te_from_share"], wm["te_predicted_replayed"], atol=0.001)
    ts = out["replay_three_step"]
    assert list(ts["step"]) == [0, 1, 2, 3] and ts["te_diff"].abs().max() < 0.002
    assert ts["gap_closed_pct_diff"].abs().max() < 1.0


@pytest.mark.parametrize("stem", sorted(p.stem for p in Path(registry.path("index")).parent.glob(
    "*.rst")))
def test_every_caption_is_valid_restructuredtext(stem):
    from docutils.core import publish_parts

    path = Path(registry.path("index")).parent / f"{stem}.rst"
    html = publish_parts(path.read_text(), writer="html",
                         settings_overrides={"report_level": 1, "halt_level": 5})["body"]
    assert "system-message" not in html, html
    assert "docs/method.md" in path.read_text()


def test_every_report_item_has_a_caption_and_a_section():
    for section, items in registry.SECTIONS.items():
        for t in items["tables"]:
            assert registry.text(t) and registry.section_of(t) == section
        for f in items["figures"]:
            assert registry.text(f, figure=True) and registry.section_of(f, "figures") == section


def make_report(tmp_path: Path) -> Path:
    """The report from a fixed set of results: the tables of one default run."""
    res = tmp_path / "results"
    td = res / "tables"
    shutil.copytree(FIXTURE, td)
    for csv in sorted(td.glob("*.csv")):
        tables.write_table(tables.read_csv(csv), csv.with_suffix(""), {"config_hash": "fixture"},
                           registry.text(csv.stem))
    study = {"tiny-fine": {"study": "Qwen2-57B", "precision": None, "tp": None, "gpu": "CPU"},
             "synth-fine": {"study": "Qwen3-30B", "precision": "bf16", "tp": 1, "gpu": "H100"}}
    report.replay_stage(td)
    report.comparison_stage(td, td / "comparison", study, {})
    report.figures_stage(td, res / "figures", {}, study, VARIANT_OF)
    report.report_stage(td, res / "figures", res / "report" / "index.md", {"config_hash": "x"})
    return res


def test_report_from_fixed_results_has_every_figure_and_table(tmp_path):
    res = make_report(tmp_path)
    index = (res / "report" / "index.md").read_text()
    for fig in registry.FIGURES:
        png = res / "figures" / f"{fig}.png"
        assert png.stat().st_size > 5000 and (res / "figures" / f"{fig}.pdf").stat().st_size > 0
        assert f"![{fig}](../figures/{fig}.png)" in index
        assert registry.text(fig, figure=True) in index
    tables_made = sorted(p.stem for p in (res / "tables").glob("*.csv"))
    assert "comparison" in tables_made and "replay_three_step" in tables_made
    for stem in tables_made:
        assert f"#### {stem.replace('_', ' ')}" in index and registry.text(stem) in index
        assert not tables.read_csv(res / "tables" / f"{stem}.csv").empty, stem
    for section in ("## What the routing shows", "## What the measurements show",
                    "## How it compares with the study", "## Overlap and IPF", "## Cost model",
                    "## Speedup and sweeps", "## Profiling", "## Acceptance",
                    "## The study side by side"):
        assert section in index
    assert ("tiny-fine (compared with Qwen2-57B): step-1 overlap along the committed sequence "
            "0.267 vs 0.204") in index
    # the first page's findings table, from the fixture's tables
    assert "## The study's findings in this run's tiny targets" in index
    assert ("| tiny-fine | overlap decays with distance | overlap(1) - overlap(8) along the "
            "sequence > 0 | +0.073 [+0.056, +0.086], 112 requests | shown |") in index
    assert ("Not shown here: tiny-coarse: step-1 overlap above independence (0.393 [0.382, "
            "0.405])") in index
    assert "tiny-fine's output loops: 12% of its windows repeat a token" in index
    assert "What a CPU run cannot show" in index
    cmp_ = tables.read_csv(res / "tables" / "comparison.csv")
    assert set(cmp_["model"]) == {"tiny-fine", "synth-fine"}


def test_every_figure_of_the_fixed_results_has_data():
    """The default run fills every figure in miniature: none is the explanatory placeholder, and
    the variants figure has tiny-fine beside its bf16 variant."""
    study = {"tiny-fine": {"study": "Qwen2-57B"}, "tiny-fine-bf16": {"study": "Qwen2-57B"}}
    frames = figures.figure_frames(FIXTURE, study, VARIANT_OF)
    placeholders = [stem for stem, (fn, *_) in frames.items() if fn is figures.empty]
    assert placeholders == ["comparison"] or placeholders == [], placeholders
    _, sp, _, panel, line, *_ = frames["speedup_variants"]
    families = {k: set(g[line]) for k, g in sp.groupby(panel) if g[line].nunique() >= 2}
    assert families == {("tiny-fine", "tiny-drafter", "tinybench+heldout-code+heldout-prose"):
                        {"tiny-fine", "tiny-fine-bf16"}}


def test_report_html_opens_in_a_headless_browser_with_every_image(tmp_path):
    res = make_report(tmp_path)
    page = open_page((res / "report" / "index.html").as_uri())
    assert page["errors"] == []
    assert page["images"] == len(registry.FIGURES) and page["broken"] == []
    assert "How it compares with the study" in page["text"]
    assert page["overflowing"] == 0  # wide tables scroll inside the column


def test_replay_configuration_runs_in_seconds_without_models(tmp_path):
    wd = copy_workflow(tmp_path / "wf", {"models": []}, "replay.yaml")
    t0 = time.perf_counter()
    r = subprocess.run([*SNAKEMAKE, "--configfile", "replay.yaml", "--cores", "1"], cwd=wd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert time.perf_counter() - t0 < 120
    for stem in ("replay_unique_experts", "replay_weight_model", "replay_three_step"):
        df = tables.read_csv(wd / "results" / "tables" / f"{stem}.csv")
        assert not df.empty
    index = (wd / "results" / "report" / "index.md").read_text()
    assert "largest difference from the published te_predicted" in index


def _routing_tables(tmp_path, fine: dict, coarse: dict):
    """Minimal overlap tables for a fine and a coarse tiny target (each with its -random twin)."""
    ob, dec, ue = [], [], []
    for name, kn, v in (("fine", 0.125, fine), ("coarse", 0.25, coarse)):
        for model in (name, f"{name}-random"):
            run = {"model": model, "drafter": "d", "k": 3, "dataset": "main"}
            ob.append({**run, "step1": v["seq1"], "independent": v["ind"], "seq1": v["seq1"],
                       "seq1_low": v["seq1"] - 0.01, "seq1_high": v["seq1"] + 0.01,
                       **{f"seq{d}": v["seq1"] - v["decay"] * (d - 1) / 7 for d in range(2, 9)},
                       "seq_decay": v["decay"], "seq_decay_low": v["decay"] - 0.02,
                       "seq_decay_high": v["decay"] + 0.02, "seq_requests": 40})
            share = (v["seq1"] - v["ind"]) / v["seq1"]
            dec.append({**run, "k_over_n": kn, "sequence_temporal_share": share,
                        "sequence_temporal_share_low": share - 0.02,
                        "sequence_temporal_share_high": share + 0.02, "hottest_share": v["hot"]})
            ue.append({**run, "empirical": 20.0, "ipf_uniform": 20.0 * (1 + v["ipf"]),
                       "ipf_uniform_rel_err": v["ipf"], "ipf_unconverged_experts": 0})
    for stem, rows in (("overlap_by_distance", ob), ("overlap_decomposition_step1", dec),
                       ("unique_experts", ue)):
        pd.DataFrame(rows).to_csv(tmp_path / f"{stem}.csv", index=False)


def test_routing_targets_follow_the_tables(tmp_path):
    """The first page's verdicts come from the tables: a collapsed, flat, reversed miniature is
    'not shown' with its numbers; a balanced, decaying one is 'shown'; an interval that straddles
    its threshold is 'undecided'."""
    bad = {"seq1": 0.45, "ind": 0.40, "decay": -0.03, "hot": 0.83, "ipf": 0.12}
    _routing_tables(tmp_path, fine=bad, coarse={**bad, "seq1": 0.60, "ind": 0.40})
    t = prose.routing_targets(tmp_path)
    fine = t[t["model"] == "fine"].set_index("finding")["status"]
    assert set(fine) == {"not shown"}
    assert "83%" in t[t["model"] == "fine"]["value"].iloc[0]
    page = tmp_path / "index.md"
    report.report_stage(tmp_path, tmp_path, page, {"config_hash": "x", "created": "now"})
    text = page.read_text()
    assert "## The study's findings in this run's tiny targets" in text
    assert "Not shown here: fine: expert loads near uniform (independence 0.400" in text

    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.009}
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27})
    t = prose.routing_targets(tmp_path).set_index(["model", "finding"])["status"]
    assert set(t.loc["fine"]) == {"shown"}
    assert t.loc[("fine", "temporal share larger for finer experts")] == "shown"
    report.report_stage(tmp_path, tmp_path, page, {"config_hash": "x", "created": "now"})
    assert "Every finding that a CPU run can measure is shown" in page.read_text()

    _routing_tables(tmp_path, fine={**good, "decay": 0.01}, coarse=good)
    t = prose.routing_targets(tmp_path).set_index(["model", "finding"])["status"]
    assert t.loc[("fine", "overlap decays with distance")] == "undecided"


def _curve_tables(tmp_path, dense: list[float], speedups: list[float], shape: str):
    """A draft-ratio table (model-derived, exact) and a speedup table with its shape label."""
    run = {"model": "fine", "drafter": "d", "k": 3, "dataset": "main"}
    batches = [1, 2, 4, 8]
    dr = [{**run, "batch": b, "synthetic_drafter": name, "draft_cost": c}
          for name, curve in (("dense drafter", dense), ("MoE drafter", [0.3] * 4))
          for b, c in zip(batches, curve)]
    sp = [{**run, "batch": b, "speedup": s, "speedup_low": s * 0.9, "speedup_high": s * 1.1,
           "tau": 2.0, "draft_cost": 0.2 + 0.01 * b, "shape": shape}
          for b, s in zip(batches, speedups)]
    pd.DataFrame(dr).to_csv(tmp_path / "draft_ratio_model.csv", index=False)
    pd.DataFrame(sp).to_csv(tmp_path / "speedup_vs_batch.csv", index=False)


def test_directions_in_the_words_follow_the_tables(tmp_path):
    """A draft-cost curve that rises is worded 'rises', the same curve falling 'falls', a flat one
    'stays flat'; a speedup's shape and interval are the table's, and a measured draft cost with
    no interval is given no direction (fixtures that contradict each other's wording)."""
    _curve_tables(tmp_path, [0.1, 0.2, 0.3, 0.4], [1.4, 1.2, 1.1, 1.0], "peak at low batch")
    words = " ".join(prose.draft_cost_findings(tmp_path) + prose.measured_findings(tmp_path))
    assert "dense drafter: the step model's draft cost ratio rises with batch size, from 0.100" \
        in words
    assert "MoE drafter: the step model's draft cost ratio stays flat" in words
    assert "B=1: 1.40 [1.26, 1.54]" in words and "(peak at low batch)" in words
    assert "no interval: no direction is claimed" in words
    _curve_tables(tmp_path, [0.4, 0.3, 0.2, 0.1], [1.0, 1.1, 1.0, 1.05],
                  "undecided within the noise")
    words = " ".join(prose.draft_cost_findings(tmp_path) + prose.measured_findings(tmp_path))
    assert "dense drafter: the step model's draft cost ratio falls with batch size" in words
    assert "rises" not in words and "(undecided within the noise)" in words
    # a curve that turns is worded by its turn, not by its ends
    _curve_tables(tmp_path, [0.4, 0.2, 0.1, 0.39], [1.0, 1.1, 1.0, 1.05], "concave")
    words = " ".join(prose.draft_cost_findings(tmp_path))
    assert ("dense drafter: the step model's draft cost ratio falls from 0.400 at batch 1 to "
            "0.100 at batch 4, then rises to 0.390 at batch 8.") in words
