"""bench/cold_runs.py times cold runs only: an interrupted run's folder is not resumed (its jobs
left were saved as a cold run's wall time), and a clone at another commit is not reused."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cold_runs", REPO / "bench" / "cold_runs.py")
cold_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cold_runs)


def test_an_interrupted_runs_outputs_are_removed_before_it_runs_cold(tmp_path, capsys):
    """A stand-in snakemake lists what it finds: the interrupted run's results/, logs/,
    benchmarks/ and .snakemake/ are gone, and the run is timed and kept in wall_s."""
    where = tmp_path / "new-quiet"
    (where / ".venv" / "bin").mkdir(parents=True)
    snakemake = where / ".venv" / "bin" / "snakemake"
    snakemake.write_text("#!/bin/sh\nls -A > seen.txt\nmkdir -p results\n")
    snakemake.chmod(0o755)
    for d in cold_runs.RUN_OUTPUTS:
        (where / d).mkdir()
        (where / d / "left.txt").write_text("from the interrupted run")
    wall = cold_runs.run(where, busy=False)
    seen = (where / "seen.txt").read_text().split()
    assert not set(seen) & set(cold_runs.RUN_OUTPUTS), seen
    assert "an interrupted run, removing its results, logs, benchmarks, .snakemake" in \
        capsys.readouterr().err
    assert float((where / "wall_s").read_text()) == pytest.approx(wall, abs=0.1)
    assert cold_runs.run(where, busy=False) == float((where / "wall_s").read_text())  # done


def _git(*args, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_clone_at_another_commit_is_refused(tmp_path, monkeypatch):
    """A folder an earlier bench cloned at one revision was reused for another without a look
    at its commit: the runs then timed other code than the revision named."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    for text in ("one", "two"):
        (repo / "f.txt").write_text(text)
        _git("add", "f.txt", cwd=repo)
        _git("commit", "-qm", text, cwd=repo)
        _git("tag", text, cwd=repo)
    monkeypatch.setattr(cold_runs, "REPO", repo)
    where = tmp_path / "old-quiet"
    cold_runs.clone("one", where)
    assert (where / "f.txt").read_text() == "one"
    cold_runs.clone("one", where)  # an interrupted bench resumes in its clone
    with pytest.raises(SystemExit) as e:
        cold_runs.clone("two", where)
    assert str(e.value) == (f"{where}: a checkout of {_git('rev-parse', 'one', cwd=repo)[:12]}, "
                            f"not of two ({_git('rev-parse', 'two', cwd=repo)[:12]}): remove it or "
                            "give another --dir")
