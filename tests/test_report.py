"""The study side by side (published data, comparison, replay) and the report: every figure and
table present, captions valid reStructuredText, the HTML report opened in a real headless browser."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from browser import open_page
from declared import in_folder, report_inputs, report_job, tables_in
from specmoe.contracts import Named
from specmoe.contracts.report import (ComparisonParams, FiguresParams, ReplayParams,
                                      ReportIndexParams)
from specmoe.sources import published
from specmoe.report import bounds, figures, page, prose, registry, replay, tables
from specmoe.runs import label_of
from specmoe.stages import report
from wf import copy_workflow, snakemake

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"
VARIANT_OF = {"tiny-fine-bf16": "tiny-fine"}  # the fixture run's variant (config.yaml)


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
    study = {"mine": {"study": "Qwen3-30B", "precision": "fp8", "tp": 2, "gpu": "H100",
                      "methods": {"d": "EAGLE-3"}}}
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


def test_comparison_sets_the_studys_main_set_at_k3_beside_only_its_own_runs():
    """The study's overlap and acceptance tables are of its main set (MT-Bench) at K = 3: a run
    on Aya or at K = 7 was set beside them (Aya's own independence is 0.176, shown 0.119); its
    TE at batch 1 is per drafting method (a separate draft model was set beside EAGLE's 0.488);
    its three-step correction is of Qwen3-30B fp8 TP 1 on H100 (a B200 or bf16 TP 2 variant
    was set beside it)."""
    rows = [{"model": "q", "drafter": "d", "k": k, "dataset": ds, "seq1": 0.5,
             "independent": 0.1} for ds in ("mt-bench", "aya", "spec-bench") for k in (3, 7)]
    study = {"q": published.study_entry(
        {"name": "q", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "tp": 1, "hardware": "H100",
         "datasets": ["mt-bench", "aya", "spec-bench"]}, methods={"d": "eagle3"})}
    df = published.comparison({"overlap_by_distance": pd.DataFrame(rows)}, study)
    assert len(df) == 2 and set(df["dataset"]) == {"mt-bench"} and set(df["k"]) == {3}
    te = pd.DataFrame([{"model": "m", "drafter": d, "k": 3, "dataset": "mt-bench", "batch": 1,
                        "te_sweep": 0.3} for d in ("draft", "eagle")])
    mixtral = published.study_entry(
        {"name": "m", "repo_id": "mistralai/Mixtral-8x7B-Instruct-v0.1", "tp": 1,
         "precision": "fp8", "hardware": "H100", "datasets": ["mt-bench"]},
        methods={"draft": "draft_model", "eagle": "eagle"})
    df = published.comparison({"te_three_ways": te}, {"m": mixtral})
    assert list(df["drafter"]) == ["eagle"] and df["published"].iloc[0] == 0.488
    tsc = pd.DataFrame([{"model": "q", "drafter": "d", "k": 3, "dataset": "mt-bench",
                         "batch": 1, "te": 0.5}])
    assert len(published.comparison({"three_step_correction": tsc}, study)) == 1
    for change in ({"gpu": "B200"}, {"precision": "bf16", "tp": 2}):
        assert published.comparison({"three_step_correction": tsc},
                                    {"q": {**study["q"], **change}}).empty

def test_comparison_sets_the_study_per_layer_overlap_beside_the_sequence_one():
    """The study's per-layer overlap (Table 19) is its Table 17's, along the committed sequence
    (Qwen3-30B layer 22: 0.433 beside 0.431 overall): the overlap inside windows was set beside
    it. The per-layer table carries both, from the overlap result's per_layer (sequence:
    [layer, d])."""
    from specmoe.report.runs import per_layer_rows

    rc = {"model": "q", "drafter": "d", "k": 3, "dataset": "mt-bench"}
    layers = 23
    pl = {"overlap": [[0.9, 0.8, 0.7]] * layers, "independent": [0.1] * layers,
          "sequence": [[0.42 + i / 1000, 0.3] for i in range(layers)]}
    rows = pd.DataFrame(per_layer_rows(rc, pl))
    assert list(rows["sequence_step1"]) == [p[0] for p in pl["sequence"]]
    study = {"q": published.study_entry({"name": "q", "compare_with": "Qwen3-30B",
                                         "datasets": ["mt-bench"]})}
    df = published.comparison({"per_layer_overlap": rows}, study)
    step1 = df[df["quantity"] != "independent"]
    assert set(step1["quantity"]) == {"sequence_step1"}
    assert list(step1["key"]) == [f"layer {n}" for n in (0, 1, 2, 3, 22)]
    assert list(step1["reproduced"]) == pytest.approx([0.42, 0.421, 0.422, 0.423, 0.442])
    assert list(step1["published"]) == [0.094, 0.265, 0.306, 0.389, 0.433]
    # the figure draws the same measure beside the study's crosses
    rows["run"], rows["label"] = "q/d/K3/mt-bench", "q, K=3, mt-bench"
    fig = figures.per_layer_overlap(rows, {"q": "C0"},
                                    figures._published_per_layer(rows, study))
    drawn = {ln.get_label(): ln.get_ydata() for ln in fig.axes[0].get_lines()}
    assert list(drawn["along the committed sequence"]) == list(rows["sequence_step1"])
    assert list(drawn["published: Qwen3-30B"]) == [0.094, 0.265, 0.306, 0.389, 0.433]


def test_the_comparison_sentence_says_a_run_pools_its_held_out_slices(tmp_path):
    """The tiny default's first dataset joins its held-out sets (31% of tiny-coarse's windows):
    the comparison said "main set" of a pooled run. Its sentence says what is compared, with the
    share of its windows held out (heldout_overlap's slices, not the held-out means), or the
    datasets where that table is not declared; a run on one dataset is named as before."""
    pooled = {"model": "tiny", "drafter": "d", "k": 3, "dataset": "bench+code+prose"}
    alone = {"model": "synth", "drafter": "d", "k": 3, "dataset": "synth"}
    cmp_ = pd.DataFrame([{**run, "table": "overlap_by_distance", "study_model": "Mixtral-8x7B",
                          "key": "", "quantity": "seq1", "published": 0.355,
                          "reproduced": 0.4, "difference": 0.045} for run in (pooled, alone)])
    slices = [("coding", "bench", 200), ("math", "bench", 100), ("code", "code", 60),
              ("prose", "prose", 40), ("mean of code", "code", 60), ("mean of prose", "prose", 40)]
    ho = pd.DataFrame([{**pooled, "slice": n, "slice_dataset": ds, "n_windows": w}
                       for n, ds, w in slices])
    tables.write_table(cmp_, tmp_path / "comparison", {}, "")
    tables.write_table(ho, tmp_path / "heldout_overlap", {}, "")
    said = prose.comparison_findings(tables_in(tmp_path))
    # each sentence's compared quantity first (then what the study publishes and these tables
    # do not give, "not compared": test_report_prose_fixes)
    assert [s.split("; ")[0] for s in said[:2]] == [
        "tiny (compared with Mixtral-8x7B) on its main set pooled with its held-out slices (25% "
        "of its windows held out): step-1 overlap along the committed sequence 0.400 (no "
        "interval) vs 0.355",
        "synth (compared with Mixtral-8x7B): step-1 overlap along the committed sequence 0.400 "
        "(no interval) vs 0.355"]
    (tmp_path / "heldout_overlap.csv").unlink()
    assert prose.comparison_findings(tables_in(tmp_path))[0].startswith(
        "tiny (compared with Mixtral-8x7B) on its main set pooled with its held-out slices (bench "
        "with code, prose): ")
    assert "pooled with its held-out slices" in registry.text("comparison")


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


def declared_tables(folder: Path, stems) -> Named:
    """A table rule's outputs (tables: each table's CSV, where the rule declares them)."""
    return Named({"tables": [folder / f"{t}.csv" for t in stems]})


@pytest.fixture(scope="module")
def fixed_results(tmp_path_factory) -> Path:
    """The report from a fixed set of results, the tables of one default run: made once for the
    tests that read it (none writes there)."""
    res = tmp_path_factory.mktemp("fixed") / "results"
    td = res / "tables"
    shutil.copytree(FIXTURE, td)
    for csv in sorted(td.glob("*.csv")):
        tables.write_table(tables.read_csv(csv), csv.with_suffix(""), {"config_hash": "fixture"},
                           registry.text(csv.stem))
    study = {"tiny-fine": {"study": "Qwen2-57B", "precision": None, "tp": None, "gpu": "CPU"},
             "synth-fine": {"study": "Qwen3-30B", "precision": "bf16", "tp": 1, "gpu": "H100"}}
    report.replay_stage(Named({}), declared_tables(td, registry.written_by("replay")),
                        ReplayParams())
    report.comparison_stage(Named({"tables": list(in_folder(td).values())}),
                            declared_tables(td, ["comparison"]),
                            ComparisonParams(study=study, config_hash="x"))
    figs = res / "figures"
    report.figures_stage(Named({"tables": list(in_folder(td).values())}),
                         Named({"png": [figs / f"{f}.png" for f in registry.FIGURES],
                                "pdf": [figs / f"{f}.pdf" for f in registry.FIGURES]}),
                         FiguresParams(study=study, variant_of=VARIANT_OF, config_hash="x"))
    report.report_index_stage(*report_job(td, res / "figures", res / "report" / "index.md"),
                              ReportIndexParams("x"), run_root=None)
    return res


def test_figures_record_where_their_tables_were_measured(tmp_path):
    """A figure is drawn on the report's machine: its metadata holds, beside that machine, the
    `measured` lines of the tables it is drawn from (their union) and the comparison's published
    source; it held neither."""
    import json

    from PIL import Image

    td = tmp_path / "tables"
    shutil.copytree(FIXTURE, td)
    tables.write_table(pd.DataFrame(columns=published.COLUMNS), td / "comparison",
                       {"published_source": published.SOURCE, "measured": ["elsewhere"]})
    paths = list(in_folder(td).values())
    figs = tmp_path / "figures"
    report.figures_stage(Named({"tables": paths}),
                         Named({"png": [figs / f"{f}.png" for f in registry.FIGURES],
                                "pdf": [figs / f"{f}.pdf" for f in registry.FIGURES]}),
                         FiguresParams(study={}, variant_of=VARIANT_OF, config_hash="x"))
    union = sorted({m for p in paths for m in tables.read_provenance(p).get("measured", [])})
    assert len(union) > 6 and "elsewhere" in union  # the CPU runs, the sweeps' GPUs, ...
    for fig in registry.FIGURES:
        prov = json.loads(Image.open(figs / f"{fig}.png").info["Description"])
        assert prov["measured"] == union and prov["published_source"] == published.SOURCE
        assert prov["config_hash"] == "x" and "hardware" in prov


def test_report_from_fixed_results_has_every_figure_and_table(fixed_results):
    res = fixed_results
    index = (res / "report" / "index.md").read_text()
    for fig in registry.FIGURES:
        png = res / "figures" / f"{fig}.png"
        assert png.stat().st_size > 5000 and (res / "figures" / f"{fig}.pdf").stat().st_size > 0
        assert f"![{registry.ALT[fig]}](../figures/{fig}.png)" in index
        assert f"### Figure: {registry.title(fig, figure=True)}" in index
        # the caption as figures.caption fills it from the run's tables
        assert page.md_text(figures.caption(fig, tables_in(res / "tables"))) in index
    tables_made = sorted(p.stem for p in (res / "tables").glob("*.csv"))
    assert "comparison" in tables_made and "replay_three_step" in tables_made
    for stem in tables_made:
        assert f"### {registry.title(stem)}" in index
        assert page.md_text(registry.text(stem)) in index
        assert not tables.read_csv(res / "tables" / f"{stem}.csv").empty, stem
    # the first page: a paragraph, the findings table, the details, then the sections, in order
    heads = [ln for ln in index.splitlines() if ln.startswith("#")]
    assert heads[:5] == ["# specmoe report", "## What this run shows", "## Findings",
                         "## Details", "### What the routing shows, run by run"]
    assert all(not h.startswith("####") for h in heads)
    for section in ("### What the measurements show", "### How it compares with the study",
                    "## Overlap and IPF", "## Cost model", "## Speedup and sweeps",
                    "## Profiling", "## Acceptance", "## The study side by side"):
        assert section in heads
    opening = index.split("## What this run shows")[1].split("## Findings")[0]
    # the numbers the words carry are the fixture tables' (a default run's, regenerated by the
    # pipeline): the decays decided by the matched controls' paired differences
    assert ("tiny-fine: shown and above its untrained control, matched request by request or "
            "prompt by prompt (evidence of learned routing): overlap decays inside windows (") \
        in opening
    assert "within-window shuffle null" not in opening
    assert "so these are not evidence of learned routing" in opening
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    g = sp[(sp["model"] == "tiny-fine") & (sp["k"] == 3)]
    g = g[g["dataset"] == g["dataset"].iloc[0]].sort_values("batch")
    first, best = g.iloc[0], g.loc[g["speedup"].idxmax()]
    iv = lambda r: f"{r['speedup']:.2f} [{r['speedup_low']:.2f}, {r['speedup_high']:.2f}]"  # noqa
    # "largest" only where the sweep's pair test puts every other batch size below the highest
    decided = "below_highest" in g and g.drop(best.name)["below_highest"].eq(True).all()
    highest = ("" if best.name == first.name else
               f"{'largest' if decided else 'highest point estimate'} {iv(best)} at batch "
               f"{int(best['batch'])}")
    assert f"tiny-fine, K=3: {first['direction']}; speedup {iv(first)} at batch 1, {highest}" \
        in opening
    assert (f"{int((g['speedup_high'] < 1).sum())} of {len(g)} intervals below 1 and "
            f"{int((g['speedup_low'] > 1).sum())} above") in opening
    # a TE past 1, or whose interval reaches past 1, is marked, never given as a value
    t3 = tables.read_csv(FIXTURE / "te_three_ways.csv")
    flagged = t3[(t3["batch"] == 1) & (t3["te_profiled_status"] != "ok")]
    assert len(flagged)
    for status in flagged["te_profiled_status"]:
        assert f"from profiled passes {status} (raw ratio" in index
    assert "What a CPU run cannot show" in opening
    mc = tables.read_csv(FIXTURE / "matched_controls.csv").set_index("target").loc["tiny-fine"]
    decay = (f"{mc['seq_decay_difference']:+.3f} [{mc['seq_decay_difference_low']:+.3f}, "
             f"{mc['seq_decay_difference_high']:+.3f}]")
    row = next(ln for ln in index.splitlines()
               if ln.startswith("| tiny-fine | overlap decays with distance | overlap(1) - "
                                "overlap(8) along the sequence > 0 |"))
    # where the untrained control shows the decay as well (its cell ends "(shown)"), the
    # verdict says so after it
    ctl = row.split(' | shown | ')[1].split(' | ')[0]
    assert row.endswith(f"| shown | {ctl} | yes: above the matched control by {decay}"
                        + (f", {prose.SHARED}" if ctl.endswith("(shown)") else "") + " |"), row
    ob = tables.read_csv(FIXTURE / "overlap_by_distance.csv")
    seq1 = ob[ob["model"] == "tiny-fine"][["seq1", "seq1_low", "seq1_high"]].iloc[0]
    held = re.search(r"tiny-fine \(compared with Qwen2-57B\) on its main set pooled with its "
                     r"held-out slices \((\d+)% of its windows held out\)", index)
    assert held and 0 < int(held.group(1)) < 100
    assert (f"tiny-fine (compared with Qwen2-57B) on its main set pooled with its held-out slices "
            f"({held.group(1)}% of its windows held out): step-1 overlap along the committed "
            f"sequence {seq1['seq1']:.3f} [{seq1['seq1_low']:.3f}, {seq1['seq1_high']:.3f}] vs "
            f"0.204") \
        in index
    st = tables.read_csv(FIXTURE / "overlap_by_distance.csv")
    loops = st[st["model"] == "tiny-fine"]["repetitive_windows_pct"].iloc[0]
    # said where the loops pass the share that can make overlap (prose.LOOPING), else not
    said = f"tiny-fine's output repeats a token in {loops:.0f}% of its windows" in index
    assert said == (loops > 100 * prose.LOOPING), loops
    assert "(the same prompts as a slice of tiny-fine/tiny-drafter/K3/" in index
    # one number format per quantity: no scientific notation, no "inf", no "K over N"
    assert not re.search(r"\d\.\d+e[-+]\d", index) and " inf " not in index
    assert "K over N" not in index and "| k/N |" in index
    cmp_ = tables.read_csv(res / "tables" / "comparison.csv")
    assert set(cmp_["model"]) == {"tiny-fine", "synth-fine"}
    assert "ipf_skewed_window" not in set(cmp_["quantity"])  # this project's own: no twin
    # figures as wide as the page's column (1,100 px), not wider
    from PIL import Image

    for fig in registry.FIGURES:
        assert Image.open(res / "figures" / f"{fig}.png").size[0] <= 1100, fig
    assert (res / "report" / "summary.txt").read_text().startswith("Report: ")


@pytest.mark.parametrize("with_run", [False, True])
def test_a_comparison_row_of_a_model_without_runs_is_named_by_its_model(tmp_path, with_run):
    """A cost-only study model has weight-model rows in the comparison with no drafter or
    dataset: its run is named by its model alone, beside a run's full name (such a row stopped
    the figures job)."""
    from specmoe.report.runs import load

    row = {"table": "weight_model", "model": "qwen-cost", "drafter": None, "k": 3,
           "dataset": None, "quantity": "moe_weight_share", "published": 0.667,
           "reproduced": 0.667}
    rows = [row] + ([{**row, "table": "overlap_by_distance", "model": "synth", "drafter": "d",
                      "dataset": "x", "quantity": "seq1"}] if with_run else [])
    tables.write_table(pd.DataFrame(rows), tmp_path / "comparison", {}, "")
    df = load(tables_in(tmp_path), "comparison")
    assert list(df["run"]) == ["qwen-cost"] + (["synth/d/K3/x"] if with_run else [])
    assert list(df["label"]) == ["qwen-cost"] + (["synth, K=3, x"] if with_run else [])
    assert figures.figure_frames(tables_in(tmp_path))["comparison"][0] is figures.comparison

    # one panel per table, as its caption says (it said one marker per table)
    fig = figures.comparison(df, figures.palette(list(dict.fromkeys(df["model"]))))
    assert sum(ax.has_data() for ax in fig.axes) == df["table"].nunique()
    assert "one panel per table" in registry.text("comparison", figure=True)


def test_the_comparison_figure_names_rows_it_cannot_draw_and_keeps_units_apart():
    """Two steps of the three-step correction not identified (their TE left [0, 1]) were dropped
    silently, and MiB, a fraction and an expert count shared one axis of the weight model; the
    panel's note names the steps, and each unit has its own panel, named in its title."""
    rows = [{"table": "three_step_correction", "model": "q", "key": f"step {i}",
             "quantity": "te", "published": p, "reproduced": r}
            for i, (p, r) in enumerate([(0.50, 0.52), (0.62, np.nan), (0.70, 0.69),
                                        (0.84, np.nan)])]
    rows += [{"table": "weight_model", "model": "q", "key": "", "quantity": q, "published": p,
              "reproduced": r}
             for q, p, r in [("c_expert_mib_per_gpu", 9.0, 9.0), ("c_dense_mib_per_gpu", 120.0,
                                                                   121.0),
                             ("moe_weight_share", 0.91, 0.90), ("unique_ipf", 20.1, 19.9)]]
    fig = figures.comparison(pd.DataFrame(rows), {"q": "C0"})
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    steps = panels["three step correction"]
    assert sum(len(c.get_offsets()) for c in steps.collections) == 2
    note = " ".join(" ".join(t.get_text().split()) for t in steps.texts)
    assert "not identified" in note and "step 1" in note and "step 3" in note
    assert "step 0" not in note
    drawn = {t: sorted(float(x) for c in ax.collections for x, _ in c.get_offsets())
             for t, ax in panels.items() if t.startswith("weight model")}
    assert drawn == {"weight model (MiB per GPU)": [9.0, 120.0], "weight model": [0.91],
                     "weight model (unique experts)": [20.1]}
    figures.plt.close(fig)
    assert "names it" in registry.text("comparison", figure=True)


