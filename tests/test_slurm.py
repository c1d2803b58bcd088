"""The cluster path on a real SLURM (tests/slurm_cluster.py): the README's command, the SLURM profile,
the launcher's environment (.venv-slurm, the plugin) apart from the engines' (.venv, where jobs run).
Each job's submission is asserted from SLURM's own records (scontrol; there is no slurmdbd). The
launcher checks its jobs' status every 2 s instead of the plugin's slowing pace (on_slurm), so that
the tests do not wait up to a minute for jobs that have finished; what it submits is unchanged.

Needs Debian's slurmctld, slurmd, slurm-client and munge and the launcher environment; without them
the tests are skipped, unless SPECMOE_REQUIRE_SLURM=1 (set by .ci/run), which makes that a failure.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hubfake import lay_out_cache
from slurm_cluster import Cluster, available
from wf import LAUNCHER, REPO, copy_workflow, failure, snakemake

FIXTURES = Path(__file__).parents[1] / "src" / "specmoe" / "data" / "hf_configs"
# each launch's limit: the module's runs share the node (SLURM queues one run's jobs behind the
# others'), about 145 s together in CI, so each waits for all; 900 s is six times that. The
# first test's setup launches them all, so its own limit is above that.
TIMEOUT = 900
pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT + 300)]

SYNTH = {
    "ks": [3], "batch_sizes": [1, 8],
    "models": [{
        "name": "syn", "source": "synthetic", "hardware": "H100", "drafters": ["synth"],
        "datasets": ["synth"],
        "dims": {"hidden": 256, "expert_intermediate": 64, "heads": 4, "kv_heads": 2,
                 "head_dim": 64, "num_layers": 2, "vocab_size": 1000},
        "synthetic": {"num_experts": 16, "top_k": 2, "num_layers": 2, "requests": 8, "steps": 8,
                      "stickiness": 0.4, "categories": ["a", "b"], "seed": 3}}],
}
TINY = {
    "ks": [3], "batch_sizes": [1],
    "tiny": {"vocab_size": 300, "max_train_tokens": 20000, "max_heldout_tokens": 5000,
             "train": {"seq_len": 32, "batch_size": 4, "warmup": 1, "eval_batches": 1}},
    "drafters": [{"name": "d", "source": "tiny", "steps": 2, "arch": {
        "kind": "dense", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 32,
        "intermediate": 64}}],
    "models": [{"name": "t", "source": "tiny", "hardware": "CPU", "drafters": ["d"],
                "datasets": ["tinybench"], "steps": 2, "arch": {
                    "kind": "moe", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1,
                    "head_dim": 32, "num_experts": 8, "top_k": 2, "expert_intermediate": 16}}],
}
GPU = {
    "ks": [3], "batch_sizes": [1],
    "hardware": {"H100": {}},  # the shipped GPU's numbers
    "drafters": [{"name": "mtp", "source": "self", "method": "mtp"}],
    "models": [{"name": "q", "source": "hf", "repo_id": "zai-org/GLM-4.7-Flash", "tp": 2,
                "hardware": "H100", "drafters": ["mtp"], "datasets": ["tinybench"],
                "gpu": {"mem_mb": 2000, "runtime": 5, "cpus": 2}}],  # the test node's 2 CPUs
}


def _unavailable() -> str | None:
    why = available()
    if why is None and not LAUNCHER.exists():
        why = (f"no launcher environment at {LAUNCHER} (python3 -m venv .venv-slurm && "
               ".venv-slurm/bin/pip install -e '.[slurm]')")
    return why


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = _unavailable()
    if why:
        if os.environ.get("SPECMOE_REQUIRE_SLURM") == "1":
            pytest.fail(f"SLURM test required but {why}")
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()  # by pid, also when a test fails


def workdir(root: Path, config: dict) -> Path:
    return copy_workflow(root / "wf", config)


# The launcher's snakemake with the plugin's status checks at one pace: after each check the
# plugin waits 10 s longer than before while no job has finished (up to 180 s), so that a busy
# cluster is not asked too often; on the test's cluster that left each launcher waiting up to a
# minute for a job that had long finished. Here every wait is the first one
# (--slurm-init-seconds-before-status-checks); what is submitted, and how, is the plugin's own.
STEADY_STATUS_CHECKS = """
import asyncio, dataclasses, sys
from snakemake_executor_plugin_slurm import Executor, ExecutorSettings

