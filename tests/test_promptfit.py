"""Prompts as the engines receive them (specmoe.sources.promptfit, specmoe.checks.contextfit): the
longest prompt, in the target tokenizer's tokens, plus the output (and K+1) against max_model_len,
checked when the workflow is parsed wherever the prompt table and the tokenizer exist; prompts over
the limit left out and counted (the filter policy), the same in capture and sweeps; the chat
template applied per dataset, exactly as vLLM 0.32's `bench serve` custom dataset renders it, and
sent as the same text to capture and sweeps. A byte-level BPE tokenizer trained here stands in for
the target's (given a chat template where a test needs one)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from specmoe.checks import contextfit, schema
from specmoe.config import Config, for_workflow
from specmoe.errors import InputError
from specmoe.sources import promptfit
from specmoe.sources import prompts as prompt_table
from wf import REPO

pytest.importorskip("transformers")
DEFAULT = yaml.safe_load((REPO / "config.yaml").read_text())
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer of 300 tokens (the tiny models' kind), trained in seconds."""
    from specmoe.runtime import tiny

    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 300, out)
    return out


@pytest.fixture(scope="module")
def chat_dir(tokenizer_dir, tmp_path_factory) -> Path:
    """The same tokenizer given a chat template, saved as a checkpoint's tokenizer."""
    tok = promptfit.load_tokenizer(tokenizer_dir)
    tok.chat_template = TEMPLATE
    out = tmp_path_factory.mktemp("chat") / "target"
    tok.save_pretrained(out)
    # a config vLLM reads (the sweep stage records the dtype vLLM resolves from it)
    (out / "config.json").write_text('{"model_type": "qwen3", "torch_dtype": "float32"}')
    return out


def in_workdir(monkeypatch, tmp_path, tokenizer_dir) -> None:
    """A work directory whose tiny-model tokenizer has been trained (rule tokenizer)."""
    import shutil

    shutil.copytree(tokenizer_dir, tmp_path / "results" / "models" / "tokenizer")
    monkeypatch.chdir(tmp_path)


def default(edit=None) -> dict:
    cfg = copy.deepcopy(DEFAULT)
    if edit:
        edit(cfg)
    return cfg


def test_the_dry_run_measures_the_longest_prompt_of_each_dataset(monkeypatch, tmp_path,
                                                                 tokenizer_dir):
    """The default configuration once its tokenizer exists: every prompt fits its 1,024-token
    capture engine and its sweeps' engines; the summary names each dataset's longest prompt."""
    in_workdir(monkeypatch, tmp_path, tokenizer_dir)
    _, notes = for_workflow(default(), SCHEMA)
    (line,) = [n for n in notes if n.startswith("preflight: prompts:")]
    assert line.startswith("preflight: prompts: longest as each target's tokenizer counts it: "
                           "heldout-code ") and "tinybench" in line, line
    assert line.endswith("(engine contexts 1,024)"), line


PARSE = """
import json, sys
import yaml
from specmoe.config import for_workflow
_, notes = for_workflow(yaml.safe_load(open(sys.argv[1])), sys.argv[2], cache_dir=sys.argv[3])
print(json.dumps({"notes": [n for n in notes if n.startswith("preflight: prompts:")],
                  "transformers": "transformers" in sys.modules}))
"""


