"""README.md is true as written: every shell command in its code blocks runs as shown, except those
that need the network, a GPU, a SLURM cluster or a finished default run (which takes most of an
hour on a small machine): each is listed in SKIPPED below with its reason, and a command that is
neither run nor skipped fails the test, so that a new command in the README is not silently left
out.

Commands run verbatim with bash: `.venv/bin/snakemake`, `.venv/bin/python` and `specmoe` are this
interpreter's (`python -m ...`, small scripts in a `.venv/bin` of the test's own); the workflow's
commands in a copy of the repository (tests/wf.py), the `specmoe` command's in an empty folder (it
works from any directory), `specmoe predict` from the copy's root as the README says (it names a
config.json the package ships; a study checkpoint's repository id is read offline from there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from wf import REPO, copy_workflow

README = (REPO / "README.md").read_text()

# command pattern -> why it is not run here
SKIPPED = {
    r"^python3 -m venv \.venv && .*-e '\.\[cpu\]'": "installs from PyPI and the PyTorch wheel page "
                                                   "(network), then runs the whole default",
    r"^python3 -m venv \.venv && .*-e '\.\[cpu,test\]'": "installs from the network, then runs "
                                                        "every test",
    r"^python3 -m venv \.venv && \.venv/bin/pip install -e \.$": "installs from PyPI (network)",
    r"^\.venv/bin/snakemake --report report\.html$": "needs a finished default run",
    r"^for r in .* do \.venv/bin/specmoe download \$r --mode config; done$":
        "fetches the study's drafters' config.json from the Hub (network); the test's Hugging Face "
        "cache holds stand-ins of them instead (conftest.study_drafters_cache)",
    r"^\.venv/bin/snakemake --cores all --forcerun ipf": "needs a finished default run (else it "
                                                         "runs the whole default)",
    r"results/tables/weight_model\.md": "downloads every study model's config.json (network)",
    r"^\.venv/bin/python tests/study_cpu\.py ": "trains models and runs vLLM engines for about 3½ "
                                               "minutes",
    r"^export SBATCH_PARTITION=": "a SLURM cluster's settings",
    r"^\.venv-slurm/bin/snakemake --profile profiles/slurm": "needs a SLURM cluster",
    r"^\.venv/bin/python bench/": "benchmarks: minutes of timing on a quiet machine",
    r"^PYTHONPATH=src python3 bench/gpu_check\.py": "needs a CUDA GPU",
}
# command pattern -> where it runs: "repo" (a copy of the repository) or "anywhere" (an empty folder)
RUN = {
    r"^\.venv/bin/snakemake ": "repo",
    r"^specmoe predict ": "repo",
    r"^specmoe ": "anywhere",
    r"^python3 -c ": "anywhere",
}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.M | re.S)


def commands() -> list[str]:
    """Every shell command of README.md's bash blocks, continuation lines joined, in order."""
    out = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+", " ", line).strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def kind(cmd: str) -> tuple[str, str]:
    for pattern, why in SKIPPED.items():
        if re.search(pattern, cmd):
            return "skip", why
    for pattern, where in RUN.items():
        if re.search(pattern, cmd):
            return "run", where
    return "unknown", ""


def test_every_command_is_run_or_skipped_for_a_stated_reason():
    cmds = commands()
    assert len(cmds) > 20
    unknown = [c for c in cmds if kind(c)[0] == "unknown"]
    assert unknown == [], unknown
    assert all(any(re.search(p, c) for c in cmds) for p in SKIPPED), "a stale skip"


def test_the_drafters_to_fetch_are_the_studys():
    """The README's loop fetches the config.json of every drafter of config/paper.yaml with a
    repository that a model uses, and no other (the preflight stops without them)."""
    import yaml

    from hubfake import STUDY_DRAFTERS

    paper = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    used = {d for m in paper["models"] for d in m.get("drafters", [])}
    repos = {d["repo_id"] for d in paper["drafters"] if d["name"] in used and d.get("repo_id")}
    (loop,) = [c for c in commands() if c.startswith("for r in ")]
    assert set(loop.split(";")[0].split()[3:]) == repos == set(STUDY_DRAFTERS)


