"""A copy of the workflow in a temporary folder, and the one way the tests run Snakemake on it (a
real `python -m snakemake` subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The SLURM launcher's environment (README: .venv-slurm, with snakemake-executor-plugin-slurm).
LAUNCHER = Path(os.environ.get("SPECMOE_LAUNCHER_PYTHON", REPO / ".venv-slurm" / "bin" / "python"))
# A dry run as the SLURM executor plans it: the rules' functions see a remote executor
# (workflow.local_exec is false, so threads and resources are a cluster job's), and the jobs that
# run where the workflow is launched (localrules) are dry-run as well instead of run.
CLUSTER_DRY_RUN = """
import dataclasses, sys
from snakemake.executors import dryrun

dryrun.common_settings = dataclasses.replace(dryrun.common_settings, non_local_exec=True)
# imported after the change: importing them registers the executors as they are
from snakemake.cli import main
from snakemake.scheduling.job_scheduler import JobScheduler

run = JobScheduler.run
JobScheduler.run = lambda self, jobs, executor=None: run(self, jobs)  # the dry-run executor
sys.argv[0] = "snakemake"
main()
"""


def copy_workflow(dest: Path, config: dict | None = None, name: str = "case.yaml",
                  memo: Path | None = None) -> Path:
    """The Snakefile, default config, config/, workflow/, profiles/, envs/, .test/ and docs/ (the
    report links to docs/method.md) under dest; `config`, if given, written there as `name` for
    --configfile. With `memo` (conftest.preflight_memo), the folder the workflow keeps its checks'
    answers in (.snakemake/specmoe, specmoe.checks.memo) is a link to it, so that a question
    another copy asked is not asked of vLLM again (its checks take tens of seconds a parse)."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / f, dest / f)
    for d in ("config", "workflow", "profiles", "envs", ".test", "docs"):
        shutil.copytree(REPO / d, dest / d)
    if config is not None:
        (dest / name).write_text(yaml.safe_dump(config))
    if memo is not None:
        (dest / ".snakemake").mkdir()
        (dest / ".snakemake" / "specmoe").symlink_to(memo, target_is_directory=True)
    return dest


# dry runs side by side (dry_runs): each parses the workflow on one core, and CI has two
AT_ONCE = 2


def dry_runs(dest: Path, items: list, check, config: dict | None = None,
             name: str = "case.yaml") -> list:
    """check(workdir, item) for each item, AT_ONCE at a time, each in a copy of the workflow of
    its own under dest (copy_workflow's `config` and `name`) that no other check uses meanwhile
    (a check writes its case there), the copies sharing one folder of the checks' answers as the
    items would in one copy: the results in the items' order. For dry runs, which leave nothing
    that the next item in the copy reads."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    (dest / "memo").mkdir(parents=True)
    free = queue.SimpleQueue()
    for i in range(AT_ONCE):
        free.put(copy_workflow(dest / f"wf{i}", config, name, memo=dest / "memo"))

    def one(item):
        wd = free.get()
        try:
            return check(wd, item)
        finally:
            free.put(wd)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(one, items))


def h100(**overrides):
    """The H100 the package ships (its datasheet numbers), with `overrides` to its entry."""
    from specmoe.cost.costmodel import Hardware
    from specmoe.sources.published import gpus

    return Hardware.from_config("H100", {**gpus()["H100"], **overrides})


def paper_config(*models: str) -> dict:
    """config/paper.yaml with only these models and their drafters."""
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["models"] = [m for m in cfg["models"] if m["name"] in models]
    drafters = {d for m in cfg["models"] for d in m.get("drafters", ())}
    cfg["drafters"] = [d for d in cfg["drafters"] if d["name"] in drafters]
    return cfg


def snakemake_command(*args: str, configfile: str | None = None, cores: int | None = None,
                      python: str | os.PathLike = sys.executable,
                      script: str | None = None) -> list[str]:
    """`python -m snakemake` (or `python -c script`, a script that ends in Snakemake's CLI main,
    as CLUSTER_DRY_RUN does) with `args` (targets and options), then `--cores` and `--configfile`
    if given. `--configfile` comes last because it takes one or more values: a target written
    after it would be read as a second config file."""
    cmd = [str(python), *(("-c", script) if script else ("-m", "snakemake")), *args]
    if cores is not None:
        cmd += ["--cores", str(cores)]
    if configfile is not None:
        cmd += ["--configfile", configfile]
    return cmd


def snakemake(cwd: Path, *args: str, configfile: str | None = None, cores: int | None = None,
              env: dict[str, str] | None = None, check: bool = True, timeout: float = 600,
              python: str | os.PathLike = sys.executable,
              script: str | None = None) -> subprocess.CompletedProcess:
    """Snakemake run in `cwd` (see `snakemake_command`), its output captured as text; `env`
    replaces the environment (None: this process's). With `check`, a non-zero status fails the
    test with the command and the tails of its stdout and stderr."""
    cmd = snakemake_command(*args, configfile=configfile, cores=cores, python=python,
                            script=script)
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(failure(r))
    return r


def failure(r: subprocess.CompletedProcess) -> str:
    """A failed run's command, status and the tails of its stdout and stderr."""
    return (f"{' '.join(map(str, r.args))} exited with status {r.returncode}\n"
            f"--- stdout (tail) ---\n{r.stdout[-3000:]}\n--- stderr (tail) ---\n{r.stderr[-5000:]}")


def job_timeline(workdir: Path) -> list[dict]:
    """The jobs of the first Snakemake run in workdir, from its own log (.snakemake/log): rule,
    jobid, inputs, outputs, start and end (seconds since the run's first timestamp, to the
    second, as the log prints them; end None for a job that did not finish)."""
    import re
    from datetime import datetime

    log = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))[0]
    jobs, by_id, now, t0, cur = [], {}, None, None, None
    for line in log.read_text().splitlines():
        if m := re.fullmatch(r"\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", line.strip()):
            now = datetime.strptime(m[1], "%a %b %d %H:%M:%S %Y")
            t0 = t0 or now
        elif m := re.fullmatch(r"(?:local)?rule (\w+):", line.strip()):
            cur = {"rule": m[1], "input": [], "output": [],
                   "start": (now - t0).total_seconds(), "end": None}
        elif cur and (m := re.fullmatch(r"\s+(input|output|jobid): (.*)", line)):
            if m[1] == "jobid":
                jobs.append(cur)
                by_id[m[2]] = cur
            else:
                cur[m[1]] = m[2].split(", ")
        elif m := re.match(r"Finished jobid: (\d+)", line):
            by_id[m[1]]["end"] = (now - t0).total_seconds()
            cur = None
    return jobs

