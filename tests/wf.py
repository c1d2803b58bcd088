"""A copy of the workflow in a temporary folder, and the one way the tests run Snakemake on it (a
real `python -m snakemake` subprocess)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def copy_workflow(dest: Path, config: dict | None = None, name: str = "case.yaml") -> Path:
    """The Snakefile, default config, config/, workflow/, profiles/, envs/, .test/ and docs/ (the
    report links to docs/method.md) under dest; `config`, if given, written there as `name` for --configfile."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / f, dest / f)
    for d in ("config", "workflow", "profiles", "envs", ".test", "docs"):
        shutil.copytree(REPO / d, dest / d)
    if config is not None:
        (dest / name).write_text(yaml.safe_dump(config))
    return dest


def h100(**overrides):
    """The H100 the package ships (its datasheet numbers), with `overrides` to its entry."""
    from specmoe.cost.costmodel import Hardware
    from specmoe.sources.published import gpus

    return Hardware.from_config("H100", {**gpus()["H100"], **overrides})


def snakemake_command(*args: str, configfile: str | None = None, cores: int | None = None,
                      python: str | os.PathLike = sys.executable) -> list[str]:
    """`python -m snakemake` with `args` (targets and options), then `--cores` and `--configfile`
    if given. `--configfile` comes last because it takes one or more values: a target written
    after it would be read as a second config file."""
    cmd = [str(python), "-m", "snakemake", *args]
    if cores is not None:
        cmd += ["--cores", str(cores)]
    if configfile is not None:
        cmd += ["--configfile", configfile]
    return cmd


def snakemake(cwd: Path, *args: str, configfile: str | None = None, cores: int | None = None,
              env: dict[str, str] | None = None, check: bool = True, timeout: float = 600,
              python: str | os.PathLike = sys.executable) -> subprocess.CompletedProcess:
    """Snakemake run in `cwd` (see `snakemake_command`), its output captured as text; `env`
    replaces the environment (None: this process's). With `check`, a non-zero status fails the
    test with the command and the tails of its stdout and stderr."""
    cmd = snakemake_command(*args, configfile=configfile, cores=cores, python=python)
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
