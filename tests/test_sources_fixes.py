"""The study's sources where they once failed silently or reran too much: a pinned revision, the
dataset readers' columns, a dataset download that fetches nothing, the packaged data files'
source notes and the three-step comparison's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hubfake import lay_out_cache, repo_folder
from wf import copy_workflow, planned_jobs, snakemake

MODEL_MANIFEST = "results/downloads/zai-org--GLM-4.7-Flash.full.json"
DATASET_MANIFEST = "results/downloads/datasets/mtb.json"
CAPTURE = "results/traces/glm-run/mtp/K3/tinybench.parquet"
PROMPTS = "results/prompts/mtb.csv"
MT = [{"question_id": 81, "category": "writing", "turns": ["Write a post.", "Shorter."]}]


@pytest.mark.slow
def test_pinning_the_recorded_commit_reruns_nothing_and_another_commit_reruns_the_download(
        tmp_path, preflight_memo):
    """The README's advice: run unpinned, then copy the recorded commit into the config to pin
    it. Pinning it changes no param, so neither the download nor the engine job that reads its
    manifest (nor the prompt table of a dataset so pinned) reruns; another commit (its
    config.json fetched, which the preflight reads for a pinned commit) reruns the download and
    so what reads it. Offline throughout: only dry runs after the downloads."""
    from test_study_workflow import CASE, offline_cache

    env = offline_cache(tmp_path)  # every repo of the study case at commit f*40, offline
    lay_out_cache(tmp_path / "hf" / "hub", "philschmid/mt-bench",
                  {"question.jsonl": "".join(json.dumps(r) + "\n" for r in MT).encode()},
                  commit="e" * 40, repo_type="dataset")
    case = yaml.safe_load(CASE.read_text())
    case["models"] = [m for m in case["models"] if m["name"] == "glm-run"]
    case["datasets"] = {"mtb": {"format": "mt-bench", "repo_id": "philschmid/mt-bench"}}
    wd = copy_workflow(tmp_path / "wf", memo=preflight_memo)

    def config(model_revision=None, dataset_revision=None) -> str:
        c = json.loads(json.dumps(case))
        if model_revision:
            c["models"][0]["revision"] = model_revision
        if dataset_revision:
            c["datasets"]["mtb"]["revision"] = dataset_revision
        name = f"case-{model_revision}-{dataset_revision}.yaml"
        (wd / name).write_text(yaml.safe_dump(c))
        return name

    unpinned = config()
    snakemake(wd, MODEL_MANIFEST, DATASET_MANIFEST, env=env, configfile=unpinned, cores=2)
    assert json.loads((wd / MODEL_MANIFEST).read_text())["commit"] == "f" * 40
    assert json.loads((wd / DATASET_MANIFEST).read_text())["commit"] == "e" * 40
    # what reads the manifests, as a finished run leaves it: newer than they are
    for out in (CAPTURE, PROMPTS):
        (wd / out).parent.mkdir(parents=True, exist_ok=True)
        (wd / out).write_text("x")

    def rules(configfile: str) -> set[str]:
        dry = snakemake(wd, "-n", CAPTURE, PROMPTS, env=env, configfile=configfile, cores=2)
        return {j["rule"] for j in planned_jobs(dry.stdout)}

    assert rules(unpinned) == set()
    assert rules(config("f" * 40, "e" * 40)) == set()  # the recorded commits, pinned
    # another commit: its config.json fetched first (`specmoe download REPO --mode config
    # --revision COMMIT`, as the preflight asks: the package's copy stands for no pinned commit)
    cache = tmp_path / "hf" / "hub"
    recorded = repo_folder(cache, case["models"][0]["repo_id"], "model") / "snapshots" / ("f" * 40)
    lay_out_cache(cache, case["models"][0]["repo_id"],
                  {"config.json": (recorded / "config.json").read_bytes()}, commit="0" * 40,
                  ref="fetched-config")
    assert rules(config("0" * 40)) == {"download_model", "capture"}
    assert rules(config(None, "1" * 40)) == {"download_dataset", "prompt_table"}
    assert rules(config("main")) == {"download_model", "capture"}  # a branch named anew

    # main has moved on since; the downloads rerun (--forcerun, as snapshot_of advises) with the
    # recorded commits pinned: they download those, pinned, not main's newest commits, and keep
    # their params, so the next run reruns neither a second time
    for repo_id, repo_type, commit in ((case["models"][0]["repo_id"], "model", "f" * 40),
                                       ("philschmid/mt-bench", "dataset", "e" * 40)):
        snap = repo_folder(cache, repo_id, repo_type) / "snapshots" / commit
        lay_out_cache(cache, repo_id, {p.name: p.read_bytes() for p in snap.iterdir()},
                      commit="9" * 40, repo_type=repo_type)
    pinned = config("f" * 40, "e" * 40)
    snakemake(wd, MODEL_MANIFEST, DATASET_MANIFEST, "--forcerun", "download_model",
              "download_dataset", env=env, configfile=pinned, cores=2)
    for manifest, commit in ((MODEL_MANIFEST, "f" * 40), (DATASET_MANIFEST, "e" * 40)):
        man = json.loads((wd / manifest).read_text())
        assert (man["commit"], man["pinned"]) == (commit, True), manifest
    dry = snakemake(wd, "-n", MODEL_MANIFEST, DATASET_MANIFEST, env=env, configfile=pinned,
                    cores=2)
    assert planned_jobs(dry.stdout) == []


def test_the_download_param_is_the_revision_its_manifest_was_made_from(tmp_path):
    """tracked_revision in itself: a manifest made unpinned is named by the revision it was made
    from (unset, so as Snakemake recorded the job's param) whether the config leaves it unset or
    pins its commit; a manifest of another repository, or none, leaves the configured one."""
    from specmoe.contracts.study import tracked_revision

    man = tmp_path / "m.json"
    assert tracked_revision("a" * 40, str(man), "o/r") == "a" * 40  # no manifest yet
    man.write_text(json.dumps({"repo_id": "o/r", "revision_requested": None,
                               "commit": "c" * 40}))
    assert tracked_revision(None, str(man), "o/r") is None
    assert tracked_revision("c" * 40, str(man), "o/r") is None
    assert tracked_revision("d" * 40, str(man), "o/r") == "d" * 40
    assert tracked_revision("c" * 40, str(man), "o/other") == "c" * 40
    man.write_text(json.dumps({"repo_id": "o/r", "revision_requested": "c" * 40,
                               "commit": "c" * 40}))
    assert tracked_revision(None, str(man), "o/r") == "c" * 40  # a pin removed: kept
    # a forced rerun of the unpinned job with the commit pinned downloaded the commit; the
    # manifest keeps the job's param as its rerun key
    man.write_text(json.dumps({"repo_id": "o/r", "revision_requested": "c" * 40,
                               "revision_param": None, "commit": "c" * 40}))
    assert tracked_revision("c" * 40, str(man), "o/r") is None
    man.write_text("{not json")
    assert tracked_revision("c" * 40, str(man), "o/r") == "c" * 40


def _parquet(path: Path, columns: dict) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns).to_parquet(path)


AYA = "data/train-00000-of-00001.parquet"
SPEED = "throughput_32k/test-00000-of-00001.parquet"


def _aya_without_language(root):
    _parquet(root / AYA, {"inputs": ["uno"], "targets": ["1"]})


def _aya_null_input(root):
    _parquet(root / AYA, {"inputs": ["uno", None], "language": ["Spanish", "Spanish"]})


def _speed_without_turns(root):
    _parquet(root / SPEED, {"question_id": ["q1"], "category": ["low_entropy"]})


def _speed_empty_turns(root):
    _parquet(root / SPEED, {"category": ["low_entropy", "x"], "turns": [["long"], []]})


def _speed_turns_a_string(root):
    _parquet(root / SPEED, {"category": ["low_entropy"], "turns": ["a long prompt"]})


def _questions_without_turns(root):
    (root / "question.jsonl").write_text(json.dumps({"question_id": 1, "category": "w"}) + "\n")


def _questions_not_json(root):
    (root / "question.jsonl").write_text("question 1: write a poem\n")


def _questions_turns_a_string(root):
    (root / "question.jsonl").write_text(
        json.dumps({"question_id": 1, "category": "w", "turns": "a long prompt"}) + "\n")


def _questions_category(category):
    def lay_out(root):
        rows = [{"question_id": 1, "category": "writing", "turns": ["w1"]},
                {"question_id": 2, "category": category, "turns": ["e1"]}]
        (root / "question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return lay_out


def _speed_null_category(root):
    _parquet(root / SPEED, {"category": ["qa", None], "turns": [["p1"], ["p2"]]})


INSTRUCT = "data/train-00000-of-00001.parquet"


def _instructcoder_null(column):
    def lay_out(root):
        cells = {"instruction": ["Fix the bug", "Add types"], "input": ["x=1", "y=2"],
                 "output": ["a", "b"]}
        cells[column] = [cells[column][0], None]
        _parquet(root / INSTRUCT, cells)
    return lay_out


@pytest.mark.parametrize("fmt,lay_out,file,says", [
    ("aya", _aya_without_language, AYA, "no column 'language'"),
    ("aya", _aya_null_input, AYA, "column 'inputs' of row 1 is null"),
    ("speed-bench", _speed_without_turns, SPEED, "no column 'turns'"),
    ("speed-bench", _speed_empty_turns, SPEED, "column 'turns' of row 1 is an empty list"),
    ("speed-bench", _speed_turns_a_string, SPEED, "column 'turns' of row 0 is a string"),
    ("mt-bench", _questions_without_turns, "question.jsonl", "no column 'turns'"),
    ("mt-bench", _questions_not_json, "question.jsonl", "not a question.jsonl"),
    ("mt-bench", _questions_turns_a_string, "question.jsonl", "column 'turns' of row 0 is a"),
    ("mt-bench", _questions_category(""), "question.jsonl",
     "column 'category' of row 1 is an empty string"),
    ("mt-bench", _questions_category(None), "question.jsonl",
     "column 'category' of row 1 is null"),
    ("speed-bench", _speed_null_category, SPEED, "column 'category' of row 1 is null"),
    ("instructcoder", _instructcoder_null("input"), INSTRUCT, "column 'input' of row 1 is null"),
    ("instructcoder", _instructcoder_null("instruction"), INSTRUCT,
     "column 'instruction' of row 1 is null"),
])
def test_a_dataset_file_of_the_wrong_shape_is_one_line_naming_file_and_column(
        tmp_path, fmt, lay_out, file, says):
    """A file whose columns or cells are not the format's: one InputError naming the file and
    the column, not pyarrow's ArrowInvalid, an IndexError or vLLM's ValueError, and never a
    prompt made of a string's first character or of a null ('nan')."""
    from specmoe.errors import InputError
    from specmoe.sources import studydata

    if fmt in ("mt-bench", "instructcoder"):
        pytest.importorskip("vllm")
    lay_out(tmp_path)
    with pytest.raises(InputError) as err:
        studydata.normalise(fmt, {"format": fmt}, tmp_path)
    assert str(err.value).startswith(f"{tmp_path / file}: ") and says in str(err.value), err.value
    assert "\n" not in str(err.value)


def test_a_dataset_download_that_fetches_no_file_is_refused(tmp_path, monkeypatch):
    """Offline, a dataset repository whose cached snapshot holds none of the files asked for
    (README.md only, question.jsonl asked): the download stops naming the repository, its
    commit and the patterns, instead of writing a manifest of no files for the prompt table to
    fail on later."""
    from specmoe.errors import InputError
    from specmoe.sources import hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = tmp_path / "hf" / "hub"
    lay_out_cache(cache, "acme/questions", {"README.md": b"# questions\n"}, commit="b" * 40,
                  repo_type="dataset")
    with pytest.raises(InputError) as err:
        hub.download("dataset mtb", "acme/questions", repo_type="dataset",
                     allow_patterns=["question.jsonl"], cache_dir=str(cache))
    assert str(err.value).startswith(
        "dataset mtb: no file of acme/questions@bbbbbbbbbbbb matches question.jsonl"), err.value


def test_the_three_step_comparison_takes_the_main_run_at_the_studys_k_and_no_nan():
    """The published three-step correction is of Qwen3-30B at K = 3 on its main set: a K = 5
    run listed before the K = 3 run was set beside it (the first four rows of the model,
    whatever their run), and a step whose TE is NaN (not identified) was shown beside the
    published value as a value. Each run is its own four steps; only the K = 3 run on the main
    set is compared, and its NaN step is left out."""
    import numpy as np
    import pandas as pd

    from specmoe.sources import published

    study = {"q": published.study_entry(
        {"name": "q", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "tp": 1, "hardware": "H100",
         "datasets": ["mt-bench", "aya"]}, methods={"d": "eagle3"})}
    rows = [{"model": "q", "drafter": "d", "k": k, "dataset": ds, "batch": 1, "te": te}
            for k, ds, tes in ((5, "mt-bench", (0.9, 0.9, 0.9, 0.9)),
                               (3, "aya", (0.8, 0.8, 0.8, 0.8)),
                               (3, "mt-bench", (0.5, 0.6, np.nan, 0.7)))
            for te in tes]
    df = published.comparison({"three_step_correction": pd.DataFrame(rows)}, study)
    assert len(df) == 3 and set(df["k"]) == {3} and set(df["dataset"]) == {"mt-bench"}
    assert list(df["key"]) == ["step 0", "step 1", "step 3"]
    assert list(df["reproduced"]) == [0.5, 0.6, 0.7]
    steps, _ = published.three_step()
    assert list(df["published"]) == [float(steps["te"].iloc[i]) for i in (0, 1, 3)]

