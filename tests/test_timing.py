"""Where a run's time went (specmoe.report.timing), from fixture benchmark files and outputs laid
out as a run leaves them: benchmarks/<output path>.tsv beside results/<output path>."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from declared import report_job
from specmoe import paths as P
from specmoe.contracts.report import ReportIndexParams
from specmoe.files import Files
from specmoe.report import timing
from specmoe.report.summary import end_of_run
from specmoe.routing.trace import Trace, status_for, write_trace
from specmoe.stages import report
from test_config import resolved

# the untrained controls of run_dir's run (Config.controls: those the train note tells apart)
CONTROLS = ("tiny-fine-random",)
HEAD = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(root: Path, rel: str, seconds: float) -> Path:
    p = root / "benchmarks" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(HEAD + f"{seconds}\t0:00:{int(seconds):02d}\t1\t1\t1\t1\t0\t0\t90\t{seconds}\n")
    return p


def out_json(root: Path, rel: str, data: dict) -> None:
    p = root / "results" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data))


def trace(root: Path, rel: str, meta: dict) -> None:
    n = 4
    cols = {"request": np.zeros(n, np.int32), "step": np.zeros(n, np.int32),  # one window
            "position": np.arange(n, dtype=np.int8), "accepted": np.zeros(n, np.int8),
            "n_drafts": np.full(n, 3, np.int8), "k_draft": np.full(n, 3, np.int8),
            "token_id": np.arange(n, dtype=np.int32)}
    cols["status"] = status_for(cols["position"], cols["accepted"])
    p = root / "results" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    write_trace(p, Trace(experts=np.tile(np.arange(2), (n, 1, 1)), columns=cols, num_experts=8,
                         k_draft=3, meta=meta))


def run_dir(root: Path) -> Path:
    """A small run: tokenizer and one model trained, an SD check, two sweeps (one of them with
    every point reused: no engine started), a capture, a synthetic trace, analysis and report."""
    bench(root, "models/tokenizer.tsv", 10)
    bench(root, "models/tiny-fine.tsv", 100)
    bench(root, "sd_check/tiny-fine/tiny-drafter/K3/tinybench.tsv", 40)
    out_json(root, "sd_check/tiny-fine/tiny-drafter/K3/tinybench.json",
             {"sd_startup_s": 12.0, "plain_startup_s": 8.0})
    bench(root, "sweeps/tiny-fine/ar.tsv", 60)
    out_json(root, "sweeps/tiny-fine/ar.json", {"engine_starts": 1, "engine_startup_s": 30.0})
    bench(root, "sweeps/tiny-fine/tiny-drafter/K3.tsv", 5)
    out_json(root, "sweeps/tiny-fine/tiny-drafter/K3.json",
             {"engine_starts": 0, "engine_startup_s": 0.0})
    bench(root, "traces/tiny-fine/tiny-drafter/K3/tinybench.tsv", 20)
    trace(root, "traces/tiny-fine/tiny-drafter/K3/tinybench.parquet",
          {"capture": {"startup_s": 10.0, "generate_s": 6.0}})
    bench(root, "traces/synth-fine/synth/K3/synth.tsv", 3)
    trace(root, "traces/synth-fine/synth/K3/synth.parquet", {"generator": {"seed": 0}})
    bench(root, "profiles/tiny-fine/tiny-drafter/K3.tsv", 30)
    out_json(root, "profiles/tiny-fine/tiny-drafter/K3.json", {"engine_startup_s": 16.0})
    bench(root, "overlap/tiny-fine/tiny-drafter/K3/tinybench.tsv", 4)
    bench(root, "report/tables.tsv", 7)
    return root


def test_an_sd_series_counts_each_engine_it_started(tmp_path):
    """A series records how many engines it started (an SD series' no-SD engine as well)."""
    root = run_dir(tmp_path)
    out_json(root, "sweeps/tiny-fine/tiny-drafter/K3.json",
             {"engine_starts": 2, "engine_startup_s": 4.0})
    assert timing.collect(root).engine_starts == 8


def test_a_profile_counts_a_decode_and_a_verify_engine_per_engine_start(tmp_path):
    """A profile starts its decode and verify engines `engines` times (three by default): six
    engines, where two were counted."""
    root = run_dir(tmp_path)
    out_json(root, "profiles/tiny-fine/tiny-drafter/K3.json",
             {"engines": 3, "engine_startup_s": 16.0})
    assert timing.collect(root).engine_starts == 10


def test_stages_sum_the_jobs_and_split_engine_start_off_where_recorded(tmp_path):
    b = timing.collect(run_dir(tmp_path), controls=CONTROLS)
    assert b.seconds == pytest.approx({"train": 110, "engine start": 76, "serve": 55,
                                       "capture": 10, "profile": 14, "analysis": 7, "report": 7})
    assert b.jobs == {"train": 2, "serve": 3, "capture": 1, "profile": 1, "analysis": 2,
                      "report": 1}
    assert b.total_s == pytest.approx(279)  # every job's time, nothing lost or counted twice
    assert b.engine_starts == 6 and not b.unsplit
    assert b.engine_start_share == pytest.approx(76 / 155)  # of the jobs that start engines
    md = "\n".join(timing.markdown(b))
    assert "| engine start | – | 1 min 16 s | 27% |" in md
    assert "6 engines" in md and "49% of the engine jobs' time" in md


def test_an_engine_job_without_its_start_recorded_says_so_and_stays_whole(tmp_path):
    """A capture made before traces recorded their engine's start: not estimated, named."""
    root = run_dir(tmp_path)
    trace(root, "traces/tiny-fine/tiny-drafter/K3/tinybench.parquet",
          {"capture": {"generate_s": 6.0}})
    (root / "results/sweeps/tiny-fine/ar.json").unlink()
    b = timing.collect(root, controls=CONTROLS)
    assert b.seconds["engine start"] == pytest.approx(36)  # the SD check and the profile only
    assert b.seconds["capture"] == pytest.approx(20) and b.seconds["serve"] == pytest.approx(85)
    assert sorted(b.unsplit) == ["sweeps/tiny-fine/ar", "traces/tiny-fine/tiny-drafter/K3/tinybench"]
    assert any(n.startswith("Not split: 2 engine job(s)") for n in timing.notes(b))


def test_an_engine_start_timed_after_vllms_import_is_named_too_short(tmp_path):
    """A profile whose engines were both timed after vLLM was imported in their process (as
    profiles and the untrained controls were) is named; one import per process is not."""
    root = run_dir(tmp_path)
    late = {"import_included": False}
    out_json(root, "profiles/tiny-fine/tiny-drafter/K3.json",
             {"engine_startup_s": 16.0, "engine_start": {"decode": late, "verify": late}})
    b = timing.collect(root, controls=CONTROLS)
    assert b.import_excluded == ["profiles/tiny-fine/tiny-drafter/K3"]
    assert any(n.startswith("Too short: 1 engine job(s)") for n in timing.notes(b))
    out_json(root, "profiles/tiny-fine/tiny-drafter/K3.json",
             {"engine_startup_s": 16.0,
              "engine_start": {"decode": {"import_included": True}, "verify": late}})
    assert timing.collect(root).import_excluded == []


def test_end_of_run_counts_only_this_runs_jobs(tmp_path):
    root = run_dir(tmp_path)
    old = time.time() - 3600
    for p in (root / "benchmarks").rglob("*.tsv"):
        os.utime(p, (old, old))
    started = time.time() - 1
    bench(root, "report/figures.tsv", 9)
    text = end_of_run(root / "results/report/summary.txt", started, root=root)
    assert "made no report" in text
    assert "where the time went (1 jobs, 9.0 s of job time" in text
    assert "report" in text and "train" not in text.split("where the time went")[1].split("\n  ")[1]
    # nothing ran: said in words
    assert "nothing ran" in end_of_run(root / "x", time.time() + 60, root=root)


def test_the_report_has_a_provenance_section_with_the_breakdown(tmp_path):
    root = run_dir(tmp_path)
    out = root / "results/report/index.md"
    report.report_index_stage(*report_job(root / "results/tables", root / "results/figures", out),
                              ReportIndexParams("abc", controls=CONTROLS), run_root=root)
    text = out.read_text()
    section = text[text.index("## Provenance"):]
    assert "Configuration hash `abc`" in section and "### Where the time went" in section
    assert "| train | 2 | 1 min 50 s | 39% |" in section
    assert "engine start" in section and "report's own job is still running" in section


def test_the_reports_html_page_names_the_packages_and_where_the_tables_were_measured(tmp_path):
    """index.html carried only the configuration hash: the packages and hardware were in a
    comment of index.md alone, and where the measurements were made nowhere."""
    from specmoe.provenance import package_versions
    from specmoe.report import tables

    root = run_dir(tmp_path)
    prov = {"config_hash": "abc", "measured": ["t@abc on NVIDIA H100 80GB HBM3 with vllm"]}
    tables.write_table(pd.DataFrame({"x": [1]}), root / "results/tables/extra", prov)
    out = root / "results/report/index.md"
    report.report_index_stage(*report_job(root / "results/tables", root / "results/figures", out),
                              ReportIndexParams("abc"), run_root=None)
    html = out.with_suffix(".html").read_text()
    assert "t@abc on NVIDIA H100 80GB HBM3 with vllm" in html
    assert all(f"{k} {v}" in html for k, v in package_versions().items())


def test_a_file_that_is_not_a_benchmark_is_not_a_job(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "notes.tsv").write_text("a\tb\n1\t2\n")
    assert timing.collect(tmp_path).seconds == {}
    assert "cannot be broken down" in timing.markdown(timing.collect(tmp_path))[0]


def test_the_reports_breakdown_counts_the_jobs_its_configuration_declares_alone(tmp_path):
    """Snakemake leaves a job's previous benchmark file in place until the job ends and never
    removes those of jobs the configuration dropped: the report counted its own job's previous
    file (300 s) and the overlap of a dropped K and dataset of a model it still has (500 s),
    {'analysis': 505, 'report': 312} where its jobs took {'analysis': 5, 'report': 12}."""
    cfg = resolved()
    params = ReportIndexParams.from_config(cfg, None, Files(cfg))
    run = cfg.models["tiny-fine"].runs()[0]
    bench(tmp_path, P.benchmark_of(run.fill(P.OVERLAP)).removeprefix("benchmarks/"), 5)
    bench(tmp_path, "report/tables.tsv", 12)
    for stale, seconds in (("overlap/tiny-fine/tiny-drafter/K7/oldset.tsv", 500),
                           ("report/index.tsv", 300),  # the report's own previous job
                           ("models/tiny-fine-old.tsv", 318),  # a dropped model's, download's
                           ("downloads/old--repo.full.tsv", 10),
                           ("downloads/datasets/old.tsv", 10), ("prompts/old.tsv", 10)):
        bench(tmp_path, stale, seconds)
    out = tmp_path / "results/report/index.md"
    report.report_index_stage(*report_job(tmp_path / "results/tables",
                                          tmp_path / "results/figures", out),
                              params, run_root=tmp_path)
    section = out.read_text().split("### Where the time went")[1]
    assert "| analysis | 1 | 5.0 s |" in section and "| report | 1 | 12.0 s |" in section
    assert "| train |" not in section and "| inputs |" not in section
    assert timing.collect(tmp_path, benchmarks=params.benchmarks).seconds == {"analysis": 5.0,
                                                                             "report": 12.0}


def test_the_breakdown_reads_an_engine_jobs_record_only_where_it_is_declared(tmp_path):
    """Each engine job's record is its output (record_of its benchmark file); given the records
    a job declares (rule report_index's input records), the breakdown reads those alone: an SD
    check whose output the report does not declare stays whole in serve, unsplit, instead of
    being read from a file that may be a previous run's."""
    root = run_dir(tmp_path)
    sd = "benchmarks/sd_check/tiny-fine/tiny-drafter/K3/tinybench.tsv"
    assert timing.record_of(sd) == "results/sd_check/tiny-fine/tiny-drafter/K3/tinybench.json"
    assert timing.record_of("benchmarks/traces/m/d/K3/a+b.tsv") == \
        "results/traces/m/d/K3/a+b.parquet"
    assert timing.record_of("benchmarks/overlap/m/d/K3/a.tsv") is None
    assert timing.record_of(P.benchmark_of(P.SWEEP_AR.format(model="m", dtype="auto", tp=2))) \
        == P.SWEEP_AR.format(model="m", dtype="auto", tp=2)
    every = timing.collect(root)
    records = [r for b in (root / "benchmarks").rglob("*.tsv")
               if (r := timing.record_of(b.relative_to(root).as_posix()))]
    assert timing.collect(root, records=records) == every
    without_sd = [r for r in records if not r.startswith("results/sd_check/")]
    b = timing.collect(root, records=without_sd)
    assert b.unsplit == ["sd_check/tiny-fine/tiny-drafter/K3/tinybench"]
    assert b.seconds["engine start"] == every.seconds["engine start"] - 20.0
    assert b.seconds["serve"] == every.seconds["serve"] + 20.0


def test_the_breakdown_says_which_declared_jobs_it_could_not_count(tmp_path):
    """Of 98 declared jobs, 96 left no benchmark file and one left a file that is not
    Snakemake's: the breakdown read "analysis 1 job 100%" and said nothing of the other 97. Its
    notes now count the missing files and name the unreadable one."""
    declared = [f"benchmarks/overlap/m/d/K3/set{i}.tsv" for i in range(96)]
    bench(tmp_path, "overlap/m/d/K3/read.tsv", 5)
    bad = tmp_path / "benchmarks/overlap/m/d/K3/torn.tsv"
    bad.write_text("a\tb\n1\t2\n")  # no 's' column: a file being written, or not a benchmark
    declared += ["benchmarks/overlap/m/d/K3/read.tsv", "benchmarks/overlap/m/d/K3/torn.tsv"]
    b = timing.collect(tmp_path, benchmarks=declared)
    assert b.seconds == {"analysis": 5.0} and b.jobs == {"analysis": 1}
    assert len(b.missing) == 96 and b.unreadable == ["overlap/m/d/K3/torn"]
    said = " ".join(timing.notes(b))
    assert "96 declared job(s) left no benchmark file" in said
    assert "1 benchmark file(s) unreadable" in said and "overlap/m/d/K3/torn" in said
    assert "96 declared job(s)" in "\n".join(timing.markdown(b))
    assert "96 declared job(s)" in timing.text(b)
    # nothing counted at all: the page says so, and why
    nothing = timing.collect(tmp_path, benchmarks=declared[:96])
    assert nothing.seconds == {}
    page = "\n".join(timing.markdown(nothing))
    assert "cannot be broken down" in page and "96 declared job(s)" in page
    assert "96 declared job(s)" in timing.text(nothing)


@pytest.mark.parametrize("rel, record, said", [
    ("sweeps/tiny-fine/ar", {"engine_starts": 1, "engine_startup_s": -5.0}, "negative"),
    ("sweeps/tiny-fine/ar", {"engine_starts": 1, "engine_startup_s": float("nan")},
     "not a finite"),
    ("sweeps/tiny-fine/ar", {"engine_starts": 1, "engine_startup_s": "slow"}, "not a number"),
    # an SD check of 40 s whose engines' starts sum to 500 s
    ("sd_check/tiny-fine/tiny-drafter/K3/tinybench",
     {"sd_startup_s": 300.0, "plain_startup_s": 200.0}, "longer than"),
])
def test_an_engine_start_outside_its_jobs_time_is_refused(tmp_path, rel, record, said):
    """A sweep recording engine_startup_s -5 in a 60 s job was shown as "engine start | – |
    -1 min 55 s | -8%" with serve at 108%; an SD check's 500 s of starts in a 40 s job was cut
    to 40 s without a word. A start is measured inside its job, so it lies in [0, the job's
    time]: outside, the record or the benchmark file is wrong, and the error names both."""
    from specmoe.errors import InputError

    root = run_dir(tmp_path)
    out_json(root, rel + ".json", record)
    with pytest.raises(InputError) as err:
        timing.collect(root)
    msg = str(err.value)
    assert "\n" not in msg and said in msg
    assert f"results/{rel}.json" in msg and f"benchmarks/{rel}.tsv" in msg


def test_an_engine_start_as_long_as_its_job_within_the_clocks_rounding_is_its_whole_job(tmp_path):
    """Snakemake rounds a job's time to 0.1 ms and times it on another clock than the start:
    a start a hair over the job's time is the whole job, not an error."""
    root = run_dir(tmp_path)
    out_json(root, "sweeps/tiny-fine/ar.json", {"engine_starts": 1, "engine_startup_s": 60.00004})
    b = timing.collect(root)
    assert b.seconds["engine start"] == pytest.approx(76 + 30)
    assert b.seconds["serve"] == pytest.approx(55 - 30) and b.seconds["serve"] >= 25


def test_a_benchmark_file_of_a_negative_time_is_not_snakemakes(tmp_path):
    """A job time below zero or not finite is no Snakemake benchmark's: counted nowhere, named."""
    bench(tmp_path, "overlap/m/d/K3/a.tsv", 5)
    bench(tmp_path, "overlap/m/d/K3/b.tsv", -5)
    (tmp_path / "benchmarks/overlap/m/d/K3/c.tsv").write_text(
        HEAD + "nan\t0\t1\t1\t1\t1\t0\t0\t90\t1\n")
    b = timing.collect(tmp_path)
    assert b.seconds == {"analysis": 5.0} and b.unreadable == ["overlap/m/d/K3/b",
                                                               "overlap/m/d/K3/c"]


def _records(root: Path) -> list[str]:
    """The records a report declares: those of every benchmark file (record_of)."""
    return [r for b in (root / "benchmarks").rglob("*.tsv")
            if (r := timing.record_of(b.relative_to(root).as_posix()))]


@pytest.mark.parametrize("declared", [True, False])
def test_an_unreadable_engine_record_is_an_error_not_nothing_recorded(tmp_path, declared):
    """A truncated serving series was read as "nothing recorded" (except Exception: None): the
    breakdown said "Not split: ... whose output records no engine start" of a file it could not
    read; a junk synthetic trace was counted as a capture job, unsplit. Each is an error naming
    the file and its job's benchmark file."""
    from specmoe.errors import InputError

    root = run_dir(tmp_path)
    records = _records(root) if declared else None
    good = (root / "results/sweeps/tiny-fine/ar.json").read_text()
    for rel, junk in (("sweeps/tiny-fine/ar.json", good[:len(good) // 2]),  # truncated
                      ("sweeps/tiny-fine/ar.json", "[1, 2]"),  # JSON, not a record
                      ("traces/synth-fine/synth/K3/synth.parquet", "PAR1 not a trace")):
        path = root / "results" / rel
        kept = path.read_bytes()
        path.write_text(junk)
        with pytest.raises(InputError) as err:
            timing.collect(root, records=records)
        msg = str(err.value)
        assert "\n" not in msg and f"results/{rel}" in msg, msg
        assert "benchmarks/" + rel.rsplit(".", 1)[0] + ".tsv" in msg, msg
        path.write_bytes(kept)
    assert timing.collect(root, records=records).jobs["capture"] == 1  # the capture alone


def test_a_declared_engine_record_that_is_missing_is_an_error(tmp_path):
    """A record the report declares (its input: Snakemake made it) that is not there is not an
    output without a start: it is named. Undeclared (the end of a run reads every output), a
    missing output stays unsplit, as before."""
    from specmoe.errors import InputError

    root = run_dir(tmp_path)
    records = _records(root)
    (root / "results/sweeps/tiny-fine/ar.json").unlink()
    with pytest.raises(InputError, match="results/sweeps/tiny-fine/ar.json"):
        timing.collect(root, records=records)
    assert timing.collect(root).unsplit == ["sweeps/tiny-fine/ar"]


def test_the_notes_name_the_stage_each_unsplit_job_is_counted_in_and_only_stages_present(
        tmp_path):
    """A profile whose output records no start is counted in the profile row, but the note said
    "counted in serve or capture"; "Train includes the tokenizer and the untrained controls,
    serve the sweeps ..." was said of a run without a train or a serve row; and "vLLM's import
    included" of every engine, even where the breakdown names starts timed after it."""
    bench(tmp_path, "profiles/m/d/K3.tsv", 30)
    out_json(tmp_path, "profiles/m/d/K3.json", {"k": 3})  # no engine_startup_s
    b = timing.collect(tmp_path)
    assert b.seconds == {"profile": 30.0} and b.unsplit == ["profiles/m/d/K3"]
    said = " ".join(timing.notes(b))
    assert "counted in profile" in said and "serve or capture" not in said
    assert "Train" not in said and "serve" not in said and "sweeps" not in said
    assert "each job's time runs from its script's start" in said.lower()
    # a start timed after vLLM's import: its import is counted in its stage, named, and the
    # engine-start sentence does not say every start includes the import
    late = {"import_included": False}
    out_json(tmp_path, "profiles/m/d/K3.json",
             {"engine_startup_s": 16.0, "engine_start": {"decode": late, "verify": late}})
    b = timing.collect(tmp_path)
    said = " ".join(timing.notes(b))
    assert b.import_excluded == ["profiles/m/d/K3"]
    assert "their import is counted in profile" in said and "serve or capture" not in said
    assert "vLLM's import included but in the 1 job(s) named too short" in said
    assert "(profiles)" in said
    # the whole run: both unsplit stages named, train and serve said where they have rows
    root = run_dir(tmp_path / "run")
    trace(root, "traces/tiny-fine/tiny-drafter/K3/tinybench.parquet",
          {"capture": {"generate_s": 6.0}})
    (root / "results/sweeps/tiny-fine/ar.json").unlink()
    said = " ".join(timing.notes(timing.collect(root, controls=CONTROLS)))
    assert "their start-up is counted in serve and capture" in said
    assert "Train includes the tokenizer" in said and "serve the sweeps and SD checks" in said
    assert "vLLM's import included," in said


def test_the_train_note_names_only_the_jobs_that_ran(tmp_path):
    """The note said "Train includes the tokenizer and the untrained controls" whenever train had
    time, of a run without controls and of a rerun that retrained one model alike: it now says
    what the counted train jobs are, from their benchmark files."""
    bench(tmp_path, "models/tiny-fine.tsv", 100)  # one model retrained, nothing else
    controls = ("tiny-fine-random", "tiny-coarse-random")
    said = " ".join(timing.notes(timing.collect(tmp_path, controls=controls)))
    assert "Train includes 1 trained model;" in said
    assert "tokenizer" not in said and "control" not in said
    bench(tmp_path, "models/tokenizer.tsv", 10)
    bench(tmp_path, "models/tiny-coarse.tsv", 90)
    for target in ("tiny-fine", "tiny-coarse"):
        bench(tmp_path, f"models/{target}-random.tsv", 2)
    b = timing.collect(tmp_path, controls=controls)
    assert b.jobs["train"] == 5
    assert ("Train includes the tokenizer, 2 trained models and 2 untrained controls;"
            in " ".join(timing.notes(b)))


def test_the_timing_notes_and_the_prose_join_names_with_one_function():
    """report.timing kept its own copy of prose's "a, b and c" (timing must not import prose, a
    heavy module): both now take it from report.words, which imports nothing of the report."""
    import ast
    import inspect

    from specmoe.report import prose, timing, words

    assert words.and_join(["a"]) == "a" and words.and_join(["a", "b"]) == "a and b"
    assert words.and_join(["a", "b", "c"]) == "a, b and c" and words.and_join([]) == ""
    for module in (prose, timing):
        defined = {n.name for n in ast.walk(ast.parse(inspect.getsource(module)))
                   if isinstance(n, ast.FunctionDef)}
        assert "_and" not in defined and module.and_join is words.and_join, module.__name__
    assert not [n for n in ast.walk(ast.parse(inspect.getsource(words)))
                if isinstance(n, (ast.Import, ast.ImportFrom)) and n.module != "__future__"]


def _renamed(old: str, new: str):
    """The default configuration with every `old` in its text read as `new`."""
    import yaml

    from specmoe.config import Config
    from test_config import REPO

    raw = yaml.safe_load((REPO / "config.yaml").read_text().replace(old, new))
    return Config.load(raw, REPO / "workflow/schemas/config.schema.yaml")


def test_a_dotted_tiny_models_benchmark_is_the_one_its_rule_writes():
    """A tiny model's name may hold a dot (the schema's ^[A-Za-z0-9][A-Za-z0-9._-]*$), but
    benchmark_of dropped its last '.xxx' as an extension, though a checkpoint is a directory:
    Files.benchmarks() declared benchmarks/models/tiny-fine-1.tsv (and its control the same
    file) where rules train_model and random_model write benchmarks/models/tiny-fine-1.5.tsv and
    tiny-fine-1.5-random.tsv."""
    from specmoe.names import control_name

    cfg = _renamed("tiny-fine", "tiny-fine-1.5")
    declared = Files(cfg).benchmarks()
    for name in ("tiny-fine-1.5", control_name("tiny-fine-1.5")):
        # what Snakemake writes: the rules' benchmark pattern, filled
        written = P.benchmark_of(P.model("{tiny}")).format(tiny=name)
        assert written == f"benchmarks/models/{name}.tsv"
        assert written in declared, (written, [d for d in declared if "/models/" in d])
        assert P.log_of(P.model(name)) == f"logs/models/{name}.log"
    # a file output still loses its extension alone, a dotted name kept
    assert P.benchmark_of(P.SWEEP_AR.format(model="m.1", dtype="auto", tp=2)) == \
        "benchmarks/sweeps/m.1/ar-auto-tp2.tsv"
    assert P.benchmark_of(P.download("a--b.c", "full")) == "benchmarks/downloads/a--b.c.full.tsv"


def test_the_report_counts_a_dotted_models_training(tmp_path):
    """The report said "1 declared job(s) left no benchmark file (models/tiny-fine-1)" of a run
    whose end-of-run summary counted its trainings: it now counts them too."""
    from specmoe.names import control_name

    cfg = _renamed("tiny-fine", "tiny-fine-1.5")
    params = ReportIndexParams.from_config(cfg, None, Files(cfg))
    for name, s in (("tiny-fine-1.5", 100), (control_name("tiny-fine-1.5"), 2)):
        bench(tmp_path, P.benchmark_of(P.model("{tiny}")).format(tiny=name)
              .removeprefix("benchmarks/"), s)
    b = timing.collect(tmp_path, benchmarks=params.benchmarks)
    assert b.seconds.get("train") == 102 and b.jobs.get("train") == 2, (b.seconds, b.missing)
    assert not [j for j in b.missing if j.startswith("models/tiny-fine")], b.missing


def test_a_trained_drafter_named_random_is_not_an_untrained_control(tmp_path):
    """A job counted as an untrained control where its name ended in "-random": a trained tiny
    drafter named draft-random (the configuration refuses only a name that clashes with a
    generated control) made "1 trained model and 2 untrained controls" of the tokenizer,
    tiny-fine, its control and draft-random. The configuration's own controls decide it now, in
    the report's breakdown (ReportIndexParams.controls) and at the end of the run alike."""
    cfg = _renamed("tiny-drafter", "draft-random")
    assert "draft-random" in cfg.tiny_drafters and "draft-random" not in cfg.controls
    for job, s in (("models/tokenizer", 10), ("models/tiny-fine", 100),
                   ("models/tiny-fine-random", 2), ("models/draft-random", 50)):
        bench(tmp_path, f"{job}.tsv", s)
    said = "Train includes the tokenizer, 2 trained models and 1 untrained control;"
    params = ReportIndexParams.from_config(cfg, None, Files(cfg))
    assert "tiny-fine-random" in params.controls and "draft-random" not in params.controls
    out = tmp_path / "results/report/index.md"
    report.report_index_stage(*report_job(tmp_path / "results/tables",
                                          tmp_path / "results/figures", out),
                              params, run_root=tmp_path)
    assert said in out.read_text()
    assert said in end_of_run(tmp_path / "x", 0.0, root=tmp_path, controls=cfg.controls)
    # without the configuration's controls, the train jobs are not told apart by a guess
    with pytest.raises(ValueError, match="without the configuration's controls"):
        timing.notes(timing.collect(tmp_path))