def test_every_figure_of_the_fixed_results_has_data():
    """The default run fills every figure in miniature: none is the explanatory placeholder, and
    the variants figure has tiny-fine beside its bf16 variant."""
    study = {"tiny-fine": {"study": "Qwen2-57B"}, "tiny-fine-bf16": {"study": "Qwen2-57B"}}
    frames = figures.figure_frames(in_folder(FIXTURE), study, VARIANT_OF)
    placeholders = [stem for stem, (fn, *_) in frames.items() if fn is figures.empty]
    assert placeholders == ["comparison"] or placeholders == [], placeholders
    _, sp, _, panel, line, *_ = frames["speedup_variants"]
    families = {k: set(g[line]) for k, g in sp.groupby(panel) if g[line].nunique() >= 2}
    assert families == {("tiny-fine", "tiny-drafter", "tinybench+heldout-code+heldout-prose"):
                        {"tiny-fine", "tiny-fine-bf16"}}


def test_the_variants_figure_shows_each_family_at_its_own_smallest_k():
    """A family swept at K = 5 only beside one at K = 3: the variants figure took the smallest K
    of all families and dropped the second with no note; each family is at its own smallest K."""
    rows = [{"model": m, "drafter": "d", "k": k, "dataset": "x", "batch": b, "speedup": 1.1,
             "shape": "undecided within the noise"}
            for m, k in (("a", 3), ("a", 5), ("a-bf16", 3), ("b", 5), ("b-bf16", 5), ("b", 7))
            for b in (1, 2)]
    frames = figures._speedup_frames(pd.DataFrame(rows), {}, {},
                                     {"a-bf16": "a", "b-bf16": "b"})
    sp = frames["speedup_variants"][1]
    assert sorted(set(zip(sp["family"], sp["k"]))) == [("a", 3), ("b", 5)]
    assert set(sp["model"]) == {"a", "a-bf16", "b", "b-bf16"}


def test_every_line_of_a_panel_is_drawn_however_many():
    """Seven Ks of one model, seven variants of a family (paper.yaml's Qwen3-30B has six) and
    five routings: the styles were zipped with six (four) and the rest dropped with no note;
    each is drawn, and told apart from the others of its panel."""
    def legend(fig):
        return [t.get_text() for t in fig.legends[0].get_texts()]

    ks = pd.DataFrame([{"model": "m", "drafter": "d", "dataset": "x", "k": k, "shape": "x",
                        "batch": b, "speedup": 1 + 0.1 * k} for k in range(1, 8)
                       for b in (1, 2, 4)])
    fn, *args = figures._speedup_frames(ks, {"m": "C0"}, {}, {})["speedup_by_k"]
    fig = fn(*args)
    assert legend(fig) == [f"K {k}" for k in range(1, 8)]
    styles = {(ln.get_marker(), ln.get_linestyle()) for ln in fig.axes[0].get_lines()
              if not ln.get_label().startswith("_")}  # not the speedup-1 line
    assert len(styles) == 7
    figures.plt.close(fig)

    names = [f"q-{i}" for i in range(7)]
    var = pd.DataFrame([{"model": m, "drafter": "d", "dataset": "x", "k": 3, "shape": "x",
                         "batch": b, "speedup": 1.5} for m in names for b in (1, 2)])
    fn, *args = figures._speedup_frames(var, figures.palette(names),
                                        {m: {"study": "Q"} for m in names}, {})["speedup_variants"]
    fig = fn(*args)
    assert legend(fig) == names
    figures.plt.close(fig)

    tb = pd.DataFrame([{"run": "r", "label": "r", "model": "m", "batch": b,
                        "routing": f"routing {i}", "te": 0.5} for i in range(5) for b in (1, 2)])
    fig = figures.te_vs_batch(tb, {"m": "C0"})
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == [f"routing {i}" for i in range(5)]
    figures.plt.close(fig)


def test_te_vs_batch_rows_keep_a_te_outside_0_1_as_its_raw_value_and_status():
    """te_vs_batch wrote a TE of 1.3 as a plain value (every other TE table went through
    bounded_te): the row's te is NaN, te_raw 1.3, te_status not physical; an ordinary TE stays."""
    from specmoe.report import runs as report_runs

    t = {"target_efficiency": [], "te_vs_batch": [], "draft_ratio_model": []}
    cm = {"run": {"model": "m", "drafter": "d", "k": 3, "dataset": "x"}, "hardware": "h",
          "c_expert_mib": 1.0,
          "c_dense_mib": 1.0, "moe_weight_share": 0.5, "te_weight_batch1": {},
          "te_vs_batch": [{"routing": "r", "batch": b, "te": te, "compute_bound": False}
                          for b, te in ((1, 0.4), (8, 1.3))]}
    report_runs._add_cost_rows(t, cm)
    ok, bad = t["te_vs_batch"]
    assert (ok["te"], ok["te_raw"], ok["te_status"]) == (0.4, 0.4, "ok")
    assert np.isnan(bad["te"]) and bad["te_raw"] == 1.3
    assert bad["te_status"] == "above 1: not physical"
    # the page marks the cell by its status and shows the raw number; the figure leaves it out
    from specmoe.report import page
    df = pd.DataFrame([{**r, "control_of": None, "label": "m"} for r in t["te_vs_batch"]])
    df["batch"] = [1, 4]
    wide, note = page.pivoted(df, "te_vs_batch")
    assert list(wide["r"]) == [0.4, "1.300 ‡"] and "‡: not physical (te_status)" in note
    fig = figures.te_vs_batch(df.assign(run="m"), {"m": "C0"})
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "r"]
    assert np.isnan(line.get_ydata()[1])
    assert "1 point left out" in " ".join(fig.axes[0].texts[0].get_text().split())
    figures.plt.close(fig)


def test_te_points_of_too_few_windows_or_outside_0_1_are_not_drawn_as_values(tmp_path):
    """The fixture's te_vs_batch with tiny-fine's measured windows flagged sample_ok False at
    batch >= 64 and one TE of 1.30 at batch 8: both were drawn as ordinary points (the 1.30 cut
    off by the axis in one figure) and shown inline as values. The flagged points are open
    markers named in the legend, the 1.30 left out with the panel saying so, the inline cells
    marked, and the captions say so."""
    from specmoe.report import page
    from specmoe.cost.costmodel import MEASURED_ROUTING
    from specmoe.report.bounds import bounded_te

    shutil.copytree(FIXTURE, tmp_path / "t")
    path = tmp_path / "t" / "te_vs_batch.csv"
    head = path.read_text().splitlines()[0]
    df = tables.read_csv(path)
    ours = (df["routing"] == MEASURED_ROUTING) & (df["model"] == "tiny-fine")
    few = ours & (df["batch"] >= 64)
    bad = ours & (df["batch"] == 8) & (df["k"] == 3)
    df.loc[few, "sample_ok"] = False
    for c, v in bounded_te("te", 1.30).items():  # as report.runs writes a TE of 1.30
        df.loc[bad, c] = v
    path.write_text(head + "\n" + df.to_csv(index=False))
    flagged = {(int(b), round(float(t), 6)) for b, t in zip(df.loc[few | bad, "batch"],
                                                             df.loc[few | bad, "te_raw"])}
    frames = figures.figure_frames(in_folder(tmp_path / "t"))
    for stem in ("te_vs_batch", "te_by_dataset"):
        fn, *args = frames[stem]
        fig = fn(*args)
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith(
            "tiny-fine,")]
        assert panels
        open_points, notes = set(), []
        for ax in panels:
            notes += [" ".join(t.get_text().split()) for t in ax.texts]
            for ln in ax.get_lines():
                pts = {(int(x), round(float(y), 6)) for x, y in zip(ln.get_xdata(),
                                                                    ln.get_ydata())
                       if np.isfinite(y)}
                if ln.get_label() == figures.TOO_FEW_WINDOWS:
                    assert ln.get_markerfacecolor() == "none" and ln.get_linestyle() == "None"
                    open_points |= pts
                elif stem == "te_by_dataset" or ln.get_label() == MEASURED_ROUTING:
                    assert not pts & flagged, (stem, ax.get_title(), ln.get_label())
        assert {(64, 0.25), (128, 0.25)} <= open_points
        assert not any(y > 1 for _, y in open_points)
        assert any("left out, not a value: above 1: not physical (te_status" in t
                   for t in notes), (
            stem, notes)
        assert figures.TOO_FEW_WINDOWS in [t.get_text() for t in fig.legends[0].get_texts()]
        figures.plt.close(fig)
        assert "Open markers" in registry.text(stem, figure=True)

    wide, note = page.pivoted(tables.read_csv(path), "te_vs_batch")
    rows = wide[wide["model"] == "tiny-fine"].set_index(["k", "batch"])
    assert rows.loc[(3, 64), MEASURED_ROUTING] == "0.250 †"
    # an unflagged point shown as its value: the run's first dataset's TE (page.pivoted's)
    first = df.loc[ours & (df["batch"] == 4) & (df["k"] == 3), "te"].iloc[0]
    assert rows.loc[(3, 4), MEASURED_ROUTING] == pytest.approx(first, abs=1e-3)
    assert "†: the trace has too few windows" in note and "‡" not in note  # batch 8 not shown


# the fixture run's models matched to study models, each with its main set (its first dataset)
FIXTURE_STUDY = {"tiny-fine": published.study_entry(
                     {"name": "tiny-fine", "compare_with": "Qwen2-57B",
                      "datasets": ["tinybench+heldout-code+heldout-prose", "heldout-code"]}),
                 "synth-fine": published.study_entry(
                     {"name": "synth-fine", "compare_with": "Qwen3-30B", "datasets": ["synth"]})}


def test_published_points_are_drawn_only_on_main_set_k3_panels():
    """The study's tables are of its main set at K = 3: its crosses were drawn on the K = 5,
    K = 7 and heldout-code panels too (the comparison table's rule, published.main_run, holds
    for the figures)."""
    frames = figures.figure_frames(in_folder(FIXTURE), FIXTURE_STUDY, VARIANT_OF)
    main = {"tiny-fine": "tiny-fine/tiny-drafter/K3/tinybench+heldout-code+heldout-prose",
            "synth-fine": "synth-fine/synth/K3/synth"}
    fn, df, colors, pub = frames["overlap_by_distance"]
    assert set(pub["run"]) == set(main.values())
    fn_l, df_l, colors_l, pub_l = frames["per_layer_overlap"]
    assert set(pub_l["run"]) == {main["synth-fine"]}  # Qwen2-57B has no published layers
    for fig in (fn(df, colors, pub), fn_l(df_l, colors_l, pub_l)):
        crossed = [ax.get_title() for ax in fig.axes
                   if any(lab.startswith("published") for lab in ax.get_legend_handles_labels()[1])]
        assert sorted(crossed) == (["synth-fine, K=3, synth", "tiny-fine, K=3, tinybench+2"]
                                   if fig.axes[0].get_xlabel() == "step distance d"
                                   else ["synth-fine, K=3, synth"])

def test_a_report_job_reads_only_its_declared_tables_each_once(tmp_path, monkeypatch):
    """The report reads the tables its rule declares and nothing else in the folder, and parses
    each of them once, however many sentences, findings and blocks read it."""
    td = tmp_path / "results" / "tables"
    shutil.copytree(FIXTURE, td)
    for csv in sorted(td.glob("*.csv")):
        tables.write_table(tables.read_csv(csv), csv.with_suffix(""), {}, registry.text(csv.stem))
    csvs, mds, _ = report_inputs(td, tmp_path)
    left_out = "speedup_vs_batch"  # a table another configuration left in the folder
    csvs.pop(left_out), mds.pop(left_out)
    parsed = []
    read_csv = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda src, *a, **kw:  # a path, or a file it opened
                        parsed.append(str(getattr(src, "name", src))) or read_csv(src, *a, **kw))
    out = tmp_path / "results" / "report" / "index.md"
    report.report_index_stage(Named({"tables": csvs, "markdown": mds, "figures": {}}),
                              Named({"md": out, "html": out.with_suffix(".html"),
                                     "summary": out.parent / "summary.txt"}),
                              ReportIndexParams("x"), run_root=None)
    mine = [p for p in parsed if p.startswith(str(td))]  # not the package's published data
    assert len(mine) == len(set(mine)) and set(mine) <= {str(p) for p in csvs.values()}
    assert str(csvs["overlap_by_distance"]) in mine
    text = out.read_text()
    assert f"### {registry.title('overlap_by_distance')}" in text
    assert f"### {registry.title(left_out)}" not in text and "(file `speedup_vs_batch`" not in text


def test_report_html_opens_in_a_headless_browser_with_every_image(fixed_results):
    res = fixed_results
    page = open_page((res / "report" / "index.html").as_uri())
    assert page["errors"] == []
    assert page["images"] == len(registry.FIGURES) and page["broken"] == []
    assert "How it compares with the study" in page["text"]
    assert page["overflowing"] == 0  # wide tables scroll inside the column


@pytest.mark.slow  # a real Snakemake run
def test_replay_configuration_runs_in_seconds_without_models(tmp_path):
    wd = copy_workflow(tmp_path / "wf", {"models": []}, "replay.yaml")
    t0 = time.perf_counter()
    snakemake(wd, configfile="replay.yaml", cores=1, timeout=300)
    assert time.perf_counter() - t0 < 120
    for stem in ("replay_unique_experts", "replay_weight_model", "replay_three_step"):
        df = tables.read_csv(wd / "results" / "tables" / f"{stem}.csv")
        assert not df.empty
    index = (wd / "results" / "report" / "index.md").read_text()
    assert "largest difference from the published te_predicted" in index


