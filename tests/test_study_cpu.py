"""The study's path end to end on a CPU (.test/study-cpu): study models and datasets from an offline
Hugging Face cache that its builder makes (tests/study_cpu.py: tiny models trained here, datasets
in their published layouts), served by vLLM for CPUs through the same rules as on GPUs, down to
the report. The test runs the builder's command, as CI and a user do."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from specmoe.report import tables
from specmoe.provenance import read_json
from specmoe.measured.sweep import Estimate, shape_label
from specmoe.routing.trace import read_trace
from wf import REPO, job_timeline

CASE = REPO / ".test" / "study-cpu"
pytestmark = pytest.mark.slow


@pytest.mark.timeout(3600)  # about 10 minutes on 2 cores; a slow day runs up to 2.7x longer
def test_study_cpu_case_runs_every_study_rule(tmp_path):
    pytest.importorskip("vllm")
    root = tmp_path / "case"
    r = subprocess.run([sys.executable, str(REPO / "tests" / "study_cpu.py"), str(root)],
                       capture_output=True, text=True, timeout=3300)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    res = root / "results"
    cfg = yaml.safe_load((CASE / "config.yaml").read_text())
    pinned = {e["repo_id"]: e["revision"]
              for e in [*cfg["models"], *cfg["drafters"], *cfg["datasets"].values()]}

    # downloads: every repo resolved offline from the case's cache, at its pinned revision
    manifests = [read_json(p) for p in (res / "downloads").rglob("*.json")]
    # 3 model repos in full; config only: 2 targets (weight model, GPU plan) and the draft model
    # (the step model's drafter), 4 datasets
    assert len(manifests) == 6 + 4
    for man in manifests:
        assert man["commit"] == pinned[man["repo_id"]]
        assert man["snapshot_path"].startswith(str(root / "hf" / "hub"))
    prompts = (res / "prompts" / "aya.csv").read_text()
    assert ",English," in prompts and ",Python," in prompts

    # capture, sweeps and profiles ran the downloaded snapshots on vLLM for CPUs
    for model in ("fine-cpu", "coarse-cpu"):
        m = next(m for m in cfg["models"] if m["name"] == model)
        for ds in m["datasets"]:
            tr = read_trace(res / f"traces/{model}/tiny-draft/K3/{ds}.parquet")
            prov = tr.meta["provenance"]
            assert prov["model"] == {"name": model, "source": "hf",
                                     "revision": m["revision"]}
            assert prov["engine"].endswith("(cpu)") and len(tr) > 0
        if not m.get("sweep", True):
            assert not (res / "sweeps" / model).exists()
            continue
        # one served engine per series (one start-up) measures every dataset of the model, each
        # point twice: the speedup's interval comes from the repeats; an SD series starts a
        # second engine beside it, without SD, whose points interleave with the SD ones
        # (the target has no series without SD of its own: its SD series measures those points)
        assert not list((res / "sweeps" / model).glob("ar*.json"))
        # the draft model alone in its SD series' dtype (the sweep's float32)
        for series, engines in ((f"sweeps/{model}/tiny-draft/K3", 2),
                                ("sweeps/tiny-draft/ar-float32-tp1", 1)):
            sw = read_json(res / f"{series}.json")
            assert sw["engine_starts"] == engines
            assert (root / "logs" / f"{series}.log").read_text().count(
                "engine up on port") == engines
            sides = [lambda v: v["points"]] + (
                [lambda v: v["paired_no_sd"]["points"]] if engines == 2 else [])
            for side in sides:
                assert {ds: [(p["batch"], p["repeat"]) for p in side(v)]
                        for ds, v in sw["datasets"].items()} == {
                    ds: [(1, 0), (1, 1), (2, 0), (2, 1)] for ds in m["datasets"]}
            if engines == 2:
                assert all("sd" not in p for v in sw["datasets"].values()
                           for p in v["paired_no_sd"]["points"])
                # on a CPU both engines ran side by side (serving.arm_order), and it says so
                assert sw["paired_no_sd"]["arm_order"] == "interleaved"
        sd = read_json(res / f"sweeps/{model}/tiny-draft/K3.json")
        assert sd["engine"]["speculative_config"]["model"].endswith(
            pinned["specmoe-test/tiny-draft"])
        for ds in m["datasets"]:  # the shape's label follows the intervals
            sp = read_json(res / f"speedup/{model}/tiny-draft/K3/{ds}.json")
            assert sp["shape"] == shape_label(
                [1, 2], [Estimate(r["speedup"], r["speedup_log_se"], r["speedup_df"])
                         for r in sp["rows"]], sp["margin"])
            assert sp["no_sd_series"].startswith("interleaved")  # the SD series' own no-SD points
            for r in sp["rows"]:  # the drafter's own series gives c, and with it TE
                assert r["repeats"] == 2 and 1.0 <= r["tau"] <= 4.0 and r["draft_cost"] > 0
        prof = read_json(res / f"profiles/{model}/tiny-draft/K3.json")
        assert prof["batches"][0]["decode_steps"] > 0 and prof["batches"][0]["verify_steps"] > 0
    # the draft model served alone gives the draft cost c
    assert read_json(res / "sweeps/tiny-draft/ar-float32-tp1.json")["datasets"]

    sp = tables.read_csv(res / "tables/speedup_vs_batch.csv")
    assert len(sp) == 3 * 2  # fine-cpu's three datasets, two batch sizes
    assert ((sp["speedup_low"] < sp["speedup"]) & (sp["speedup"] < sp["speedup_high"])).all()
    assert (sp["draft_cost"] > 0).all()

    # TE three ways: a profiled or swept TE outside [0, 1] (a few CPU steps can time a verify pass
    # below a decode pass) is kept raw with its status, never as a value
    te3 = tables.read_csv(res / "tables/te_three_ways.csv")
    assert len(te3) and set(te3["model"]) == {"fine-cpu"}
    for _, r in te3.iterrows():
        assert r["te_profiled_raw"] > 0 and r["te_costmodel"] > 0
        inside = 0 <= r["te_profiled_raw"] <= 1
        # a point inside whose 95% interval reaches past a bound is not identified (#43)
        identified = inside and (pd.isna(r.get("te_profiled_raw_low")) or (
            0 < r["te_profiled_raw_low"] and r["te_profiled_raw_high"] <= 1))
        assert (r["te_profiled_status"] == "ok") == identified, r["te_profiled_status"]
        if inside and not identified:
            assert r["te_profiled_status"].startswith("not identified")
        assert (r["te_profiled_status"] == "ok") == pd.notna(r["te_profiled"])
    assert len(tables.read_csv(res / "tables/three_step_correction.csv")) == 4

    # the held-out tables in the study's shapes (Tables 16 and 18): Aya's languages are the slices
    acc = tables.read_csv(res / "tables/heldout_acceptance.csv")
    held = acc[acc["heldout_dataset"] == "aya"]
    assert set(held["slice"]) == {"English", "Python", "median of aya"}
    ov = tables.read_csv(res / "tables/heldout_overlap.csv")
    mean = ov[(ov["dataset"] == "aya") & (ov["slice"] == "mean of aya")].iloc[0]
    slices = ov[(ov["dataset"] == "aya") & (ov["slice"].isin(["English", "Python"]))]
    for d in ("step1", "step2", "step3"):
        assert mean[f"{d}_min"] == slices[d].min() and mean[f"{d}_max"] == slices[d].max()
        assert mean[f"{d}_min"] <= mean[d] <= mean[f"{d}_max"]

    # the weight model of every study model, and the plan: every engine job (the draft model's
    # series alone included), none on a GPU
    wm = tables.read_csv(res / "tables/weight_model.csv")
    assert set(wm["model"]) == {"fine-cpu", "coarse-cpu"}
    assert list(wm["top_k"]) == [4, 1] and list(wm["N"]) == [16, 4]
    plan = json.loads((res / "plan.json").read_text())
    assert {j["rule"] for j in plan["jobs"]} == {"sweep_sd", "sweep_ar", "capture", "profile"}
    assert {j["model"] for j in plan["jobs"] if j["rule"] != "capture"} == {"fine-cpu",
                                                                             "tiny-draft"}
    assert all(j["gpus"] == 0 for j in plan["jobs"]) and plan["gpu_hours"] == 0
    assert "On a CPU, no GPU: coarse-cpu, fine-cpu, tiny-draft" in (res / "plan.md").read_text()

    index = (res / "report/index.md").read_text()
    for needle in ("fine-cpu/tiny-draft/K3/aya", "coarse-cpu, K=3, sharegpt",
                   "What a CPU run cannot show", "heldout_acceptance"):
        assert needle in index, needle
    for log in (root / "logs").rglob("*.log"):
        assert "done in" in log.read_text(), log

    # no engine job started while a download or prompt table that engine jobs wait for was ready
    # and waiting (rule priority GATE_PRIORITY): a prompt table ran 59 s after its download,
    # behind the analysis, and the capture that reads it waited as long (no engine job waits for
    # the GPU plan)
    jobs = job_timeline(root)
    made_by = {out: j for j in jobs for out in j["output"]}
    engine_starts = sorted(j["start"] for j in jobs
                           if j["rule"] in ("capture", "sweep_sd", "sweep_ar", "profile"))
    gates = [j for j in jobs
             if j["rule"] in ("download_model", "download_dataset", "prompt_table")]
    assert len(engine_starts) == 8 and len(gates) >= 12
    for gate in gates:
        ready = max((made_by[f]["end"] for f in gate["input"] if f in made_by), default=0.0)
        assert not [t for t in engine_starts if ready < t < gate["start"]], (gate, ready)

    again = subprocess.run([sys.executable, str(REPO / "tests" / "study_cpu.py"), str(root), "-n"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
