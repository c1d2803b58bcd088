"""Every input answered in one line: a corpus of bad and unusual inputs to the `specmoe` command and
to the workflow's configuration, one table. Each case is the input, the exit status it must give
and a pattern its one line of output on stderr must match; an input that is accepted (status 0)
prints nothing, or one warning where the pattern names it.

- Command cases run `specmoe.cli.main` with the arguments (the code `python -m specmoe` runs).
- Configuration cases are edits of config.yaml, merged as `--configfile` merges a file, through
  `specmoe.config.for_workflow`: what the workflow runs when it is parsed, and stops with status 1
  and the message on (`sys.exit`) where it fails (tests/test_configcheck.py runs a sample through
  `snakemake -n` itself). The GPU jobs' preflight runs offline here; its checks that need vLLM are
  tests/test_preflight.py's.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from hubfake import lay_out_cache
from specmoe import cli
from specmoe.sources import prompts as prompt_table
from specmoe.config import for_workflow
from specmoe.errors import InputError
from wf import REPO

QWEN_FP8 = REPO / "src/specmoe/data/hf_configs/Qwen3-30B-A3B-FP8.json"
DIMS = ("te --hidden 2048 --expert-intermediate 768 --heads 32 --kv-heads 4 --head-dim 128 "
        "--experts-per-token 8 --n 128 --layers 48")
CORR = "--moe-weight-share 0.667 --unique-ratio 2.436 --moe-time-share 0.33 --moe-time-ratio 1.57"
OK = None  # accepted: nothing on stderr

# (label, arguments with {d} the fixtures' folder, exit status, the line's pattern)
COMMAND = [
    # the parser
    ("no subcommand", "", 2, r"the following arguments are required: cmd"),
    ("unknown subcommand", "frobnicate", 2, r"invalid choice: 'frobnicate'"),
    ("misspelt subcommand", "ipff --experts-per-token 8", 2, r"invalid choice: 'ipff' .*; did you mean 'ipf'\?$"),
    ("misspelt flag", DIMS.replace("--hidden", "--hiden"), 2,
     r"unrecognized arguments: --hiden 2048; did you mean '--hidden'\?$"),
    ("misspelt choice", "download o/r --mode ful", 2,
     r"invalid choice: 'ful' \(choose from 'full', 'config'\); did you mean 'full'\?$"),
    ("required flags missing", "ipf", 2, r"required: --experts-per-token, --n, --overlaps"),
    ("a word for an integer", "ipf --experts-per-token eight --n 128 --overlaps 0.3", 2,
     r"--experts-per-token: invalid int value: 'eight'"),
    ("unknown flag", "ipf --experts-per-token 8 --n 128 --overlaps 0.3 --frob 1", 2,
     r"unrecognized arguments: --frob 1"),
    ("flag without its value", "ipf --experts-per-token 8 --n 128 --overlaps", 2, r"expected one argument"),
    ("a choice that is not one", "download Qwen/Qwen3-30B-A3B --mode partial", 2,
     r"invalid choice: 'partial'"),
    ("a fraction for an integer", "te --tp 1.5", 2, r"--tp: invalid int value: '1.5'"),
    ("a negative value reaches its check", "ipf --experts-per-token 8 --n 128 --overlaps 0.3 --batch -2", 2,
     r"--batch must be >= 1 \(got -2\)"),
    # comma-separated values
    ("empty value inside a list", "ipf --experts-per-token 8 --n 128 --overlaps 0.3,,0.2", 2,
     r"got '0.3,,0.2' \(an empty value\)"),
    ("trailing comma", "ipf --experts-per-token 8 --n 128 --overlaps 0.3,", 2, r"got '0.3,' \(an empty value\)"),
    ("leading comma", "ipf --experts-per-token 8 --n 128 --overlaps ,0.3", 2, r"\(an empty value\)"),
    ("letters in a list", "ipf --experts-per-token 8 --n 128 --overlaps a,b", 2, r"'a' is not a number"),
    ("semicolons for commas", "ipf --experts-per-token 8 --n 128 --overlaps 0.3;0.2", 2,
     r"'0.3;0.2' is not a number"),
    ("nan in a list", "ipf --experts-per-token 8 --n 128 --overlaps nan", 2, r"expected finite numbers, got 'nan'"),
    ("infinity in a list", "ipf --experts-per-token 8 --n 128 --overlaps inf,0.2", 2, r"finite numbers, got 'inf'"),
    ("a negative list", "ipf --experts-per-token 8 --n 128 --overlaps -0.1,0.2", 2,
     r"--overlaps must be in \[0, 1\] each \(got -0.1 in '-0.1,0.2'\)"),
    ("integer list with a gap", "predict x --batch-sizes 1,,4", 2,
     r"expected comma-separated integers, got '1,,4' \(an empty value\)"),
    ("integer list with a fraction", "predict x --batch-sizes 1,2.5", 2,
     r"'2.5' is not an integer"),
    ("float list trailing comma", "predict x --acceptance-length 2.4,", 2, r"\(an empty value\)"),
    # ipf
    ("k above N", "ipf --experts-per-token 9 --n 8 --overlaps 0.3", 2, r"k=9 exceeds N=8"),
    ("k of zero", "ipf --experts-per-token 0 --n 128 --overlaps 0.3", 2, r"--experts-per-token must be >= 1 \(got 0\)"),
    ("N of zero", "ipf --experts-per-token 8 --n 0 --overlaps 0.3", 2, r"--n must be >= 1 \(got 0\)"),
    ("negative N", "ipf --experts-per-token 8 --n -4 --overlaps 0.3", 2, r"--n must be >= 1 \(got -4\)"),
    ("overlap above 1", "ipf --experts-per-token 8 --n 128 --overlaps 0.3,1.4", 2,
     r"--overlaps must be in \[0, 1\] each \(got 1.4"),
    ("window past K = 8", "ipf --experts-per-token 8 --n 128 --overlaps " + ",".join(["0.3"] * 9), 2,
     r"9 overlaps means a window of 10 positions; at most 9"),
    ("batch of zero", "ipf --experts-per-token 8 --n 128 --overlaps 0.3 --batch 0", 2, r"--batch must be >= 1"),
    ("loads file missing", "ipf --experts-per-token 8 --n 128 --overlaps 0.3 --loads {d}/none.txt", 2,
     r"none.txt: no such loads file"),
    ("loads a directory", "ipf --experts-per-token 8 --n 128 --overlaps 0.3 --loads {d}", 2,
     r"--loads must be a file of numbers, not a directory"),
    ("loads of the wrong count", "ipf --experts-per-token 8 --n 128 --overlaps 0.3 --loads {d}/three.txt", 2,
     r"3 loads for N=128 experts"),
    ("negative loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/negative.txt", 2,
     r"loads must be non-negative and not all zero"),
    ("loads all zero", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/zeros.txt", 2,
     r"not all zero"),
    ("nan loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/nan.txt", 2,
     r"loads must be finite numbers"),
    ("loads that are words", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/words.txt", 2,
     r"expected numbers \(JSON list, CSV or one per line\)"),
    ("ragged JSON loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/ragged.json", 2,
     r"a nested JSON array is not a list of loads"),
    ("one expert takes every token", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/one-hot.txt", 2,
     r"a load share of 2.000 > 1 after scaling to sum k=2"),
    ("ipf as documented", "ipf --experts-per-token 8 --n 128 --overlaps 0.431,0.356,0.328", 0, OK),
    ("ipf with skewed loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.6 --loads {d}/loads.txt --batch 4",
     0, OK),
    # loads 4 2 1 1 scaled to k = 2: the first expert is in every token's set, so two tokens
    # share it always (was accepted, and fitted as a clipped table)
    ("ipf below what the loads allow", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/loads.txt",
     2, r"overlap 0.3 at distance 1 is impossible with these loads: .* so ov >= 0.5 \(hottest "
        r"expert q = 1\)"),
    ("ipf overlaps that cannot hold together", "ipf --experts-per-token 8 --n 128 --overlaps 1,0,1", 2,
     r"overlaps 1,0,1 cannot hold together in one window of 4 tokens"),
    ("ipf overlaps a long window cannot have", "ipf --experts-per-token 2 --n 8 --overlaps "
     "0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1", 2, r"cannot hold together in one window of 9 tokens"),
    ("ipf near the boundary", "ipf --experts-per-token 8 --n 128 --overlaps 0.999,0.998,0.997", 0,
     r"^specmoe: warning: IPF stopped [0-9.e-]+ short of the overlaps \(they are feasible"),
    # te
    ("te without dimensions", "te", 2, r"give --config or all of: --hidden"),
    ("te with some dimensions", "te --hidden 2048", 2,
     r"give --config or all of: --expert-intermediate, --heads, --kv-heads, --head-dim, --experts-per-token, "
     r"--layers"),
    ("config file missing", "te --config {d}/none.json", 2, r"none.json: no such config file"),
    ("config folder without config.json", "te --config {d}", 2, r"config.json: no such config file"),
    ("config not JSON", "te --config {d}/words.txt", 2, r"not valid JSON"),
    ("config without the keys", "te --config {d}/empty.json", 2, r"lacks any of hidden_size"),
    ("a dimension beside --config", "te --config " + str(QWEN_FP8) + " --hidden 4096", 2,
     r"--hidden beside --config: the dimensions come from --config"),
    ("k beside --config", "te --config " + str(QWEN_FP8) + " --experts-per-token 8 --n 128", 2,
     r"--experts-per-token, --n beside --config"),
    ("TP that splits no heads", "te --config " + str(QWEN_FP8) + " --tp 3", 2,
     r"--tp 3: TP 3 does not divide the 32 attention heads"),
    ("TP past the fp8 block", "te --config " + str(QWEN_FP8) + " --tp 8", 2,
     r"768 / 8 = 96, is not a multiple of the fp8 weight block 128"),
    ("TP against the KV heads",
     DIMS.replace("--heads 32 --kv-heads 4", "--heads 48 --kv-heads 12") + " --tp 8", 2,
     r"TP 8 neither divides the 12 KV heads nor is a multiple of them"),
    ("TP of zero", DIMS + " --tp 0", 2, r"--tp must be >= 1 \(got 0\)"),
    ("K of zero", DIMS + " --draft-length 0", 2, r"--draft-length must be >= 1 \(got 0\)"),
    ("unique below k", DIMS + " --unique 7.9", 2, r"--unique 7.9 is impossible"),
    ("unique above the window", DIMS + " --unique 40", 2, r"min\(N, k \(K\+1\)\) = 32"),
    ("unknown dtype", DIMS + " --dtype int3", 2, r"unknown dtype 'int3'"),
    ("N below k", DIMS.replace("--n 128", "--n 4"), 2, r"k=8 exceeds N=4"),
    ("hidden of zero", DIMS.replace("--hidden 2048", "--hidden 0"), 2, r"--hidden must be >= 1"),
    ("negative heads", DIMS.replace("--heads 32", "--heads -2"), 2, r"--heads must be >= 1"),
    ("negative shared experts", DIMS + " --shared-intermediate -1", 2,
     r"--shared-intermediate must be >= 0"),
    ("te from dimensions", DIMS + " --unique 19.49", 0, OK),
    ("te from a config.json", "te --config " + str(QWEN_FP8) + " --tp 2", 0, OK),
    ("te with KV heads replicated", DIMS + " --tp 8", 0, OK),
    # correction
    ("weight share above 1", f"correction {CORR.replace('0.667', '1.5')} --dense-time-ratio 0.94",
     2, r"--moe-weight-share must be in \(0, 1\) \(got 1.5\)"),
    ("weight share of 0", f"correction {CORR.replace('0.667', '0')} --dense-time-ratio 0.94", 2,
     r"--moe-weight-share must be in \(0, 1\) \(got 0\)"),
    ("time share of 1", f"correction {CORR.replace('0.33', '1')} --dense-time-ratio 0.94", 2,
     r"--moe-time-share must be in \(0, 1\) \(got 1\)"),
    ("unique ratio below 1", f"correction {CORR.replace('2.436', '0.5')} --dense-time-ratio 0.94",
     2, r"--unique-ratio must be in \[1, 9\] \(got 0.5\)"),
    ("MoE time ratio of 0", f"correction {CORR.replace('1.57', '0')} --dense-time-ratio 0.94", 2,
     r"--moe-time-ratio must be in \(0, 9\] \(got 0\)"),
    ("negative dense ratio", f"correction {CORR} --dense-time-ratio -1", 2,
     r"--dense-time-ratio must be in \(0, 9\] \(got -1\)"),
    ("measured TE above 1", f"correction {CORR} --dense-time-ratio 0.94 --measured 1.2", 2,
     r"--measured must be in \(0, 1\] \(got 1.2\)"),
    ("measured TE of 0", f"correction {CORR} --dense-time-ratio 0.94 --measured 0", 2,
     r"--measured must be in \(0, 1\] \(got 0\)"),
    ("negative measured TE", f"correction {CORR} --dense-time-ratio 0.94 --measured -0.5", 2,
     r"--measured must be in \(0, 1\] \(got -0.5\)"),
    ("correction missing a share", "correction --moe-weight-share 0.6", 2,
     r"required: --unique-ratio"),
    # the study's own s_dense of 0.94 (its published correction): a value, as in the report
    # (a time ratio holding idle time may fall below 1: report.measured.CORRECTION_INPUTS)
    ("correction as documented", f"correction {CORR} --dense-time-ratio 0.94 --measured 0.896", 0,
     OK),
    # synth
    ("--out a directory", "synth --out {d}", 2, r"--out .*: is a directory; give a file name"),
    ("--out in a missing folder", "synth --out {d}/no/such/t.parquet", 2,
     r"directory .*no/such does not exist"),
    ("--fit-to beside --skew", "synth --out {d}/t.parquet --fit-to Qwen3-30B --skew 2", 2,
     r"--skew beside --fit-to Qwen3-30B: --fit-to fits them"),
    ("--fit-to beside two it fits",
     "synth --out {d}/t.parquet --fit-to Qwen3-30B --stickiness 0.2 --topic-spread 1", 2,
     r"--stickiness, --topic-spread beside --fit-to"),
    ("--fit-to an unknown model", "synth --out {d}/t.parquet --fit-to Qwen9", 2,
     r"no published overlap curve for 'Qwen9'"),
    ("topic switch without topics", "synth --out {d}/t.parquet --topic-switch 0.5", 2,
     r"--topic-switch has no effect without --topic-spread"),
    ("too few experts for k", "synth --out {d}/t.parquet --n 10 --experts-per-token 8", 2,
     r"needs num_experts >= 2\*top_k \(got 10, 8\)"),
    ("k of zero in synth", "synth --out {d}/t.parquet --experts-per-token 0", 2, r"--experts-per-token must be >= 1 \(got 0\)"),
    ("K past 8", "synth --out {d}/t.parquet --draft-length 9", 2, r"--draft-length must be <= 8 \(got 9\)"),
    ("K of zero in synth", "synth --out {d}/t.parquet --draft-length 0", 2,
     r"--draft-length must be >= 1 \(got 0\)"),
    ("no layers", "synth --out {d}/t.parquet --layers 0", 2, r"--layers must be >= 1"),
    ("no requests", "synth --out {d}/t.parquet --requests 0", 2, r"requests must be >= 1"),
    ("no steps", "synth --out {d}/t.parquet --steps 0", 2, r"steps must be >= 1"),
    ("negative skew", "synth --out {d}/t.parquet --skew -1", 2, r"skew must be >= 0"),
    ("stickiness above 1", "synth --out {d}/t.parquet --stickiness 1.5", 2,
     r"stickiness must be in \[0, 1\]"),
    ("acceptance above 1", "synth --out {d}/t.parquet --accept-prob 1.2", 2,
     r"--accept-prob must be in \[0, 1\]"),
    ("topic switch above 1", "synth --out {d}/t.parquet --topic-spread 1 --topic-switch 1.5", 2,
     r"--topic-switch must be in \[0, 1\]"),
    ("negative topic spread", "synth --out {d}/t.parquet --topic-spread -1", 2,
     r"--topic-spread must be >= 0"),
    ("negative seed", "synth --out {d}/t.parquet --seed -1", 2, r"--seed must be >= 0"),
    ("synth small", "synth --out {d}/ok.parquet --layers 2 --requests 2 --steps 4", 0, OK),
    ("70,000 experts (ids past uint16)",
     "synth --out {d}/wide.parquet --n 70000 --experts-per-token 8 --layers 1 --requests 2 --steps 2", 0, OK),
    # analyze
    ("trace missing", "analyze {d}/none.parquet", 2, r"none.parquet: no such trace file"),
    ("trace a directory", "analyze {d}", 2, r"is a directory; give a routing trace"),
    ("trace not Parquet", "analyze {d}/words.txt", 2, r"not a readable Parquet file"),
    ("Parquet that is no trace", "analyze {d}/plain.parquet", 2,
     r"not a specmoe routing trace \(no specmoe.schema_version\)"),
    ("truncated trace", "analyze {d}/truncated.parquet", 2, r"not a readable Parquet file"),
    ("shuffle seed, which changes nothing", "analyze {d}/trace.parquet --seed 3", 2,
     r"--seed is gone: the shuffle null is exact, so no seed changes it; drop the flag"),
    ("analyze a trace", "analyze {d}/trace.parquet", 0,
     r"^specmoe: warning: .*trace.parquet: 6 request\(s\): no interval \(at least 10 needed\)"),
    # download
    ("repo id without owner", "download foo", 2,
     r"'foo' is not a Hugging Face repository id: it is owner/name"),
    ("repo id too deep", "download foo/bar/baz", 2, r"is not a Hugging Face repository id"),
    ("empty repo id", "download ''", 2, r"give a Hugging Face repository id \(owner/name\)"),
    ("mode for a dataset", "download o/r --repo-type dataset --mode config", 2,
     r"--mode config applies to model repositories, not to --repo-type dataset"),
    ("remote code for a dataset", "download o/r --repo-type dataset --trust-remote-code", 2,
     r"--trust-remote-code applies to model repositories"),
    ("manifest into a directory", "download o/r --out {d}", 2, r"--out .*: is a directory"),
    ("offline and not cached", "download specmoe-test/not-cached", 2,
     r"not \(completely\) in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading"),
]


def _fixtures(d: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import write_trace

    files = {"three.txt": "1 2 3", "negative.txt": "1,-1,1,1", "zeros.txt": "0 0 0 0",
             "nan.txt": "1 nan 1 1", "words.txt": "one two three four", "ragged.json": "[[1, 2], [3]]",
             "one-hot.txt": "10 0 0 0", "loads.txt": "4 2 1 1", "empty.json": "{}"}
    for name, text in files.items():
        (d / name).write_text(text)
    pq.write_table(pa.table({"a": [1, 2]}), d / "plain.parquet")
    write_trace(d / "trace.parquet", generate(SynthParams(num_experts=16, top_k=2, num_layers=2,
                                                          requests=6, steps=6, seed=1)))
    data = (d / "trace.parquet").read_bytes()
    (d / "truncated.parquet").write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    _fixtures(d)
    return d


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines:\n{stderr}"
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("label,args,status,pattern", COMMAND, ids=[c[0] for c in COMMAND])
def test_the_command(label, args, status, pattern, folder, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(folder)
    argv = [a.replace("{d}", str(folder)) for a in shlex.split(args)]
    try:
        got = cli.main(argv)
    except SystemExit as exc:  # the parser's own errors
        got = exc.code
    err = capsys.readouterr().err
    assert got == status, err
    if pattern is OK:
        assert err == "", err
    else:
        assert re.search(pattern, one_line(err)), err


# --- the configuration --------------------------------------------------------------------------

BASE = yaml.safe_load((REPO / "config.yaml").read_text())
TABLE = {p.dataset for p in prompt_table.load()}
# Study models on an H100 beside the default's models (served in bf16: the default's engine
# sections are float32, which would double an unquantised checkpoint's weights).
GLM = {"name": "glm", "source": "hf", "repo_id": "zai-org/GLM-4.7-Flash", "hardware": "H100",
       "precision": "bf16", "drafters": ["mtp"], "datasets": ["tinybench"], "ks": [3]}
QWEN = {"name": "qwen", "source": "hf", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "hardware": "H100",
        "drafters": ["eagle"], "datasets": ["tinybench"], "ks": [3]}
MTP = {"name": "mtp", "source": "self", "method": "mtp"}
EAGLE = {"name": "eagle", "source": "hf", "method": "eagle3", "repo_id": "specmoe-test/eagle3"}
EAGLE_VOCAB = {**EAGLE, "name": "eagle-v", "repo_id": "specmoe-test/eagle3-vocab"}
EAGLE_WIDE = {**EAGLE, "name": "eagle-wide", "repo_id": "specmoe-test/eagle3-wide"}
DRAFT = {"name": "small", "source": "hf", "method": "draft_model",
         "repo_id": "specmoe-test/draft"}


def model(target, **kw):
    """An edit: update the model entry named `target` of the configuration."""
    def edit(c):
        next(m for m in c["models"] if m["name"] == target).update(kw)
    return edit


def merge(**kw):
    """An edit: merge keys as a --configfile does (mappings merged, lists replaced)."""
    return lambda c: update_config(c, copy.deepcopy(kw))


def study(*models, drafters=(MTP,), **more):
    """An edit: the default's models and drafters plus study models on GPUs."""
    def edit(c):
        c["models"] += [copy.deepcopy(m) for m in models]
        c["drafters"] += [copy.deepcopy(d) for d in drafters]
        update_config(c, copy.deepcopy(more))
    return edit