def _routing_tables(tmp_path, fine: dict, coarse: dict, controls: dict | None = None):
    """Minimal overlap tables for a fine and a coarse tiny target, each with its untrained control
    (the control's values: `controls`, else the target's own), which its `control_of` column
    names as one (its name says nothing: the report does not read names)."""
    ob, dec, ue = [], [], []
    for name, kn, v in (("fine", 0.125, fine), ("coarse", 0.25, coarse)):
        for model in (name, f"untrained-{name}"):
            w = v if model == name or controls is None else {**v, **controls}
            run = {"model": model, "drafter": "d", "k": 3, "dataset": "main",
                   "control_of": None if model == name else name}
            ob.append({**run, "step1": w["seq1"], "independent": w["ind"],
                       "independent_low": w["ind"] - 0.005, "independent_high": w["ind"] + 0.005,
                       "seq1": w["seq1"],
                       "seq1_low": w["seq1"] - 0.01, "seq1_high": w["seq1"] + 0.01,
                       **{f"seq{d}": w["seq1"] - w["decay"] * (d - 1) / 7 for d in range(2, 9)},
                       "seq_decay": w["decay"], "seq_decay_low": w["decay"] - 0.02,
                       "seq_decay_high": w["decay"] + 0.02, "seq_requests": 40,
                       "seq_excess": w["seq1"] - w["ind"],
                       "seq_excess_low": w["seq1"] - w["ind"] - 0.01,
                       "seq_excess_high": w["seq1"] - w["ind"] + 0.01,
                       "seq_within_request": w["ind"] + 0.01,
                       "seq_excess_within": w["seq1"] - w["ind"] - 0.01,
                       "seq_excess_within_low": w["seq1"] - w["ind"] - 0.02,
                       "seq_excess_within_high": w["seq1"] - w["ind"],
                       "above_shuffle": w["above"], "above_shuffle_low": w["above"] - 0.01,
                       "above_shuffle_high": w["above"] + 0.01,
                       "above_shuffle_share": w["above"] / 0.2,
                       "above_shuffle_share_low": (w["above"] - 0.01) / 0.2,
                       "above_shuffle_share_high": (w["above"] + 0.01) / 0.2,
                       "window_decay_within_status": w["above"],
                       "window_decay_within_status_low": w["above"] - 0.01,
                       "window_decay_within_status_high": w["above"] + 0.01,
                       "window_decay": w["decay"], "window_decay_low": w["decay"] - 0.02,
                       "window_decay_high": w["decay"] + 0.02})
            share = (w["seq1"] - w["ind"]) / w["seq1"]
            dec.append({**run, "k_over_n": kn, "sequence_temporal_share": share,
                        "sequence_temporal_share_low": share - 0.02,
                        "sequence_temporal_share_high": share + 0.02,
                        "hottest_expert_pct": 100 * w["hot"]})
            ue.append({**run, "empirical": 20.0, "uniform": 29.0,
                       "ipf_uniform_sequence": 20.0 * (1 + w["ipf"]),
                       "ipf_uniform_sequence_error_pct": 100 * w["ipf"],
                       **{f"ipf_uniform_sequence_error_pct_{end}": 100 * w["ipf"] + side * w.get(
                           "ipf_half", 0.5) for end, side in (("low", -1), ("high", 1))},
                       "ipf_uniform_window": 21.0, "ipf_uniform_window_error_pct": 5.0,
                       "ipf_skewed_window": 20.5, "ipf_skewed_window_error_pct": 2.5,
                       "ipf_skewed_window_unconverged_experts": 0})
    for stem, rows in (("overlap_by_distance", ob), ("overlap_decomposition_step1", dec),
                       ("unique_experts", ue)):
        pd.DataFrame(rows).to_csv(tmp_path / f"{stem}.csv", index=False)


def _page(tmp_path) -> str:
    page = tmp_path / "report" / "index.md"
    report.report_index_stage(*report_job(tmp_path, tmp_path, page), ReportIndexParams("x"),
                              run_root=None)
    return page.read_text()


def test_routing_targets_follow_the_tables(tmp_path):
    """The first page's verdicts come from the tables: a collapsed, flat, reversed miniature is
    'not shown' with its numbers; a balanced, decaying one is 'shown'; an interval that straddles
    its threshold is 'undecided'; and each finding is evidence of learned routing only where the
    untrained control does not show it (tables that contradict each other's words)."""
    bad = {"seq1": 0.38, "ind": 0.40, "decay": -0.03, "hot": 0.83, "ipf": 0.12, "above": -0.03}
    _routing_tables(tmp_path, fine=bad, coarse={**bad, "seq1": 0.60, "ind": 0.40})
    t = prose.routing_targets(tables_in(tmp_path))
    fine = t[t["model"] == "fine"].set_index("finding")["status"]
    assert set(fine) == {"not shown"}
    assert "83%" in t[t["model"] == "fine"]["value"].iloc[0]
    text = _page(tmp_path)
    assert "## Findings" in text and "## What this run shows" in text
    assert "fine: nothing that separates learned routing" in text
    assert ("not shown or undecided: expert loads near uniform (independence 0.400 [0.395, "
            "0.405]") in text

    # a balanced, decaying target beside a control that is flat inside its windows
    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.009, "above": 0.03}
    flat = {"decay": 0.0, "above": 0.0, "seq1": 0.9}
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27},
                    controls=flat)
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    assert set(t.loc["fine"]["status"]) == {"shown"}
    assert t.loc[("fine", "overlap decays inside windows"), "learned"] == "yes"
    assert "step-1 overlap above the within-window shuffle null" not in t.loc["fine"].index
    assert t.loc[("fine", "overlap decays with distance"), "learned"] == "yes"
    assert t.loc[("fine", "overlap decays with distance"), "control_status"] == "undecided" \
        or t.loc[("fine", "overlap decays with distance"), "control_status"] == "not shown"
    assert t.loc[("fine", "step-1 overlap above independence"), "learned"] == \
        "no: the untrained control shows it as well"
    text = _page(tmp_path)
    assert ("fine: shown and not shared by its untrained control (evidence of learned "
            "routing): overlap decays inside windows (+0.030 [+0.020, +0.040]; all pairs, d = 1 "
            "to K: +0.060 [+0.040, +0.080], certifying 15% [10%, 20%] of the temporal overlap "
            "as within-window ordering)") in text
    assert "| fine | overlap decays with distance |" in text

    # the same target beside a control that decays and clears its null as well: not evidence
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27},
                    controls={"seq1": 0.9})
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    assert set(t.loc["fine"]["learned"]) == {"no: the untrained control shows it as well"}
    assert t.loc[("fine", "temporal share larger for finer experts"), "learned"] == \
        "no: the untrained control shows it as well"
    text = _page(tmp_path)
    assert "fine: nothing that separates learned routing; its untrained control shows" in text
    assert "so these are not evidence of learned routing" in text

    # the study's "within 4%": the uniform IPF of the overlap along the sequence decides it
    _routing_tables(tmp_path, fine={**good, "ipf": 0.05}, coarse=good, controls=flat)
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    assert t.loc[("fine", "uniform IPF predicts unique experts"), "status"] == "not shown"
    assert "+5.00 [+4.50, +5.50]% (21.00 vs 20.00)" in t.loc[
        ("fine", "uniform IPF predicts unique experts"), "value"]
    # decided by the error's interval over requests: a point inside 4% whose interval crosses
    # its edge is undecided (it was shown on the point alone)
    _routing_tables(tmp_path, fine={**good, "ipf": 0.035, "ipf_half": 1.0}, coarse=good,
                    controls=flat)
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    assert t.loc[("fine", "uniform IPF predicts unique experts"), "status"] == "undecided"

    _routing_tables(tmp_path, fine={**good, "decay": 0.01}, coarse=good, controls=flat)
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])["status"]
    assert t.loc[("fine", "overlap decays with distance")] == "undecided"


def test_direction_words_come_with_the_interval_that_decides_them(tmp_path):
    """'decays' where the decay's interval lies above 0, 'rises' below, 'undecided' across it,
    each with the interval; the sweep's speedup summary says slower or faster as the sweep
    decided it (sweep.direction_labels), with the speedup at batch 1 and where it is largest."""
    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.0, "above": 0.03}
    for decay, word in ((0.06, "decays (+0.060 [+0.040, +0.080])"),
                        (-0.05, "rises (-0.050 [-0.070, -0.030])"),
                        (0.005, "undecided (+0.005 [-0.015, +0.025])")):
        _routing_tables(tmp_path, fine={**good, "decay": decay}, coarse=good)
        words = " ".join(prose.report_findings(tables_in(tmp_path)))
        assert f"fine, K=3, main: inside windows, overlap at d = 1..1 0.250, from d = 1 to 1 " \
               f"{word}" in words
    run = {"model": "fine", "drafter": "d", "k": 3, "dataset": "main", "tau": 2.0,
           "shape": "undecided within the noise", "draft_cost": np.nan}
    for spd, word in ((0.8, "slower"), (1.3, "faster"), (1.0, "neither decidedly faster nor "
                                                           "slower")):
        pd.DataFrame([{**run, "batch": b, "speedup": spd + 0.01 * (b == 4),
                       "speedup_low": spd - 0.1, "speedup_high": spd + 0.1, "direction": word}
                      for b in (1, 2, 4, 8)]).to_csv(tmp_path / "speedup_vs_batch.csv",
                                                     index=False)
        # the first page's numbers with their intervals: at batch 1 and where highest (the
        # intervals, which overlap, rank nothing)
        assert (f"fine, K=3: {word}; speedup {spd:.2f} [{spd - 0.1:.2f}, {spd + 0.1:.2f}] at "
                f"batch 1, highest point estimate {spd + 0.01:.2f} [{spd - 0.1:.2f}, "
                f"{spd + 0.1:.2f}] at batch 4; the batch sizes are not separated by their "
                "intervals; ") in prose.opening(tables_in(tmp_path))


def test_a_highest_speedup_is_called_the_largest_only_where_the_intervals_decide_it(tmp_path):
    """'speedup 1.04 [0.81, 1.33] at batch 1, largest 1.10 [0.86, 1.41] at batch 8' (and
    'largest 1.01 [0.78, 1.32] at batch 1' under a target of 'batch 1 above the largest') ranked
    point estimates whose intervals overlap: the highest is named as such, and 'largest' only
    where the sweep's pair test puts every other batch size below it (below_highest)."""
    run = {"model": "fine", "drafter": "d", "k": 3, "dataset": "main", "run": "fine/d/K3/main",
           "tau": 2.0, "shape": "undecided within the noise", "draft_cost": np.nan,
           "direction": "neither decidedly faster nor slower"}
    # the model's N/k, from which the findings row takes the shape the study's rule expects
    pd.DataFrame([{**run, "k_over_n": 0.125}]).to_csv(
        tmp_path / "overlap_decomposition_step1.csv", index=False)

    def words(speedups, below=None):
        rows = [{**run, "batch": b, "speedup": v, "speedup_low": v - 0.23, "speedup_high": v + 0.29}
                for b, v in zip((1, 2, 4, 8), speedups)]
        for r, x in zip(rows, below or []):
            r["below_highest"] = x
        pd.DataFrame(rows).to_csv(tmp_path / "speedup_vs_batch.csv", index=False)
        td = tables_in(tmp_path)
        return prose.opening(td), prose._cpu_rows(td, ["fine"])[0]["value"]

    text, value = words([1.04, 1.09, 1.04, 1.10], [False] * 4)
    assert ("speedup 1.04 [0.81, 1.33] at batch 1, highest point estimate 1.10 [0.87, 1.39] at "
            "batch 8; the batch sizes are not separated by their intervals; ") in text
    assert "largest" not in text and "largest" not in value
    assert value.startswith("1.04 [0.81, 1.33] at batch 1, highest point estimate 1.10 [0.87, "
                            "1.39] at batch 8; the batch sizes are not separated")
    text, value = words([1.01, 0.91, 0.79, 0.96], [False] * 4)
    assert ("speedup 1.01 [0.78, 1.30] at batch 1, the highest point estimate; the batch sizes "
            "are not separated by their intervals; ") in text
    # separated from some: named; from all: the largest
    text, _ = words([1.0, 1.3, 1.28, 1.0], [True, False, False, True])
    assert ("at batch 1, highest point estimate 1.30 [1.07, 1.59] at batch 2, not separated by "
            "their intervals from batch 4; ") in text
    text, value = words([1.0, 1.6, 1.0, 1.0], [True, False, True, True])
    assert "at batch 1, largest 1.60 [1.37, 1.89] at batch 2; " in text
    assert "largest 1.60 [1.37, 1.89] at batch 2; shape:" in value
    # a table without the pair test decides none
    text, _ = words([1.0, 1.6, 1.0, 1.0])
    assert "highest point estimate 1.60 [1.37, 1.89] at batch 2; the batch sizes are not" in text


def test_a_tiny_target_swept_on_a_gpu_has_its_gpu_findings_decided_not_marked_cpu(tmp_path):
    """The findings table marked a tiny target's speedup and MoE-share rows "not measurable on a
    CPU" by the model's kind, also where the speedup table's device column says its sweep ran on
    a GPU: there the speedup row is decided by the sweep's shape and the MoE share by its interval
    over the profile's engine starts (undecided without one); a CPU sweep keeps the mark, and neither row joins the routing
    sentences of the first paragraph."""
    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.009, "above": 0.03}
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27},
                    controls={"decay": 0.0, "above": 0.0, "seq1": 0.9})
    run = {"model": "fine", "drafter": "d", "k": 3, "dataset": "main", "run": "fine/d/K3/main",
           "tau": 2.0, "draft_cost": np.nan, "direction": "faster"}
    pd.DataFrame([{"model": "fine", "drafter": "d", "k": 3, "dataset": "main", "batch": 1,
                   "class": "moe", "decode_share": 0.3, "moe_weight_share": 0.8,
                   "run": "fine/d/K3/main"}]).to_csv(tmp_path / "kernel_time_shares.csv",
                                                      index=False)
    # "fine" has k/N 0.125 (N/k 8 < 16): the study's N/k rule expects it concave
    for device, shape, want in (("cuda", "concave", "shown"),
                                ("cuda", "peak at low batch", "not shown"),
                                ("cuda", "rising", "not shown"),
                                ("cuda", "undecided within the noise", "undecided"),
                                ("cpu", "peak at low batch", prose.CPU)):
        pd.DataFrame([{**run, "batch": b, "speedup": 1.5 - 0.1 * b, "speedup_low": 1.4 - 0.1 * b,
                       "speedup_high": 1.6 - 0.1 * b, "shape": shape, "device": device}
                      for b in (1, 2, 4)]).to_csv(tmp_path / "speedup_vs_batch.csv", index=False)
        td = tables_in(tmp_path)
        t = prose.routing_targets(td).set_index(["model", "finding"])["status"]
        assert t.loc[("fine", prose.SPEEDUP_SHAPE)] == want, (device, shape)
        assert t.loc[("fine", prose.MOE_SHARE)] == ("undecided" if device == "cuda"
                                                    else prose.CPU)
        assert prose.SPEEDUP_SHAPE not in prose.opening(td)
    # the profile's MoE share with its interval over engine starts decides the row on a GPU
    for lo, hi, want in ((0.25, 0.35, "shown"), (0.7, 0.9, "undecided"),
                         (0.85, 0.9, "not shown"), (np.nan, np.nan, "undecided")):
        pd.DataFrame([{**run, "batch": 1, "moe_time_share": 0.3, "moe_time_share_low": lo,
                       "moe_time_share_high": hi}]).to_csv(tmp_path / "te_three_ways.csv",
                                                           index=False)
        pd.DataFrame([{**run, "batch": b, "speedup": 1.5 - 0.1 * b, "speedup_low": 1.4 - 0.1 * b,
                       "speedup_high": 1.6 - 0.1 * b, "shape": "peak at low batch",
                       "device": "cuda"} for b in (1, 2, 4)]).to_csv(
            tmp_path / "speedup_vs_batch.csv", index=False)
        rows = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
        assert rows.loc[("fine", prose.MOE_SHARE), "status"] == want, (lo, hi)
        if np.isfinite(lo):
            assert f"0.30 [{lo:.2f}, {hi:.2f}] of time, 0.80 of weights" in rows.loc[
                ("fine", prose.MOE_SHARE), "value"]