def test_a_workflow_parsed_again_reads_the_prompt_lengths_back(monkeypatch, tmp_path,
                                                               tokenizer_dir):
    """The prompt lengths are kept in the workflow's cache folder by all they depend on
    (specmoe.checks.memo): parsed again in a new process, the same notes come without importing
    transformers (most of a dry run's time on two cores); another tokenizer is measured again
    and gives what a parse without the cache gives; a kept answer cut short is measured again."""
    import shutil
    import subprocess
    import sys

    from specmoe.runtime import tiny

    cache = tmp_path / ".snakemake" / "specmoe"
    tok = tmp_path / "results" / "models" / "tokenizer"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(DEFAULT))
    shutil.copytree(tokenizer_dir, tok)
    monkeypatch.chdir(tmp_path)

    def prompt_notes(cache_dir=None) -> list[str]:
        return [n for n in for_workflow(default(), SCHEMA, cache_dir=cache_dir)[1]
                if n.startswith("preflight: prompts:")]

    first = prompt_notes(cache)
    kept = sorted(cache.glob("prompt-lengths-*.json"))   # one answer per dataset measured
    assert first and len(kept) == first[0].count(" tokens")
    r = subprocess.run([sys.executable, "-c", PARSE, "config.yaml", str(SCHEMA), str(cache)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == {"notes": first, "transformers": False}

    # another tokenizer (a larger vocabulary: shorter prompts) in the same place
    shutil.rmtree(tok)
    tiny.train_tokenizer(tiny.corpus_files(False, 10)[:30], 400, tok)
    retrained = prompt_notes(cache)
    assert retrained != first and retrained == prompt_notes()
    assert len(list(cache.glob("prompt-lengths-*.json"))) == 2 * len(kept)

    kept[0].write_text(kept[0].read_text()[:5])   # cut short (an older writer's crash)
    shutil.rmtree(tok)
    shutil.copytree(tokenizer_dir, tok)
    assert prompt_notes(cache) == first and json.loads(kept[0].read_text())


def test_prompts_over_the_limit_are_counted_at_the_dry_run(monkeypatch, tmp_path,
                                                           tokenizer_dir):
    """A capture context that the longest prompts do not fit: a note names how many the engine
    leaves out; a context none fits stops the dry run in one line (the parse's estimate of the
    longest prompt says so first: it reads the engine's context whichever key sets it), and the
    preflight's count of the prompts says none fits."""
    in_workdir(monkeypatch, tmp_path, tokenizer_dir)
    tok = promptfit.load_tokenizer(tokenizer_dir)
    rows = prompt_table.load(datasets=["tinybench"])
    lengths = sorted(len(tok(r.text).input_ids) for r in rows)
    cap = DEFAULT["tiny"]["capture"]
    limit = lengths[-3] + cap["max_tokens"] + 4  # K = 3: the two longest are over

    def tight(cfg, max_len=limit):
        cfg["tiny"]["capture"] = {**cap, "engine_args": {"max_model_len": max_len}}
        cfg["models"] = [m for m in cfg["models"] if m["name"] == "tiny-coarse"]
        # captured, not swept: a capture context below its sweeps' is refused on its own
        cfg["models"][0].update(datasets=["tinybench"], sweep=False)

    _, notes = for_workflow(default(tight), SCHEMA)
    over = [n for n in notes if "prompts are longer" in n]
    assert over and over[0] == (
        f"preflight: prompts: capture tiny-coarse/tiny-drafter/K3/tinybench (and 1 more job): "
        f"tinybench: 2 of "
        f"{len(rows)} prompts are longer than max_model_len {limit:,} less "
        f"{cap['max_tokens'] + 4} tokens of output and drafts (the longest: {lengths[-1]}): the "
        "engine leaves them out (filter)"), over
    none_fits = default(lambda c: tight(c, cap["max_tokens"] + 4 + lengths[0] - 1))
    with pytest.raises(InputError) as exc:
        for_workflow(copy.deepcopy(none_fits), SCHEMA)
    (line,) = str(exc.value).splitlines()
    assert line.startswith(f"config: tiny.capture.max_tokens {cap['max_tokens']} + the longest "
                           "prompt (about "), line
    schema.check(none_fits, SCHEMA)
    (line,), _ = contextfit.check(Config(none_fits))
    assert line.startswith("preflight: prompts: capture tiny-coarse/tiny-drafter/K3/tinybench "
                           f"(and 1 more job): tinybench: {len(rows)} of {len(rows)} prompts "
                           "are longer") \
        and line.endswith("none fits; raise max_model_len"), line


def test_before_its_tokenizer_exists_the_engine_jobs_check(monkeypatch, tmp_path):
    """Nothing trained yet: nothing measured, nothing said (a clean dry run stays silent); each
    engine job checks its prompts before its engine starts (test_promptfit's engine tests)."""
    monkeypatch.chdir(tmp_path)
    problems, notes = contextfit.check(Config.load(default(), SCHEMA))
    assert problems == [] and notes == []


def test_the_filter_policy_leaves_out_what_does_not_fit_and_counts_it(tokenizer_dir):
    tok = promptfit.load_tokenizer(tokenizer_dir)
    rows = prompt_table.load(datasets=["tinybench", "heldout-code"])
    lengths = {r.prompt_id: len(tok(r.text).input_ids) for r in rows}
    longest = max(lengths.values())
    kept, info = promptfit.prepare(rows, tok, {}, 100 + longest, 100)
    assert kept == rows  # everything fits: the very same rows
    kept, info = promptfit.prepare(rows, tok, {}, 100 + longest - 1, 100)
    dropped = [r for r in rows if lengths[r.prompt_id] == longest]
    assert kept == [r for r in rows if r not in dropped]
    ds = dropped[0].dataset
    assert info[ds] == {"chat_template": False, "policy": "filter",
                        "max_model_len": 99 + longest, "reserved": 100,
                        "prompts": sum(r.dataset == ds for r in rows),
                        "over_limit": len(dropped), "longest": longest,
                        "longest_prompt_id": dropped[0].prompt_id}


@pytest.mark.slow
def test_the_chat_template_is_rendered_as_vllms_bench_serve_renders_it(chat_dir, tmp_path):
    """vLLM 0.32's own CustomDataset.sample (templating on) against ours, prompt by prompt, with
    a tokenizer given a chat template; the lengths are those bench serve counts."""
    pytest.importorskip("vllm")
    from vllm.benchmarks.datasets.datasets import CustomDataset

    tok = promptfit.load_tokenizer(chat_dir)
    rows = prompt_table.load(datasets=["tinybench"])[:12]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": r.text}) + "\n" for r in rows))
    theirs = CustomDataset(dataset_path=str(path), disable_shuffle=True).sample(
        tok, len(rows), output_len=8, skip_chat_template=False)
    ours = promptfit.measure(rows, tok, {"tinybench": True})
    assert [(s.prompt, s.prompt_len) for s in theirs] == [(r.text, n) for r, n in ours]
    assert ours[0][0].text == f"<|user|>{rows[0].text}\n<|assistant|>"


def test_a_tokenizer_without_a_chat_template_is_one_line(tokenizer_dir):
    tok = promptfit.load_tokenizer(tokenizer_dir)
    rows = prompt_table.load(datasets=["tinybench"])
    with pytest.raises(InputError) as exc:
        promptfit.prepare(rows, tok, {"tinybench": True}, 1024, 52, "tiny-fine")
    assert str(exc.value) == ("tiny-fine's tokenizer has no chat template, but the dataset's "
                              "chat_template is true (set it false for raw text)")


def test_capture_and_sweeps_send_the_same_rendered_prompts(chat_dir, tmp_path, monkeypatch):
    """The capture and sweep stages up to their engines (vLLM's side replaced by recorders that
    keep what they were given): both send the chat-rendered text of the same prompts, with
    the prompts that do not fit left out of both."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import CaptureParams, SweepArParams
    from specmoe.runtime import engine, serving
    from specmoe.stages.measure import sweep_stage
    from specmoe.stages.traces import capture_stage

    sent = {}

    class Stop(Exception):
        pass

    def generate(prompts, *a, **kw):  # the capture engine, in its child (run in-process)
        sent["capture"] = prompts
        raise Stop

    def child(fn, *a, log_path=None, timeout=None, untimed=False, **kw):
        return fn(*a, **kw)

    def series(engine_kw, model_dir, texts, *a, **kw):
        sent["sweep"] = texts
        raise Stop

    monkeypatch.setattr(engine, "run_in_child", child)
    monkeypatch.setattr(serving, "run_series", series)
    monkeypatch.setattr("specmoe.stages.measure.vllm_version", lambda: "0.32.0",
                        raising=False)
    import specmoe.runtime.capture as cap_mod
    monkeypatch.setattr(cap_mod, "vllm_version", lambda: "0.32.0")
    monkeypatch.setattr(cap_mod, "capture_generate", generate)

    tok = promptfit.load_tokenizer(chat_dir)
    rows = prompt_table.load(datasets=["tinybench"])
    rendered = {r.prompt_id: promptfit.render(tok, r.text, True) for r in rows}
    lengths = {i: len(tok(t).input_ids) for i, t in rendered.items()}
    limit = sorted(lengths.values())[-2] + 16 + 4  # output 16, K = 3: the longest is out
    prompting = {"chat_template": {"tinybench": True}, "draft_slack": 4}
    run = {"model": "t", "drafter": "d", "k": 3, "dataset": "tinybench"}
    cap = {"prompts": 200, "max_tokens": 16, "max_num_seqs": 4,
           "engine_args": {"max_model_len": limit}}
    sweep = {"schedule": [{"batch": 1, "prompts": 200}], "output_len": 16, "warmups": 0,
             "repeats": 1, "startup_timeout_s": 10, "max_model_len": limit}
    # the stages as their rules run them (the target served alone: the records' job and
    # settings; no downloaded prompt table, so the tiny models' table)
    served = Named({"target": str(chat_dir), "prompts": []})
    capture = dict(inputs=served, outputs=Named({"trace": str(tmp_path / "t.parquet")}),
                   params=CaptureParams(job=run, settings=cap, method=None, gpu=False,
                                        prompts=prompt_table.DEFAULT_SOURCE, prompting=prompting))
    series = dict(inputs=served, outputs=Named({"json": str(tmp_path / "s.json")}),
                  params=SweepArParams(job={"model": "t", "drafter": None, "k": 3,
                                            "datasets": ["tinybench"]},
                                       settings=sweep, method=None, gpu=False,
                                       prompts=prompt_table.DEFAULT_SOURCE, prompting=prompting))
    with pytest.raises(Stop):
        capture_stage(**capture)
    with pytest.raises(Stop):
        sweep_stage(**series)
    longest = max(lengths, key=lengths.get)
    fits = {t for i, t in rendered.items() if i != longest}
    assert set(sent["capture"]) == fits == set(sent["sweep"]["tinybench"])
    assert all(t.startswith("<|user|>") and t.endswith("<|assistant|>") for t in fits)

    # what was done goes into the trace's and the series' metadata
    from specmoe.routing.trace import read_trace
    from specmoe.routing.synth import SynthParams, generate

    synthetic = generate(SynthParams(num_experts=8, top_k=2, num_layers=1, k_draft=3,
                                     requests=2, steps=2, seed=0))
    synthetic.meta["capture"] = {"windows": 4, "short_windows": 0,
                                 "accepted_crosscheck": {"mismatches": 0, "steps": 4}}
    monkeypatch.setattr(cap_mod, "capture_generate", lambda *a, **kw: {})
    monkeypatch.setattr(cap_mod, "assemble", lambda *a, **kw: synthetic)
    monkeypatch.setattr(serving, "run_series", lambda *a, **kw: {"tinybench": []})
    capture_stage(**capture)
    sweep_stage(**series)
    want = {"chat_template": True, "policy": "filter", "max_model_len": limit, "reserved": 20,
            "prompts": len(rows), "over_limit": 1, "longest": lengths[longest],
            "longest_prompt_id": longest}
    assert read_trace(tmp_path / "t.parquet").meta["prompting"] == {"tinybench": want}
    assert json.loads((tmp_path / "s.json").read_text())["prompting"] == {"tinybench": want}


def test_the_report_lists_each_runs_prompts_against_its_context(tmp_path):
    """The counts a trace or series records become a row per dataset of the prompt-fit tables,
    which have their captions and sections (none for runs without an engine)."""
    import pandas as pd

    from specmoe.report import registry, tables
    from specmoe.report.runs import prompt_fit_rows

    info = {"chat_template": True, "policy": "filter", "max_model_len": 1024, "reserved": 52,
            "prompts": 80, "over_limit": 2, "longest": 1000, "longest_prompt_id": "p1"}
    rc = {"model": "m", "drafter": "d", "k": 3, "dataset": "a+b"}
    rows = prompt_fit_rows(rc, {"b": info, "a": {**info, "over_limit": 0}})
    assert [(r["slice_dataset"], r["left_out"], r["longest_tokens"]) for r in rows] == [
        ("a", 0, 1000), ("b", 2, 1000)]
    assert prompt_fit_rows(rc, None) == []
    for stem in ("prompt_fit", "prompt_fit_sweeps"):
        assert registry.section_of(stem) and "left out" in registry.text(stem)
    tables.write_tables({"prompt_fit": pd.DataFrame(rows)}, tmp_path, {})
    assert (tmp_path / "prompt_fit.csv").exists()
