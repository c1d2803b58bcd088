"""The study's datasets normalised into the prompt-table schema, each from a small file in the
dataset's published layout (vLLM's own loaders read MT-Bench, Spec-Bench, ShareGPT, InstructCoder),
and one whole download stage against a dataset repo laid out in an offline Hugging Face cache."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from hubfake import lay_out_cache
from specmoe.sources import prompts, studydata
from specmoe.errors import InputError
from specmoe.report.tables import read_provenance

pytest.importorskip("vllm")


def write_questions(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


MT = [
    {"question_id": 81, "category": "writing", "turns": ["Write a travel blog post.", "Rewrite it."]},
    {"question_id": 82, "category": "writing", "turns": ["Draft an email.", "Shorter."]},
    {"question_id": 101, "category": "reasoning", "turns": ["Who is taller?", "Why?"]},
]


def test_mt_bench_and_spec_bench_through_vllms_loader(tmp_path):
    write_questions(tmp_path / "question.jsonl", MT)
    rows = studydata.normalise("mt-bench", {"format": "mt-bench"}, tmp_path)
    assert [(r["category"], r["text"]) for r in rows] == [
        ("writing", "Write a travel blog post."), ("writing", "Draft an email."),
        ("reasoning", "Who is taller?")]
    assert rows[0]["prompt_id"] == "mt-bench/writing/00000" and rows[0]["dataset"] == "mt-bench"
    sb = [{"question_id": i, "category": c, "turns": [f"{c} {i}"], "reference": []}
          for i, c in enumerate(["translation", "summarization", "qa", "math_reasoning", "rag"])]
    write_questions(tmp_path / "sb" / "data" / "spec_bench" / "question.jsonl", sb)
    rows = studydata.normalise("spec-bench", {"format": "spec-bench"}, tmp_path / "sb")
    assert [r["category"] for r in rows] == ["translation", "summarization", "qa",
                                             "math_reasoning", "rag"]


def test_sharegpt_first_turn(tmp_path):
    data = [{"id": "a1", "conversations": [{"from": "human", "value": "Hi there"},
                                            {"from": "gpt", "value": "Hello"}]},
            {"id": "a2", "conversations": [{"from": "human", "value": "lonely"}]},  # 1 turn: dropped
            {"id": "a3", "conversations": [{"from": "human", "value": "Explain MoE"},
                                            {"from": "gpt", "value": "..."}]}]
    (tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json").write_text(json.dumps(data))
    rows = studydata.normalise("sharegpt", {"format": "sharegpt"}, tmp_path)
    assert [r["text"] for r in rows] == ["Hi there", "Explain MoE"]


def test_instructcoder_uses_vllms_prompt(tmp_path):
    (tmp_path / "data").mkdir()
    pd.DataFrame({"instruction": ["Add type hints."], "input": ["def f(x): return x"],
                  "output": ["def f(x: int) -> int: return x"]}).to_parquet(
        tmp_path / "data" / "train-00000-of-00001.parquet")
    rows = studydata.normalise("instructcoder", {"format": "instructcoder"}, tmp_path)
    assert rows[0]["text"].startswith("def f(x): return x\n\nAdd type hints.")
    assert "Just output the code" in rows[0]["text"]


def test_aya_held_out_languages_and_limit(tmp_path):
    (tmp_path / "data").mkdir()
    pd.DataFrame({"inputs": ["uno", "dos", "eins", "hello", "tres"],
                  "targets": ["1", "2", "1", "hi", "3"],
                  "language": ["Spanish", "Spanish", "German", "English", "Spanish"],
                  "language_code": ["spa", "spa", "deu", "eng", "spa"],
                  "annotation_type": ["original-annotations"] * 5,
                  "user_id": ["u"] * 5}).to_parquet(tmp_path / "data" / "train-00000-of-00001.parquet")
    spec = {"format": "aya", "languages": ["Spanish", "German"], "max_prompts": 2}
    rows = studydata.normalise("aya", spec, tmp_path)
    assert [(r["category"], r["text"]) for r in rows] == [
        ("Spanish", "uno"), ("Spanish", "dos"), ("German", "eins")]
    # the limits the table keeps to, as the configuration reads them before the download
    # (Config.capture_prompts): per language, and in all for the languages named
    from specmoe.sources.prompts import prompt_limits

    assert prompt_limits(spec) == (2, 4)
    assert prompt_limits({"format": "aya", "max_prompts": 2}) == (2, None)
    assert prompt_limits({"format": "sharegpt", "max_prompts": 3}) == (None, 3)
    assert prompt_limits({"format": "sharegpt"}) == (None, None)
    with pytest.raises(InputError, match="no language"):
        studydata.normalise("aya", {"format": "aya", "languages": ["Klingon"]}, tmp_path)


def test_speed_bench_long_context_config(tmp_path):
    (tmp_path / "throughput_32k").mkdir()
    pd.DataFrame({"question_id": ["q1", "q2"], "category": ["low_entropy", "high_entropy"],
                  "sub_category": ["", ""], "turns": [["long " * 50], ["context " * 50]],
                  "source": ["s", "s"], "src_id": ["1", "2"], "difficulty": ["", ""],
                  "multiturn": [False, False]}).to_parquet(
        tmp_path / "throughput_32k" / "test-00000-of-00001.parquet")
    rows = studydata.normalise("speed-bench-32k", {"format": "speed-bench"}, tmp_path)
    assert [r["category"] for r in rows] == ["low_entropy", "high_entropy"]
    assert rows[0]["text"].startswith("long long")


def test_missing_files_are_named(tmp_path):
    with pytest.raises(InputError, match="dataset mt: no file matching question.jsonl"):
        studydata.normalise("mt", {"format": "mt-bench"}, tmp_path)


def test_download_dataset_stage_offline_writes_a_prompt_table_with_provenance(tmp_path):
    """The whole stage in a fresh process (huggingface_hub reads HF_HUB_OFFLINE at import). The
    prompt table carries its provenance line, as every CSV the pipeline writes (its repository
    and commit: its input manifest's; its params hold neither), and reads back as the rows
    normalised from the download."""
    cache = tmp_path / "hf" / "hub"
    lay_out_cache(cache, "philschmid/mt-bench",
                  {"question.jsonl": "".join(json.dumps(r) + "\n" for r in MT).encode()},
                  commit="e" * 40, repo_type="dataset")
    code = ("from specmoe.stages.study import download_dataset_stage as d, prompt_table_stage as p; "
            "from specmoe.contracts import Named; "
            "from specmoe.contracts.study import DownloadDatasetParams, PromptTableParams; "
            "import sys; spec = {'format': 'mt-bench', 'repo_id': 'philschmid/mt-bench'}; "
            "man = Named({'manifest': sys.argv[2]}); "
            "d(Named({}), man, DownloadDatasetParams(spec=spec, dataset='mt-bench', "
            "configured_revision=None)); "
            "p(man, Named({'csv': sys.argv[1]}), "
            "PromptTableParams(spec={'format': 'mt-bench'}, dataset='mt-bench'))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_CACHE": str(cache)}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.csv"),
                        str(tmp_path / "m.json")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    table = prompts.load(str(tmp_path / "p.csv"), ["mt-bench"])
    assert len(table) == 3 and {p.category for p in table} == {"writing", "reasoning"}
    man = json.loads((tmp_path / "m.json").read_text())
    assert man["commit"] == "e" * 40 and "provenance" in man
    prov = read_provenance(tmp_path / "p.csv")
    assert prov["stage"] == "prompt_table" and prov["dataset"] == {
        "repo_id": "philschmid/mt-bench", "revision": "e" * 40}  # the download's (its input)
    rows = studydata.normalise("mt-bench", {"format": "mt-bench"}, man["snapshot_path"])
    assert [asdict(p) for p in table] == [{c: str(r[c]) for c in prompts.COLUMNS} for r in rows]


def test_schedule_keeps_the_category_mix_at_every_size():
    """Batch 1's 16 prompts and batch 8's 64 share their first 16 and every category in the same
    proportion (the file lists categories one after the other: the first 16 rows would be two
    categories only); past the set's size prompts are oversampled."""
    from collections import Counter

    rows = prompts.load("builtin:v1", ["tinybench"])
    assert Counter(r.category for r in rows[:16]) == Counter({"writing": 10, "roleplay": 6})
    small, large = prompts.schedule(rows, 16), prompts.schedule(rows, 64)
    assert large[:16] == small
    assert set(Counter(r.category for r in small).values()) == {2}
    assert set(Counter(r.category for r in large).values()) == {8}
    over = prompts.schedule(rows, 100)
    assert len(over) == 100 and len({r.prompt_id for r in over}) == 80
    cycled = prompts.schedule(rows, 48, set_size=16)
    assert cycled == small * 3


@pytest.mark.parametrize("folder,ext", [("published", ".csv"), ("hf_configs", ".json")])
def test_packaged_data_files_are_byte_for_byte_the_listed_files(folder, ext):
    """Every CSV under data/published has the sha256 that SOURCE.md lists for it as published (the
    study's file, or this project's own for its two extra files): a re-export that drops a column
    (Table 18's verify ratio once) or a hand edit fails here. Likewise every config.json under
    data/hf_configs against its SOURCE.md."""
    import hashlib
    import re
    from importlib import resources

    folder = resources.files("specmoe") / "data" / folder
    listed = dict(re.findall(rf"^\| (\S+{re.escape(ext)}) \| `([0-9a-f]{{64}})` \|",
                             (folder / "SOURCE.md").read_text(), re.M))
    packaged = {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                for f in folder.iterdir() if f.name.endswith(ext)}
    assert set(packaged) == set(listed), "SOURCE.md's checksums and the packaged files differ"
    assert {n: s for n, s in packaged.items() if s != listed[n]} == {}


# The packaged files that are this project's own prose, not data taken from a source: the
# report's captions (data/captions/*.rst).
OWN_TEXT = ("captions/",)


def test_every_packaged_data_file_has_a_source_note():
    """Every file under src/specmoe/data/ is named by a source note in its folder (SOURCE.md or
    a <name>.SOURCE.md there): where it comes from, or that this project wrote it. A data file
    added without one (data/hf_configs/ once: public_sd_moe.SOURCE.md pointed at a SOURCE.md that
    did not exist) fails here."""
    from importlib import resources

    root = Path(str(resources.files("specmoe") / "data"))
    uncovered = []
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root).as_posix()
        if (f.name == "SOURCE.md" or f.name.endswith(".SOURCE.md") or "__pycache__" in rel
                or rel.startswith(OWN_TEXT)):
            continue
        notes = [n.read_text() for n in f.parent.glob("*SOURCE.md")]
        if not any(f.name in n for n in notes):
            uncovered.append(rel)
    assert uncovered == [], f"no source note names {uncovered}"