# what is changed must exist as it is changed, so that a new plugin fails here, not silently
assert asyncio.iscoroutinefunction(Executor.sleep), "the plugin's Executor has no async sleep()"
assert "init_seconds_before_status_checks" in {f.name for f in dataclasses.fields(
    ExecutorSettings)}, "the plugin has no init_seconds_before_status_checks"


async def sleep(self):  # between two status checks
    await asyncio.sleep(self.workflow.executor_settings.init_seconds_before_status_checks)


Executor.sleep = sleep
from snakemake.cli import main

sys.argv[0] = "snakemake"
main()
"""


def on_slurm(cluster, wd, *targets, extra_env=None):
    """The README's command: the launcher's snakemake with the SLURM profile, its status checks
    every 2 s throughout (STEADY_STATUS_CHECKS: the plugin's own pace slows down while no job
    finishes, which only made the tests wait); jobs run in the engines' environment (this
    test's own). Its completed process, whatever its status."""
    env = {**cluster.env, "SPECMOE_ENGINE_VENV": sys.prefix, **(extra_env or {})}
    return snakemake(wd, *targets, "--profile", "profiles/slurm",
                     "--slurm-init-seconds-before-status-checks", "2", configfile="case.yaml",
                     env=env, check=False, timeout=TIMEOUT, python=LAUNCHER,
                     script=STEADY_STATUS_CHECKS)


def submitted(cluster, wd) -> dict[str, list[dict]]:
    """SLURM's records of this workdir's jobs, by rule (from the plugin's --comment)."""
    out: dict[str, list[dict]] = {}
    for j in cluster.jobs():
        if j.get("WorkDir") != str(wd):
            continue
        m = re.match(r"rule_([A-Za-z0-9_]+?)(_wildcards_.*)?$", j.get("Comment", ""))
        if m:
            out.setdefault(m[1], []).append(j)
    return out


def tables_without_provenance(wd: Path) -> dict[str, str]:
    return {p.name: "".join(ln for ln in p.read_text().splitlines(True)
                            if not ln.startswith("# provenance"))
            for p in sorted((wd / "results" / "tables").glob("*.csv"))}


def launch_synthetic(root: Path, cluster):
    return on_slurm(cluster, workdir(root, SYNTH))


def launch_synthetic_locally(root: Path, cluster):
    local = workdir(root, SYNTH)
    return snakemake(local, cores=2, configfile="case.yaml", check=False, timeout=TIMEOUT)


def launch_training(root: Path, cluster):
    return on_slurm(cluster, workdir(root, TINY), "results/models/t")


