"""Every table and figure of the study has its runs in config/paper.yaml: table by table (each row of
the published table is a study model's variant that some job must measure) and figure by figure,
from the workflow's own job list (`snakemake -n --configfile config/paper.yaml`), each job joined
with its model's configuration (study model, precision, TP, hardware, speculative method)."""

from __future__ import annotations

import re

import pytest
import yaml

from specmoe.sources import published
from wf import REPO

# every test reads the study's Snakemake dry run (conftest.paper_dry_run, about 30 s)
pytestmark = pytest.mark.slow

PAPER = yaml.safe_load((REPO / "config/paper.yaml").read_text())
METHODS = {"EAGLE": "eagle", "EAGLE-3": "eagle3", "MTP": "mtp", "draft_model": "draft_model"}


@pytest.fixture(scope="module")
def jobs(paper_dry_run) -> list[dict]:
    """The dry run's jobs (conftest.paper_dry_run, shared), each with its wildcards and its
    model's variant."""
    out_text, _ = paper_dry_run
    models = {m["name"]: m for m in PAPER["models"]}
    drafters = {d["name"]: d for d in PAPER["drafters"]}
    formats = {n: d["format"] for n, d in PAPER["datasets"].items()}
    out = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out_text):
        head = re.match(r"(?:local)?rule (\w+):", block)
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        if not head:
            continue
        job = {"rule": head[1], **dict(kv.split("=", 1) for kv in (wc[1].split(", ") if wc else []))}
        m = models.get(job.get("model"), {})
        if m:
            repo = m.get("repo_id") or ""
            job.update(study=published.study_model_of(m) or m.get("compare_with"),
                       precision=m.get("precision") or ("fp8" if "fp8" in repo.lower() else "bf16"),
                       tp=int(m.get("tp", 1)), hardware=m.get("hardware", "H100"))
        if job.get("drafter") in drafters:
            job["method"] = drafters[job["drafter"]]["method"]
        if job.get("dataset") in formats:
            job["format"] = formats[job["dataset"]]
        out.append(job)
    assert len(out) > 300
    return out


def having(jobs, rule, **want) -> list[dict]:
    return [j for j in jobs if j["rule"] == rule
            and all(str(j.get(k)) == str(v) for k, v in want.items())]


def rows(name: str) -> list[dict]:
    return published.load(name).to_dict("records")


# Each published table: the rule whose jobs fill its rows, and what of a row a job must match.
TABLES = {
    "Table 1 (te_weight_model_batch1)": ("weight_model", "te_weight_model_batch1",
                                         lambda r: {}),
    "Tables 2, 13 (overlap_decomposition_step1)": (
        "overlap", "overlap_decomposition_step1", lambda r: {"study": r["model"]}),
    "Tables 3, 20 (unique_experts_ipf)": ("ipf", "unique_experts_ipf",
                                          lambda r: {"study": r["model"]}),
    "Tables 5, 12 (profiling_batch1)": ("profile", "profiling_batch1", lambda r: {
        "study": r["model"], "hardware": r["gpu"], "precision": r["precision"], "tp": r["tp"]}),
    "Table 10 (te_batch1_k3)": ("speedup", "te_batch1_k3", lambda r: {
        "study": r["model"], "precision": r["precision"], "tp": r["tp"],
        "method": METHODS[r["sd_method"]], "k": 3, "format": "mt-bench"}),
    "Tables 14, 15 (acceptance_consecutive)": ("acceptance", "acceptance_consecutive",
                                               lambda r: {"study": r["model"]}),
    "Table 16 (heldout_acceptance)": ("acceptance", "heldout_acceptance", lambda r: {
        "study": r["model"], "format": r["data"].lower()}),
    "Table 17 (overlap_by_distance)": ("overlap", "overlap_by_distance",
                                       lambda r: {"study": r["model"]}),
    "Table 18 (heldout_overlap_qwen3_30b)": ("overlap", "heldout_overlap_qwen3_30b", lambda r: {
        "study": "Qwen3-30B", "format": r["slice"].removesuffix(" mean").lower()}),
    "Table 19 (per_layer_overlap)": ("overlap", "per_layer_overlap",
                                     lambda r: {"study": r["model"]}),
}


# Rows no job can fill: the Mixtral EAGLE-1 head, which vLLM 0.32 makes EagleMixtralForCausalLM and
# cannot load (the preflight refuses it: tests/test_drafters.py; README, Known limitations).
UNSERVABLE = {"te_batch1_k3": [("Mixtral-8x7B", "EAGLE")]}


@pytest.mark.parametrize("label", list(TABLES))
def test_every_row_of_the_studys_table_has_a_job(jobs, label):
    rule, name, match = TABLES[label]
    missing = [r for r in rows(name) if not having(jobs, rule, **match(r))]
    gaps = UNSERVABLE.get(name, [])
    assert [r for r in missing if (r["model"], r.get("sd_method")) not in gaps] == [], \
        f"{label}: no {rule} job for {missing}"
    assert {(r["model"], r.get("sd_method")) for r in missing} == set(gaps)


def test_table_1_rows_are_weight_model_entries():
    """The weight model is one job over every study model: Table 1's variants are its entries."""
    entries = {(published.study_model_of(m), m.get("precision") or (
        "fp8" if "fp8" in (m.get("repo_id") or "").lower() else "bf16"), int(m.get("tp", 1)))
               for m in PAPER["models"] if m.get("repo_id")}
    for r in rows("te_weight_model_batch1"):
        assert (r["model"], r["dtype"], r["tp"]) in entries, r


