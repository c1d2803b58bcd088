"""bench/compare_runs.py refuses a directory that holds no run, where it printed '0 of 0
identical' and exited 0 (a check that cannot run must be an error, not a pass)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "compare_runs.py"


def test_a_directory_without_a_run_is_refused_in_one_line(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a"), str(tmp_path / "b")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "no results/tables/ here" in r.stderr
    assert "identical" not in r.stdout
