"""The study's path through real Snakemake runs, with no network and no GPU: the paper config's DAG,
the cost-only weight-model table of every study model from config.json files in an offline Hugging
Face cache (.test/study), and a GPU rule that stops at once where no CUDA device is visible."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from hubfake import lay_out_cache
from specmoe import paths as P
from specmoe.config import GPU_JOB_DEFAULTS
from specmoe.kinds import KINDS
from specmoe.report import tables
from wf import REPO, copy_workflow, planned_jobs, snakemake

FIXTURES = Path(__file__).parents[1] / "src" / "specmoe" / "data" / "hf_configs"
CASE = REPO / ".test" / "study" / "config.yaml"
ON_CASE = {"configfile": str(CASE.relative_to(REPO)), "cores": 2}  # how this file runs its workdirs
pytestmark = pytest.mark.slow


@pytest.fixture
def wd(tmp_path: Path, preflight_memo: Path) -> Path:
    """A copy of the workflow that shares vLLM's checks' answers (conftest.preflight_memo)."""
    return copy_workflow(tmp_path / "wf", memo=preflight_memo)


def offline_cache(tmp_path: Path) -> dict:
    """Every repo of the test case in an HF cache: its fixture config.json and a tokenizer; the
    runnable model also a (fake) safetensors file."""
    cache = tmp_path / "hf" / "hub"
    case = yaml.safe_load(CASE.read_text())
    for m in case["models"]:
        files = {"config.json": (FIXTURES / f"{m['repo_id'].split('/')[1]}.json").read_bytes(),
                 "tokenizer.json": b"{}"}
        if not m.get("cost_only"):
            files["model.safetensors"] = b"\0" * 64
        lay_out_cache(cache, m["repo_id"], files, commit="f" * 40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(cache),
               CUDA_VISIBLE_DEVICES="")
    return env


def test_paper_config_builds_the_whole_dag_quickly(paper_dry_run):
    out, elapsed = paper_dry_run  # conftest.paper_dry_run, shared with test_paper_coverage.py
    total = int(re.search(r"^total\s+(\d+)", out, re.M)[1])
    assert total >= 300, out[-2000:]
    for rule in ("download_model", "download_dataset", "capture", "sweep_sd", "profile",
                 "weight_model"):
        assert re.search(rf"^{rule}\s+\d+", out, re.M), rule
    # every target of the study is in the DAG, and no tiny model of the default came along
    for name in ("mixtral-8x7b-bf16-tp2", "qwen2-57b-bf16-tp2", "glm-4.7-flash-bf16-tp1",
                 "qwen3-30b-fp8-tp1", "qwen3-235b-fp8-tp4", "gpt-oss-120b-tp4",
                 "qwen3-next-80b-bf16-tp4", "qwen3.5-35b-bf16-tp2", "kimi-k2.5-tp8"):
        assert f"results/traces/{name}/" in out, name
    assert "tiny-fine" not in out and "train_model" not in out
    assert "no repo_id for qwen3-next-80b-bf16-tp4" in out  # the values the user must fill
    # one kernel profile per target and drafter (at its first K), whatever its number of K
    cfg = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    pairs = sum(len(m["drafters"]) for m in cfg["models"]
                if m["source"] == "hf" and not m.get("cost_only") and m.get("sweep", True))
    assert int(re.search(r"^profile\s+(\d+)", out, re.M)[1]) == pairs
    # one rule per engine stage, whatever the hardware: the GPU twins are gone
    assert not re.search(r"^\w+_gpu\s+\d+", out, re.M)
    # GPU jobs ask for gpu = TP and the hardware's GPU model
    assert re.search(r"gpu=8, gpu_model=h100, runtime=\d+", out)
    print(f"paper dry-run: {total} jobs in {elapsed:.1f} s")


def test_cost_only_weight_model_table_for_every_study_model(tmp_path, wd):
    env = offline_cache(tmp_path)
    snakemake(wd, "results/tables/weight_model.csv", env=env, **ON_CASE)
    df = tables.read_csv(wd / "results" / "tables" / "weight_model.csv")
    case = yaml.safe_load(CASE.read_text())
    assert set(df["model"]) == {m["name"] for m in case["models"]}  # runnable ones too
    row = df.set_index("model").loc["qwen3-30b-fp8-tp1"]
    assert round(row["c_expert_mib_per_gpu"], 1) == 4.5 and round(row["moe_weight_share"], 3) == 0.667
    assert row["precision"] == "fp8-b128" and row["te_ipf"] > row["te_uniform"]
    mix = df.set_index("model").loc["mixtral-8x7b-fp8-tp1"]
    assert round(mix["c_expert_mib_per_gpu"]) == 168 and mix["precision"] == "fp8"
    kimi = df.set_index("model").loc["kimi-k2.5-tp8"]
    assert kimi["precision"] == "int4-g32 experts, bf16 dense" and kimi["N"] == 384
    assert (df["te_uniform"] > 0).all() and (df["te_uniform"] < 1).all()
    # only config and tokenizer were asked for: no weights in any manifest
    for man in (wd / "results" / "downloads").glob("*.config.json"):
        assert ".safetensors" not in man.read_text()
    # nothing downloads a second time, and the table is not rebuilt
    again = snakemake(wd, "results/tables/weight_model.csv", "-n", env=env, check=False,
                      **ON_CASE)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_gpu_rule_stops_at_once_without_cuda(tmp_path, wd):
    env = offline_cache(tmp_path)
    target = "results/traces/glm-run/mtp/K3/tinybench.parquet"
    dry = snakemake(wd, target, "-n", env=env, check=False, **ON_CASE)
    assert dry.returncode == 0 and re.search(r"gpu=2\b", dry.stdout + dry.stderr)
    t0 = time.perf_counter()
    r = snakemake(wd, target, env=env, check=False, **ON_CASE)
    elapsed = time.perf_counter() - t0
    assert r.returncode != 0
    log = (wd / "logs" / "traces" / "glm-run" / "mtp" / "K3" / "tinybench.log").read_text()
    assert "needs a CUDA GPU" in log and "config.yaml for a CPU run" in log
    assert not (wd / target).exists()
    assert (wd / "results" / "downloads" / "zai-org--GLM-4.7-Flash.full.json").exists()
    assert elapsed < 120


def gpu_jobs(dry_run: str) -> list[dict]:
    """The engine jobs of a dry run (wf.planned_jobs), the study case's runnable models' alone."""
    return [j for j in planned_jobs(dry_run) if j["rule"] in KINDS]


def plan_row(plan: dict, job: dict) -> dict:
    """The GPU plan's row of a dry run's job (its rule and wildcards)."""
    (row,) = [r for r in plan["jobs"] if r["rule"] == job["rule"]
              and all(str(r[k]) == v for k, v in job["wildcards"].items())]
    return row


def test_the_gpu_plan_sets_each_gpu_jobs_runtime(tmp_path, wd):
    """Each GPU job asks SLURM for the plan's runtime: computed as the plan computes it, from its
    model's config.json (workflow/rules/common.smk), not read from results/plan.json. A model
    whose config.json the package does not ship is sized from its config-only download: until
    that exists, Snakemake leaves its jobs' runtime to be decided (<TBD>, asked again before a
    job is submitted)."""
    env = offline_cache(tmp_path)
    # a study model whose repository is not known yet: the plan names it instead of dropping it
    case = yaml.safe_load(CASE.read_text())
    case["models"].append({"name": "unknown-moe", "source": "hf", "repo_id": None,
                           "drafters": ["mtp"], "datasets": ["tinybench"]})
    # and one whose config.json the package does not ship (GLM's, under a repo of its own)
    copy = {**next(m for m in case["models"] if m["name"] == "glm-run"),
            "name": "copy-run", "repo_id": "specmoe-test/glm-copy"}
    case["models"].append(copy)
    lay_out_cache(tmp_path / "hf" / "hub", copy["repo_id"],
                  {"config.json": (FIXTURES / "GLM-4.7-Flash.json").read_bytes(),
                   "tokenizer.json": b"{}"}, commit="e" * 40)
    (wd / "plan-case.yaml").write_text(yaml.safe_dump(case))
    on_plan_case = {"env": env, "configfile": "plan-case.yaml", "cores": 2}
    before = gpu_jobs(snakemake(wd, "-n", **on_plan_case).stdout)
    runtimes = {}
    for j in before:
        runtimes.setdefault(j["wildcards"]["model"], set()).add(j["resources"]["runtime"])
    assert runtimes["copy-run"] == {"<TBD>"}
    assert all(r.isdigit() for r in runtimes["glm-run"])
    # the plan cannot size a model without a repository: its jobs ask for the `gpu` default
    assert runtimes["unknown-moe"] == {str(GPU_JOB_DEFAULTS["runtime"])}
    snakemake(wd, "results/plan.md", **on_plan_case)
    plan = json.loads((wd / "results" / "plan.json").read_text())
    jobs = {(j["rule"], j["dataset"]): j for j in plan["jobs"] if j["model"] == "glm-run"}
    # no series without SD of the target's own: its SD series measure their no-SD points
    assert set(r for r, _ in jobs) == {"sweep_sd", "capture", "profile"}
    cap = jobs[("capture", "tinybench")]
    assert cap["gpus"] == 2 and cap["gpu_hours"] == pytest.approx(2 * cap["hours"])
    assert cap["runtime_min"] >= plan["assumptions"]["min_runtime"]
    assert plan["gpu_hours"] == pytest.approx(sum(j["gpu_hours"] for j in plan["jobs"]))
    md = (wd / "results" / "plan.md").read_text()
    assert "GPU-hours" in md and "prefilled once" in md and plan["prompt_tokens"]["tinybench"] > 0
    assert plan["unplanned"] == ["unknown-moe"] and "Not in this plan: unknown-moe (no" in md
    # SD jobs pay vLLM's SD loop per iteration, at its value and its range's top (a series
    # without SD pays none: test_costmodel; this case's targets have no series without SD)
    assert plan["sd_loop_us"]["engine"] == "vllm" and "SD loop" in md
    sd = next(j for (r, _), j in jobs.items() if r == "sweep_sd")
    assert 0 < sd["sd_loop_hours"] < sd["sd_loop_hours_high"]
    assert all(j["sd_loop_hours"] == 0 for (r, _), j in jobs.items() if r == "sweep_ar")
    # every GPU job, the copy's now that its config-only download is there, asks for the plan's
    # runtime (the copy's are GLM's own at the same TP)
    after = [j for j in gpu_jobs(snakemake(wd, "-n", **on_plan_case).stdout)
             if j["wildcards"]["model"] != "unknown-moe"]
    assert len(after) == 6
    for j in after:
        assert int(j["resources"]["runtime"]) == plan_row(plan, j)["runtime_min"], j
    assert {plan_row(plan, j)["runtime_min"] for j in after if j["rule"] == "capture"} == {
        cap["runtime_min"]}


def test_a_new_gpu_plan_reruns_no_measurement(tmp_path, wd):
    """A GPU job's runtime is not read from results/plan.json, so a change to the plan alone (an
    assumption of it, here) reruns the plan and none of the GPU jobs done before it; a GPU job
    whose output is missing still runs (taken as an ancient input, the plan left it out)."""
    env = offline_cache(tmp_path)
    engine = gpu_jobs(snakemake(wd, "-n", env=env, **ON_CASE).stdout)
    assert {j["rule"] for j in engine} == {"capture", "sweep_sd", "profile"}
    targets = [P.PLAN_MD, *(o for j in engine for o in j["output"].split(", "))]

    def rules_to_run(config: str) -> set[str]:
        dry = snakemake(wd, "-n", *targets, env=env, configfile=config, cores=2).stdout
        return {j["rule"] for j in planned_jobs(dry)}

    snakemake(wd, P.PLAN_MD, env=env, **ON_CASE)
    # the GPU jobs' outputs and what they read, as a finished run leaves them, newer than the plan
    chain = planned_jobs(snakemake(wd, "-n", *targets, env=env, **ON_CASE).stdout)
    assert {j["rule"] for j in chain} == {"download_model", "capture", "sweep_sd", "profile"}
    t = time.time()
    for job in sorted(chain, key=lambda j: j["rule"] != "download_model"):
        for out in map(Path, job["output"].split(", ")):
            path = wd / out
            if out.suffix == Path(P.PROFILE_TRACES).suffix:  # a directory
                path.mkdir(parents=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("{}" if out.suffix == ".json" else "x")
            os.utime(path, (t, t))
        t += 1
    assert rules_to_run(ON_CASE["configfile"]) == set()
    case = yaml.safe_load(CASE.read_text())
    case["plan"] = {"safety": 3.0}
    (wd / "new-plan.yaml").write_text(yaml.safe_dump(case))
    assert rules_to_run("new-plan.yaml") == {"plan"}
    (wd / "results/traces/glm-run/mtp/K3/tinybench.parquet").unlink()
    assert rules_to_run("new-plan.yaml") == {"plan", "capture"}


def test_a_download_missing_from_the_offline_cache_fails_once_in_one_line(tmp_path, wd):
    """Not in the cache and HF_HUB_OFFLINE=1: nothing a retry can mend. The job fails at its first
    attempt, and the reason is one line (no Python traceback), in the output and the log."""
    env = offline_cache(tmp_path)
    repo = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2-57B-A14B-Instruct"
    import shutil

    shutil.rmtree(repo)
    target = "results/downloads/Qwen--Qwen2-57B-A14B-Instruct.config.json"
    r = snakemake(wd, target, env=env, check=False, **ON_CASE)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "Traceback" not in out
    line = ("Qwen--Qwen2-57B-A14B-Instruct: Qwen/Qwen2-57B-A14B-Instruct@main is not "
            "(completely) in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading")
    assert out.count("specmoe: download_model: " + line) == 1
    assert "attempt 2" not in out and "trying again" not in out
    log = (wd / "logs/downloads/Qwen--Qwen2-57B-A14B-Instruct.config.log").read_text()
    assert line in log and "Traceback" not in log