def test_the_speedup_shape_a_tiny_target_is_held_to_is_the_study_s_n_k_rule_s(tmp_path):
    """Every tiny target's speedup row was held to "peak at low batch", the study's shape for
    its fine-grained models (N/k >= 16) only; its coarse Mixtral (N/k 4) is concave, and
    stepmodel.nk_rule_shape says so. run2's tiny targets have N/k 8 and 4 (k_over_n 0.125, 0.25
    in overlap_decomposition_step1): a GPU sweep of tiny-coarse that is concave read "not
    shown", agreement with the study reported as failure. The row now names the rule's shape
    with the model's N/k, says that the study's fine-grained models peak at low batch, and is
    decided against that shape."""
    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.009, "above": 0.03}
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27},
                    controls={"decay": 0.0, "above": 0.0, "seq1": 0.9})

    def speedup(model: str, shape: str) -> pd.DataFrame:
        return pd.DataFrame([{"model": model, "drafter": "d", "k": 3, "dataset": "main",
                              "run": f"{model}/d/K3/main", "tau": 2.0, "direction": "faster",
                              "batch": b, "speedup": 1.2, "speedup_low": 1.1,
                              "speedup_high": 1.3, "shape": shape, "device": "cuda"}
                             for b in (1, 2, 4)])

    def row(model: str):
        t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
        return t.loc[(model, prose.SPEEDUP_SHAPE)]

    speedup("coarse", "concave").to_csv(tmp_path / "speedup_vs_batch.csv", index=False)
    r = row("coarse")
    assert r["status"] == prose.SHOWN
    assert "'concave'" in r["target"] and "N/k = 4" in r["target"]
    assert "peak at low batch" in r["target"] and ">= 16" in r["target"]  # the study's fine ones
    speedup("coarse", "peak at low batch").to_csv(tmp_path / "speedup_vs_batch.csv", index=False)
    assert row("coarse")["status"] == prose.NOT_SHOWN
    # a fine-grained tiny target (k/N 1/16): the rule's shape is the peak at low batch
    dec = pd.read_csv(tmp_path / "overlap_decomposition_step1.csv")
    dec.loc[dec["model"].isin(["fine", "untrained-fine"]), "k_over_n"] = 1 / 16
    dec.to_csv(tmp_path / "overlap_decomposition_step1.csv", index=False)
    speedup("fine", "peak at low batch").to_csv(tmp_path / "speedup_vs_batch.csv", index=False)
    r = row("fine")
    assert r["status"] == prose.SHOWN and "'peak at low batch'" in r["target"]
    assert "N/k = 16" in r["target"]
    speedup("fine", "concave").to_csv(tmp_path / "speedup_vs_batch.csv", index=False)
    assert row("fine")["status"] == prose.NOT_SHOWN


def _curve_tables(tmp_path, dense: list[float], speedups: list[float], shape: str):
    """A draft-ratio table (model-derived, exact) and a speedup table with its shape label."""
    run = {"model": "fine", "drafter": "d", "k": 3, "dataset": "main"}
    batches = [1, 2, 4, 8]
    dr = [{**run, "control_of": None, "batch": b, "synthetic_drafter": name, "draft_cost": c}
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
    td = tables_in(tmp_path)
    words = " ".join(prose.draft_cost_findings(td) + prose.measured_findings(td))
    assert "dense drafter: the step model's draft cost ratio rises with batch size, from 0.100" \
        in words
    assert "MoE drafter: the step model's draft cost ratio stays flat" in words
    assert "B=1: 1.40 [1.26, 1.54]" in words and "; shape: peak at low batch; " in words
    assert "no interval: no direction is claimed" in words
    _curve_tables(tmp_path, [0.4, 0.3, 0.2, 0.1], [1.0, 1.1, 1.0, 1.05],
                  "undecided within the noise")
    td = tables_in(tmp_path)
    words = " ".join(prose.draft_cost_findings(td) + prose.measured_findings(td))
    assert "dense drafter: the step model's draft cost ratio falls with batch size" in words
    assert "rises" not in words and "; shape: undecided within the noise; " in words
    # a curve that turns is worded by its turn, not by its ends
    _curve_tables(tmp_path, [0.4, 0.2, 0.1, 0.39], [1.0, 1.1, 1.0, 1.05], "concave")
    words = " ".join(prose.draft_cost_findings(tables_in(tmp_path)))
    assert ("dense drafter: the step model's draft cost ratio falls from 0.400 at batch 1 to "
            "0.100 at batch 4, then rises to 0.390 at batch 8.") in words


def test_one_number_format_per_quantity():
    """Fixed decimals, never scientific notation; a p-value under 0.001 as '< 0.001'; a percent
    column with one decimal; an unbounded value as '∞'; the symbols of the method in headers."""
    df = pd.DataFrame({"k": [3], "k_over_n": [0.125], "top_k": [8], "p_by_request": [8.67e-4],
                       "p_tokens_welch": [0.0051], "difference": [2.35e-16],
                       "te_sweep_high": [float("inf")], "gap_closed_pct": [44.0],
                       "ipf_uniform_sequence_error_pct": [3.06], "t_target_us": [19840.4]})
    md = tables.to_markdown(df)
    head, _, row = md.splitlines()
    assert "| K | k/N | k (experts per token) |" in head and "K over N" not in head
    assert row == ("| 3 | 0.125 | 8 | < 0.001 | 0.005 | 0.000 | ∞ | 44.0 | +3.1 | 19,840 |")
    assert "e-" not in md and "inf" not in md
    assert tables.header("gap_closed_pct") == "gap closed (%)"


def test_wide_tables_are_split_and_long_ones_show_their_main_rows():
    from specmoe.report import page

    run = {"model": "m", "drafter": "d", "k": 3, "dataset": "main+held"}
    df = pd.DataFrame([{**run, **{f"step{d}": 0.3 for d in range(1, 4)}, "step4": np.nan,
                        "independent": 0.1, **{f"shuffle{d}": 0.2 for d in range(1, 4)},
                        **{f"seq{d}": 0.3 for d in range(1, 9)}, "seq_decay": 0.05,
                        "step1_no_repetition": 0.3, "repetitive_windows_pct": 4.0}])
    got = page.parts(df, "overlap_by_distance")
    titles = [t for t, _ in got]
    assert titles == ["inside windows", "the within-window shuffle null",
                      "along the committed sequence", "without windows that repeat a token"]
    for _, part in got:
        assert list(part.columns[:4]) == ["model", "drafter", "k", "dataset"]
        assert "step4" not in part  # a column without a value is left out
    wide = pd.DataFrame([{**run, **{f"x{i}": 1.0 for i in range(25)}}])
    assert [len(p.columns) - 4 for _, p in page.parts(wide, "anything")] == [9, 9, 7]
    cmp_ = pd.DataFrame([{**run, "table": "t", "quantity": q, "published": 1.0}
                         for q in ["seq1", "independent"] + [f"q{i}" for i in range(60)]])
    shown, note = page.main_rows(cmp_, "comparison")
    assert set(shown["quantity"]) == {"seq1", "independent"} and "2 of 62 rows" in note
    curve = pd.DataFrame([{**run, "batch": 2 ** i} for i in range(13)] * 4)
    shown, note = page.main_rows(curve, "draft_ratio_model")
    assert sorted(set(shown["batch"])) == [1, 4, 16, 64, 256, 1024, 4096]


def test_html_has_contents_ordered_headings_the_method_and_alt_texts(tmp_path):
    """The page's h2 and h3 carry anchors listed in a table of contents; headings never skip a
    level; the method is a link; each image's alt text says what the figure shows."""
    import re

    from specmoe.report.html import to_html

    md = ("# r\n\nSee [docs/method.md](../../docs/method.md).\n\n## What this run shows\n\ntext\n\n"
          "## Overlap and IPF\n\n### Figure: Overlap by step distance\n\n"
          f"![{registry.ALT['overlap_by_distance']}](x.png)\n\n### Overlap by step distance\n\n"
          "## Overlap and IPF\n")
    page = to_html(md)
    assert '<nav class="toc"' in page and page.index("<nav") < page.index("<h2")
    ids = re.findall(r'<h[23] id="([^"]+)"', page)
    assert ids == ["what-this-run-shows", "overlap-and-ipf", "figure-overlap-by-step-distance",
                   "overlap-by-step-distance", "overlap-and-ipf-2"]
    for i in ids:
        assert f'href="#{i}"' in page
    assert '<a href="../../docs/method.md">docs/method.md</a>' in page
    assert 'alt="Point plots, one panel per run: expert overlap' in page


def _visible(page: str) -> str:
    """The text a browser shows of an HTML page's body (its table of contents left out), its
    white space collapsed."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        out: list[str] = []

        def handle_data(self, data):
            self.out.append(data)
    parser = Text()
    parser.out = []
    parser.feed(page.split("<body>", 1)[1].split("</nav>", 1)[-1])
    return " ".join("".join(parser.out).split())


def test_every_caption_reads_on_the_html_page_as_written(tmp_path):
    """The page's captions are Markdown: step<d>, <column>_raw were read as HTML tags (not
    shown) and ipf_<fit>_unconverged as emphasis, so the page said "(step, layer mean)" and
    "interval in _raw"; each caption now shows as its text, its `code` spans as code."""
    from specmoe.report import page
    from specmoe.report.html import to_html

    rel = lambda p: p.name  # noqa: E731
    blocks = {stem: page.table_block(tmp_path / f"{stem}.md", pd.DataFrame(), rel)[2]
              for stem in registry.TABLES}
    blocks.update({f"fig_{stem}": page.figure_block(tmp_path / f"{stem}.png", rel)[4]
                   for stem in registry.FIGURES})
    for stem, md in blocks.items():
        fig = stem.startswith("fig_")
        caption = registry.text(stem.removeprefix("fig_") if fig else stem, figure=fig)
        assert _visible(to_html(md + "\n")) == " ".join(caption.replace("`", "").split()), stem
    assert "<code>max_model_len</code>" in to_html(blocks["prompt_fit"])
    weird = "# <b>x</b> *y* [z](u) &amp; a\\b 1. `<k>_v`"
    assert _visible(to_html(page.md_text(weird))) == "# <b>x</b> *y* [z](u) &amp; a\\b 1. <k>_v"


def test_end_of_run_summary_prints_the_report_and_its_paragraph(tmp_path):
    from specmoe.report.summary import end_of_run

    path = tmp_path / "summary.txt"
    assert "made no report" in end_of_run(path, 0.0)
    path.write_text(report.run_summary(tmp_path / "index.md", "The run shows this."))
    text = end_of_run(path, 0.0)
    assert f"Report: {(tmp_path / 'index.html').resolve()}" in text
    assert "The run shows this." in text
    assert "not rebuilt by this run" in end_of_run(path, time.time() + 60)


def test_curves_are_shown_one_column_per_line():
    """A draft-ratio or TE curve reads as one row per batch size and one column per drafter
    (routing), each model's first run, without the untrained controls' copies."""
    from specmoe.report import page

    df = tables.read_csv(FIXTURE / "draft_ratio_model.csv")
    wide, note = page.pivoted(df, "draft_ratio_model")
    assert list(wide.columns) == ["model", "k", "target_experts", "batch", "dense",
                                  "MoE, the target's N", "MoE, N = 896"]
    assert "tiny-fine-random" not in set(wide["model"])
    qwen = wide[wide["model"] == "synth-fine"].set_index("batch")
    assert list(qwen.index) == [1, 4, 16, 64, 256, 1024, 4096]
    assert (qwen["target_experts"] == 128).all()
    # the flagged drafter (896 experts of Mixtral's width) is empty, not a number
    assert wide[wide["model"] == "synth-coarse"]["MoE, N = 896"].isna().all()
    assert "one column per drafter kind" in note


def test_a_ratio_that_is_not_a_te_is_worded_as_raw_with_its_interval():
    """The sweep's TE 1.86 [0.79, ∞] at batch 1 (the default run's tiny-coarse): its status by
    the one rule (its interval reaches back inside [0, 1], so not identified, whatever an older
    table wrote) and its raw numbers, named raw and "not a TE"; an identified TE with its
    interval."""
    raw = pd.Series({"te_sweep": np.nan, "te_sweep_raw": 1.859, "te_sweep_raw_low": 0.787,
                     "te_sweep_raw_high": np.inf,
                     "te_sweep_status": "not identifiable: its point lies outside (0, 1]"})
    assert prose._te_text(raw, "te_sweep") == \
        f"{bounds.TE_PAST_BOUND} (raw ratio 1.86 [0.79, ∞], not a TE)"
    ok = pd.Series({"te_profiled": 0.559, "te_profiled_low": 0.419, "te_profiled_high": 0.746})
    assert prose._te_text(ok, "te_profiled") == "0.56 [0.42, 0.75]"


def _matched_table(tmp_path, diffs: dict, comparable=("fine", "coarse"), why="") -> None:
    """matched_controls rows for both controls: the paired differences `diffs` (name -> (est,
    low, high)); the controls not in `comparable` not comparable because `why`."""
    rows = []
    for name in ("fine", "coarse"):
        ok = name in comparable
        row = {"model": f"untrained-{name}", "drafter": "d", "k": 3, "dataset": "main",
               "target": name, "matched": True, "comparable": ok, "input_repeat_pct": 0.2,
               "n_requests": 40, "not_comparable_because": "" if ok else why}
        for stat, (est, lo, hi) in diffs.items():
            if ok:
                row.update({f"{stat}_target": est + 0.1, f"{stat}_control": 0.1,
                            f"{stat}_difference": est, f"{stat}_difference_low": lo,
                            f"{stat}_difference_high": hi})
        rows.append(row)
    pd.DataFrame(rows).to_csv(tmp_path / "matched_controls.csv", index=False)


def test_matched_controls_decide_learned_routing_by_the_paired_difference(tmp_path):
    """With matched controls, the control showing a finding too no longer decides it: the paired
    difference does (above 0: evidence; across 0: undecided; below: no), and a control that is
    not comparable is never evidence, whatever its own verdicts."""
    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.009, "above": 0.03}
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27},
                    controls={"seq1": 0.9})  # the control shows everything as well
    _matched_table(tmp_path, {"seq_excess": (0.05, 0.03, 0.07),
                              "window_decay_within_status": (0.01, -0.01, 0.03),
                              "seq_decay": (-0.04, -0.06, -0.02)})
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    assert t.loc[("fine", "step-1 overlap above independence"), "learned"] == \
        ("yes: above the matched control by +0.050 [+0.030, +0.070], though its untrained "
         "control shows it as well")
    assert t.loc[("fine", "overlap decays inside windows"), "learned"].startswith(
        "undecided: not separated from the matched control (+0.010 [-0.010, +0.030])")
    assert t.loc[("fine", "overlap decays with distance"), "learned"].startswith(
        "no: below the matched control")
    assert "+0.050 [+0.030, +0.070] target minus control, paired by request" in \
        t.loc[("fine", "step-1 overlap above independence"), "control_value"]
    text = _page(tmp_path)
    # the control shows it too: "not shared by its untrained control" was false; the target's
    # value lies above its control's, request by request
    assert ("fine: shown and above its untrained control, matched request by request or prompt "
            "by prompt (evidence of learned routing): step-1 overlap above independence") in text
    assert "not shared" not in text.split("## Findings")[0]

    # a control whose inputs loop: nothing it shows or misses is evidence
    _matched_table(tmp_path, {"seq_excess": (0.05, 0.03, 0.07)}, comparable=("fine",),
                   why="read its target's tokens, which loop: 97% of adjacent committed tokens "
                       "repeat the previous one")
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    coarse = t.loc["coarse"]
    learned = coarse[coarse["status"] == "shown"]["learned"]
    assert len(learned) and all(v.startswith("not comparable: the control read its target's "
                                             "tokens, which loop")
                                for v in learned)
    assert t.loc[("fine", "temporal share larger for finer experts"), "learned"].startswith(
        "not comparable")
    assert "shown, but its control is not comparable" in _page(tmp_path)


def test_the_findings_state_the_paired_rule_and_name_a_shared_finding_above_its_control(
        tmp_path):
    """The preamble said 'a finding the control shows as well is not evidence of learned
    routing' above a row its control shows as well and whose last column read 'yes: above the
    matched control by +0.042 [+0.016, +0.070]': the rule the rows follow is the paired one
    where the run has a matched control, and such a row names both facts."""
    good = {"seq1": 0.25, "ind": 0.128, "decay": 0.06, "hot": 0.18, "ipf": 0.009, "above": 0.03}
    _routing_tables(tmp_path, fine=good, coarse={**good, "seq1": 0.40, "ind": 0.27},
                    controls={"seq1": 0.9})  # the control shows everything as well
    _matched_table(tmp_path, {"seq_excess": (0.05, 0.03, 0.07)})
    t = prose.routing_targets(tables_in(tmp_path)).set_index(["model", "finding"])
    row = t.loc[("fine", "step-1 overlap above independence")]
    assert row["control_status"] == prose.SHOWN
    assert row["learned"] == ("yes: above the matched control by +0.050 [+0.030, +0.070], "
                              "though its untrained control shows it as well")
    text = _page(tmp_path)
    preamble = text.split("## Findings")[1].split("| model |")[0]
    assert ("Where the run has a matched control (the control read its target's own inputs), "
            "the paired difference decides: a finding the target shows is evidence of learned "
            "routing where the target's value lies above the control's (the difference's 95% "
            "interval above 0), whether or not the control shows the finding as well") in preamble
    assert ("Without a matched control, or for a finding with no paired difference, a finding "
            "the control shows as well is not evidence of learned routing") in preamble
    assert "trained): a finding the control shows as well" not in preamble
    opening = text.split("## What this run shows")[1].split("## Findings")[0]
    assert "shown by its untrained control as well, the target above it)" in opening
    # the findings without a paired difference: the controls' verdicts decide
    assert "its untrained control shows expert loads near uniform, " in opening
    assert ("as well, with no paired difference to decide them, so these are not evidence of "
            "learned routing") in opening


def test_the_default_runs_findings_from_its_own_tables():
    """The findings table and the opening from a default run's tables (the fixture, regenerated
    by the pipeline): every routing finding of both trained targets measured and decided by its
    matched control's paired difference, the temporal share by granularity paired by prompt
    (its lead and the lead's excess over the controls' lead), and the speedup worded as this
    run's, saying how its no-SD points were measured."""
    td = tables_in(FIXTURE)
    t = prose.routing_targets(td)
    routing = t[t["status"] != prose.CPU]
    assert not (routing[["status", "learned"]] == prose.NOT_MEASURED).any().any()
    paired = t.set_index(["model", "finding"])
    for model in ("tiny-fine", "tiny-coarse"):
        for finding in prose.PAIRED:
            status, learned = paired.loc[(model, finding), ["status", "learned"]]
            # a finding the target's own intervals leave undecided has nothing to set against
            # its control; every other is decided by the matched control's paired difference
            if status == prose.UNDECIDED:
                assert learned == prose.UNDECIDED, (model, finding, learned)
            else:
                assert "matched control" in learned, (model, finding, learned)
    row = paired.loc[("tiny-fine", "temporal share larger for finer experts")]
    mc = tables.read_csv(FIXTURE / "matched_controls.csv").set_index("target")
    fine = mc.loc["tiny-fine"]
    assert fine["share_coarser"] == "tiny-coarse" and bool(fine["share_paired"])
    assert fine["share_lead_low"] <= fine["share_lead"] <= fine["share_lead_high"]
    assert row["value"].endswith(f"lead {fine['share_lead']:+.3f} [{fine['share_lead_low']:+.3f}"
                                 f", {fine['share_lead_high']:+.3f}], paired by prompt")
    excess = (f"{fine['share_excess']:+.3f} [{fine['share_excess_low']:+.3f}, "
              f"{fine['share_excess_high']:+.3f}]")
    assert excess in row["learned"]
    assert row["learned"].startswith("yes" if fine["share_excess_low"] > 0 else
                                     "no" if fine["share_excess_high"] < 0 else "undecided")
    # the controls show the lead as well: the row says so beside the target's excess over it
    assert row["learned"].endswith(prose.SHARED) == (
        row["control_status"] == prose.SHOWN and fine["share_excess_low"] > 0)
    text = prose.opening(td)
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    how = ("interleaved, AB BA" if sp["no_sd_series"].str.startswith("interleaved").all()
           else "the no-SD points measured apart from the SD points")
    assert ("Speculative decoding in this run, on the machines the Provenance section's "
            '"Measured on" lines name (timed by the engine; ') in text
    assert how in text and "not for the same machine on another day" in text