def _bin(root: Path) -> Path:
    """.venv/bin under root with snakemake, python and specmoe of this interpreter."""
    b = root / ".venv" / "bin"
    b.mkdir(parents=True, exist_ok=True)
    for name, run in (("snakemake", "-m snakemake"), ("python", ""), ("specmoe", "-m specmoe")):
        (b / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {run} "$@"\n')
        (b / name).chmod(0o755)
    return b


@pytest.mark.slow
def test_the_readme_commands_run_as_shown(tmp_path, study_drafters_cache, preflight_memo):
    repo = copy_workflow(tmp_path / "repo", memo=preflight_memo)
    anywhere = tmp_path / "anywhere"
    anywhere.mkdir()
    # the shipped config.json files a `specmoe predict` line names by their path in the repository
    shutil.copytree(REPO / "src/specmoe/data/hf_configs", repo / "src/specmoe/data/hf_configs")
    env = dict(os.environ, PATH=f"{_bin(repo)}:{os.environ['PATH']}", HF_HUB_OFFLINE="1",
               HF_HUB_CACHE=str(study_drafters_cache))
    ran = [c for c in commands() if kind(c)[0] == "run"]
    folders = {"repo": repo, "anywhere": anywhere}

    def in_order(where: str) -> list[subprocess.CompletedProcess]:
        """The commands that run in one folder, in the README's order."""
        return [subprocess.run(["bash", "-c", cmd], cwd=folders[where], env=env,
                               capture_output=True, text=True, timeout=900)
                for cmd in ran if kind(cmd)[1] == where]

    # the folders' commands side by side: none reads what another folder's write
    with ThreadPoolExecutor(len(folders)) as pool:
        done = {where: iter(rs) for where, rs in zip(folders, pool.map(in_order, folders))}
    failures = [f"$ {cmd}\n(status {r.returncode})\n{r.stderr[-1500:]}"
                for cmd, r in ((c, next(done[kind(c)[1]])) for c in ran) if r.returncode != 0]
    assert not failures, "\n\n".join(failures)
    assert (anywhere / "trace.parquet").exists() and (repo / "replay.html").exists()
    assert (repo / "results/plan.md").exists()
    # the Python block reads the trace the `specmoe synth` line wrote, without specmoe
    (script,) = blocks("python")
    r = subprocess.run([sys.executable, "-c", script + "\nprint(ids.shape)"], cwd=anywhere,
                       capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert r.returncode == 0 and r.stdout.strip() == f"({32 * 32 * 4}, 8, 8)", r.stderr
    print(f"{len(ran)} README commands run, {len(commands()) - len(ran)} skipped")


def test_the_preflight_example_is_what_the_preflight_says():
    """The README's example line is the preflight's line for Mixtral-8x7B in bf16 on one H100."""
    import copy

    import yaml
    from snakemake.utils import update_config

    from specmoe.config import Config

    (example,) = [ln for ln in blocks("text")[0].splitlines() if ln.startswith("preflight:")]
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((REPO / "config/paper.yaml").read_text()))
    m = copy.deepcopy(next(m for m in cfg["models"] if m["name"] == "mixtral-8x7b-bf16-tp2"))
    cfg["models"] = [{**m, "name": "mixtral-bf16-tp1", "tp": 1}]
    schema = REPO / "workflow/schemas/config.schema.yaml"
    report = Config.load(cfg, schema).preflight(with_vllm=False)
    assert report.lines(True) == [example]


# phrases of a lab notebook or of the project's history, not of what the tool does for its user
NOTEBOOK = ("recent revisions", "on some days", "in one default run", "the old `--", "the former",
            "as before", "in two runs here", "from one day to the next")


@pytest.mark.parametrize("doc", ["README.md", "config/README.md"])
def test_the_user_docs_speak_about_the_tool_not_its_history(doc):
    """The README quoted 'eight cold runs of recent revisions', a machine 'slower on some days',
    'the old `--k`', and config/README 'the former `shuffle_seed`' and 'as before': sentences about
    how the project was developed. Each user doc is free of such phrases."""
    text = " ".join((REPO / doc).read_text().split())
    assert [p for p in NOTEBOOK if p in text] == []
