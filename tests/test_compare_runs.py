"""bench/compare_runs.py refuses a directory that holds no run, where it printed '0 of 0
identical' and exited 0 (a check that cannot run must be an error, not a pass)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
        (root / "results" / "report").mkdir(parents=True)
        (root / "results" / "report" / "index.md").write_text("# report\n")
        (root / "results" / "models" / "tiny").mkdir(parents=True)
        (root / "results" / "models" / "tiny" / "config.json").write_text("{}")
        (root / "results" / "traces" / "tiny").mkdir(parents=True)
        write_trace(root / "results" / "traces" / "tiny" / "t.parquet", generate(SynthParams(
            num_experts=8, top_k=2, num_layers=2, requests=2, steps=3, seed=1)))
    for stem, text in csvs.items():
        (root / "results" / "tables" / f"{stem}.csv").write_text("# provenance: {}\n" + text)
    return root


def test_unfinished_runs_or_runs_without_a_model_or_trace_are_refused(tmp_path):
    """Two runs with empty results/tables/ folders passed as "0 of 0 identical": a run without
    its report (one that stopped before some tables) is refused, and so are two runs with
    neither a model file nor a trace; a table neither finished run has (one its configuration
    does not declare, like the default's weight_model) is no difference."""
    a, b = _run(tmp_path / "a", {}, complete=False), _run(tmp_path / "b", {}, complete=False)
    r = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "run A has no report/index.md" in r.stderr, r.stdout + r.stderr
    a, b = _run(tmp_path / "c", {}), _run(tmp_path / "d", {})
    args = [sys.executable, str(SCRIPT), str(a), str(b)]
    for root in (a, b):
        (root / "results" / "tables" / "comparison.csv").unlink()
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0 and "comparison.csv" not in r.stdout, r.stdout + r.stderr
    (b / "results" / "report" / "index.md").unlink()
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 2 and "run B has no report/index.md" in r.stderr, r.stdout + r.stderr
    (b / "results" / "report" / "index.md").write_text("# report\n")
    for root in (a, b):
        shutil.rmtree(root / "results" / "traces")
        shutil.rmtree(root / "results" / "models")
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 2 and "no models/ or traces/ file in either run" in r.stderr, \
        r.stdout + r.stderr


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
    for root in (a, b):  # a training's manifest: compared without its wall time and when it ran
        (root / "results" / "models" / "m").mkdir(parents=True)
        (root / "results" / "models" / "m" / "manifest.json").write_text(json.dumps(
            {"wall_s": len(str(root)), "provenance": {"created": str(root)}}))
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
    assert "same  models/m/manifest.json  (all but provenance.created, wall_s)" in out


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


TSC = "model,batch,name,f,s_moe,s_dense,te,te_raw,te_status,delta,gap_closed_pct,te_sweep\n"
STEPS = ("weight baseline,0.80,0.50,1.0,0.60,0.60,ok,,,0.9",
         "step 1: measured MoE time share,0.30,0.50,1.0,0.80,0.80,ok,0.2,50,0.9",
         "step 2: measured MoE kernel time ratio,0.30,1.20,1.0,0.70,0.70,ok,-0.1,-25,0.9",
         "step 3: measured non-MoE time ratio,0.30,1.20,1.1,0.65,0.65,ok,-0.05,-12,0.9")
CMP = "table,model,drafter,k,dataset,study_model,key,quantity,published,reproduced,difference\n"


def _three_step(steps=STEPS) -> str:
    return TSC + "".join(f"m,1,{s}\n" for s in steps)


def _with(step: int, cells: dict[int, str]) -> tuple[str, ...]:
    """STEPS with step `step`'s cells (by position after its name) replaced."""
    row = STEPS[step].split(",")
    for i, v in cells.items():
        row[1 + i] = v
    return STEPS[:step] + (",".join(row),) + STEPS[step + 1:]


NOT_TIMINGS = [
    ("the speedup's timing is a setting", "speedup_vs_batch",
     "model,batch,timing,speedup\nm,1,client,1.5\n",
     "model,batch,timing,speedup\nm,1,engine,1.5\n"),
    ("the share of launches below the SM count is grid sizes'", "kernel_time_shares",
     "model,class,decode_us,below_sm_share_verify\nm,moe,10,0.25\n",
     "model,class,decode_us,below_sm_share_verify\nm,moe,10,0.90\n"),
    ("step 0 is the weight model's (f, s_moe, te)", "three_step_correction",
     _three_step(), _three_step(_with(0, {0: "0.95", 1: "0.90", 3: "0.20", 4: "0.20"}))),
    ("step 1's s_moe is the unique ratio", "three_step_correction",
     _three_step(), _three_step(_with(1, {1: "0.90"}))),
    ("step 2's s_dense is 1", "three_step_correction",
     _three_step(), _three_step(_with(2, {2: "1.5"}))),
    ("the comparison's step-0 TE is the weight model's", "comparison",
     CMP + "three_step_correction,m,d,3,x,Qwen3-30B,step 0,te,0.55,0.60,0.05\n",
     CMP + "three_step_correction,m,d,3,x,Qwen3-30B,step 0,te,0.55,0.20,-0.35\n"),
]


@pytest.mark.parametrize("case,table,a,b", NOT_TIMINGS, ids=[c[0] for c in NOT_TIMINGS])
def test_a_value_that_is_no_timing_in_a_timing_table_is_compared(tmp_path, case, table, a, b):
    """Settings, grid sizes and the three-step correction's unmeasured inputs were skipped with
    the timing columns: step 0 (the weight baseline) has nothing measured, step i the first i of
    f, S_moe, S_dense, so a value the weight model gives that differs is a difference."""
    ra, rb = _run(tmp_path / "a", {table: a}), _run(tmp_path / "b", {table: b})
    r = subprocess.run([sys.executable, str(SCRIPT), str(ra), str(rb)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and f"DIFF  tables/{table}.csv" in r.stdout, r.stdout + r.stderr


def test_the_three_step_corrections_measured_values_still_are_timings(tmp_path):
    """Each step's measured inputs, its TE, delta and share of the gap closed, and the sweep's TE
    on every row, move with the clocks: two runs differing only there are the same."""
    timed = _three_step((
        STEPS[0].rsplit(",", 1)[0] + ",0.7",                               # te_sweep
        *(_with(i, {j: "9" for j in (*range(i), 3, 4, 6, 7, 8)})[i] for i in (1, 2, 3))))
    ra = _run(tmp_path / "a", {"three_step_correction": _three_step(), "comparison": CMP + (
        "three_step_correction,m,d,3,x,Qwen3-30B,step 2,te,0.55,0.60,0.05\n")})
    rb = _run(tmp_path / "b", {"three_step_correction": timed, "comparison": CMP + (
        "three_step_correction,m,d,3,x,Qwen3-30B,step 2,te,0.55,0.20,-0.35\n")})
    r = subprocess.run([sys.executable, str(SCRIPT), str(ra), str(rb)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_measured_inputs_interval_raw_value_and_status_are_timings_of_its_step(tmp_path):
    """The three-step correction bounds its inputs (f_raw, f_status, f_low, ...: report.measured
    correction_rows): on a step that measures an input those move with the clocks as the input
    does; only the exact names f, s_moe, s_dense were timings, so two runs of different clocks
    differed there. An input the step does not measure (the weight model's) is still compared."""
    cols = "model,batch,name,f,f_raw,f_status,f_low,s_moe,s_moe_raw,s_moe_status\n"
    row = "m,1,step 1: measured MoE time share,{f},{f},{st},{lo},1.2,1.2,ok\n"
    a = cols + row.format(f="0.30", st="ok", lo="0.2")
    b = cols + row.format(f="", st="not identified", lo="")
    ra, rb = _run(tmp_path / "a", {"three_step_correction": a}), \
        _run(tmp_path / "b", {"three_step_correction": b})
    r = subprocess.run([sys.executable, str(SCRIPT), str(ra), str(rb)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    rc = _run(tmp_path / "c", {"three_step_correction": a.replace("1.2,1.2,ok", "1.2,1.2,no")})
    r = subprocess.run([sys.executable, str(SCRIPT), str(ra), str(rc)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "DIFF  tables/three_step_correction.csv" in r.stdout, r.stdout


@pytest.mark.parametrize("table,cols,a,b", [
    ("kernel_time_shares", "model,class,decode_us,ratio,ratio_low,ratio_raw,ratio_status",
     "m,moe,10,1.2,1.1,1.2,ok", "m,moe,11,,,0.9,below 1: not physical"),
    ("kernel_time_shares", "model,class,decode_share,decode_share_low,verify_share_high",
     "m,moe,0.5,0.4,0.7", "m,moe,0.55,0.45,0.75"),
    ("kernel_time_shares", "model,class,decode_kernel_share,decode_kernel_share_high",
     "m,moe,0.35,0.4", "m,moe,0.36,0.42"),
    ("te_three_ways", "model,batch,moe_time_share,moe_time_share_low,draft_cost_profiled,"
     "draft_cost_profiled_high", "m,1,0.3,0.25,0.05,0.07", "m,1,0.35,0.28,0.06,0.09"),
])
def test_a_profiled_values_interval_raw_value_and_status_are_timings(tmp_path, table, cols, a, b):
    """The profiled ratios and shares carry their interval over engine starts, raw value and
    status (report.bounds): they move with the clocks as the value does; only the exact names
    were timings, so two default runs of one machine differed in kernel_time_shares and
    te_three_ways."""
    ra = _run(tmp_path / "a", {table: f"{cols}\n{a}\n"})
    rb = _run(tmp_path / "b", {table: f"{cols}\n{b}\n"})
    r = subprocess.run([sys.executable, str(SCRIPT), str(ra), str(rb)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True,
                          text=True)


def test_a_traces_and_a_non_timing_tables_provenance_are_compared(tmp_path):
    """No provenance record but a timing measurement's says when it was made, so a trace's
    Parquet bytes and a non-timing table's provenance line are the same in two runs of one
    configuration on one machine: each is compared (the trace's columns, and each table's rows
    without that line, were all that was), and a trace or table that differs there alone is a
    difference (the table's counts as identical with --schema, as across two revisions)."""
    from specmoe.provenance import provenance
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace

    head = "# provenance: " + json.dumps({"config_hash": "c", "measured": ["m on cpu"]})
    a = _run(tmp_path / "a", {"t": "x\n1\n"})
    b = _run(tmp_path / "b", {"t": "x\n1\n"})
    r = _compare(a, b)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "same  traces/tiny/t.parquet  (" in r.stdout and "rows, bytes)" in r.stdout
    for root, config in ((a, {"seed": 1}), (b, {"seed": 2})):
        write_trace(root / "results" / "traces" / "tiny" / "t.parquet", generate(SynthParams(
            num_experts=8, top_k=2, num_layers=2, requests=2, steps=3, seed=1)),
            provenance(config, stage="trace"))
        (root / "results" / "tables" / "t.csv").write_text(
            head.replace('"c"', f'"{config["seed"]}"') + "\nx\n1\n")
    r = _compare(a, b)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIFF  traces/tiny/t.parquet" in r.stdout
    assert "cols  tables/t.csv  (1 rows, same values; provenance lines differ)" in r.stdout


def test_a_captured_trace_is_compared_but_for_its_engines_times(tmp_path):
    """A captured trace records its engine's start (its provenance's engine_start) and the
    capture's seconds (its metadata's capture startup_s, generate_s, capture_s): timings, which
    differ between two runs; the rest of its metadata (the prompts' tokens, the drafter's
    identity, the capture's window counts) and its columns and router weights are compared."""
    import numpy as np

    from specmoe.provenance import provenance
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace

    def captured(root: Path, startup: float, tokens: list) -> None:
        tr = generate(SynthParams(num_experts=8, top_k=2, num_layers=2, requests=2, steps=3,
                                  seed=1))
        tr.weights = np.full(tr.experts.shape, 0.5, dtype=np.float16)
        tr.meta.update(prompt_token_ids=tokens, capture={
            "windows": 6, "startup_s": startup, "generate_s": startup / 2,
            "capture_s": startup / 10})
        write_trace(root / "results" / "traces" / "tiny" / "t.parquet", tr, provenance(
            {"run": 1}, stage="capture", engine="vllm 0.32.0 (cpu)",
            engine_start={"phases_s": {"import": startup}}, drafter={"digest": "d"}))

    a, b, c = (_run(tmp_path / n, {}) for n in "abc")
    captured(a, 11.9, [[1, 2]])
    captured(b, 12.6, [[1, 2]])
    captured(c, 11.9, [[1, 3]])
    r = _compare(a, b)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("same  traces/tiny/t.parquet  (24 rows, all but capture.capture_s, "
            "capture.generate_s, capture.startup_s, provenance.engine_start)") in r.stdout
    r = _compare(a, c)
    assert r.returncode == 1 and "DIFF  traces/tiny/t.parquet" in r.stdout, r.stdout + r.stderr


def test_a_model_manifest_is_compared_but_for_a_trainings_times(tmp_path):
    """The tokenizer's and a random control's manifest hold no timing and no time: compared as
    any model file. A training's is compared without its wall time and when it ran (wall_s,
    provenance.created): it was skipped whole, so its held-out and training losses, parameters,
    tokens seen, tokenizer digest, architecture and training settings were never compared."""
    def manifest(root: Path, name: str, **values) -> None:
        prov = {"stage": "train", "created": values.pop("created")} if "created" in values \
            else {"stage": "random"}
        (root / "results" / "models" / name).mkdir(parents=True, exist_ok=True)
        (root / "results" / "models" / name / "manifest.json").write_text(json.dumps(
            {"heldout_loss": 1.0, "train_loss": 1.2, "wall_s": 0.0, **values,
             "provenance": prov}))

    a, b, c = (_run(tmp_path / n, {}) for n in "abc")
    manifest(a, "tiny-random", heldout_loss=7.5)
    manifest(b, "tiny-random", heldout_loss=7.6)
    manifest(c, "tiny-random", heldout_loss=7.5)
    manifest(a, "tiny", wall_s=360.5, created="2026-12-07T15:52:34+00:00")
    manifest(b, "tiny", wall_s=372.6, created="2026-12-07T16:01:02+00:00")
    manifest(c, "tiny", heldout_loss=1.01, wall_s=360.5, created="2026-12-07T15:52:34+00:00")
    r = _compare(a, b)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIFF  models/tiny-random/manifest.json" in r.stdout
    assert "same  models/tiny/manifest.json  (all but provenance.created, wall_s)" in r.stdout, \
        r.stdout
    r = _compare(a, c)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "same  models/tiny-random/manifest.json" in r.stdout
    assert "DIFF  models/tiny/manifest.json" in r.stdout, r.stdout