# --- the report's words name what its tables hold -------------------------------------------


def _schema_keys() -> set[str]:
    """Every key of the configuration's schema (a caption may name one: compare_with)."""
    import yaml

    from wf import REPO

    keys: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            keys.update(node.get("properties", {}))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text()))
    return keys


def caption_columns(text: str) -> set[str]:
    """The column names a caption gives: the lower-case identifiers with an underscore or a digit
    in them (te_sweep_raw, step1_low), where <d> stands for a number and <name> or * for any part
    (seq<d>, <column>_status, seq_loop_free_*). A dotted one is a configuration key
    (sweep.engine_log_sd), not a column."""
    names = re.findall(r"(?<![\w.<>*])[a-z<][\w<>*]*", text)
    return {n for n in names if re.search(r"[_\d<]", n)}


def names_a_column(name: str, columns: list[str]) -> bool:
    """A caption's name is one of the table's columns (a pattern: one at least), or the stem its
    columns share (seq_excess for seq_excess_target, seq_excess_control ...)."""
    pattern = (re.sub(r"<\w+>|\*", "@", name.replace("<d>", "#"))
               .replace("#", r"\d+").replace("@", r"\w+"))
    return any(re.fullmatch(pattern, c) or c.startswith(f"{name}_") for c in columns)


def _table_columns(tmp_path) -> dict[str, list[str]]:
    """Every table's real columns, as the pipeline writes them: the fixture run's tables
    (tests/fixtures/report_tables, regenerated by the pipeline), the replay's (the published
    inputs alone), the comparison of the fixture tables and the weight model of a packaged
    config.json."""
    from specmoe.cost.weights import weight_model_table

    cols = {p.stem: list(tables.read_csv(p).columns) for p in FIXTURE.glob("*.csv")}
    cols.update({stem: list(df.columns) for stem, df in replay.replay_tables().items()})
    cols["comparison"] = published.COLUMNS
    cfg = tmp_path / "config.json"
    shutil.copy(Path(published.__file__).parent.parent / "data" / "hf_configs" /
                "Qwen3-30B-A3B.json", cfg)
    cols["weight_model"] = list(weight_model_table([{"name": "q", "config": cfg, "ks": [3],
                                                     "precision": "auto", "tp": 1}]).columns)
    return cols


def test_every_caption_names_only_columns_its_table_has(tmp_path):
    """A caption that names a column its table lacks sends the reader looking for it (the
    matched controls' caption defined seq_decay by seq1 and seq8, columns of another table)."""
    columns, config_keys = _table_columns(tmp_path), _schema_keys()
    assert set(columns) == set(registry.TABLES), set(registry.TABLES) ^ set(columns)
    wrong = {stem: sorted(n for n in caption_columns(registry.text(stem))
                          if not names_a_column(n, columns[stem]) and n not in config_keys)
             for stem in registry.TABLES}
    assert {stem: names for stem, names in wrong.items() if names} == {}


@pytest.mark.parametrize("stem", list(registry.TABLES))
def test_every_caption_names_every_column(stem, tmp_path):
    """Each column of the table is named in its caption (a key column, a plain word or a name or
    pattern of caption_columns): matched_controls' share_* columns were not explained anywhere,
    nor were the interval columns over engine starts of te_three_ways (moe_time_share_low ...),
    three_step_correction (f_low ...) and kernel_time_shares (ratio_low ...), nor the latter's
    ratio_raw and ratio_status; and the test read only those four, so step_model's shapes,
    speedup_vs_batch's accept_pos<d>, the replays' _published/_replayed/_diff and many more went
    unnamed. A word inside a path (docs/method.md) names no column."""
    text, columns = registry.text(stem), _table_columns(tmp_path)
    names = caption_columns(text)
    words = set(re.findall(r"\w+", re.sub(r"\S*/\S*", " ", text)))
    unnamed = [c for c in columns[stem] if c not in registry.KEYS
               and c not in words and not any(names_a_column(n, [c]) for n in names)]
    assert unnamed == []


def test_every_table_has_its_title():
    """step_model_parameters had none: its heading was its file stem with spaces."""
    assert set(registry.TITLES) == set(registry.TABLES)


def test_caption_columns_are_read_as_their_patterns():
    text = ("step<d> and shuffle<d>, step1_low/step1_high, <column>_raw, seq_loop_free_* and "
            "sweep.engine_log_sd; docs/method.md, C_expert, K+1, plain words")
    assert caption_columns(text) == {"step<d>", "shuffle<d>", "step1_low", "step1_high",
                                     "<column>_raw", "seq_loop_free_*"}
    cols = ["step1", "step12", "te_raw", "seq_loop_free_decay", "seq_excess_target"]
    assert all(names_a_column(n, cols) for n in ("step<d>", "<column>_raw", "seq_loop_free_*",
                                                 "seq_excess"))
    assert not any(names_a_column(n, cols) for n in ("shuffle<d>", "step1_low", "seq1"))
    # a family named by its pattern: the replays' <name>_published, _replayed and _diff
    replay = ["te_published", "te_replayed", "gap_closed_pct_diff"]
    assert all(names_a_column(n, [c]) for n, c in zip(
        ("<name>_published", "<name>_replayed", "<name>_diff"), replay))
    assert not names_a_column("<name>_published", ["te_replayed", "published"])


def test_cohens_d_labels_of_the_anchor_figure_do_not_overprint():
    """Every d label of a panel lies clear of the others and inside the figure, as drawn (the
    fixture run's K = 5 and 7 panels put seven labels side by side on a third of the page)."""
    fn, *args = figures.figure_frames(in_folder(FIXTURE))["anchor_overlap"]
    fig = fn(*args)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labelled = 0
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().startswith("d=")]
        labelled += len(boxes) > 1
        for i, a in enumerate(boxes):
            assert all(not a.overlaps(b) for b in boxes[i + 1:]), ax.get_title()
            assert ax.get_window_extent(renderer).y0 <= a.y0 and a.y1 <= ax.bbox.y1 + 1, \
                ax.get_title()
    assert labelled >= 4
    figures.plt.close(fig)


def test_the_first_page_names_the_hardware_the_curves_are_priced_on():
    """The tiny models' TE curves are priced on the CPU entry: the first page says so from the
    table rather than calling them GPU curves."""
    te = tables.read_csv(FIXTURE / "target_efficiency.csv")
    hw = te.drop_duplicates("model").set_index("model")["hardware"]
    assert (hw["tiny-fine"], hw["synth-fine"]) == ("CPU", "H100")
    text = prose.opening(tables_in(FIXTURE))
    assert "GPU curves" not in text
    assert ("each priced on its model's hardware entry (tiny-fine, tiny-coarse on CPU; "
            "synth-fine, synth-coarse on H100)") in text


def test_headers_say_what_their_columns_hold():
    """K is the draft length in every table: the replay tables' experts per token are headed as
    such (they read "K" before); the step model's parameter ranges are physics' ranges, not 95%
    intervals."""
    from specmoe.cost import stepmodel
    from specmoe.report.predicted import parameter_table

    ue, wm = replay.unique_experts(), replay.weight_model()
    assert ue.set_index("model").loc["Mixtral-8x7B", "top_k"] == 2
    for df in (ue, wm):
        head = tables.to_markdown(df).splitlines()[0]
        assert "| k (experts per token) |" in head and "| K |" not in head
    params = parameter_table(stepmodel.StepParams(moe_cta_gbs=60.0, node_us=3.0,
                                                  verify_draft_model=0.5, catchup_passes=0.5))
    head = tables.to_markdown(params).splitlines()[0]
    assert "| physical range low | physical range high |" in head and "95%" not in head


def test_positions_where_every_draft_was_accepted_are_named_beside_the_table(tmp_path):
    """A synthetic model whose acceptance reaches 1 accepts every draft: the report says where,
    so that its empty rejected-side columns are not read as missing data (and says nothing of
    the kind for the default run, whose every position has both arms)."""
    from specmoe.report.page import table_block
    from specmoe.report.runs import ACCEPTANCE_COLUMNS
    from specmoe.routing.acceptance import acceptance_stats
    from specmoe.routing.overlap import row_overlaps
    from specmoe.routing.synth import SynthParams, generate

    df = tables.read_csv(FIXTURE / "acceptance_consecutive.csv")
    text = "\n".join(table_block(tmp_path / "acceptance_consecutive.md", df, str))
    assert "no draft was rejected" not in text
    tr = generate(SynthParams(num_experts=16, top_k=2, num_layers=2, k_draft=3, requests=12,
                              steps=8, accept_prob=1.0, seed=3))
    rows = acceptance_stats(tr, *row_overlaps(tr))["by_position"]
    all_in = pd.DataFrame([{"model": "synth-sure", "drafter": "synth", "k": 3, "dataset": "synth",
                            **{c: r.get(c, np.nan) for c in ACCEPTANCE_COLUMNS}} for r in rows])
    text = "\n".join(table_block(tmp_path / "acceptance_consecutive.md",
                                 pd.concat([df, all_in]), str))
    assert ("At these positions no draft was rejected, every one was accepted (synth-sure, K=3, "
            "synth: positions 1, 2, 3)") in text


# --- words that the tables decide (a review of the default run's report) ---------------------


@pytest.mark.parametrize("above, words", [
    ((0.016, 0.013, 0.020), "certifying 15% [12%, 18%] of the temporal overlap"),
    # an untrained control's step 1 below its null: its share is negative and certified nothing
    ((-0.004, -0.006, -0.002), "step 1 below the within-window shuffle null (-0.004 [-0.006, "
                               "-0.002]): no within-window ordering certified"),
    ((0.006, -0.007, 0.019), "step 1 not decidedly above the within-window shuffle null "
                             "(+0.006 [-0.007, +0.019]): no within-window ordering certified"),
])
def test_ordering_is_certified_only_where_step_1_lies_above_its_null(above, words):
    """The share of the temporal overlap 'certified' as within-window ordering was printed
    whatever step 1's difference from the shuffle null: 'certifying -2% [-2%, -1%]' for a
    control whose step 1 lies below it."""
    v, lo, hi = above
    row = pd.Series({"above_shuffle": v, "above_shuffle_low": lo, "above_shuffle_high": hi,
                     "above_shuffle_share": 0.15 if v > 0.01 else v * 4,
                     "above_shuffle_share_low": 0.12 if v > 0.01 else lo * 4,
                     "above_shuffle_share_high": 0.18 if v > 0.01 else hi * 4})
    text = prose._ordering_text(row)
    assert words in text and ("certifying" in text) == (lo > 0)


def test_a_share_outside_0_and_1_certifies_nothing_and_is_not_shown():
    """A null below independence gave 'certifying 133% [132%, 134%] of the temporal overlap';
    an interval across 0 and 100% was printed as a share too."""
    from specmoe.report.runs import SHARE_OUTSIDE, overlap_row

    summary = {"overlap_by_distance": [0.456, 0.3], "independent": 0.25,
               "above_shuffle": 0.274, "above_shuffle_low": 0.27, "above_shuffle_high": 0.28,
               "above_shuffle_share": 1.332, "above_shuffle_share_low": 1.324,
               "above_shuffle_share_high": 1.341}
    for share in ((1.332, 1.324, 1.341), (0.8, -3.1, 5.2)):
        s = {**summary, **dict(zip(("above_shuffle_share", "above_shuffle_share_low",
                                    "above_shuffle_share_high"), share))}
        row = overlap_row({"model": "m"}, s, {})
        assert row["above_shuffle_share_status"] == SHARE_OUTSIDE
        assert np.isnan(row["above_shuffle_share"]) and np.isnan(row["above_shuffle_share_high"])
        text = prose._ordering_text(pd.Series(row))
        assert "certifying" not in text and "%" not in text.split("(")[0]
        assert text.endswith(f"its share of the temporal overlap is {SHARE_OUTSIDE}: none "
                             "certified")
    row = overlap_row({"model": "m"}, {**summary, "above_shuffle_share": 0.15,
                                       "above_shuffle_share_low": 0.12,
                                       "above_shuffle_share_high": 0.18}, {})
    assert row["above_shuffle_share_status"] == "ok"
    assert prose._ordering_text(pd.Series(row)).startswith("certifying 15% [12%, 18%]")


def test_a_curve_that_turns_twice_is_worded_by_both_turns():
    """synth-fine's MoE drafter: 0.192 at batch 1, down to 0.138 at 8, up to 0.319 at 256,
    down to 0.225 at 4096. It read 'falls ... then rises to 0.225 at batch 4096', the peak 42%
    above the end left out."""
    b = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    v = [0.192, 0.17, 0.15, 0.138, 0.15, 0.2, 0.25, 0.3, 0.319, 0.319, 0.288, 0.254, 0.225]
    assert prose.course(b, v) == ("falls from 0.192 at batch 1 to 0.138 at batch 8, then rises "
                                  "to 0.319 at batch 256, then falls to 0.225 at batch 4096")
    assert prose.course([1, 2, 4], [1.0, 1.02, 1.04]).startswith("stays flat (within 5%)")
    assert prose.course([1, 2, 4, 8], [1.0, 1.2, 1.19, 1.6]) == \
        "rises with batch size, from 1.000 at batch 1 to 1.600 at batch 8"