# A dry run that prints each job's params as Snakemake records them to decide a rerun (a job
# reruns where they differ from those of its output's last run): one line "params <json>" each.
PARAMS_DRY_RUN = """
import json, sys
from snakemake.executors import dryrun

def run_job(self, job, run_job=dryrun.Executor.run_job):
    print("params", json.dumps({"output": sorted(map(str, job.output)),
                                "params": self.workflow.persistence._params(job)}))
    return run_job(self, job)

dryrun.Executor.run_job = run_job
from snakemake.cli import main

sys.argv[0] = "snakemake"
main()
"""


def job_params(cwd: Path, *args: str, configfile: str | None = None) -> dict[str, list[str]]:
    """Every job's params as Snakemake records them (PARAMS_DRY_RUN), by its outputs."""
    cmd = [sys.executable, "-c", PARAMS_DRY_RUN, "-n", *args]
    if configfile is not None:
        cmd += ["--configfile", configfile]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(failure(r))
    jobs = [json.loads(line.split(" ", 1)[1]) for line in r.stdout.splitlines()
            if line.startswith("params {")]
    return {", ".join(j["output"]): j["params"] for j in jobs}


def launcher() -> Path:
    """The launcher's python; its absence is an error (the README installs it beside .venv)."""
    if not LAUNCHER.exists():
        raise AssertionError(f"no launcher environment at {LAUNCHER} (python3 -m venv .venv-slurm "
                             "&& .venv-slurm/bin/pip install -e '.[slurm]')")
    return LAUNCHER


def cluster_dry_run(cwd: Path, *args: str, configfile: str | None = None,
                    env: dict[str, str] | None = None) -> str:
    """`snakemake -n --profile profiles/slurm` from the launcher's environment in `cwd`, each job
    planned as the SLURM executor plans it (CLUSTER_DRY_RUN), with this checkout's src first on
    the path: its stdout and stderr (a failure fails the test)."""
    cmd = snakemake_command("-n", "--profile", "profiles/slurm", *args, configfile=configfile,
                            python=launcher(), script=CLUSTER_DRY_RUN)
    env = {**(os.environ if env is None else env), "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(failure(r))
    return r.stdout + r.stderr


def planned_jobs(dry_run: str) -> list[dict]:
    """The jobs of a dry run's output: rule, local (a localrule), and each job's listed fields
    as text (input, threads, ...), its resources and wildcards as {name: text}."""
    import re

    jobs, cur = [], None
    for line in dry_run.splitlines():
        if m := re.fullmatch(r"(local)?rule (\w+):", line.strip()):
            cur = {"rule": m[2], "local": bool(m[1])}
            jobs.append(cur)
        elif cur is not None and (m := re.fullmatch(r"    (\w+): (.*)", line)):
            cur[m[1]] = m[2]
            if m[1] in ("resources", "wildcards"):
                cur[m[1]] = dict(r.split("=", 1) for r in m[2].split(", "))
        elif not line.startswith("    "):
            cur = None
    return jobs
