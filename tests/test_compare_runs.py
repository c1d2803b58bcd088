"""bench/compare_runs.py refuses a directory that holds no run, where it printed '0 of 0
identical' and exited 0 (a check that cannot run must be an error, not a pass)."""

import shutil
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


def _run(root: Path, csvs: dict[str, str], complete: bool = True) -> Path:
    """A run's results: the tables `csvs`, and where `complete`, every other table of the registry
    (no rows), a model file and a trace, all the same in every run."""
    from specmoe.report.registry import TABLES
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace

    (root / "results" / "tables").mkdir(parents=True)
    if complete:
        csvs = {**dict.fromkeys(TABLES, ""), **csvs}
        (root / "results" / "models" / "tiny").mkdir(parents=True)
        (root / "results" / "models" / "tiny" / "config.json").write_text("{}")
        (root / "results" / "traces" / "tiny").mkdir(parents=True)
        write_trace(root / "results" / "traces" / "tiny" / "t.parquet", generate(SynthParams(
            num_experts=8, top_k=2, num_layers=2, requests=2, steps=3, seed=1)))
    for stem, text in csvs.items():
        (root / "results" / "tables" / f"{stem}.csv").write_text("# provenance: {}\n" + text)
    return root


def test_runs_that_lack_the_same_tables_or_hold_no_model_or_trace_are_no_pass(tmp_path):
    """Two runs with empty results/tables/ folders passed as "0 of 0 identical", and two that
    lacked the same table or every trace passed too: a table of the registry neither run has is
    a difference, and two runs without a model file or a trace are refused in one line."""
    a, b = _run(tmp_path / "a", {}, complete=False), _run(tmp_path / "b", {}, complete=False)
    r = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "no models/ file in either run" in r.stderr, r.stdout + r.stderr
    a, b = _run(tmp_path / "c", {}), _run(tmp_path / "d", {})
    args = [sys.executable, str(SCRIPT), str(a), str(b)]
    assert subprocess.run(args, capture_output=True).returncode == 0
    for root in (a, b):
        (root / "results" / "tables" / "comparison.csv").unlink()
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 1 and "DIFF  tables/comparison.csv  (in neither run)" in r.stdout
    for root in (a, b):
        shutil.rmtree(root / "results" / "traces")
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 2 and "no traces/ file in either run" in r.stderr, r.stdout + r.stderr


def test_a_table_that_gained_or_renamed_a_column_is_same_values_only_where_every_value_is(
        tmp_path):
    """Across a change that adds a column or renames one on purpose, the check says whether the
    shared columns hold the same values, and counts the table as identical only with --schema;
    a changed value stays a difference."""
    a = _run(tmp_path / "a", {"t": "model,k,x\nm,3,0.5\n", "u": "k,y\n2,1.0\n"})
    b = _run(tmp_path / "b", {"t": "model,control_of,k,x\nm,,3,0.5\n", "u": "top_k,y\n2,1.0\n"})
    args = [sys.executable, str(SCRIPT), str(a), str(b), "--rename", "u:k=top_k"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cols  tables/t.csv  (1 rows, same values; only in B: control_of)" in r.stdout
    assert "cols  tables/u.csv  (1 rows, same values; renamed: k=top_k)" in r.stdout
    assert subprocess.run(args + ["--schema"], capture_output=True).returncode == 0
    (b / "results" / "tables" / "t.csv").write_text(
        "# provenance: {}\nmodel,control_of,k,x\nm,,3,0.6\n")
    r = subprocess.run(args + ["--schema"], capture_output=True, text=True)
    assert r.returncode == 1 and "DIFF  tables/t.csv" in r.stdout


def test_a_file_only_one_run_has_and_a_non_timing_column_of_a_timing_table_are_differences(
        tmp_path):
    """A table, model file or SD check that only run B has was never looked at (A's files were
    the list), a file only A had stopped the script, and a timing table's cost-model column
    (te_three_ways' unique_sd) was skipped with the whole table: each is a difference now, while
    the timing table's clock columns still are not compared."""
    head = "model,batch,unique_sd,te_sweep\n"
    a = _run(tmp_path / "a", {"te_three_ways": head + "m,1,12.5,0.8\n"})
    b = _run(tmp_path / "b", {"te_three_ways": head + "m,1,12.5,0.7\n"})
    args = [sys.executable, str(SCRIPT), str(a), str(b)]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr  # te_sweep is a timing
    for root in (a, b):
        (root / "results" / "models" / "m").mkdir(parents=True)
        (root / "results" / "models" / "m" / "manifest.json").write_text(str(root))  # skipped
        (root / "results" / "models" / "m" / "generation_config.json").write_text("{}")
    assert subprocess.run(args, capture_output=True).returncode == 0
    (b / "results" / "models" / "m" / "generation_config.json").write_text('{"eos": 2}')
    (b / "results" / "tables" / "extra.csv").write_text("# p\nx\n1\n")
    (a / "results" / "tables" / "gone.csv").write_text("# p\nx\n1\n")
    sd = b / "results" / "sd_check" / "m" / "K3"
    sd.mkdir(parents=True)
    (sd / "x.json").write_text('{"sd_token_ids": [[1]]}')
    (b / "results" / "tables" / "te_three_ways.csv").write_text(
        "# p\n" + head + "m,1,25.0,0.7\n")
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "DIFF  models/m/generation_config.json" in out
    assert "DIFF  tables/extra.csv  (only in B)" in out and "DIFF  tables/gone.csv  (only in A)" \
        in out
    assert "DIFF  sd_check/m/K3/x.json  (only in B)" in out
    assert "DIFF  tables/te_three_ways.csv  (1 rows, non-timing columns)" in out
    assert "manifest" not in out


def test_a_value_beside_a_hash_in_a_cell_is_compared(tmp_path):
    """A cell holding `#` (a prompt category `C#`) is a value like any: read as a comment, it cut
    the rest of its row, and a changed value beside it passed as the same under --schema."""
    a = _run(tmp_path / "a", {"t": "category,x\nC#,0.5\n"})
    b = _run(tmp_path / "b", {"t": "category,x\nC#,0.6\n"})
    r = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), "--schema"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "DIFF  tables/t.csv" in r.stdout, r.stdout + r.stderr


def test_the_sweeps_pair_test_against_the_highest_speedup_is_a_timing(tmp_path):
    """speedup_vs_batch's below_highest is decided by the timed speedups' pair tests, so it moves
    with the clocks like the speedups themselves: two runs of the same code differing only there
    (and in the speedups) are the same; its cost-model columns still are compared."""
    head = "model,batch,speedup,below_highest,unique_sd\n"
    a = _run(tmp_path / "a", {"speedup_vs_batch": head + "m,1,1.6,False,12.5\nm,8,1.2,True,20\n"})
    b = _run(tmp_path / "b", {"speedup_vs_batch": head + "m,1,1.4,False,12.5\nm,8,1.3,False,20\n"})
    args = [sys.executable, str(SCRIPT), str(a), str(b)]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (b / "results" / "tables" / "speedup_vs_batch.csv").write_text(
        "# provenance: {}\n" + head + "m,1,1.4,False,12.5\nm,8,1.3,False,21\n")
    assert subprocess.run(args, capture_output=True).returncode == 1