def test_the_caveats_cover_every_ipf_fit_by_name(tmp_path):
    """The caveats read the skewed fit's counts alone: a uniform fit that did not converge (the
    study's input at overlaps of 0.1 over a window of 9 with k = 2 of N = 8, whose margins no
    distribution has) went unsaid. The unique_experts row carries each fit's counts, and the
    caveats name the fit."""
    from handmade import per_request
    from specmoe.contracts.analysis import IpfParams
    from specmoe.provenance import read_json, write_json
    from specmoe.report.runs import unique_experts_row
    from specmoe.stages.analysis import ipf_stage

    n, k = 8, 2
    run = {"model": "m", "drafter": "d", "k": 8, "dataset": "x"}
    write_json(tmp_path / "o.json", {
        "run": run, "summary": {"num_experts": n, "top_k": k, "k_draft": 8,
                                "sequence_by_distance": [0.1] * 8},
        "unique": {"empirical": 6.0, "empirical_over_k": 3.0, "uniform": 6.8,
                   "independent": 6.8},
        "per_layer": {"overlap": [[k / n] * 8], "q": [[k / n] * n]},
        "per_request": per_request([0.1] * 8, [[k / n] * 8], [[k / n] * n], k, 6.0)}, {})
    ipf_stage(Named({"overlap": tmp_path / "o.json"}), Named({"json": tmp_path / "i.json"}),
              IpfParams([1]))
    ip = read_json(tmp_path / "i.json")
    assert not ip["converged"]["uniform_sequence"] and ip["converged"]["skewed_window"]
    row = unique_experts_row(read_json(tmp_path / "o.json"), ip)
    pd.DataFrame([row]).to_csv(tmp_path / "unique_experts.csv", index=False)
    [caveat] = prose.report_caveats(tables_in(tmp_path))
    assert caveat.startswith("m, K=8, x: the study's uniform IPF fit, of the overlap along the "
                             "committed sequence, stopped short of the margins of 8 expert(s), 8 "
                             "of them with pair margins that cannot hold together")
    assert caveat.endswith("its prediction (ipf_uniform_sequence) is the closest fit")


def test_the_loop_note_gives_the_decays_without_the_loops(tmp_path):
    """'its overlap along the committed sequence partly measures the loop' was fixed text at
    12% of windows repeating a token, while without the looping requests the decay was larger
    (+0.081 against +0.073): the note now gives both and says whether the decays stand."""
    row = {"model": "fine", "drafter": "d", "k": 3, "dataset": "main",
           "repetitive_windows_pct": 11.9, "seq_loop_free_dropped_requests": 2,
           "window_decay": 0.048, "window_decay_low": 0.040, "window_decay_high": 0.057,
           "window_decay_no_repetition": 0.063, "window_decay_no_repetition_low": 0.056,
           "window_decay_no_repetition_high": 0.070, "seq_decay": 0.073,
           "seq_decay_low": 0.050, "seq_decay_high": 0.084, "seq_loop_free_decay": 0.081,
           "seq_loop_free_decay_low": 0.071, "seq_loop_free_decay_high": 0.088}
    pd.DataFrame([row]).to_csv(tmp_path / "overlap_by_distance.csv", index=False)
    [note] = prose.repetition_notes(tables_in(tmp_path), ["fine"])
    assert note.startswith("fine's output repeats a token in 12% of its windows")
    assert ("along the sequence, without the 2 looping request(s), +0.081 [+0.071, +0.088] "
            "(with them +0.073 [+0.050, +0.084])") in note
    assert note.endswith("they stand without the loops.") and "partly measures" not in note
    row.update(seq_loop_free_decay=0.01, seq_loop_free_decay_low=-0.01)
    pd.DataFrame([row]).to_csv(tmp_path / "overlap_by_distance.csv", index=False)
    [note] = prose.repetition_notes(tables_in(tmp_path), ["fine"])
    assert note.endswith("so the loops may carry part of them.")
    # a table without the count of looping requests: the note still reads (int(NaN) raised)
    pd.DataFrame([{c: v for c, v in row.items() if c != "seq_loop_free_dropped_requests"}]
                 ).to_csv(tmp_path / "overlap_by_distance.csv", index=False)
    [note] = prose.repetition_notes(tables_in(tmp_path), ["fine"])
    assert "along the sequence, without the looping requests, +0.010" in note


def test_a_run_whose_every_window_repeats_a_token_is_reported_without_numbers(tmp_path):
    """Where every window repeated a token the findings read "100% of windows repeat a token,
    and without them 0.571 / 0.369 / 0.271" (the numbers with them): the row now carries how
    many windows are left (n_windows_no_repetition) beside no numbers, and the findings and the
    loop note say that they are too few instead of giving numbers."""
    from specmoe.report.runs import overlap_row

    summary = {"overlap_by_distance": [0.571, 0.369, 0.271], "independent": 0.152,
               "window_decay": 0.300, "window_decay_low": 0.287, "window_decay_high": 0.310,
               "window_decay_within_status": 0.05, "window_decay_within_status_low": 0.02,
               "window_decay_within_status_high": 0.08, "sequence_loop_free_dropped_requests": 0}
    none_left = {"n_windows": 1, "omitted": "1 window(s) without a repeated token, fewer than "
                                            "the 2 its statistics need"}
    row = overlap_row({"model": "fine", "drafter": "d", "k": 3, "dataset": "main"}, summary,
                      {"summary_without_repetition": none_left, "repetitive_windows": 0.99})
    assert row["n_windows_no_repetition"] == 1
    assert all(np.isnan(row[f"step{d}_no_repetition"]) for d in (1, 2, 3))
    assert np.isnan(row["window_decay_within_status_no_repetition"])
    pd.DataFrame([row]).to_csv(tmp_path / "overlap_by_distance.csv", index=False)
    td = tables_in(tmp_path)
    [line] = prose.report_findings(td)
    assert ("99% of windows repeat a token: only 1 window(s) repeat no token, too few to "
            "measure without them") in line
    assert "0.571 / 0.369 / 0.271, from d = 1 to 3" in line and "without them 0.571" not in line
    [note] = prose.repetition_notes(td, ["fine"])
    assert ("without the windows that repeat a token, none (only 1 window(s) repeat no token, "
            "too few to measure without them) (with them +0.050 [+0.020, +0.080])") in note
    assert note.endswith("so the loops may carry part of them.")


def test_the_loop_note_tests_the_findings_own_decay_inside_windows(tmp_path):
    """The note vouched for the decay over all pairs, d = 1 to K (+0.063 without the repeating
    windows, +0.048 with them), while the finding is the decay among pairs of one acceptance
    status (+0.012 [+0.001, +0.022]): the note now gives that statistic with and without the
    windows that repeat a token (overlap_row carries it from the overlap stage's summary without
    them), and whether it stands is decided by its interval without them."""
    from specmoe.report.runs import overlap_row

    iv = lambda name, v, lo, hi: {name: v, f"{name}_low": lo, f"{name}_high": hi}  # noqa: E731
    summary = {"overlap_by_distance": [0.259, 0.235, 0.211], "independent": 0.152,
               **iv("window_decay", 0.048, 0.040, 0.057),
               **iv("window_decay_within_status", 0.012, 0.001, 0.022),
               **iv("sequence_decay", 0.073, 0.050, 0.084),
               "sequence_loop_free_dropped_requests": 2,
               **iv("sequence_loop_free_decay", 0.081, 0.071, 0.088)}

    def note(within_status_without):
        clean = {"overlap_by_distance": [0.257, 0.207, 0.194],
                 **iv("window_decay", 0.063, 0.056, 0.070),
                 **iv("window_decay_within_status", *within_status_without)}
        row = overlap_row({"model": "fine", "drafter": "d", "k": 3, "dataset": "main"}, summary,
                          {"summary_without_repetition": clean, "repetitive_windows": 0.119})
        assert row["window_decay_within_status_no_repetition_low"] == within_status_without[1]
        pd.DataFrame([row]).to_csv(tmp_path / "overlap_by_distance.csv", index=False)
        [text] = prose.repetition_notes(tables_in(tmp_path), ["fine"])
        return text

    text = note((0.030, 0.015, 0.045))
    assert ("inside windows among pairs of one acceptance status, without the windows that "
            "repeat a token, +0.030 [+0.015, +0.045] (with them +0.012 [+0.001, +0.022])") in text
    assert "+0.063" not in text and "+0.048" not in text
    assert text.endswith("they stand without the loops.")
    # the finding's decay undecided without the repeating windows: it does not stand
    text = note((0.004, -0.008, 0.016))
    assert "+0.004 [-0.008, +0.016] (with them +0.012 [+0.001, +0.022])" in text
    assert text.endswith("so the loops may carry part of them.")


def test_the_prediction_beside_the_measurement_says_no_information_at_a_clipped_end(tmp_path):
    """An end of the predicted speedup drawn from TE's end held at its clip bound was printed as
    a number ("[0.00, 2.37]", the clip's, not the model's), where `specmoe predict` says "no
    information below": the findings read the step model's own flags."""
    rows = [{"model": "fine", "k": 3, "method": "draft_model", "hardware": "CPU", "batch": b,
             "te_predicted": 0.47, "te_low": 0.001 if low else 0.2, "te_high": 1.0 if high else 0.9,
             "te_low_clipped": low, "te_high_clipped": high, "no_information": False,
             "speedup_predicted": 1.15, "speedup_low": 0.0 if low else 0.5,
             "speedup_high": 2.37, "speedup_measured": 1.1, "tau_predicted_low": 1.64,
             "tau_predicted_high": 1.64, "tau_measured": 2.09, "shape_predicted": "undecided",
             "shape_measured": "undecided within the noise"}
            for b, low, high in ((1, True, False), (2, False, True), (4, False, False))]
    pd.DataFrame(rows).to_csv(tmp_path / "step_model.csv", index=False)
    [line] = prose.prediction_findings(tables_in(tmp_path))
    assert "B=1: 1.10 (no interval) measured, 1.15 [no information below, 2.37] predicted" in line
    assert "B=2: 1.10 (no interval) measured, 1.15 [0.50, no information above] predicted" in line
    assert "B=4: 1.10 (no interval) measured, 1.15 [0.50, 2.37] predicted" in line
    assert "[0.00," not in line


def test_the_prediction_beside_the_measurement_reads_no_shape_from_medians(tmp_path):
    """'the predicted curve is rising (predicted values 0.312 / 0.344 / 0.374 / 0.399)' came
    from the medians while every interval spanned [0.00, 0.70] and more, two of them TE's whole
    range; the prediction's shape from its draws was 'undecided'."""
    rows = [{"model": "fine", "k": 3, "method": "draft_model", "hardware": "CPU", "batch": b,
             "te_predicted": 0.25, "te_low": 0.001, "te_high": th,
             "no_information": th == 1.0, "speedup_predicted": sp,
             "speedup_low": 0.0, "speedup_high": hi, "speedup_measured": m,
             "tau_predicted_low": 1.64, "tau_predicted_high": 1.64, "tau_measured": 2.09,
             "shape_predicted": "undecided", "shape_measured": "undecided within the noise"}
            for b, th, sp, hi, m in ((1, 0.79, 0.312, 0.70, 0.6), (2, 0.93, 0.344, 0.83, 1.07),
                                     (4, 1.0, 0.374, 0.95, 0.88), (8, 1.0, 0.399, 1.03, 0.92))]
    pd.DataFrame(rows).to_csv(tmp_path / "step_model.csv", index=False)
    [line] = prose.prediction_findings(tables_in(tmp_path))
    assert "rising" not in line and "(no shape is read from medians)" in line
    assert ("B=4: 0.88 (no interval) measured, no information predicted (TE's 95% interval "
            "spans its whole range)") in line
    # a measurement without an interval (a table of an older run) is separated from nothing
    assert ("of the 2 measured batch size(s) where the prediction has information, 1 inside the "
            "predicted interval, 1 not separated from the predicted interval") in line
    assert ("predicted medians, where the prediction has information, 0.312 at B=1, 0.344 at "
            "B=2 (no shape is read from medians)") in line
    assert "the prediction's shape, decided over its draws, is undecided" in line
    # the capture's acceptance length (repetition penalty) against the sweep's: named, since the
    # speedup scales with it
    assert ("acceptance length 1.64 in the prediction against 2.09 (no interval over requests) "
            "in the sweep (the speedup scales with it)") in line


def test_the_sweep_s_acceptance_length_beside_the_prediction_carries_its_interval(tmp_path):
    """prediction_findings gave the sweep's acceptance length bare ('against 2.09 in the sweep')
    although the sweep keeps its 95% interval over the repeats: the table carries it
    (tau_measured_low/high) and the sentence gives the sweep's lowest and highest with theirs."""
    from specmoe.report.predicted import prediction_table

    own = {"model": "tiny-fine", "drafter": "tiny-drafter", "k": 3, "dataset": "tinybench"}
    pred = {"model": "tiny-fine", "run": own, "k": 3, "method": "draft_model",
            "hardware": "CPU", "overlaps": "measured", "batch_sizes": [1, 2], "te": [0.5, 0.5],
            "te_low": [0.4, 0.4], "te_high": [0.6, 0.6], "te_low_clipped": [False, False],
            "te_high_clipped": [False, False], "no_information": [False, False],
            "speedup": [1.2, 1.2], "speedup_low": [1.0, 1.0], "speedup_high": [1.4, 1.4],
            "acceptance_length": [2.5, 2.5], "shape": "no shape"}
    (tmp_path / "pred.json").write_text(json.dumps({"model": "tiny-fine", "predictions": [pred]}))
    (tmp_path / "sp.json").write_text(json.dumps({"run": own, "shape": "x", "rows": [
        {"batch": 1, "speedup": 1.3, "tau": 2.4, "tau_low": 2.2, "tau_high": 2.6},
        {"batch": 2, "speedup": 1.2, "tau": 2.1, "tau_low": None, "tau_high": None}]}))
    table = prediction_table([tmp_path / "pred.json"], [tmp_path / "sp.json"])
    assert table[["tau_measured_low", "tau_measured_high"]].iloc[0].tolist() == [2.2, 2.6]
    table.to_csv(tmp_path / "step_model.csv", index=False)
    [line] = prose.prediction_findings(tables_in(tmp_path))
    assert ("acceptance length 2.50 in the prediction against 2.10 (no interval over requests) "
            "to 2.40 [2.20, 2.60] (over repeats, not requests) in the sweep") in line, line


def test_shapes_from_the_studys_rule_are_scored_apart_from_measured_curves(tmp_path):
    """'1 of 5 shapes right' counted two shapes the study's N/k rule gives, not curves it
    measured (the table's own caption says so)."""
    rows = [{"model": m, "published_shape": s, "published_by": by, "step_model_shape": p,
             "agrees": s == p, "nk_rule_agrees": s == rule,
             "constant_agrees": s == "peak at low batch"}
            for m, s, by, p, rule in (
                ("A", "concave", "the model's own curve", "concave", "concave"),
                ("B", "peak at low batch", "the model's own curve", "concave", "peak at low batch"),
                ("C", "peak at low batch", "the study's N/k rule", "concave", "peak at low batch"))]
    pd.DataFrame(rows).to_csv(tmp_path / "step_model_shapes.csv", index=False)
    words = " ".join(prose.calibration_findings(tables_in(tmp_path)))
    assert "1 of 2 curves the study measured right (B: published peak at low batch, " \
           "predicted concave)" in words
    assert "0 of 1 shapes the study's N/k rule gives (not measured curves) right" in words


def test_the_step_model_is_shown_beside_its_baselines_on_te_and_shapes(tmp_path):
    """The text gave the step model's TE error beside the weight model's only (the mean
    baseline's, 0.115 against its 0.086, was in the table alone), and its shapes without any
    baseline ('1 of 3 curves the study measured right', where the study's N/k rule gets 3 and a
    peak at low batch for every model 2): the step model's shape table carries both baselines,
    and the text gives each one's count and the mean baseline's TE error."""
    from specmoe.report.predicted import calibration_tables

    tables = calibration_tables()
    shp = tables["step_model_shapes"]
    own = shp[shp["published_by"] == "the model's own curve"]
    assert list(own["nk_rule_agrees"]) == [True] * 3
    assert int(own["constant_agrees"].sum()) == 2 and set(shp["constant_shape"]) == {
        "peak at low batch"}
    for stem in ("step_model_calibration", "step_model_shapes"):
        tables[stem].to_csv(tmp_path / f"{stem}.csv", index=False)
    te, shapes = prose.calibration_findings(tables_in(tmp_path))
    cal = tables["step_model_calibration"]
    mean = cal[cal["in_table_10"]]["mean_baseline_error"].abs().mean()
    assert f"the mean baseline's (the other models' mean TE of its method family and " \
           f"granularity) {mean:.3f}" in te
    assert "of 3 curves the study measured right" in shapes
    assert "against 3 of 3 by the study's N/k rule and 2 of 3 by a peak at low batch for " \
           "every model" in shapes


def profile_batch(per: dict) -> dict:
    """A profiled batch as profiling.compare_starts writes it: each value per engine start with
    its summary (share_over_starts for the MoE share, over_starts for a ratio)."""
    from specmoe.measured.profiling import over_starts, share_over_starts

    from specmoe.measured.profiling import EAGER

    b = {"engine_mode": {"decode": EAGER, "verify": EAGER}}
    for k, v in per.items():
        point, lo, hi = (share_over_starts if k == "moe_time_share" else over_starts)(v)
        b.update({k: point, f"{k}_low": lo, f"{k}_high": hi, f"{k}_per_start": list(v)})
    return b