def both(*edits):
    def edit(c):
        for e in edits:
            e(c)
    return edit


def pop(path):
    """An edit: remove a nested key ("hardware.H100.hbm_bandwidth_gbs")."""
    def edit(c):
        *head, last = path.split(".")
        node = c
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node.pop(last)
    return edit


SF = "synth-fine"
CONFIG = [
    # the schema, one line per violation
    ("a misspelt top-level key", merge(modles=[]), 1,
     r"^config: modles: unknown key; did you mean 'models'\?$"),
    ("ks not a list", merge(ks=3), 1, r"config: ks: must be a list of integers \(each >= 1 and "
     r"<= 8\), at least 1 \(got 3\)"),
    ("a top-level K of zero", merge(ks=[0]), 1, r"config: ks\[0\]: must be an integer >= 1 and <= 8 \(got 0\)"),
    ("K of nine", merge(ks=[3, 9]), 1, r"config: ks\[1\]: must be an integer >= 1 and <= 8"),
    ("no K", merge(ks=[]), 1, r"config: ks: must have at least 1 item"),
    ("a fractional batch size", merge(batch_sizes=[1.5]), 1,
     r"config: batch_sizes\[0\]: must be an integer >= 1 \(got 1.5\)"),
    ("a word for the shuffle null", merge(shuffle_null="x"), 1,
     r"config: shuffle_null: must be true or false \(got 'x'\)"),
    ("models not a list", merge(models={"a": 1}), 1,
     r"config: models: must be a list of model entries \(got a mapping\)"),
    ("a misspelt model key", model(SF, hardwre="H100"), 1,
     r"config: models\[3\]\.hardwre \(model 'synth-fine'\): unknown key; did you mean "
     r"'hardware'\?"),
    ("a misspelt source", model(SF, source="synth"), 1,
     r"models\[3\]\.source \(model 'synth-fine'\): must be one of synthetic, tiny, hf, variant "
     r"\(got 'synth'\); did you mean 'synthetic'\?"),
    ("a model's TP of zero", model(SF, tp=0), 1, r"models\[3\]\.tp \(model 'synth-fine'\): must be an "
     r"integer >= 1 \(got 0\)"),
    ("a name with a space", model(SF, name="synth fine"), 1,
     r"models\[3\]\.name \(model 'synth fine'\): must be letters, digits"),
    ("no drafters", model(SF, drafters=[]), 1, r"models\[3\]\.drafters .*: must have at least 1"),
    ("datasets a string", model(SF, datasets="synth"), 1,
     r"models\[3\]\.datasets .*: must be a list of strings"),
    ("a generator's stickiness above 1", lambda c: c["models"][3]["synthetic"].update(stickiness=1.5), 1,
     r"models\[3\]\.synthetic\.stickiness .*: must be a number >= 0 and <= 1 \(got 1.5\)"),
    ("one layer's stickiness above 1",
     lambda c: c["models"][3]["synthetic"].update(stickiness=[0.2, 1.5]), 1,
     r"models\[3\]\.synthetic\.stickiness\[1\] .*: must be a number >= 0 and <= 1"),
    ("a misspelt generator key", lambda c: c["models"][3]["synthetic"].update(skeww=1), 1,
     r"synthetic\.skeww .*: unknown key; did you mean 'skew'\?"),
    ("a misspelt dimension", lambda c: c["models"][3]["dims"].update(hiden=1), 1,
     r"dims\.hiden .*: unknown key; did you mean 'hidden'\?"),
    ("a precision that is not one", model(SF, precision="fp4"), 1,
     r"precision .*: must be one of auto, fp8, bf16, fp16, fp32 \(got 'fp4'\); did you mean "
     r"'fp8'\?"),
    ("a study model without repo_id", study({**GLM, "repo_id": None}, ), 0,
     r"config: no repo_id for glm"),
    ("a study model's repo_id left out", study({k: v for k, v in GLM.items() if k != "repo_id"}),
     1, r"models\[5\] \(model 'glm'\): missing key 'repo_id' \(required for source hf\)"),
    ("a study model's repo_id misspelt",
     study({**{k: v for k, v in GLM.items() if k != "repo_id"}, "reop_id": "zai-org/GLM"}), 1,
     r"models\[5\]\.reop_id \(model 'glm'\): unknown key; did you mean 'repo_id'\?$"),
    ("a synthetic model without its generator", pop("models.3.synthetic"), 1,
     r"missing key 'synthetic' \(required for source synthetic\)"),
    ("a misspelt hardware key", lambda c: c["hardware"]["CPU"].update(hbm_bandwith_gbs=1), 1,
     r"config: hardware\.CPU\.hbm_bandwith_gbs: unknown key; did you mean "
     r"'hbm_bandwidth_gbs'\?"),
    ("bandwidth a word", lambda c: c["hardware"]["CPU"].update(hbm_bandwidth_gbs="fast"), 1,
     r"hardware\.CPU\.hbm_bandwidth_gbs: must be a number >= 1 and <= 100000 \(got 'fast'\)"),
    ("hardware without bandwidth", pop("hardware.CPU.hbm_bandwidth_gbs"), 1,
     r"config: hardware\.CPU: needs hbm_bandwidth_gbs and peak_tflops \(not a GPU the package "
     r"ships: H100, B200, H200\)"),
    ("a shipped GPU's number overridden", lambda c: c["hardware"].update(H100={"memory_gib": 94}),
     0, OK),
    ("no hardware", lambda c: c.update(hardware={}), 1,
     r"config: hardware: must not be empty"),
    ("a device that is not one", lambda c: c["hardware"]["CPU"].update(device="tpu"), 1,
     r"hardware\.CPU\.device: must be one of gpu, cpu \(got 'tpu'\)"),
    ("GPU memory of zero", lambda c: c["hardware"].update(H100={"memory_gib": 0}), 1,
     r"hardware\.H100\.memory_gib: must be a number >= 1 and <= 65536 \(got 0\)"),
    ("timing that is not one", merge(sweep={"timing": "wall"}), 1,
     r"config: sweep\.timing: must be one of client, engine \(got 'wall'\)"),
    ("a batch of zero", lambda c: c["sweep"]["schedule"].append({"batch": 0, "prompts": 1}), 1,
     r"config: sweep\.schedule\[4\]\.batch: must be an integer >= 1 \(got 0\)"),
    ("a sweep without schedule", pop("sweep.schedule"), 1,
     r"config: sweep: missing key 'schedule'"),
    ("no repeats", merge(sweep={"repeats": 0}), 1, r"sweep\.repeats: must be an integer >= 2"),
    ("a learning rate in words", merge(tiny={"train": {"lr": "fast"}}), 1,
     r"tiny\.train\.lr: must be a number > 0 and <= 1 \(got 'fast'\)"),
    ("a vocabulary too small", merge(tiny={"vocab_size": 100}), 1,
     r"tiny\.vocab_size: must be an integer >= 300 and <= 65536 \(got 100\)"),
    ("own MTP layers with another method", study(GLM, drafters=[{**MTP, "method": "eagle"}]), 1,
     r"drafters\[1\]\.method \(drafter 'mtp'\): must be 'mtp' \(got 'eagle'\)"),
    ("a method that is not one", lambda c: c["drafters"][0].update(method="eagle2"), 1,
     r"drafters\[0\]\.method .*: must be one of draft_model, eagle, eagle3, mtp \(got "
     r"'eagle2'\); did you mean 'eagle'\?"),
    ("memory utilisation above 1", merge(gpu={"memory_utilization": 1.5}), 1,
     r"config: gpu\.memory_utilization: must be a number > 0 and <= 1 \(got 1.5\)"),
    ("job memory too small", merge(gpu={"mem_mb": 10}), 1, r"gpu\.mem_mb: must be an integer >= "
     r"1000"),
    ("tau below 1", merge(plan={"tau": 0.5}), 1, r"config: plan\.tau: must be a number >= 1"),
    ("a misspelt plan key", merge(plan={"safty": 2}), 1,
     r"plan\.safty: unknown key; did you mean 'safety'\?"),
    ("a misspelt dataset format", merge(datasets={"x": {"format": "mtbench", "repo_id": "o/r"}}),
     1, r"datasets\.x\.format: must be one of .* \(got 'mtbench'\); did you mean 'mt-bench'\?"),
    ("a dataset without repo_id", merge(datasets={"x": {"format": "mt-bench"}}), 1,
     r"config: datasets\.x: missing key 'repo_id'"),
    # the first token is the prefill's: no window verifies it
    ("captures of no verification window", merge(capture={"max_tokens": 1}), 1,
     r"capture\.max_tokens: must be an integer >= 2"),
    ("profiles at no batch size", merge(profiling={"batch_sizes": []}), 1,
     r"profiling\.batch_sizes: must have at least 1 item"),
    # TE's interval is over engine starts: one start has none
    ("profiles on one engine start", merge(profiling={"engines": 1}), 1,
     r"profiling\.engines: must be an integer >= 2 and <= 20"),
    ("a model's K of nine", model(SF, ks=[3, 9]), 1, r"models\[3\]\.ks\[1\] .*: must be an "
     r"integer >= 1 and <= 8"),
    # references, with the closest name
    ("hardware close to a defined one", model(SF, hardware="H300"), 1,
     r"^config: model synth-fine: hardware 'H300' is not defined under 'hardware'; did you "
     r"mean 'H[12]00'\?$"),
    ("hardware far from any", model(SF, hardware="TPUv5e"), 1,
     r"hardware 'TPUv5e' is not defined under 'hardware' \(defined: B200, CPU, H100, H200\)"),
    ("a misspelt drafter", model("tiny-fine", drafters=["tiny-drafer"]), 1,
     r"model tiny-fine: drafter 'tiny-drafer' is not defined under 'drafters'; did you mean "
     r"'tiny-drafter'\?"),
    ("a misspelt dataset", model("tiny-coarse", datasets=["tinybnch"]), 1,
     r"model tiny-coarse: dataset 'tinybnch' is not in the prompt table; did you mean "
     r"'tinybench'\?"),
    ("compare_with in the wrong case", model(SF, compare_with="Qwen3-30b"), 1,
     r"compare_with 'Qwen3-30b' is not a model of the study; did you mean 'Qwen3-30B'\?"),
    ("fit_to an unknown study model",
     lambda c: c["models"][3]["synthetic"].update(fit_to="Qwen3-30b"), 1,
     r"model synth-fine: synthetic\.fit_to 'Qwen3-30b' has no published overlap curve; did you "
     r"mean 'Qwen3-30B'\?"),
    ("a variant of a misspelt model", model("tiny-fine-bf16", variant_of="tiny-fin"), 1,
     r"variant_of 'tiny-fin' is not a tiny model .*; did you mean 'tiny-fine'\?"),
    ("the SD check on a misspelt dataset", merge(tiny={"sd_check": {"dataset": "tinybnch"}}), 1,
     r"tiny\.sd_check\.dataset 'tinybnch' is not in the prompt table; did you mean "
     r"'tinybench'\?"),
    ("a study model on a misspelt dataset",
     study({**GLM, "datasets": ["mt-bnch"]},
           datasets={"mt-bench": {"format": "mt-bench", "repo_id": "o/r"}}), 1,
     r"model glm: dataset 'mt-bnch' is neither under 'datasets' nor in the prompt table; did you "
     r"mean 'mt-bench'\?"),
    # contradictions
    ("TP in the engine arguments", study({**GLM, "engine_args": {"tensor_parallel_size": 2}}),
     1, r"model glm: engine_args\.tensor_parallel_size is set by the model's tp: leave it out"),
    ("dtype in a section's engine arguments", merge(sweep={"engine_args": {"dtype": "half"}}), 1,
     r"^config: sweep\.engine_args\.dtype is set by the model's precision"),
    ("a speculative config of one's own",
     study({**GLM, "engine_args": {"speculative_config": {"method": "mtp"}}}), 1,
     r"engine_args\.speculative_config is set by the model's drafters and ks"),
    ("memory utilisation twice",
     study({**GLM, "engine_args": {"gpu_memory_utilization": 0.8}}), 1,
     r"engine_args\.gpu_memory_utilization is set by gpu\.memory_utilization"),
    ("max-num-seqs spelt with dashes", merge(profiling={"engine_args": {"max-num-seqs": 4}}), 1,
     r"profiling\.engine_args\.max-num-seqs is set by the schedule's largest batch"),
    # the kernel profile needs eager mode: Dynamo drops record_function ranges, and a CUDA
    # graph's kernels share one launch's correlation id
    ("a model's engine in graph mode, its profile's too",
     study({**GLM, "engine_args": {"enforce_eager": False}}), 1,
     r"^config: model glm: engine_args\.enforce_eager false reaches the kernel profile, which "
     r"needs eager mode"),
    ("the profile's engine in graph mode", merge(profiling={"engine_args": {"enforce-eager": False}}),
     1, r"^config: profiling\.engine_args\.enforce-eager false reaches the kernel profile"),
    ("sweep without profiling", pop("profiling"), 1,
     r"^config: sweep is set without profiling: sweeps and profiles run only when both"),
    ("TP beside the dimensions' TP", model(SF, tp=2), 1,
     r"model synth-fine: tp 2 contradicts dims\.tp 1"),
    ("dimensions against the generator",
     lambda c: c["models"][3]["dims"].update(num_experts=64), 1,
     r"dims\.num_experts=64 contradicts synthetic\.num_experts=128"),
    ("two models of one name", lambda c: c["models"].append(copy.deepcopy(c["models"][3])), 1,
     r"model name 'synth-fine' is used by 2 entries"),
    ("a model named like a drafter", model(SF, name="tiny-drafter"), 1,
     r"'tiny-drafter' is both a model and a drafter"),
    ("K twice", merge(ks=[3, 3]), 1, r"^config: ks lists K=3 2 times$"),
    ("a model's K twice", model(SF, ks=[5, 5]), 1, r"model synth-fine: ks lists K=5 twice"),
    ("fewer prompts than the batch",
     lambda c: c["sweep"]["schedule"].append({"batch": 16, "prompts": 4}), 1,
     r"sweep\.schedule: batch 16 has 4 prompts, fewer than its batch size"),
    ("one batch twice", lambda c: c["sweep"]["schedule"].append({"batch": 8, "prompts": 40}), 1,
     r"sweep\.schedule lists batch 8 2 times"),
    ("fit_to beside a parameter it fits",
     lambda c: c["models"][3]["synthetic"].update(skew=2.0), 1,
     r"synthetic: fit_to=Qwen3-30B fits skew: set them or fit_to, not both"),
    ("top-k above the experts", lambda c: c["models"][4]["synthetic"].update(top_k=9), 1,
     r"model synth-coarse: synthetic: top_k=9 exceeds num_experts=8"),
    ("a tiny top-k above its experts", lambda c: c["models"][2]["arch"].update(top_k=9), 1,
     r"model tiny-coarse: top_k=9 must lie in 1\.\.num_experts=8"),
    ("a head size vLLM's CPU attention cannot run",
     lambda c: c["models"][0]["arch"].update(head_dim=16), 1,
     r"model tiny-fine: head_dim=16: vLLM's CPU attention needs a multiple of 32"),
    ("a dense tiny target", lambda c: c["models"][2].update(arch={
        **{k: v for k, v in c["models"][2]["arch"].items()
           if k not in ("num_experts", "top_k", "expert_intermediate")},
        "kind": "dense", "intermediate": 64}),
     1, r"model tiny-coarse: a target must be a MoE"),
    ("a study model with a tiny drafter", study({**GLM, "drafters": ["tiny-drafter"]}), 1,
     r"model glm: drafter 'tiny-drafter' is a tiny drafter built here"),
    ("a tiny target with a study drafter", both(study(), model("tiny-coarse", drafters=["mtp"])),
     1,
     r"model tiny-coarse: drafter 'mtp' is a self drafter; a tiny target needs a tiny drafter"),
    ("one repository at two revisions",
     study({**GLM, "revision": "a" * 40}, {**GLM, "name": "glm2", "revision": "b" * 40}), 1,
     r"zai-org/GLM-4\.7-Flash is asked for at different revisions"),
    ("an fp8 variant on a CPU", model("tiny-fine-bf16", precision="fp8"), 1,
     r"model tiny-fine-bf16: precision fp8 needs a GPU"),
    ("a variant with its own architecture",
     lambda c: c["models"][1].update(arch=copy.deepcopy(c["models"][0]["arch"])), 1,
     r"model tiny-fine-bf16: a variant takes 'arch' from tiny-fine"),
    ("fp8 on hardware without fp8", study({**GLM, "precision": "fp8", "hardware": "CPU"}), 1,
     r"model glm: precision fp8 on hardware CPU, which has no fp8 peak"),
    ("a held-out set smaller than one batch", merge(tiny={"max_heldout_tokens": 1000}), 1,
     r"tiny\.max_heldout_tokens \(1000\) is smaller than one evaluation batch"),
    ("a study model on a GPU beside the default's", study(GLM), 0, OK),
    # the preflight of GPU jobs (offline)
    ("Mixtral-8x7B in bf16 on one H100",
     study({**QWEN, "name": "mixtral", "repo_id": "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "precision": "bf16", "drafters": ["small"]}, drafters=[DRAFT]), 1,
     r"^preflight: capture mixtral/small/K3/tinybench \(and \d+ more of its jobs\): memory: "
     r"weights 87\.0 GiB .* > TP 1 x 79\.65 GiB \(81,559 MiB as CUDA reports it\) x "
     r"gpu_memory_utilization 0\.9 = 71\.7 GiB per GPU"),
    ("TP 3 with 32 heads",
     study({**QWEN, "tp": 3}, drafters=[EAGLE]), 1,
     r"tensor parallelism: TP 3 does not divide the 32 attention heads; TP 3 neither divides the "
     r"4 KV heads"),
    ("GLM on TP 3", study({**GLM, "tp": 3}), 1,
     r"^preflight: capture glm/mtp/K3/tinybench \(and \d+ more of its jobs\): tensor "
     r"parallelism: TP 3 does not divide the 20 attention heads$"),
    ("an fp8 checkpoint past its weight block", study({**QWEN, "tp": 4}, drafters=[EAGLE]), 1,
     r"768 / 4 = 192, is not a multiple of the fp8 weight block 128 \(vLLM refuses it; TP 1 or 2 "
     r"works\)"),
    ("MTP on a model without MTP layers", study({**QWEN, "drafters": ["mtp"]}), 1,
     r"speculative method: method mtp, but qwen's config.json has no MTP layers \(neither "
     r"num_nextn_predict_layers nor mtp_num_hidden_layers\)"),
    ("MTP where the checkpoint says none",
     study({**GLM, "name": "kimi", "repo_id": "moonshotai/Kimi-K2.5", "tp": 8,
            "hardware": "B200", "precision": "auto"}), 1, r"has no MTP layers \(num_nextn_predict_layers = 0\)"),
    ("prompts longer than the context",
     study({**GLM, "datasets": ["long"]}, datasets={"long": {"format": "mt-bench",
                                                             "repo_id": "o/r",
                                                             "prompt_tokens": 5000}}), 1,
     r"context: long's prompts \(about 5,000 tokens\) \+ \d+ output tokens \+ K\+1 = [\d,]+ "
     r"exceed max_model_len 1,024 \(set engine_args.max_model_len\)"),
    ("a context past the model's positions",
     study({**QWEN, "engine_args": {"max_model_len": 100000}}, drafters=[EAGLE]), 1,
     r"context: max_model_len 100,000 exceeds the model's 40,960 positions"),
    ("a batch whose KV cache does not fit",
     both(study({**QWEN, "datasets": ["long"], "engine_args": {"max_model_len": 40000}},
                drafters=[EAGLE], datasets={"long": {"format": "mt-bench", "repo_id": "o/r",
                                                     "prompt_tokens": 32000}}),
          lambda c: c["sweep"]["schedule"].append({"batch": 64, "prompts": 64})), 0,
     r"memory: the KV cache \([\d.]+ GiB per GPU after the weights\) holds \d+ sequences of "
     r"[\d,]+ tokens, fewer than the largest batch \d+"),
    ("a GPU the step model was not calibrated on",
     both(lambda c: c["hardware"].update(A100={"hbm_bandwidth_gbs": 2039,
                                               "peak_tflops": {"bf16": 312}}),
          model(SF, hardware="A100")), 0,
     r"hardware A100 is not a GPU the step model was calibrated on \(B200, H100, H200\)"),
    ("an EAGLE head of another vocabulary",
     study({**QWEN, "drafters": ["eagle-v"]}, drafters=[EAGLE_VOCAB]), 1,
     r"drafter: eagle-v's vocabulary \(32,000\) is not the target's \(151,936\): a different "
     r"vocabulary"),
    ("an EAGLE head of another width",
     study({**QWEN, "drafters": ["eagle-wide"]}, drafters=[EAGLE_WIDE]), 1,
     r"drafter: eagle-wide reads hidden states of width 4096, the target's are 2048"),
    ("a draft model of another tokenizer",
     study({**QWEN, "drafters": ["small"]}, drafters=[DRAFT]), 1,
     r"drafter: small's vocabulary \(32,000\) is not the target's \(151,936\): a different "
     r"tokenizer"),
    ("a float precision on a quantised checkpoint",
     study({**GLM, "name": "oss", "repo_id": "openai/gpt-oss-120b", "tp": 4}), 1,
     r"^config: model oss: openai/gpt-oss-120b config.json: precision bf16 on a checkpoint "
     r"quantised with mxfp4: vLLM keeps its mxfp4 weights"),
    ("the default configuration", lambda c: None, 0, OK),
]

# drafters' config.json in the test's Hugging Face cache (their repositories are the project's own)
EAGLE3_QWEN = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
               "hidden_size": 2048, "vocab_size": 151936, "draft_vocab_size": 32000,
               "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 4,
               "intermediate_size": 8192, "torch_dtype": "bfloat16"}
DRAFTER_CONFIGS = {
    "specmoe-test/eagle3": EAGLE3_QWEN,
    "specmoe-test/eagle3-vocab": {**EAGLE3_QWEN, "vocab_size": 32000},
    "specmoe-test/eagle3-wide": {"architectures": ["LlamaForCausalLMEagle3"],
                                 "model_type": "llama", "hidden_size": 4096,
                                 "vocab_size": 151936, "num_hidden_layers": 1,
                                 "num_attention_heads": 32, "num_key_value_heads": 8,
                                 "intermediate_size": 14336, "torch_dtype": "bfloat16"},
    "specmoe-test/draft": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                           "hidden_size": 1024, "vocab_size": 32000, "num_hidden_layers": 4,
                           "num_attention_heads": 16, "num_key_value_heads": 4,
                           "intermediate_size": 2816, "max_position_embeddings": 2048,
                           "torch_dtype": "bfloat16"},
}


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf") / "hub"
    for repo, cfg in DRAFTER_CONFIGS.items():
        lay_out_cache(cache, repo, {"config.json": json.dumps(cfg).encode()})
    return cache