def test_table_11_the_three_step_correction(jobs):
    """Profiled shares and the measured TE of Qwen3-30B fp8 on H100 at batch 1, K = 3."""
    want = {"study": "Qwen3-30B", "precision": "fp8", "hardware": "H100", "k": 3}
    assert having(jobs, "profile", **want) and having(jobs, "speedup", **want)
    assert having(jobs, "costmodel", study="Qwen3-30B")


STUDY_MODELS = sorted(set(published.load("models")["model"])
                      | {"Qwen3-Next-80B", "Qwen3.5-35B", "Kimi-K2.5"})

# Each figure: the speedup (sweep) or other jobs it draws, as lists of required matches.
FIGURES = {
    "Figure 1: speedup vs batch, one coarse and three fine-grained models": [
        {"rule": "speedup", "study": s, "k": 3, "format": "mt-bench"}
        for s in ("Mixtral-8x7B", "Qwen3-30B", "GLM-4.7-Flash", "Qwen3-235B")],
    "Figure 2: TE under routing strategies": [{"rule": "costmodel", "study": "Qwen3-30B"}],
    "Figure 3: speedup for K = 3, 5, 7": [
        {"rule": "speedup", "study": "Qwen3-30B", "k": k, "format": "mt-bench"}
        for k in (3, 5, 7)],
    "Figure 4: TE vs batch, MT-Bench against a long-context set": [
        {"rule": "speedup", "study": "Qwen3-30B", "precision": "fp8", "tp": 2, "format": f}
        for f in ("mt-bench", "speed-bench")],
    "Figure 5: one model across TP, precision and hardware": [
        {"rule": "speedup", "study": "Qwen3-30B", "precision": p, "tp": tp, "hardware": hw,
         "format": "mt-bench"}
        for p, tp, hw in (("fp8", 1, "H100"), ("fp8", 2, "H100"), ("bf16", 1, "H100"),
                          ("bf16", 2, "H100"), ("fp8", 2, "B200"))],
    "Figure 6: speedup vs batch for every model (K = 3)": [
        {"rule": "speedup", "study": s, "k": 3, "format": "mt-bench"} for s in STUDY_MODELS],
    "Figure 7: two models on four datasets": [
        {"rule": "speedup", "study": s, "format": f}
        for s in ("Qwen3-30B", "Qwen3-235B")
        for f in ("mt-bench", "spec-bench", "sharegpt", "instructcoder")],
    "Figure 9: anchor overlap by acceptance status": [
        {"rule": "acceptance", "study": s} for s in ("Qwen3-30B", "Qwen3-235B")],
    "Figure 10: per-layer step-1 overlap": [
        {"rule": "overlap", "study": s} for s in ("Qwen3-30B", "Qwen3-235B")],
    "Figure 11: a dense drafter's cost vs batch": [
        {"rule": "sweep_ar", "model": "qwen2-0.5b"},
        {"rule": "speedup", "study": "Qwen2-57B", "method": "draft_model"}],
    "Figure 12: a synthetic MoE drafter's draft ratio": [
        {"rule": "costmodel", "study": "Qwen3-30B"}],
}


@pytest.mark.parametrize("label", list(FIGURES))
def test_every_figure_of_the_study_has_its_runs(jobs, label):
    missing = [want for want in FIGURES[label] if not having(jobs, **want)]
    assert not missing, f"{label}: no job for {missing}"


def test_held_out_slices_come_from_datasets_marked_heldout():
    held = {n for n, d in PAPER["datasets"].items() if d.get("heldout")}
    assert {PAPER["datasets"][n]["format"] for n in held} == {"spec-bench", "aya"}


def test_the_gpu_plan_estimates_exactly_the_engine_jobs_of_the_dag(jobs):
    """The GPU plan and the rules take a model's engine jobs from one decision
    (specmoe.config.Config.engine_jobs): the dry run's capture, sweep and profile jobs of the study's
    models are the jobs the plan lists, no more, no fewer."""

    from specmoe.checks import schema
    from specmoe.config import Config

    cfg = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    schema.check(cfg, REPO / "workflow/schemas/config.schema.yaml")
    c = Config.resolve(cfg)
    planned = {(j.rule, j.model, str(j.drafter), str(j.k), j.dataset)
               for n in c.names("hf") for j in c.engine_jobs(n)}
    engine = {"capture", "sweep_ar", "sweep_sd", "profile"}
    dag = {(j["rule"], j["model"], j.get("drafter", ""), j.get("k", ""), j.get("dataset", ""))
           for j in jobs if j["rule"] in engine and j["model"] in c.models}
    # a profile's dataset is not a wildcard: the plan's profile rows carry it, the DAG's do not
    planned = {(r, m, d, k, "" if r == "profile" else ds) for r, m, d, k, ds in planned}
    assert planned == dag


def test_the_readme_quotes_the_study_dry_runs_own_job_counts(paper_dry_run):
    """The README quoted 465 jobs and 'preflight: 107 GPU jobs' for config/paper.yaml after
    the drafters served alone per dtype and TP had made them 469 and 109: each count it quotes is
    read from the dry run itself."""
    out_text, _ = paper_dry_run
    readme = (REPO / "README.md").read_text()
    total = re.search(r"^total\s+(\d+)$", out_text, re.M)
    gpu = re.search(r"preflight: (\d+) GPU jobs", out_text)
    assert total and gpu, out_text[-2000:]
    assert re.findall(r"every job it would run: (\d+)", readme) == [total[1]]
    assert re.findall(r"configuration plans (\d+) jobs", readme) == [total[1]]
    assert re.findall(r"`preflight: (\d+) GPU jobs", readme) == [gpu[1]]