def test_the_three_step_correction_flags_what_te_three_ways_flags():
    """Its last step is the profiled TE: 0.931 was 'ok' there while te_three_ways called the
    same TE not identified (its interval 0.78-1.11 passes 1); and a step between TEs above 1
    printed a delta (0.317) of values that are not physical."""
    from specmoe.report.bounds import TE_PAST_BOUND
    from specmoe.report.measured import correction_rows

    cm = {"moe_weight_share": 0.667, "unique_ratio": 2.833}
    # three engine starts, only the non-MoE ratio spread over them: the last step's TE interval
    # reaches past 1
    b = profile_batch({"moe_time_share": [0.313] * 3, "moe_time_ratio": [1.215] * 3,
                       "dense_time_ratio": [0.85, 1.009, 1.2]})
    rows = correction_rows({"model": "m"}, b, None, cm)
    assert [r["te_status"] for r in rows] == ["ok", "ok", "ok", TE_PAST_BOUND]
    assert np.isnan(rows[-1]["te"]) and rows[-1]["te_raw"] == pytest.approx(0.93, abs=0.01)
    assert np.isnan(rows[-1]["delta"]) and not np.isnan(rows[2]["delta"])
    coarse = correction_rows({"model": "m"}, profile_batch(
        {"moe_time_share": [0.313] * 3, "moe_time_ratio": [0.913] * 3,
         "dense_time_ratio": [0.695] * 3}), None,
        {"moe_weight_share": 0.667, "unique_ratio": 2.329})
    assert [r["te_status"] for r in coarse][2] == "above 1: not physical"
    assert all(np.isnan(r["delta"]) for r in coarse[2:])
    assert not np.isnan(coarse[1]["delta"])


def test_the_three_step_corrections_rows_lay_out_the_cost_models_correction_over_starts(
        monkeypatch):
    """The report computed each step's TE over the starts and its delta and gap closed itself,
    beside the cost model's: now it lays out costmodel.three_step_correction_over_starts, the
    one source (a row's te: the starts' geometric mean of each start's TE at that step)."""
    from specmoe.cost import costmodel
    from specmoe.report.measured import correction_rows

    cm = {"moe_weight_share": 0.667, "unique_ratio": 2.4}
    per = {"moe_time_share": [0.30, 0.33, 0.36], "moe_time_ratio": [1.5, 1.6, 1.7],
           "dense_time_ratio": [1.0, 1.05, 1.1]}
    b = profile_batch(per)
    want = costmodel.three_step_correction_over_starts(0.667, 2.4, *per.values(),
                                                       measured=0.85)["steps"]
    calls = []
    real = costmodel.three_step_correction_over_starts
    monkeypatch.setattr(costmodel, "three_step_correction_over_starts",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    rows = correction_rows({"model": "m"}, b, {"te_sweep": 0.85}, cm)
    assert len(calls) == 1 and [r["te_status"] for r in rows] == ["ok"] * 4
    for r, s in zip(rows, want):
        assert r["te"] == s["te"] and r.get("te_low") == s["te_low"]
        # the inputs as computed (their shown values are bounded by their physical ranges)
        assert (r["f_raw"], r["s_moe_raw"], r["s_dense_raw"]) == (s["f"], s["s_moe"],
                                                                 s["s_dense"])
    for r, s in zip(rows[1:], want[1:]):
        assert r["delta"] == s["delta"] and r["gap_closed_pct"] == 100 * s["gap_closed"]


def test_a_te_from_the_sweep_with_profiled_c_has_its_interval_and_bound():
    """te_sweep_profiled_c was a bare number (0.788) whose speedup interval put it at 1.30,
    past the bound: now it carries the interval from the speedup's and is flagged with it."""
    from specmoe.report.measured import te_three_ways_row

    sw = {"tau": 2.087, "tau_low": 2.087, "tau_high": 2.087, "speedup": 1.25,
          "speedup_low": 0.96, "speedup_high": 1.632, "te_sweep": np.nan, "te_sweep_raw": 1.38,
          "te_sweep_status": "x"}
    from specmoe.measured.profiling import EAGER

    b = {"batch": 1, "draft_cost_profiled": 0.667, "draft_cost_profiled_low": 0.667,
         "draft_cost_profiled_high": 0.667, "te_profiled": 0.5, "te_profiled_low": 0.4,
         "te_profiled_high": 0.6, "moe_time_share": 0.3, "moe_time_share_low": 0.25,
         "moe_time_share_high": 0.35, "verify_steps": 12,
         "engine_mode": {"decode": EAGER, "verify": EAGER}, "device": "cpu"}
    row = te_three_ways_row({"model": "m"}, b, sw, None, np.nan)
    assert np.isnan(row["te_sweep_profiled_c"])
    assert row["te_sweep_profiled_c_raw_high"] == pytest.approx(1 / (2.087 / 1.632 - 0.667))
    assert row["te_sweep_profiled_c_status"].startswith("not identified")
    row = te_three_ways_row({"model": "m"}, b, {**sw, "speedup_high": 1.2}, None, np.nan)
    assert row["te_sweep_profiled_c_status"] == "ok" and 0 < row["te_sweep_profiled_c"] < 1


def test_the_openings_evidence_says_how_it_fares_in_the_targets_other_runs():
    """tiny-fine's 'overlap decays inside windows' rested on its first run alone (+0.012
    [+0.001, +0.022] at K = 3), while the same prompts at K = 5 were undecided and a slice of them
    rose: the opening now gives each other run's value in words its own interval decides."""
    td = tables_in(FIXTURE)
    ob = tables.read_csv(FIXTURE / "overlap_by_distance.csv")
    g = ob[ob["model"] == "tiny-fine"].sort_values("k", kind="stable")
    others = g.iloc[1:]
    assert len(others) >= 2
    text = prose.opening(td)
    clause = prose.other_runs(td, "tiny-fine")["overlap decays inside windows"]
    assert clause in text
    for _, r in others.iterrows():
        v, lo, hi = (r[f"window_decay_within_status{s}"] for s in ("", "_low", "_high"))
        word = "decays" if lo > 0 else "rises" if hi < 0 else "undecided"
        assert f"K={r['k']}, " in clause and f"{word} ({v:+.3f} [{lo:+.3f}, {hi:+.3f}])" in clause


def test_the_anchor_figure_shows_no_d_where_too_few_requests_decide_it():
    """First-rejected drafts from 2 requests gave d = 4.20, size "too few", and the figure still
    printed "d=4.20"; the anchor table kept only d and raw p-values (no interval, no size, no
    requests per arm, no p_holm)."""
    from specmoe.routing.acceptance import TOO_FEW, compare
    from specmoe.report.runs import ANCHOR_EFFECT_COLUMNS, anchor_rows

    rng = np.random.default_rng(0)
    acc, rej = rng.uniform(0.3, 0.5, 40), np.array([0.05, 0.1])
    few = {"draft_position": 1, **compare(acc, rej, np.arange(40) % 30, np.array([0, 1]))}
    rng2 = np.random.default_rng(1)
    many = {"draft_position": 2, **compare(rng2.uniform(0.3, 0.5, 60), rng2.uniform(0.2, 0.4, 40),
                                           np.arange(60) % 30, np.arange(40) % 20 + 30)}
    assert few["size"] == TOO_FEW and np.isfinite(few["cohens_d"])
    assert many["size"] != TOO_FEW
    anchor = [{"draft_position": j, "status": s, "mean": m, "se_tokens": 0.01, "n": 20,
               "se_by_request": 0.02, "n_requests": 10}
              for j in (1, 2) for s, m in (("accepted", 0.4), ("first_rejected", 0.2))]
    rows = anchor_rows({"model": "fine"}, {"anchor": anchor, "anchor_effects": [few, many]})
    assert set(ANCHOR_EFFECT_COLUMNS) <= set(rows[0])
    assert rows[0]["size"] == TOO_FEW and rows[0]["n_requests_rejected"] == 2
    assert np.isfinite(rows[2]["cohens_d_low"]) and rows[2]["size"] == many["size"]
    df = pd.DataFrame(rows).assign(run="fine")
    fn, *args = figures._anchor_frame(df)
    fig = fn(*args)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "d: too few" in texts and not any(t.startswith("d=4.") for t in texts)
    assert f"d={many['cohens_d']:.2f}" in texts
    figures.plt.close(fig)


def test_a_target_below_its_matched_control_is_not_said_to_share_the_finding_with_it():
    """Target +0.05 [+0.02, +0.08], control +0.09 [-0.02, +0.20], the pair -0.04 [-0.06, -0.02]:
    the opening said 'its untrained control shows overlap decays with distance as well', which
    the control's own interval does not decide."""
    rows = pd.DataFrame([
        {"finding": "overlap decays with distance", "value": "+0.050 [+0.020, +0.080]",
         "status": prose.SHOWN, "control_status": prose.UNDECIDED,
         "learned": "no: below the matched control (-0.040 [-0.060, -0.020])"},
        {"finding": "expert loads near uniform", "value": "0.25", "status": prose.SHOWN,
         "control_status": prose.SHOWN,
         "learned": "no: the untrained control shows it as well"}])
    text = prose._routing_sentence("fine", rows)
    assert "control shows overlap decays with distance" not in text
    assert "its untrained control shows expert loads near uniform as well" in text
    assert ("below its matched control, so not evidence of learned routing: overlap decays with "
            "distance ((-0.040 [-0.060, -0.020]))") not in text
    assert ("below its matched control, so not evidence of learned routing: overlap decays with "
            "distance (-0.040 [-0.060, -0.020])") in text


@pytest.mark.parametrize("ind, lo, hi, status", [
    (0.2499, 0.2400, 0.2600, prose.UNDECIDED),   # a point just below 2 k/N was 'shown'
    (0.2000, 0.1900, 0.2100, prose.SHOWN),
    (0.3000, 0.2900, 0.3100, prose.NOT_SHOWN),
    (0.2000, np.nan, np.nan, prose.UNDECIDED),
])
def test_expert_loads_near_uniform_is_decided_by_the_baselines_interval(ind, lo, hi, status):
    o = pd.Series({"independent": ind, "independent_low": lo, "independent_high": hi,
                   "seq_excess_low": 0.1, "seq_excess_high": 0.2, "seq_decay": 0.1,
                   "seq_decay_low": 0.05, "seq_decay_high": 0.15})
    d = pd.Series({"k_over_n": 0.125, "hottest_expert_pct": 20.0})
    (row, *_) = prose._routing_rows("m", o, d, None)
    assert row["finding"] == "expert loads near uniform" and row["status"] == status


@pytest.mark.parametrize("flag, said", [(True, True), ("True", True), (False, False),
                                         (np.nan, False)])
def test_an_interval_end_held_at_its_bound_is_said_where_the_finding_quotes_it(flag, said):
    """The baseline's and the excess's basic intervals are held at what the statistic can be
    and flagged (independent_clipped, seq_excess_clipped): the findings quoted the held ends as
    if the bootstrap had given them."""
    o = pd.Series({"independent": 0.2501, "independent_low": 0.25, "independent_high": 0.2510,
                   "independent_clipped": flag, "seq1": 0.5, "seq_excess": 0.25,
                   "seq_excess_low": 0.2, "seq_excess_high": 0.75, "seq_excess_clipped": flag,
                   "seq_decay": 0.1, "seq_decay_low": 0.05, "seq_decay_high": 0.15})
    d = pd.Series({"k_over_n": 0.25, "hottest_expert_pct": 20.0})
    rows = {r["finding"]: r["value"] for r in prose._routing_rows("m", o, d, None)}
    for finding in ("expert loads near uniform", "step-1 overlap above independence"):
        assert ("held at its bound" in rows[finding]) is said, rows[finding]


def test_what_a_cpu_run_cannot_show_is_said_with_its_numbers():
    """'A tiny model's step on a CPU costs host overhead rather than weight reads' stood with no
    number: the opening now gives each CPU target's measured decode step beside the step model's
    price of its weights and launches, and its MoE share of time beside its share of weights,
    each read from the run's tables."""
    td = tables.Tables.of(in_folder(FIXTURE))
    text = prose.opening(td)
    sp, dr = td.read("speedup_vs_batch"), td.read("draft_ratio_model")
    ms = sp[(sp["model"] == "tiny-fine") & (sp["batch"] == 1)]["tpot_ar_ms"].iloc[0]
    us = dr[(dr["model"] == "tiny-fine") & (dr["batch"] == 1)]["t_target_us"].iloc[0]
    assert (f"tiny-fine: a decode step at batch 1 took {ms:.2f} ms, {ms * 1e3 / us:.0f} times "
            f"the {us / 1e3:.2f} ms the step model prices") in text
    ks = td.read("kernel_time_shares")
    moe = ks[(ks["model"] == "tiny-fine") & (ks["batch"] == 1) & (ks["class"] == "moe")].iloc[0]
    took = (f"{100 * moe['decode_share']:.0f}% [{100 * moe['decode_share_low']:.0f}%, "
            f"{100 * moe['decode_share_high']:.0f}%]")  # with its interval over engine starts
    assert (f"its MoE kernels took {took} of the profiled step against "
            f"{100 * moe['moe_weight_share']:.0f}% of its weights") in text


def _fixture_with(tmp_path, stem: str, df: pd.DataFrame):
    """The fixture run's tables with `stem` replaced by df."""
    for p in FIXTURE.glob("*.csv"):
        shutil.copy(p, tmp_path / p.name)
    tables.write_table(df, tmp_path / stem, tables.read_provenance(FIXTURE / f"{stem}.csv"))
    return tables_in(tmp_path)


def test_the_cpu_paragraph_names_only_the_models_swept_on_a_cpu(tmp_path):
    """'What a CPU run cannot show ... test the pipeline, not the study' stood in every report
    with a speedup, and said 'on this machine' of sweeps a SLURM job ran elsewhere: a study
    model's speedups swept on an H100 were called CPU pipeline tests. The paragraph now names
    the models whose sweeps ran on a CPU (the speedup table's device, from each sweep's
    provenance), and the speedups point to the Provenance section for where they were
    measured."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    text = prose.opening(_fixture_with(tmp_path, "speedup_vs_batch", sp.assign(device="cpu")))
    assert ("What a CPU run cannot show: the study's GPU claims. tiny-fine, tiny-coarse and "
            "tiny-fine-bf16 were swept on a CPU, where a model's step costs host overhead rather "
            "than weight reads (tiny-fine: a decode step at batch 1 took ") in text
    assert ("Speculative decoding in this run, on the machines the Provenance section's "
            '"Measured on" lines name (timed by the engine; ') in text
    assert "on this machine" not in text
    # one of them swept on a GPU: left out of the paragraph and its numbers
    on_gpu = sp.assign(device=np.where(sp["model"] == "tiny-coarse", "cuda", "cpu"))
    text = prose.opening(_fixture_with(tmp_path, "speedup_vs_batch", on_gpu))
    assert "tiny-fine and tiny-fine-bf16 were swept on a CPU" in text
    assert "tiny-coarse: a decode step" not in text
    # a study model swept on an H100 (the reviewer's table): no CPU paragraph, the hardware its
    # curves are priced on still said
    sp = sp[sp["model"] == "tiny-fine"].assign(model="qwen3-30b", drafter="eagle3", device="cuda")
    te = tables.read_csv(FIXTURE / "target_efficiency.csv")
    te = te[te["model"] == "synth-fine"].assign(model="qwen3-30b", drafter="eagle3")
    only = tmp_path / "gpu"
    only.mkdir()
    for stem, df in {"speedup_vs_batch": sp, "target_efficiency": te}.items():
        tables.write_table(df, only / stem, {"config_hash": "x"})
    text = prose.opening(tables_in(only))
    assert "CPU" not in text and "qwen3-30b, K=3: " in text
    assert text.endswith("The curves of TE and of the draft cost ratio against batch size come "
                         "from the cost and step models, each priced on its model's hardware "
                         "entry (qwen3-30b on H100): only a GPU entry's curves speak to the "
                         "study's GPU claims.")
    # a table of an older run does not say where its sweeps ran: no paragraph claims it
    tables.write_table(sp.drop(columns="device"), only / "speedup_vs_batch", {"config_hash": "x"})
    assert "CPU" not in prose.opening(tables_in(only))


def test_the_prediction_beside_the_measurement_gives_its_intervals(tmp_path):
    """'B=1: 1.19 measured, 0.30 [0.00, 0.78] predicted; 0 of 1 measurements inside the
    predicted interval' gave the measurement no interval, though its [0.77, 1.85] overlaps the
    prediction's, and 'predicted medians ... 0.303 / 0.325 / ...' where the prediction has no
    information. The measurement now stands with its interval, a miss is counted only where the
    intervals are apart, and medians only where the prediction has information."""
    sm = tables.read_csv(FIXTURE / "step_model.csv")
    first = sm[sm["model"] == "tiny-fine"].iloc[0]  # one run of tiny-fine's, swept
    sm = sm[np.logical_and.reduce([sm[c] == first[c]
                                   for c in ("model", "drafter", "k", "dataset")])]
    said = (f"tiny-fine (step model for {label_of('tiny-fine', first['k'], first['dataset'])} "
            f"with {first['drafter']}, ")
    [fine] = [s for s in prose.prediction_findings(tables_in(FIXTURE)) if s.startswith(said)]
    b1 = sm["batch"] == 1
    r1 = sm[b1].iloc[0]
    measured = prose._with_interval(r1["speedup_measured"], r1["speedup_measured_low"],
                                    r1["speedup_measured_high"], 2)
    assert f"B=1: {measured} measured" in fine
    # the fixture's prediction has no information at any measured batch size: nothing counted
    # against it, no median
    assert sm["no_information"].astype(bool).all()
    assert "no measured batch size where the prediction has information" in fine
    assert ("predicted medians, where the prediction has information, none (no information at "
            "any measured batch size)") in fine
    # the prediction with information at batch 1 alone (0.30 [0.0015, hi]): the measured
    # interval overlaps it, not separated; its median only there
    # (its upper end between the measured interval's lower end and its point: the intervals
    # overlap, the measured point outside the prediction's)
    hi = round((r1["speedup_measured_low"] + r1["speedup_measured"]) / 2, 2)
    assert 0.303 < r1["speedup_measured_low"] < hi < r1["speedup_measured"]
    informed = sm.assign(no_information=~b1, speedup_predicted=sm["speedup_predicted"].where(
        ~b1, 0.303), speedup_low=sm["speedup_low"].where(~b1, 0.0015),
        speedup_high=sm["speedup_high"].where(~b1, hi),
        te_low_clipped=sm["te_low_clipped"].where(~b1, False),  # neither end at its clip
        te_high_clipped=sm["te_high_clipped"].where(~b1, False))
    tables.write_table(informed, tmp_path / "step_model", {"config_hash": "x"})
    [fine] = prose.prediction_findings(tables_in(tmp_path))
    assert f"B=1: {measured} measured, 0.30 [0.00, {hi:.2f}] predicted" in fine
    assert ("of the 1 measured batch size(s) where the prediction has information, 1 not "
            "separated from the predicted interval (the point outside it, the measured interval "
            "not apart from it)") in fine
    assert "predicted medians, where the prediction has information, 0.303 at B=1 (" in fine
    # apart: the measured interval clear of the predicted one; none with information
    apart = informed.assign(speedup_measured_low=np.maximum(
        informed["speedup_measured_low"], informed["speedup_high"] + 0.01))
    tables.write_table(apart, tmp_path / "step_model", {"config_hash": "x"})
    [fine] = prose.prediction_findings(tables_in(tmp_path))
    assert ("where the prediction has information, 1 outside the predicted interval, the "
            "measured interval apart from it;") in fine
    tables.write_table(sm.assign(no_information=True), tmp_path / "step_model",
                       {"config_hash": "x"})
    [fine] = prose.prediction_findings(tables_in(tmp_path))
    assert "no measured batch size where the prediction has information" in fine
    assert ("predicted medians, where the prediction has information, none (no information at "
            "any measured batch size)") in fine and "0.303" not in fine


def test_the_comparison_gives_the_reproduced_values_interval(tmp_path):
    """'temporal share of step-1 overlap 0.717 vs 0.724' dropped the reproduced value's 95%
    interval [0.710, 0.717], which leaves the published value out: the comparison carries each
    reproduced value's interval from its table (reproduced_low/high) and the sentence gives it."""
    td = tables_in(FIXTURE)
    study = {"tiny-fine": {"study": "Qwen2-57B", "precision": None, "tp": None, "gpu": "CPU"},
             "synth-fine": {"study": "Qwen3-30B", "precision": "bf16", "tp": 1, "gpu": "H100"}}
    report.comparison_stage(Named({"tables": list(in_folder(FIXTURE).values())}),
                            declared_tables(tmp_path, ["comparison"]),
                            ComparisonParams(study=study, config_hash="x"))
    cmp_ = tables.read_csv(tmp_path / "comparison.csv")
    # where its reproduced values were measured, beside the published source (it named only that)
    prov = tables.read_provenance(tmp_path / "comparison.csv")
    assert prov["measured"] == report.sources_of(list(in_folder(FIXTURE).values()))["measured"]
    assert prov["measured"] and prov["published_source"] == published.SOURCE
    run = ["model", "drafter", "k", "dataset"]

    def compared(model: str, stem: str, q: str) -> pd.Series:
        """The row of `stem` that the comparison's `q` of `model` was read from."""
        c = cmp_[(cmp_["model"] == model) & (cmp_["quantity"] == q)].iloc[0]
        df = td.read(stem)
        mine = df[(df[run] == c[run].values).all(axis=1)].iloc[0]
        assert np.isfinite(mine[f"{q}_low"]) and (c["reproduced_low"], c["reproduced_high"]) \
            == (mine[f"{q}_low"], mine[f"{q}_high"])
        return mine

    for model in study:
        compared(model, "overlap_by_distance", "seq1")
    dec = compared("synth-fine", "overlap_decomposition_step1", "sequence_temporal_share")
    [synth] = [s for s in prose.comparison_findings(tables_in(tmp_path))
               if s.startswith("synth-fine ")]
    share = (f"{dec['sequence_temporal_share']:.3f} [{dec['sequence_temporal_share_low']:.3f}, "
             f"{dec['sequence_temporal_share_high']:.3f}]")
    assert f"temporal share of step-1 overlap {share} vs 0.724" in synth


@pytest.mark.parametrize("path", sorted(FIXTURE.glob("*.csv")), ids=lambda p: p.stem)
def test_each_point_of_the_tables_lies_within_its_own_interval(path):
    """Where a table has <col>, <col>_low and <col>_high, each row's finite point lies within
    its finite ends (a point outside its own interval is a biased point or a broken interval)."""
    df = tables.read_csv(path)
    outside = []
    for col in df.columns:
        if f"{col}_low" not in df or f"{col}_high" not in df:
            continue
        v, lo, hi = (df[c].to_numpy(np.float64) for c in (col, f"{col}_low", f"{col}_high"))
        bad = np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi) & ~((lo <= v) & (v <= hi))
        outside += [(col, int(i), v[i], lo[i], hi[i]) for i in np.flatnonzero(bad)]
    assert not outside, outside