def workflow_parse(edit, cache_dir) -> tuple[int, str]:
    """(exit status, stderr) of the workflow's parse of config.yaml with the edit, as
    workflow/rules/common.smk runs it."""
    cfg = copy.deepcopy(BASE)
    edit(cfg)
    try:
        _, notes = for_workflow(cfg, REPO / "workflow/schemas/config.schema.yaml", TABLE,
                                cache_dir=cache_dir, with_vllm=False)
    except InputError as exc:
        return 1, f"{exc}\n"
    return 0, "".join(f"{n}\n" for n in notes if not re.match(r"preflight: \d+ GPU jobs", n))


@pytest.mark.parametrize("label,edit,status,pattern", CONFIG, ids=[c[0] for c in CONFIG])
def test_the_configuration(label, edit, status, pattern, hf_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    # the parse of a fresh run: the preflight reads results/ where the workflow runs (a trained
    # tokenizer lets it count the prompts), and the checkout's own may hold a finished run
    monkeypatch.chdir(tmp_path)
    got, err = workflow_parse(edit, tmp_path)
    assert got == status, err
    if pattern is OK:
        assert err == "", err
    else:
        assert re.search(pattern, one_line(err)), err


def test_the_corpus_is_broad():
    """Well over a hundred inputs, each class of both sides represented."""
    assert len(COMMAND) + len(CONFIG) > 150
    assert len({c[0] for c in COMMAND + CONFIG}) == len(COMMAND) + len(CONFIG)


# labels of configuration cases run through `snakemake -n` itself (a workflow parse each; cases
# that remove a key cannot be written as a --configfile, which merges over config.yaml)
THROUGH_SNAKEMAKE = ["a misspelt top-level key", "models not a list", "a misspelt model key",
                     "a study model's repo_id misspelt", "a misspelt hardware key",
                     "a misspelt dataset format", "hardware close to a defined one",
                     "fit_to an unknown study model", "dtype in a section's engine arguments",
                     "fewer prompts than the batch"]


@pytest.mark.slow
def test_a_sample_through_snakemake(tmp_path):
    """The workflow's parse gives the same one line with status 1, after Snakemake's own two
    lines, with no traceback, no schema and no job."""
    from wf import dry_runs, snakemake

    cases = {c[0]: c for c in CONFIG}

    def check(wd, label):
        _, edit, status, pattern = cases[label]
        cfg = copy.deepcopy(BASE)
        edit(cfg)
        (wd / "case.yaml").write_text(yaml.safe_dump(cfg))
        r = snakemake(wd, "-n", configfile="case.yaml", check=False, timeout=300)
        ours = [ln for ln in r.stderr.splitlines()
                if not ln.startswith(("Using workflow", "Config file"))]
        if r.returncode != status or len(ours) != 1 or not re.search(pattern, ours[0]) \
                or "Traceback" in r.stderr or "Job stats" in r.stdout:
            return f"{label}: status {r.returncode}\n{r.stderr[-1500:]}"

    failures = [f for f in dry_runs(tmp_path, THROUGH_SNAKEMAKE, check) if f]
    assert not failures, "\n\n".join(failures)