def launch_gpu_rule(root: Path, cluster):
    cache = root / "hf" / "hub"
    lay_out_cache(cache, "zai-org/GLM-4.7-Flash", {  # a model with MTP layers (the preflight)
        "config.json": (FIXTURES / "GLM-4.7-Flash.json").read_bytes(),
        "tokenizer.json": b"{}", "model.safetensors": b"\0" * 64}, commit="f" * 40)
    return on_slurm(cluster, workdir(root, GPU), GPU_TARGET, extra_env={
        "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(cache)})


GPU_TARGET = "results/traces/q/mtp/K3/tinybench.parquet"
LAUNCHES = {"synthetic": launch_synthetic, "synthetic-local": launch_synthetic_locally,
            "training": launch_training, "gpu": launch_gpu_rule}


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """The module's workflows launched at once, each in its own folder, on the one cluster, as
    several users share one: a launcher spends much of its time waiting between the plugin's
    status checks (every 2 s here: on_slurm), and SLURM queues the jobs on the node's CPUs.
    Each test reads its own run: (workdir, completed process), or the exception its launch
    raised."""
    root = tmp_path_factory.mktemp("runs")
    launches = {name: launch for name, launch in LAUNCHES.items()
                if name != "training" or importlib.util.find_spec("torch")}
    with ThreadPoolExecutor(len(launches)) as pool:
        futures = {name: pool.submit(launch, root / name, cluster)
                   for name, launch in launches.items()}
    return {name: (root / name / "wf", f) for name, f in futures.items()}


def finished(cluster, runs, name: str, check: bool = True) -> tuple[Path, object]:
    wd, future = runs[name]
    r = future.result()  # the launch's own exception, in the test it belongs to
    if check and r.returncode != 0:  # the helper's message, and the cluster's logs
        raise AssertionError(f"{failure(r)}\n{cluster.logs()}")
    return wd, r


def test_synthetic_chain_through_sbatch_equals_a_local_run(cluster, runs):
    wd, _ = finished(cluster, runs, "synthetic")
    jobs = submitted(cluster, wd)
    # the per-run stages went through sbatch and completed; the quick ones ran on the launcher
    assert set(jobs) == {"synth_trace", "overlap", "acceptance"}, jobs.keys()
    assert all(j["JobState"] == "COMPLETED" for js in jobs.values() for j in js)
    assert all(j.get("NumCPUs") == "2" for j in jobs["overlap"])   # the rule's threads
    assert (wd / "results" / "report" / "index.md").exists()
    local, _ = finished(cluster, runs, "synthetic-local")
    assert not submitted(cluster, local)
    assert tables_without_provenance(wd) == tables_without_provenance(local)


def test_tiny_model_training_runs_as_a_slurm_job(cluster, runs):
    pytest.importorskip("torch")
    wd, _ = finished(cluster, runs, "training")
    jobs = submitted(cluster, wd)
    assert {"tokenizer", "train_model"} <= set(jobs)
    assert all(j["JobState"] == "COMPLETED" for js in jobs.values() for j in js)
    assert (wd / "results" / "models" / "t" / "model.safetensors").exists()
    # a training runs on its configured threads and asks SLURM for all of them: only a local
    # run claims one core less (workflow/rules/common.smk: local_claim); the workflow profile's
    # `cores: all` once made the launcher's two cores look like a local run (config.yaml's
    # tiny.train.threads: 2)
    assert {j.get("NumCPUs") for j in jobs["train_model"]} == {"2"}


def test_a_gpu_rule_asks_slurm_for_its_gpus_and_stops_without_cuda(cluster, runs):
    wd, r = finished(cluster, runs, "gpu", check=False)
    assert r.returncode != 0
    jobs = submitted(cluster, wd)
    assert "capture" in jobs, r.stdout[-3000:] + r.stderr[-3000:]
    # the engine rules' one retry (a CPU engine can fail for passing reasons) submits it again
    assert 1 <= len(jobs["capture"]) <= 2
    for job in jobs["capture"]:
        assert "gpu:2" in job.get("TresPerJob", "") and job["JobState"] == "FAILED"
        # gpu.cpus reaches sbatch as --cpus-per-task (by default TP + 2 = 4 for a capture at
        # TP 2, more than the test node's 2 CPUs: SLURM would hold it for ever)
        assert job.get("NumCPUs") == "2", job
    log = (wd / "logs" / "traces" / "q" / "mtp" / "K3" / "tinybench.log").read_text()
    assert "needs a CUDA GPU" in log
    # downloads run where the workflow is launched (seconds of work that the GPU jobs wait for:
    # no queue before them), and so does the GPU plan
    assert not {"download_model", "plan"} & set(jobs), jobs.keys()
    assert not (wd / GPU_TARGET).exists()