def _interval_words(tmp_path, study: bool, device: str) -> str:
    """The report's words on the speedup intervals of a series swept on `device`, through the
    pipeline's own path: the speedup stage under config.yaml (with config/paper.yaml merged over
    it where `study`), the measured tables, the opening's timing scope."""
    from specmoe.report.measured import build_measured_tables
    from test_sweep import _resolved, _speedup_on

    work = tmp_path / f"{int(study)}{device}"
    (work / "tables").mkdir(parents=True)
    _speedup_on(work, _resolved(study), device)
    sp = build_measured_tables([str(work / "out.json")], [], [])["speedup_vs_batch"]
    assert list(sp["device"].unique()) == [device]
    tables.write_table(sp, work / "tables" / "speedup_vs_batch", {"config_hash": "x"})
    return prose._timing_scope(tables_in(work / "tables"))


def test_the_report_says_whether_the_intervals_hold_the_engine_spread_of_their_device(tmp_path):
    """The report said every interval held 'the engine-to-engine spread', the one config.yaml
    measured on a 2-core CPU, of the study's GPU sweeps too (config/paper.yaml inherited it). It
    says, by the device each series was swept on, whether its intervals hold the spread measured
    for that device or the spread was not measured there."""
    gpu = _interval_words(tmp_path, True, "cuda")
    assert gpu.endswith("; 95% intervals from this run's repeats alone: the engine-to-engine "
                        "spread is not measured for a GPU (sweep.engine_log_sd_device), so they "
                        "hold for these engine starts, not for another start or the same machine "
                        "on another day")
    cpu = _interval_words(tmp_path, False, "cpu")
    assert cpu.endswith("; 95% intervals from this run's repeats and the engine-to-engine spread "
                        "measured for the device they ran on, a CPU (sweep.engine_log_sd): they "
                        "hold for this session, not for the same machine on another day")
    # the default's CPU spread says nothing of a GPU it swept on
    assert "not measured for a GPU" in _interval_words(tmp_path, False, "cuda")


def test_the_interval_sentence_over_series_of_both_devices_and_of_an_older_table(tmp_path):
    """Series swept on a CPU (the spread measured there) beside one on a GPU (not measured): the
    sentence names each; a table from before the engine_log_sd column does not claim either."""
    sp = tables.read_csv(FIXTURE / "speedup_vs_batch.csv")
    gpu = sp["model"] == "tiny-coarse"
    both = sp.assign(device=np.where(gpu, "cuda", "cpu"), engine_log_sd=np.where(gpu, 0.0, 0.043))
    text = prose.opening(_fixture_with(tmp_path, "speedup_vs_batch", both))
    assert ("95% intervals from this run's repeats, with the engine-to-engine spread for the "
            "series swept on a CPU and without it for those swept on a GPU (not measured there, "
            "sweep.engine_log_sd_device; those hold for their engine starts alone): none hold "
            "for the same machine on another day") in text
    older = prose.opening(_fixture_with(tmp_path, "speedup_vs_batch",
                                        sp.drop(columns="engine_log_sd")))
    assert ("95% intervals from this run's repeats (the table does not say whether the "
            "engine-to-engine spread is in them)") in older


def test_every_calibration_row_has_a_baseline_beside_the_step_model():
    """The MoE shares of decode time and the time ratios (7 of 22 rows) stood without a baseline
    (both columns empty), so that the non-MoE ratio's step model (+0.061) could not be seen to do
    no better than the constant 1 (+0.060): each row carries the weight model, named."""
    from specmoe.cost import stepmodel
    from specmoe.report.predicted import calibration_tables

    cal = calibration_tables()["step_model_calibration"]
    assert not (cal["mean_baseline"].isna() & cal["weight_model"].isna()).any()
    assert (cal["weight_model_is"] != "").all()
    by = cal.set_index("quantity")
    rest = by.loc[stepmodel.REST_RATIO]
    assert rest["weight_model"] == 1.0
    assert rest["weight_model_error"] == pytest.approx(1.0 - rest["published"])
    # the MoE ratio's: unique experts / k, above 1 (verification reads more experts than decode)
    assert by.loc[stepmodel.MOE_RATIO, "weight_model"] > 1.0
    share = cal[cal["quantity"] == stepmodel.MOE_SHARE]
    assert share["weight_model"].between(0, 1).all()
    assert share["weight_model"].nunique() > 1  # each model's own weights, not one constant


def test_the_prediction_stands_beside_its_own_runs_sweep(tmp_path):
    """The table matched a sweep on model, K and batch alone, the first file winning: a
    prediction made for tiny-drafter on tinybench (acceptance length 2.5) stood beside another
    drafter's sweep on heldout-code (speedup 0.7, tau 1.6), with no column to say so. It takes
    the sweep of the run the prediction names, and says which run."""
    from specmoe.errors import InputError
    from specmoe.report.predicted import prediction_table

    own = {"model": "tiny-fine", "drafter": "tiny-drafter", "k": 3,
           "dataset": "tinybench+heldout-code+heldout-prose"}
    pred = {"model": "tiny-fine", "run": own, "k": 3, "method": "draft_model",
            "hardware": "CPU", "overlaps": "measured", "batch_sizes": [1], "te": [0.5],
            "te_low": [0.4], "te_high": [0.6], "te_low_clipped": [False],
            "te_high_clipped": [False], "no_information": [False], "speedup": [1.2],
            "speedup_low": [1.0], "speedup_high": [1.4], "acceptance_length": [2.5, 2.5],
            "shape": "no shape"}
    (tmp_path / "pred.json").write_text(json.dumps({"model": "tiny-fine", "predictions": [pred]}))
    sweeps = []
    for name, run, speedup, tau in (
            ("a", {**own, "drafter": "other-drafter", "dataset": "heldout-code"}, 0.7, 1.6),
            ("b", own, 1.3, 2.5)):
        sweeps.append(tmp_path / f"sp_{name}.json")
        sweeps[-1].write_text(json.dumps({"run": run, "shape": "x", "rows": [
            {"batch": 1, "speedup": speedup, "tau": tau}]}))
    [row] = prediction_table([tmp_path / "pred.json"], sweeps).to_dict("records")
    assert (row["speedup_measured"], row["tau_measured"]) == (1.3, 2.5)
    assert (row["drafter"], row["dataset"]) == ("tiny-drafter", own["dataset"])
    # another run's sweep alone is no measurement of this prediction
    [row] = prediction_table([tmp_path / "pred.json"], sweeps[:1]).to_dict("records")
    assert np.isnan(row["speedup_measured"]) and row["dataset"] == own["dataset"]
    # a prediction that names no run (written before they did) is refused, not guessed
    (tmp_path / "old.json").write_text(json.dumps({"model": "tiny-fine", "predictions": [
        {k: v for k, v in pred.items() if k != "run"}]}))
    with pytest.raises(InputError, match="names no run"):
        prediction_table([tmp_path / "old.json"], sweeps)


def test_the_predict_stage_names_its_run_for_the_table(tmp_path):
    """The predict JSON carried no run, so the table could only guess which sweep it predicts:
    the stage writes the run of its params, and the table reads it."""
    from specmoe.contracts.analysis import PredictParams
    from specmoe.report.predicted import prediction_table
    from specmoe.stages.analysis import predict_stage

    snapshot = tmp_path / "olmoe"
    snapshot.mkdir()
    (snapshot / "config.json").write_bytes(
        (Path(__file__).parent / "fixtures/hf_configs/OLMoE-1B-7B-0924.json").read_bytes())
    cfg = {"name": "olmoe", "source": "hf", "precision": "bf16", "tp": 1, "hardware": "H100",
           "hf_config": str(snapshot)}
    run = {"model": "olmoe", "drafter": "olmoe-eagle", "k": 3, "dataset": "heldout-prose"}
    predict_stage(Named({}), Named({"json": tmp_path / "p.json"}),
                  PredictParams(model=cfg, hardware={"H100": published.gpus()["H100"]},
                                batch_sizes=[1], study=None,
                                predictions=[{"run": run, "k": 3, "method": "eagle3"}]))
    (tmp_path / "sp.json").write_text(json.dumps({"run": run, "shape": "x", "rows": [
        {"batch": 1, "speedup": 1.7, "tau": 2.9}]}))
    [row] = prediction_table([tmp_path / "p.json"], [tmp_path / "sp.json"]).to_dict("records")
    assert (row["dataset"], row["drafter"], row["speedup_measured"]) == (
        "heldout-prose", "olmoe-eagle", 1.7)
    # the text names the run whose sweep it sets beside the prediction
    tables.write_table(prediction_table([tmp_path / "p.json"], [tmp_path / "sp.json"]),
                       tmp_path / "step_model", {"config_hash": "x"})
    [line] = prose.prediction_findings(tables_in(tmp_path))
    assert line.startswith("olmoe (step model for olmoe, K=3, heldout-prose with olmoe-eagle, "
                           "on H100): B=1: 1.70")


def test_every_report_index_output_carries_its_provenance(tmp_path):
    """summary.txt, an output of rule report_index, carried no provenance, and the Markdown
    outputs wrote theirs in two encodings (index.md JSON, plan.md a Python repr: single quotes,
    None). Each now carries the one provenance line (provenance.provenance_line): index.md and
    index.html in a comment, summary.txt in a last '# provenance: ' line, which the end of the
    run does not print."""
    from specmoe.provenance import CSV_PROVENANCE
    from specmoe.report.summary import end_of_run

    out = tmp_path / "results/report/index.md"
    report.report_index_stage(*report_job(tmp_path / "results/tables",
                                          tmp_path / "results/figures", out),
                              ReportIndexParams("abc"), run_root=None)

    def comment(text: str) -> dict:
        import html

        return json.loads(html.unescape(re.search(r"<!-- provenance: (.*?) -->", text)[1]))

    assert comment(out.read_text())["config_hash"] == "abc"
    assert comment(out.with_suffix(".html").read_text())["config_hash"] == "abc"
    summary = (out.parent / "summary.txt").read_text().rstrip("\n").splitlines()
    assert summary[0].startswith("Report: ") and summary[-1].startswith(CSV_PROVENANCE)
    prov = json.loads(summary[-1][len(CSV_PROVENANCE):])
    assert prov["config_hash"] == "abc" and prov == comment(out.read_text())
    said = end_of_run(out.parent / "summary.txt", 0.0)
    assert "Report: " in said and "provenance" not in said and "abc" not in said


def test_the_gpu_plans_provenance_comment_is_json(tmp_path):
    """plan.md's provenance comment was the record's Python repr (single quotes, None), not
    the JSON every other output carries."""
    from types import SimpleNamespace

    from specmoe.contracts.report import PlanParams
    from test_preflight import only, paper

    out = SimpleNamespace(json=tmp_path / "plan.json", md=tmp_path / "plan.md")
    report.plan_stage(None, out, PlanParams.from_config(paper(only("glm-4.7-flash-bf16-tp1"))))
    line = re.search(r"<!-- provenance: (.*?) -->", out.md.read_text())[1]
    assert json.loads(line) == json.loads(out.json.read_text())["provenance"]
