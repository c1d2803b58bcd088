"""Real Snakemake runs of the pipeline in a temporary directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specmoe.report import tables
from specmoe.provenance import read_json
from specmoe.routing.trace import read_trace
from wf import REPO, copy_workflow, snakemake, snakemake_command

ON_TEST = {"configfile": "test.yaml", "cores": 2}  # how this file runs its workdirs
pytestmark = pytest.mark.slow

TEST_CONFIG = {
    "ks": [3],
    "batch_sizes": [1, 8],
    "models": [{
        "name": "tiny",
        "source": "synthetic",
        "hardware": "H100",
        "drafters": ["synth"],
        "datasets": ["synth"],
        "dims": {"hidden": 256, "expert_intermediate": 64, "heads": 4, "kv_heads": 2,
                 "head_dim": 64, "num_layers": 2, "vocab_size": 1000},
        "synthetic": {"num_experts": 16, "top_k": 2, "num_layers": 2, "requests": 8, "steps": 8,
                      "stickiness": 0.4, "categories": ["a", "b"], "seed": 3},
    }],
}


def make_workdir(tmp_path: Path, config: dict) -> Path:
    return copy_workflow(tmp_path / "wf", config, "test.yaml")


def outputs(wd: Path) -> dict[str, float]:
    return {str(p.relative_to(wd)): p.stat().st_mtime_ns
            for p in (wd / "results").rglob("*") if p.is_file()}


RUN = "tiny/synth/K3/synth"


def test_chain_runs_caches_and_forcerun_reruns_only_downstream(tmp_path):
    wd = make_workdir(tmp_path, TEST_CONFIG)
    first = snakemake(wd, **ON_TEST)
    res = wd / "results"
    # where the time went: printed at the end of the run, and in the report's provenance section
    assert "specmoe: where the time went" in first.stdout
    assert "| analysis |" in (res / "report/index.md").read_text().split("## Provenance")[1]
    tr = read_trace(res / f"traces/{RUN}.parquet")
    assert tr.meta["provenance"]["config_hash"] and tr.meta["provenance"]["hardware"]["cpu_count"]
    ov = read_json(res / f"overlap/{RUN}.json")
    assert 0 < ov["summary"]["step1"] <= 1 and ov["provenance"]["stage"] == "overlap"
    assert len(ov["summary"]["shuffle_by_distance"]) == 3
    cm = read_json(res / f"costmodel/{RUN}.json")
    assert {r["routing"] for r in cm["te_vs_batch"]} >= {"uniform i.i.d. (prior model)"}
    # per-slice overlap by distance (the study's Table 18 shape): each category of the trace
    sl = tables.read_csv(res / "tables/heldout_overlap.csv")
    assert sorted(sl["slice"]) == ["a", "b"] and (sl["n_windows"] > 0).all()
    assert ((sl[["step1", "step2", "step3"]] > 0) & (sl[["step1", "step2", "step3"]] <= 1)).all(
        axis=None)
    index = (res / "report/index.md").read_text()
    for stem in ("overlap_by_distance", "te_vs_batch", "unique_experts", "acceptance_consecutive"):
        assert stem in index
    for link in [line.split("](../")[1].split(")")[0] for line in index.splitlines()
                 if "](../" in line]:
        assert (res / link).exists(), link
    for log in (wd / "logs").rglob("*.log"):
        assert "done in" in log.read_text(), log
    assert list((wd / "benchmarks").rglob("*.tsv"))
    assert_snakemake_report(wd)

    # A second run does nothing.
    before = outputs(wd)
    r = snakemake(wd, **ON_TEST)
    assert "Nothing to be done" in r.stdout + r.stderr
    assert outputs(wd) == before

    # --forcerun of one rule reruns it and what depends on it, nothing upstream.
    snakemake(wd, "--forcerun", "costmodel", **ON_TEST)
    after = outputs(wd)
    changed = {p for p in after if after[p] != before[p]}
    assert f"results/costmodel/{RUN}.json" in changed
    assert "results/tables/te_vs_batch.csv" in changed and "results/report/index.md" in changed
    for upstream in (f"results/traces/{RUN}.parquet", f"results/overlap/{RUN}.json",
                     f"results/ipf/{RUN}.json", f"results/acceptance/{RUN}.json"):
        assert upstream not in changed, upstream


def test_a_report_shows_only_the_tables_its_configuration_declares(tmp_path):
    """A configuration with a synthetic model and a cost-only study model (its weight-model
    table), then one with another synthetic model only, into the same results/: the tables of
    the first left in results/tables/ appear nowhere in the second's report, comparison or
    figures (each of their jobs reads only the tables its rule lists)."""
    from hubfake import lay_out_cache
    from specmoe.report import registry

    fixture = REPO / "src/specmoe/data/hf_configs/Qwen3-30B-A3B.json"
    cache = tmp_path / "hf" / "hub"
    lay_out_cache(cache, "Qwen/Qwen3-30B-A3B", {"config.json": fixture.read_bytes(),
                                                "tokenizer.json": b"{}"}, commit="f" * 40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(cache))
    first = yaml.safe_load(yaml.safe_dump(TEST_CONFIG))
    first["models"][0]["name"] = "synth-first"
    first["models"].append({"name": "qwen-first", "source": "hf", "cost_only": True,
                            "repo_id": "Qwen/Qwen3-30B-A3B"})
    wd = make_workdir(tmp_path, first)
    snakemake(wd, env=env, **ON_TEST)
    res = wd / "results"
    index = (res / "report/index.md").read_text()
    assert "qwen-first" in index and "synth-first" in index  # the first report shows both
    assert f"### {registry.title('weight_model')}" in index

    second = yaml.safe_load(yaml.safe_dump(TEST_CONFIG))
    second["models"][0]["name"] = "synth-second"
    (wd / "test.yaml").write_text(yaml.safe_dump(second))
    snakemake(wd, env=env, **ON_TEST)
    assert "qwen-first" in (res / "tables/weight_model.csv").read_text()  # left in the folder
    index = (res / "report/index.md").read_text()
    assert "synth-second" in index
    for text in (index, (res / "report/index.html").read_text(),
                 (res / "tables/comparison.csv").read_text()):
        assert "qwen-first" not in text and "synth-first" not in text
    assert f"### {registry.title('weight_model')}" not in index


def assert_snakemake_report(wd: Path) -> None:
    """`snakemake --report` holds every figure and every table (its HTML page) with its caption,
    and opens in a headless browser with every image decoded and no caption error."""
    from browser import SNAKEMAKE_REPORT, open_page
    from specmoe.report import registry

    snakemake(wd, "--report", "report.html", **ON_TEST)
    page = open_page((wd / "report.html").as_uri(), expression=SNAKEMAKE_REPORT)
    items = set(page["items"])
    figures = {f"results/figures/{f}.png" for s in registry.SECTIONS.values() for f in s["figures"]}
    made = {f"results/tables/{p.stem}.html" for p in (wd / "results/tables").glob("*.csv")}
    assert "results/tables/comparison.html" in made and "results/tables/te_vs_batch.html" in made
    # the first page is the report itself (a page with its figures embedded), not a download
    assert figures | made | {"results/report/index.html"} <= items, (figures | made) - items
    assert page["images"] == len(figures) and page["broken"] == []
    assert page["caption_errors"] == [] and page["empty"] == [] and page["errors"] == []
    for stem in made:  # each table's section is in the report's menu
        assert registry.section_of(Path(stem).stem) in page["text"], stem


def test_killed_run_leaves_nothing_half_written_and_resumes(tmp_path):
    cfg = yaml.safe_load(yaml.safe_dump(TEST_CONFIG))
    # big enough that the trace rule runs for several seconds
    cfg["models"][0]["synthetic"].update(num_experts=64, top_k=8, num_layers=16, requests=200,
                                         steps=100)
    wd = make_workdir(tmp_path, cfg)
    log = wd / f"logs/traces/{RUN}.log"
    proc = subprocess.Popen(snakemake_command(**ON_TEST), cwd=wd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if log.exists() and "generating" in log.read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the trace rule never started")
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    trace = wd / f"results/traces/{RUN}.parquet"
    assert not trace.exists(), "a killed rule left a file under its final name"
    # After SIGKILL Snakemake's lock stays (documented recovery: --unlock); the rerun, with the
    # workflow profile's rerun-incomplete, completes and every output reads back.
    snakemake(wd, "--unlock", **ON_TEST)
    snakemake(wd, **ON_TEST)
    assert read_trace(trace).experts.shape[1:] == (16, 8)
    assert (wd / "results/report/index.md").exists()
    assert not [p for p in (wd / "results").rglob(".*.tmp")]


def test_bad_config_names_the_key(tmp_path):
    cfg = yaml.safe_load(yaml.safe_dump(TEST_CONFIG))
    cfg["models"][0]["synthetic"]["stikiness"] = 0.4
    wd = make_workdir(tmp_path, cfg)
    r = snakemake(wd, "-n", check=False, **ON_TEST)
    assert r.returncode != 0
    assert ("config: models[0].synthetic.stikiness (model 'tiny'): unknown key; did you mean "
            "'stickiness'?") in r.stderr, r.stderr
    assert "Failed validating" not in r.stdout + r.stderr  # the schema is not dumped

    cfg = yaml.safe_load(yaml.safe_dump(TEST_CONFIG))
    cfg["ks"] = ["three"]
    (wd / "test.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake(wd, "-n", check=False, **ON_TEST)
    assert r.returncode != 0
    assert "config: ks[0]: must be an integer >= 1 and <= 8 (got 'three')" in r.stderr


def test_snakefmt_leaves_every_rule_file_unchanged():
    files = ["Snakefile", *sorted(str(p.relative_to(REPO)) for p in (REPO / "workflow" / "rules")
                                  .glob("*.smk"))]
    r = subprocess.run([sys.executable, "-m", "snakefmt", "--check", *files], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_lint_is_clean():
    r = snakemake(REPO, "--lint", check=False, timeout=120)
    assert "Lints for" not in r.stdout + r.stderr, r.stdout[-3000:]


TINY_CONFIG = {
    "ks": [3],
    "batch_sizes": [1, 8],
    "tiny": {"vocab_size": 512, "max_train_tokens": 300000, "max_heldout_tokens": 20000,
             "train": {"seq_len": 64, "batch_size": 16, "lr": 0.004, "warmup": 10,
                       "eval_batches": 2, "threads": 2},
             "sd_check": {"k": 3, "dataset": "heldout-code", "prompts": 4, "max_tokens": 32,
                          "kv_cache_mib": 128}},
    "sweep": {"schedule": [{"batch": 1, "prompts": 2}, {"batch": 2, "prompts": 4}],
              "output_len": 12, "warmups": 1, "repeats": 2, "kv_cache_mib": 128},
    "profiling": {"batch_sizes": [1], "max_tokens": 16, "engines": 2, "kv_cache_mib": 128},
    "drafters": [{"name": "dr", "source": "tiny", "steps": 120,
                  "arch": {"kind": "dense", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1,
                           "head_dim": 32, "intermediate": 128}}],
    "models": [{"name": "moe", "source": "tiny", "hardware": "CPU", "drafters": ["dr"],
                "datasets": ["heldout-code"], "steps": 60,
                "arch": {"kind": "moe", "hidden": 64, "layers": 2, "heads": 2, "kv_heads": 1,
                         "head_dim": 32, "num_experts": 16, "top_k": 4,
                         "expert_intermediate": 16}}],
}
# the target's checkpoint served in bf16: swept only, nothing trained again
VARIANT = {"name": "moe-bf16", "source": "variant", "variant_of": "moe", "precision": "bf16",
           "drafters": ["dr"], "datasets": ["heldout-code"]}


def test_tiny_models_train_cache_and_pass_the_sd_check(tmp_path):
    """The tiny chain end to end without sweeps and profiles: tokenizer, training with its
    untrained control, the SD check, capture of both and the report; then a rerun does nothing.
    (Sweeps, profiles and the speedup on an engine: tests/test_study_cpu.py, whose rules are the
    same; a series resuming at a lost point: tests/test_serving.py.)"""
    pytest.importorskip("vllm")
    cfg = {**TINY_CONFIG, "models": [{**TINY_CONFIG["models"][0], "sweep": False}]}
    wd = make_workdir(tmp_path, cfg)
    snakemake(wd, **ON_TEST)
    res = wd / "results"
    trained = read_json(res / "models/moe/manifest.json")
    control = read_json(res / "models/moe-random/manifest.json")
    assert trained["trained"] and not control["trained"] and control["steps"] == 0
    assert trained["heldout_loss"] < control["heldout_loss"] - 1.0
    assert trained["provenance"]["model"]["revision"] == "seed0-steps60"
    sd = read_json(res / "sd_check/moe/dr/K3/heldout-code.json")
    assert sd["sd_equals_plain"] and sd["spec"]["num_drafts"] > 0
    assert "done in" in (wd / "logs/sd_check/moe/dr/K3/heldout-code.log").read_text()
    traces = {}
    for model in ("moe", "moe-random"):  # each served from its own checkpoint
        tr = traces[model] = read_trace(res / f"traces/{model}/dr/K3/heldout-code.parquet")
        assert len(tr) > 0 and tr.meta["provenance"]["model"]["name"] == model
    # the control read its target's windows, token for token, and is paired with it by request
    np.testing.assert_array_equal(traces["moe-random"].columns["token_id"],
                                  traces["moe"].columns["token_id"])
    assert traces["moe-random"].meta["capture"]["teacher_forced"]["target"] == "moe"
    mc = tables.read_csv(res / "tables/matched_controls.csv")
    assert mc[["model", "target"]].values.tolist() == [["moe-random", "moe"]]
    assert bool(mc["matched"].iloc[0])
    assert not (res / "sweeps").exists() and not (res / "profiles").exists()
    assert "acceptance_consecutive" in (res / "report/index.md").read_text()
    r = snakemake(wd, **ON_TEST)
    assert "Nothing to be done" in r.stdout + r.stderr


def test_a_variant_plans_its_sweeps_on_its_targets_checkpoint_and_nothing_else(tmp_path):
    """A variant (the trained target's checkpoint served in bf16) adds its SD series (which
    measures its no-SD points beside the SD ones) and its speedup, each waiting on the target's checkpoint, and no training, capture or profile of
    its own. (The default run serves one for real; its panel beside the target's:
    tests/test_report.py.)"""
    cfg = {**TINY_CONFIG, "models": [*TINY_CONFIG["models"], VARIANT]}
    wd = make_workdir(tmp_path, cfg)
    r = snakemake(wd, "-n", **ON_TEST)
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", r.stdout + r.stderr)
    variant = sorted(re.match(r"(?:local)?rule (\w+):", b)[1] for b in blocks
                     if re.search(r"^\s+wildcards: .*model=moe-bf16\b", b, re.M))
    assert variant == ["speedup", "sweep_sd"], variant
    for b in blocks:
        if "model=moe-bf16" in b and re.match(r"(?:local)?rule sweep_", b):
            assert re.search(r"^\s+input: .*results/models/moe\b", b, re.M), b


@pytest.mark.parametrize("edit,needle", [
    (lambda c: c["models"][0].update(steps=0),
     "config: models[0].steps (model 'moe'): must be an integer >= 1 (got 0)"),
    (lambda c: c["models"][0].update(drafters=["nope"]), "drafter 'nope'"),
    (lambda c: c["tiny"]["sd_check"].update(k=9),
     "config: tiny.sd_check.k: must be an integer >= 1 and <= 8 (got 9)"),
])
def test_bad_tiny_config_stops_before_anything_runs(tmp_path, edit, needle):
    cfg = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    edit(cfg)
    wd = make_workdir(tmp_path, cfg)
    (wd / "results/models/keep").mkdir(parents=True)
    r = snakemake(wd, check=False, **ON_TEST)
    assert r.returncode != 0 and needle in r.stdout + r.stderr
    assert (wd / "results/models/keep").exists() and not (wd / "logs").exists()


def test_the_default_runs_tokenizer_and_trainings_go_first(tmp_path):
    """Every engine job waits for the trained models, so the tokenizer and the trainings have the
    scheduler's priority over every other job (before, it ran the synthetic traces and their
    analysis first and started the tokenizer 105 s into a default run). A dry run does not
    schedule (Snakemake skips its job selection there): this reads the priority Snakemake gives
    each job, and the cold run's timeline (bench/cold_runs.py) shows the order."""
    wd = copy_workflow(tmp_path / "wf")
    r = snakemake(wd, "-n", cores=2)
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", r.stdout + r.stderr)
    prio = {}
    for b in blocks:
        m = re.match(r"(?:local)?rule (\w+):", b)
        if m:
            p = re.search(r"^\s+priority: (\d+)", b, re.M)
            prio.setdefault(m[1], set()).add(int(p[1]) if p else 0)
    first = {"tokenizer", "train_model"}
    assert first <= set(prio), sorted(prio)
    top = min(min(prio[r]) for r in first)
    assert top > 0 and all(max(v) < top for r, v in prio.items() if r not in first), prio
    # an untrained control (seconds to make) waits with the engine jobs, its only readers: it
    # started before tiny-fine's training and delayed it by 8 s
    assert prio["random_model"] == prio["capture_control"] == prio["capture"]
