"""Every value checked against what it means: a corpus of inputs to the `specmoe` command that
parse but cannot be right (issue #42), in tests/test_bad_inputs.py's form. Each case is its class,
the input, the exit status it must give and a pattern its one line on stderr must match; an input
that is accepted (status 0) prints nothing on stderr, or exactly one warning line that the pattern
names (a value possible but unusual: the line says its consequence).

Classes:
- range: a value outside what its physics or method allows (finite, positive, a probability, at
  most N, feasible together with the other flags).
- warning: a value possible but unusual: accepted, with one warning line.
- file: a file that parses but means something else (loads, config.json, traces, hardware files).
- contradiction: flags that contradict each other, override each other or are ignored.
- internal: inputs that ended in an internal error (exit 1) or a traceback: now one line, exit 2.
- accepted: the documented and the edge-but-right inputs still answer, with nothing on stderr.

The checks that the command shares with the workflow (drafter compatibility, hardware entries)
are fed the same input through both at the end of the file.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from specmoe import cli
from wf import REPO

CONFIGS = REPO / "src/specmoe/data/hf_configs"
QWEN_FP8 = CONFIGS / "Qwen3-30B-A3B-FP8.json"
QWEN = CONFIGS / "Qwen3-30B-A3B.json"
GPT_OSS = CONFIGS / "gpt-oss-120b.json"
MIXTRAL = CONFIGS / "Mixtral-8x7B-Instruct-v0.1.json"
DIMS = ("te --hidden 2048 --expert-intermediate 768 --heads 32 --kv-heads 4 --head-dim 128 "
        "--experts-per-token 8 --n 128 --layers 48")
CORR = ("correction --moe-weight-share 0.667 --unique-ratio 2.436 --moe-time-share 0.33 "
        "--moe-time-ratio 1.57 --dense-time-ratio 0.94")
SYNTH = "synth --out {d}/s.parquet --layers 2 --requests 2 --steps 4"
PRED = f"predict {QWEN_FP8} --batch-sizes 1"
IPF = "ipf --experts-per-token 8 --n 128 --overlaps 0.431,0.356,0.328"
OK = None  # accepted: nothing on stderr

# (class, label, arguments with {d} the fixtures' folder, exit status, the line's pattern)
CASES = [
    # --- range: values their physics or method does not allow ---------------------------------
    ("range", "k = N forces overlap 1", "ipf --experts-per-token 8 --n 8 --overlaps 0.3", 2,
     r"overlap 0.3 at distance 1 is impossible with k = 8 of N = 8: .* ov >= 1$"),
    ("range", "overlap below 2k - N at distance 2", "ipf --experts-per-token 6 --n 8 --overlaps 0.7,0.4", 2,
     r"overlap 0.4 at distance 2 is impossible with k = 6 of N = 8: two tokens share at least "
     r"2k - N = 4 experts, so ov >= 0.6667"),
    ("range", "negative overlap", "ipf --experts-per-token 8 --n 128 --overlaps 0.3,-0.2", 2,
     r"--overlaps must be in \[0, 1\] each \(got -0.2 in '0.3,-0.2'\)"),
    ("range", "ipf batch past any engine", IPF + " --batch 100000", 2,
     r"--batch must be <= 4,096 \(got 100000\)"),
    ("range", "ipf k past any router", "ipf --experts-per-token 5000 --n 8192 --overlaps 0.3", 2,
     r"--experts-per-token must be <= 1,024 \(got 5000\)"),
    ("range", "ipf N past any model", "ipf --experts-per-token 8 --n 2000000 --overlaps 0.3", 2,
     r"--n must be <= 1,048,576 \(got 2000000\)"),
    ("range", "absurd shared experts", DIMS + " --shared-intermediate 1000000000000", 2,
     r"--shared-intermediate must be <= 262,144 \(got 1000000000000\)"),
    ("range", "absurd hidden size", DIMS.replace("--hidden 2048", "--hidden 99999999"), 2,
     r"--hidden must be <= 262,144 \(got 99999999\)"),
    ("range", "absurd expert width", DIMS.replace("--expert-intermediate 768",
                                                  "--expert-intermediate 10000000"), 2,
     r"--expert-intermediate must be <= 262,144"),
    ("range", "heads past any model", DIMS.replace("--heads 32", "--heads 4096"), 2,
     r"--heads must be <= 1,024 \(got 4096\)"),
    ("range", "head dim of zero", DIMS.replace("--head-dim 128", "--head-dim 0"), 2,
     r"--head-dim must be >= 1 \(got 0\)"),
    ("range", "layers past any model", DIMS.replace("--layers 48", "--layers 100000"), 2,
     r"--layers must be <= 1,024"),
    ("range", "KV heads more than heads", DIMS.replace("--kv-heads 4", "--kv-heads 64"), 2,
     r"64 key/value heads do not divide the 32 attention heads"),
    ("range", "KV heads not dividing heads", DIMS.replace("--kv-heads 4", "--kv-heads 5"), 2,
     r"5 key/value heads do not divide the 32 attention heads"),
    ("range", "te k above N", DIMS.replace("--n 128", "--n 4"), 2, r"k=8 exceeds N=4"),
    ("range", "te TP past 64", DIMS + " --tp 128", 2, r"--tp must be <= 64 \(got 128\)"),
    ("range", "te K past 8", DIMS + " --draft-length 12", 2, r"--draft-length must be <= 8 \(got 12\)"),
    ("range", "te unique below 1", DIMS + " --unique 0.5", 2, r"--unique must be >= 1 \(got 0.5\)"),
    ("range", "te unique infinite", DIMS + " --unique inf", 2,
     r"--unique must be a finite number \(got inf\)"),
    ("range", "te unique nan", DIMS + " --unique nan", 2, r"--unique must be a finite number"),
    ("range", "unique ratio 1e9", CORR.replace("2.436", "1e9"), 2,
     r"--unique-ratio must be in \[1, 9\] \(got 1e9\)"),
    ("range", "unique ratio past K+1 = 9", CORR.replace("2.436", "9.5"), 2,
     r"--unique-ratio must be in \[1, 9\]"),
    ("range", "MoE time ratio 1e6", CORR.replace("1.57", "1e6"), 2,
     r"--moe-time-ratio must be in \(0, 9\] \(got 1e6\)"),
    ("range", "dense time ratio infinite", CORR.replace("0.94", "inf"), 2,
     r"--dense-time-ratio must be a finite number \(got inf\)"),
    ("range", "weight share nan", CORR.replace("0.667", "nan"), 2,
     r"--moe-weight-share must be a finite number \(got nan\)"),
    ("range", "negative tie", SYNTH + " --tie -5", 2, r"--tie must be in \[0, 10\] \(got -5\)"),
    ("range", "tie of 100", SYNTH + " --tie 100", 2, r"--tie must be in \[0, 10\] \(got 100\)"),
    ("range", "stickiness negative", SYNTH + " --stickiness -0.1", 2,
     r"--stickiness must be in \[0, 1\] \(got -0.1\)"),
    ("range", "negative acceptance", SYNTH + " --accept-prob -0.2", 2,
     r"--accept-prob must be in \[0, 1\]"),
    ("range", "negative skew", SYNTH + " --skew -0.5", 2, r"--skew must be >= 0 \(got -0.5\)"),
    ("range", "infinite skew", SYNTH + " --skew inf", 2, r"--skew must be a finite number"),
    ("range", "synth K of 9", SYNTH + " --draft-length 9", 2, r"--draft-length must be <= 8 \(got 9\)"),
    ("range", "synth requests past 2^20", SYNTH + " --requests 2000000", 2,
     r"--requests must be <= 1,048,576"),
    ("range", "synth steps of a billion", SYNTH + " --steps 1000000000", 2,
     r"--steps must be <= 16,777,216 \(got 1000000000\)"),
    ("range", "synth N below 2k", "synth --out {d}/s.parquet --n 12 --experts-per-token 8", 2,
     r"needs num_experts >= 2\*top_k \(got 12, 8\)"),
    ("range", "a seed analyze never reads", "analyze {d}/trace.parquet --seed -1", 2,
     r"--seed is gone: the shuffle null is exact"),
    ("range", "predict K of 0", PRED + " --draft-length 0", 2, r"--draft-length must be >= 1 \(got 0\)"),
    ("range", "predict K past 8", PRED + " --draft-length 9", 2, r"--draft-length must be <= 8 \(got 9\)"),
    ("range", "predict TP of 0", PRED + " --tp 0", 2, r"--tp must be >= 1 \(got 0\)"),
    ("range", "acceptance length below 1", PRED + " --acceptance-length 0.5", 2,
     r"--acceptance-length must be in \[1, 9\] each \(got 0.5 in '0.5'\)"),
    ("range", "acceptance length past K+1", PRED + " --acceptance-length 2,5", 2,
     r"acceptance length \(2.0, 5.0\) outside \[1, K\+1 = 4\]"),
    ("range", "acceptance length of 50", PRED + " --acceptance-length 50", 2,
     r"--acceptance-length must be in \[1, 9\] each"),
    ("range", "batch size past 4096", PRED.replace("--batch-sizes 1", "--batch-sizes 1,8192"), 2,
     r"--batch-sizes must be <= 4,096 each \(got 8192 in '1,8192'\)"),
    ("range", "batch size of 0", PRED.replace("--batch-sizes 1", "--batch-sizes 0,1"), 2,
     r"--batch-sizes must be >= 1 each"),
    ("range", "predict overlap above 1", PRED + " --overlaps 0.4,0.3,1.2", 2,
     r"--overlaps must be in \[0, 1\] each \(got 1.2"),
    ("range", "predict draft cost negative", PRED + " --draft-cost -0.1", 2,
     r"--draft-cost must be in \[0, 10\) \(got -0.1\)"),
    ("range", "predict draft cost of 10", PRED + " --draft-cost 10", 2,
     r"--draft-cost must be in \[0, 10\)"),
    ("range", "predict overlaps impossible for k of N",
     "predict {d}/k6-of-8.json --batch-sizes 1 --overlaps 0.7,0.7,0.4", 2,
     r"overlap 0.4 at distance 3 is impossible with k = 6 of N = 8: .* ov >= 0.6667$"),
    # --- warning: possible but unusual, one line naming the consequence ------------------------
    ("warning", "a single 4-token window analysed", "analyze {d}/one-window.parquet", 0,
     r"^specmoe: warning: .*one-window.parquet: 1 request\(s\): no interval \(at least 10 "
     r"needed\): overlap, temporal share and acceptance are points from too few independent units"),
    ("warning", "a few requests analysed", "analyze {d}/few.parquet", 0,
     r"^specmoe: warning: .*: 2 request\(s\): no interval"),
    ("warning", "tie that saturates", SYNTH + " --tie 8", 0,
     r"^specmoe: warning: --tie 8: most acceptance probabilities clip to 0 or 1"),
    ("warning", "every draft accepted", SYNTH + " --accept-prob 1", 0,
     r"^specmoe: warning: --accept-prob 1: drafts \(almost\) always rejected or always "
     r"accepted"),
    ("warning", "every draft rejected", SYNTH + " --accept-prob 0", 0,
     r"^specmoe: warning: --accept-prob 0: .*acceptance tells nothing about overlap"),
    ("warning", "stickiness of 1", SYNTH + " --stickiness 1", 0,
     r"^specmoe: warning: --stickiness 1: every token keeps the previous token's experts"),
    ("warning", "extreme skew", SYNTH + " --skew 6", 0,
     r"^specmoe: warning: --skew 6: a Zipf exponent above 4 sends nearly every token"),
    ("warning", "very long requests", "synth --out {d}/s.parquet --layers 1 --requests 1 "
     "--steps 5000 --n 16 --experts-per-token 2", 0,
     r"^specmoe: warning: --steps 5000: over 4,096 SD steps per request"),
    ("warning", "drafts costing K decode steps", PRED + " --draft-cost 3", 0,
     r"^specmoe: warning: --draft-cost 3 at K = 3: the drafts cost at least K decode steps, .*"
     r"SD cannot pay$"),
    # a draft slower than one decode step still pays at a high acceptance (it warned that SD
    # could not, while its own verdict said SD pays)
    ("accepted", "drafts costing more than a decode step",
     PRED + " --draft-cost 1.5 --acceptance-length 3.8", 0, OK),
    # --- file: parses, but means something else ------------------------------------------------
    ("file", "nested JSON array of loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/nested.json",
     2, r"nested.json: a nested JSON array is not a list of loads"),
    ("file", "2-D loads of one row", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/one-row.json", 2,
     r"one-row.json: a nested JSON array is not a list of loads"),
    # loads near the float limit: their sum overflowed to inf, every share became 0 and the
    # IPF answered 0 unique experts
    ("file", "loads near the float limit", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 "
     "--loads {d}/huge.csv", 0, OK),
    ("file", "JSON object as loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/object.json", 2,
     r"object.json: expected numbers"),
    ("file", "booleans as loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/bools.json", 2,
     r"bools.json: expected numbers"),
    ("file", "strings as loads", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/strings.json", 2,
     r"strings.json: expected numbers"),
    ("file", "config.json without KV heads (Qwen3-MoE: transformers' 4)",
     "te --config {d}/qwen-no-kv.json --tp 8", 0, OK),
    ("file", "config.json without KV heads of an unknown model type",
     "te --config {d}/unknown-no-kv.json", 2,
     r"unknown-no-kv.json: no num_key_value_heads, and model_type 'frobmoe' is not one whose "
     r"default is known here"),
    ("file", "7.5 experts per token", "te --config {d}/k-fraction.json", 2,
     r"k-fraction.json: num_experts_per_tok = 7.5 is not a whole number"),
    ("file", "experts per token as a string", "te --config {d}/k-string.json", 2,
     r"k-string.json: num_experts_per_tok = '8' is not a whole number"),
    ("file", "zero experts", "te --config {d}/n-zero.json", 2,
     r"n-zero.json: num_experts = 0 must be >= 1"),
    ("file", "negative hidden size", "te --config {d}/hidden-negative.json", 2,
     r"hidden-negative.json: hidden_size = -2048 must be >= 1"),
    ("file", "boolean layers", "te --config {d}/layers-bool.json", 2,
     r"layers-bool.json: num_hidden_layers = True is not a whole number"),
    ("file", "more experts per token than experts", "te --config {d}/k-above-n.json", 2,
     r"k-above-n.json: 256 experts per token of 128 experts"),
    ("file", "KV heads not dividing the heads", "te --config {d}/kv-odd.json", 2,
     r"kv-odd.json: 5 key/value heads do not divide the 32 attention heads"),
    ("file", "config.json a JSON array", "te --config {d}/list.json", 2,
     r"list.json: a config.json is a JSON object of settings, not a list"),
    ("file", "predict on a config.json without KV heads of an unknown type",
     "predict {d}/unknown-no-kv.json --batch-sizes 1", 2,
     r"unknown-no-kv.json: model_type 'frobmoe' is not one whose layer layout is modelled"),
    ("file", "trace with a row cut out of a window", "analyze {d}/cut.parquet", 2,
     r"cut.parquet: the window of request 1 step 2 is not whole: positions \[0, 1, 3\] where "
     r"0..3 are expected \(a row is missing\)"),
    ("file", "trace with a window's last row cut", "analyze {d}/cut-last.parquet", 2,
     r"cut-last.parquet: the window of request 0 step 0 is not whole: positions \[0, 1, 2\] "
     r"where 0..3 are expected"),
    ("file", "trace with a window's first row cut", "analyze {d}/cut-first.parquet", 2,
     r"the window of request 0 step 1 is not whole: positions \[1, 2, 3\]"),
    ("file", "hardware file with an entry that is a number",
     PRED + " --hardware-file {d}/hw-scalar.yaml --hardware X1", 2,
     r"hw-scalar.yaml: hardware entry X1 is not a mapping of its numbers"),
    ("file", "hardware file naming no such GPU", PRED + " --hardware-file {d}/hw-h100.yaml "
     "--hardware X9", 2, r"--hardware X9: not in .*hw-h100.yaml \(has H100\) nor shipped"),
    ("contradiction", "hardware file giving a key twice",
     PRED + " --hardware-file {d}/hw-twice.yaml --hardware H100", 2,
     r"hw-twice.yaml: line 4: key 'hbm_bandwidth_gbs' is given twice \(first on line 3\)"),
    ("file", "hardware file with a negative step overhead",
     PRED + " --hardware-file {d}/hw-negative-overhead.yaml --hardware G1", 2,
     r"hardware G1: step_overhead_us must be >= 0, got -8000$"),
    ("file", "hardware file with a key no hardware entry has (sm_count: nothing reads it)",
     PRED + " --hardware-file {d}/hw-half-sm.yaml --hardware G1", 2,
     r"hardware G1: unknown key 'sm_count' \(a hardware entry has hbm_bandwidth_gbs, "),
    ("file", "Jamba's layout (Mamba layers, MoE every other layer)", "predict {d}/jamba.json "
     "--batch-sizes 1", 2, r"jamba.json: Mamba layers between attention layers \(Jamba\) "
     r"\(attn_layer_period\) are not modelled: .* would be wrong$"),
    ("internal", "a study repo past its published overlap steps",
     "predict Qwen/Qwen3-30B-A3B-FP8 --draft-length 5 --batch-sizes 1", 2,
     r"the study publishes overlaps for steps 1..4 only \(Qwen3-30B, K = 5\): give the "
     r"overlaps for d = 1..5 \(--overlaps\)$"),
    ("file", "hardware file with a negative bandwidth",
     PRED + " --hardware-file {d}/hw-negative.yaml --hardware H100", 2,
     r"hbm_bandwidth_gbs"),
    # --- contradiction: flags that contradict or are ignored -----------------------------------
    ("contradiction", "--hidden given twice", DIMS + " --hidden 4096", 2,
     r"--hidden given twice \(2048 and 4096\); give it once"),
    ("contradiction", "--experts-per-token given twice to ipf", IPF + " --experts-per-token 4", 2,
     r"--experts-per-token given twice \(8 and 4\); give it once"),
    # --k meant experts per token in ipf, te and synth and the draft length in predict: each
    # old spelling is refused with the flag it is now
    ("contradiction", "--k in ipf, now --experts-per-token", "ipf --k 8 --n 128 --overlaps 0.3",
     2, r"^specmoe ipf: error: --k is now --experts-per-token \(experts per token\)$"),
    ("contradiction", "--k in te", DIMS.replace("--experts-per-token", "--k"), 2,
     r"^specmoe te: error: --k is now --experts-per-token \(experts per token\)$"),
    ("contradiction", "--k-draft in te", DIMS + " --k-draft 3", 2,
     r"^specmoe te: error: --k-draft is now --draft-length \(the draft length K\)$"),
    ("contradiction", "--k in synth", SYNTH + " --k=2", 2,
     r"^specmoe synth: error: --k is now --experts-per-token \(experts per token\)$"),
    ("contradiction", "--k-draft in synth", SYNTH + " --k-draft 3", 2,
     r"^specmoe synth: error: --k-draft is now --draft-length \(the draft length K\)$"),
    ("contradiction", "--k in predict, now --draft-length", PRED + " --k 3", 2,
     r"^specmoe predict: error: --k is now --draft-length \(the draft length K\)$"),
    ("contradiction", "a flag given twice with the same value", IPF + " --n 128", 2,
     r"--n given twice \(128 and 128\)"),
    ("contradiction", "--overlaps given twice", IPF + " --overlaps 0.4", 2,
     r"--overlaps given twice \(0.431,0.356,0.328 and 0.4\)"),
    ("contradiction", "a flag given twice, abbreviated", DIMS + " --hid 4096", 2,
     r"--hidden given twice"),
    ("contradiction", "a flag given twice with =", IPF + " --batch=2 --batch=4", 2,
     r"--batch given twice \(2 and 4\)"),
    ("contradiction", "--out given twice", SYNTH + " --out {d}/t.parquet", 2,
     r"--out given twice"),
    ("contradiction", "--method given twice", PRED + " --method eagle3 --method mtp", 2,
     r"--method given twice \(eagle3 and mtp\)"),
    ("contradiction", "--precision given twice", PRED + " --precision fp8 --precision bf16", 2,
     r"--precision given twice"),
    ("contradiction", "acceptance length of three numbers", PRED + " --acceptance-length 2,3,4",
     2, r"--acceptance-length must be one tau or a range low,high \(got 3 numbers: '2,3,4'\)"),
    ("contradiction", "acceptance range high before low", PRED + " --acceptance-length 3,2", 2,
     r"--acceptance-length 3,2: a range is low,high \(low first\)"),
    ("contradiction", "--revision beside a local file", PRED + " --revision abc123", 2,
     r"--revision abc123 beside the local file .*: a revision is a commit of a Hugging Face "
     r"repository"),
    ("contradiction", "online fp8 on an mxfp4 checkpoint", f"predict {GPT_OSS} --precision fp8",
     2, r"gpt-oss-120b.json: precision fp8 on a checkpoint quantised with mxfp4: vLLM refuses "
        r"--quantization fp8"),
    ("contradiction", "bf16 on an mxfp4 checkpoint", f"predict {GPT_OSS} --precision bf16", 2,
     r"precision bf16 on a checkpoint quantised with mxfp4: vLLM keeps its mxfp4 weights"),
    ("contradiction", "bf16 on an fp8 checkpoint", PRED + " --precision bf16", 2,
     r"precision bf16 on a checkpoint quantised with fp8: vLLM keeps its fp8 weights"),
    ("contradiction", "te fp8 on an int4 checkpoint (Kimi-K2.5)",
     f"te --config {CONFIGS / 'Kimi-K2.5.json'} --dtype fp8", 2,
     r"Kimi-K2.5.json: precision fp8 on a checkpoint quantised with compressed-tensors: vLLM "
     r"refuses --quantization fp8"),
    ("contradiction", "a subcommand's flag before the subcommand", "--json " + IPF, 2,
     r"unrecognized arguments: --json; give it after the subcommand$"),
    ("contradiction", "te fp16 on an fp8 checkpoint", f"te --config {QWEN_FP8} --dtype fp16", 2,
     r"precision fp16 on a checkpoint quantised with fp8"),
    ("contradiction", "--fit-to Mixtral onto 8 of 128", "synth --out {d}/s.parquet "
     "--fit-to Mixtral-8x7B", 2,
     r"fit_to Mixtral-8x7B: its curve is of 2 of 8 experts \(N/k = 4\), this generator routes "
     r"8 of 128 \(N/k = 16\)"),
    ("contradiction", "--fit-to Qwen3-30B onto 2 of 8", "synth --out {d}/s.parquet --n 8 --experts-per-token 2 "
     "--fit-to Qwen3-30B", 2, r"fit_to Qwen3-30B: its curve is of 8 of 128 experts"),
    ("contradiction", "draft cost beside a draft config",
     PRED + " --method draft_model --draft-config {d}/draft.json --draft-cost 0.1", 2,
     r"--draft-cost beside --draft-config: a known cost replaces the drafter's"),
    ("contradiction", "a draft config for MTP", PRED + " --method mtp --draft-config "
     "{d}/draft.json", 2, r"--draft-config beside --method mtp"),
    ("contradiction", "EAGLE-3 head of another vocabulary",
     PRED + " --method eagle3 --draft-config {d}/eagle3-vocab.json", 2,
     r"eagle3-vocab.json's vocabulary \(32,000\) is not the target's \(151,936\): a different "
     r"vocabulary"),
    ("contradiction", "EAGLE head of another width",
     PRED + " --method eagle3 --draft-config {d}/eagle3-wide.json", 2,
     r"eagle3-wide.json reads hidden states of width 4096, the target's are 2048"),
    ("contradiction", "draft model of another tokenizer",
     PRED + " --method draft_model --draft-config {d}/draft.json", 2,
     r"draft.json's vocabulary \(32,000\) is not the target's \(151,936\): a different "
     r"tokenizer"),
    ("contradiction", "a MoE given as a dense draft model",
     PRED + f" --method draft_model --draft-config {QWEN}", 2,
     r"Qwen3-30B-A3B.json is a MoE \(128 experts\) given as a draft model: a draft model is "
     r"sized and priced as dense"),
    ("contradiction", "study model of another routing", PRED + " --study-model Mixtral-8x7B", 2,
     r"--study-model Mixtral-8x7B routes 2 of 8 experts; this model 8 of 128"),
    # --- internal: what was an internal error or a traceback ---------------------------------
    ("internal", "binary loads file", "ipf --experts-per-token 2 --n 4 --overlaps 0.3 --loads {d}/binary.bin", 2,
     r"binary.bin: --loads is not text"),
    ("internal", "binary config.json", "te --config {d}/binary.bin", 2,
     r"binary.bin: not a text file \(JSON is text\)"),
    ("internal", "binary config.json to predict", "predict {d}/binary.bin --batch-sizes 1", 2,
     r"binary.bin: not a text file"),
    ("internal", "binary hardware file", PRED + " --hardware-file {d}/binary.bin", 2,
     r"binary.bin: not a text file \(--hardware-file is YAML or JSON\)"),
    ("internal", "binary draft config", PRED + " --method eagle3 --draft-config {d}/binary.bin",
     2, r"binary.bin: not a text file"),
    ("internal", "binary trace", "analyze {d}/binary.bin", 2,
     r"binary.bin: not a readable Parquet file"),
    ("internal", "config.json a JSON string", "te --config {d}/string.json", 2,
     r"string.json: a config.json is a JSON object of settings, not a str"),
    ("internal", "draft config a JSON array",
     PRED + " --method eagle3 --draft-config {d}/list.json", 2,
     r"list.json: a config.json is a JSON object of settings, not a list"),
    ("internal", "predict a JSON array", "predict {d}/list.json", 2,
     r"list.json: a config.json is a JSON object of settings"),
    ("internal", "hidden size a string in config.json", "te --config {d}/hidden-string.json", 2,
     r"hidden-string.json: hidden_size = 'big' is not a whole number"),
    ("internal", "huge seed", SYNTH + " --seed 99999999999999999999999", 0, OK),
    # --- accepted: right inputs answer with nothing on stderr ----------------------------------
    ("accepted", "ipf as documented", IPF, 0, OK),
    ("accepted", "k = N with overlap 1", "ipf --experts-per-token 8 --n 8 --overlaps 1", 0, OK),
    ("accepted", "overlap exactly at 2k - N", "ipf --experts-per-token 6 --n 8 --overlaps 0.6667", 0, OK),
    ("accepted", "a study checkpoint by repo id, offline from the package",
     "predict Qwen/Qwen3-30B-A3B-FP8 --batch-sizes 1 --hardware H100", 0, OK),
    ("accepted", "the shipped H100 overlaid by a file without nvlink_gbs",
     PRED.replace("--batch-sizes 1", "--batch-sizes 1") + " --tp 2 --hardware-file "
     "{d}/hw-h100.yaml --hardware H100", 0, OK),
    ("accepted", "online fp8 of a bf16 checkpoint", f"predict {QWEN} --precision fp8 "
     "--batch-sizes 1", 0, OK),
    ("accepted", "fp8 on an fp8 checkpoint", PRED + " --precision fp8", 0, OK),
    ("accepted", "a tie of the default configuration's 3", SYNTH + " --tie 3", 0, OK),
    ("accepted", "a draft model of the target's vocabulary",
     PRED + " --method draft_model --draft-config {d}/draft-qwen.json", 0, OK),
    ("accepted", "fit-to of the same granularity", "synth --out {d}/s.parquet --n 64 --experts-per-token 4 "
     "--layers 2 --requests 2 --steps 4 --fit-to Qwen3-30B", 0, OK),
    ("accepted", "a whole trace of 10 requests", "analyze {d}/trace.parquet", 0, OK),
    ("accepted", "config.json with whole-number floats", "te --config {d}/floats.json", 0, OK),
]


def _trace(path: Path, requests: int, steps: int, cut=None) -> None:
    """A synthetic trace of requests x steps windows of K+1 = 4 rows; `cut`: drop that row."""
    from specmoe.routing.synth import SynthParams, generate
    from specmoe.routing.trace import Trace, write_trace

    tr = generate(SynthParams(num_experts=16, top_k=2, num_layers=2, requests=requests,
                              steps=steps, seed=1))
    if cut is not None:
        keep = np.ones(len(tr), bool)
        keep[cut(tr)] = False
        tr = Trace(experts=tr.experts[keep], columns={k: v[keep] for k, v in tr.columns.items()},
                   num_experts=tr.num_experts, k_draft=tr.k_draft, meta=tr.meta)
        path.write_bytes(b"")
        _write_unchecked(path, tr)
        return
    write_trace(path, tr)


def _write_unchecked(path: Path, tr) -> None:
    """Write a trace as a broken writer would: without write_trace's own check."""
    from specmoe.routing import trace as trace_mod

    real = trace_mod.Trace.validate
    trace_mod.Trace.validate = lambda self, source="trace": None
    try:
        trace_mod.write_trace(path, tr)
    finally:
        trace_mod.Trace.validate = real


def _row(request: int, step: int, position: int):
    def pick(tr):
        c = tr.columns
        return np.flatnonzero((c["request"] == request) & (c["step"] == step)
                              & (c["position"] == position))
    return pick


QWEN_CFG = json.loads(QWEN.read_text())
EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 2048,
          "vocab_size": 151936, "draft_vocab_size": 32000, "num_hidden_layers": 1,
          "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 8192,
          "torch_dtype": "bfloat16"}
DRAFT = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
         "vocab_size": 32000, "num_hidden_layers": 4, "num_attention_heads": 16,
         "num_key_value_heads": 4, "intermediate_size": 2816, "torch_dtype": "bfloat16"}


def _without(d: dict, *keys) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def _fixtures(d: Path) -> None:
    texts = {"nested.json": "[[1, 2], [3, 4]]", "one-row.json": "[[4, 2, 1, 1]]",
             "huge.csv": "1e308 1e308 1e308 1e308\n", "ones.csv": "1 1 1 1\n",
             "object.json": '{"loads": [1, 2, 3, 4]}', "bools.json": "[true, false, true, true]",
             "strings.json": '["1", "2", "3", "4"]', "list.json": "[1, 2]",
             "string.json": '"config"',
             "hw-h100.yaml": "hardware:\n  H100: {hbm_bandwidth_gbs: 3000}\n",
             "hw-scalar.yaml": "hardware:\n  X1: 5\n",
             "hw-negative.yaml": "hardware:\n  H100: {hbm_bandwidth_gbs: -1}\n",
             "hw-negative-overhead.yaml": "hardware:\n  G1: {hbm_bandwidth_gbs: 3350, "
                                          "peak_tflops: {bf16: 989}, step_overhead_us: -8000}\n",
             "hw-half-sm.yaml": "hardware:\n  G1: {hbm_bandwidth_gbs: 3350, "
                                "peak_tflops: {bf16: 989}, sm_count: 132.5}\n",
             "hw-twice.yaml": "hardware:\n  H100:\n    hbm_bandwidth_gbs: 3000\n"
                              "    hbm_bandwidth_gbs: 3350\n"}
    for name, text in texts.items():
        (d / name).write_text(text)
    (d / "binary.bin").write_bytes(bytes(range(256)) * 4)
    configs = {
        "qwen-no-kv.json": _without(QWEN_CFG, "num_key_value_heads"),
        "unknown-no-kv.json": {**_without(QWEN_CFG, "num_key_value_heads"),
                               "model_type": "frobmoe"},
        "k-fraction.json": {**QWEN_CFG, "num_experts_per_tok": 7.5},
        "k-string.json": {**QWEN_CFG, "num_experts_per_tok": "8"},
        "n-zero.json": {**QWEN_CFG, "num_experts": 0},
        "hidden-negative.json": {**QWEN_CFG, "hidden_size": -2048},
        "hidden-string.json": {**QWEN_CFG, "hidden_size": "big"},
        "layers-bool.json": {**QWEN_CFG, "num_hidden_layers": True},
        "k-above-n.json": {**QWEN_CFG, "num_experts_per_tok": 256},
        "k6-of-8.json": {**QWEN_CFG, "num_experts": 8, "num_experts_per_tok": 6},
        "kv-odd.json": {**QWEN_CFG, "num_key_value_heads": 5},
        "floats.json": {**QWEN_CFG, "num_experts_per_tok": 8.0, "hidden_size": 2048.0},
        "eagle3-vocab.json": {**EAGLE3, "vocab_size": 32000},
        "eagle3-wide.json": {**EAGLE3, "hidden_size": 4096, "num_key_value_heads": 8},
        "draft.json": DRAFT,
        "jamba.json": {**QWEN_CFG, "model_type": "jamba", "attn_layer_period": 8,
                       "attn_layer_offset": 4, "expert_layer_period": 2,
                       "expert_layer_offset": 1},
        "draft-qwen.json": {**DRAFT, "vocab_size": 151936},
    }
    for name, cfg in configs.items():
        (d / name).write_text(json.dumps(cfg))
    _trace(d / "trace.parquet", 10, 4)  # bootstrap.MIN_REQUESTS: intervals, no warning
    _trace(d / "one-window.parquet", 1, 1)
    _trace(d / "few.parquet", 2, 4)
    _trace(d / "cut.parquet", 3, 4, cut=_row(1, 2, 2))
    _trace(d / "cut-last.parquet", 3, 4, cut=_row(0, 0, 3))
    _trace(d / "cut-first.parquet", 3, 4, cut=_row(0, 1, 0))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("meaning")
    _fixtures(d)
    return d


def run(args: str, folder: Path, capsys) -> tuple[int, str]:
    argv = [a.replace("{d}", str(folder)) for a in shlex.split(args)]
    try:
        got = cli.main(argv)
    except SystemExit as exc:  # the parser's own errors
        got = exc.code
    return got, capsys.readouterr().err


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines:\n{stderr}"
    assert "Traceback" not in stderr and "internal error" not in stderr
    return lines[0]


@pytest.mark.parametrize("cls,label,args,status,pattern", CASES, ids=[c[1] for c in CASES])
def test_the_command(cls, label, args, status, pattern, folder, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(folder)
    got, err = run(args, folder, capsys)
    assert got == status, err
    if pattern is OK:
        assert err == "", err
    else:
        line = one_line(err)
        assert re.search(pattern, line), err
        assert line.startswith("specmoe: warning: ") == (cls == "warning"), line


def test_loads_near_the_float_limit_are_the_shares_they_say(folder, capsys):
    """Four equal loads of 1e308 are four equal shares: 3.4 unique experts, as [1, 1, 1, 1]
    give (their sum overflowed and the IPF answered 0)."""
    for loads in ("huge.csv", "ones.csv"):
        assert cli.main(["ipf", "--experts-per-token", "2", "--n", "4", "--overlaps", "0.3",
                         "--loads", str(folder / loads)]) == 0
        assert re.search(r"^unique +3\.4000$", capsys.readouterr().out, re.M)


def test_the_corpus_is_broad():
    """At least 90 cases, every class represented, labels unique."""
    assert len(CASES) >= 90
    assert {c[0] for c in CASES} == {"range", "warning", "file", "contradiction", "internal",
                                     "accepted"}
    assert len({c[1] for c in CASES}) == len(CASES)


# --- one owner per check: the command and the workflow fed the same input ----------------------

def _engine(method: str, drafter: str):
    from specmoe.checks.preflight import Engine

    return Engine(job=f"sweep_sd qwen/{drafter}/K3", model="qwen", entry={}, hardware={},
                  hardware_name="H100", tp=1, precision="auto", method=method,
                  drafter={"name": drafter}, k=3, max_model_len=4096, batch=1, output_tokens=64,
                  prompt_tokens={}, utilization=0.9, offline_server=False)


@pytest.mark.parametrize("method,drafter", [("eagle3", "eagle3-vocab.json"),
                                            ("eagle3", "eagle3-wide.json"),
                                            ("draft_model", "draft.json"),
                                            ("draft_model", QWEN.name)])
def test_the_drafter_check_is_the_preflights(method, drafter, folder, capsys):
    """`specmoe predict --draft-config` refuses a drafter with the line the workflow's preflight
    gives the same drafter of the same target (checks.preflight.drafter_problems)."""
    from specmoe.checks import preflight

    path = QWEN if drafter == QWEN.name else folder / drafter
    target = json.loads(QWEN_FP8.read_text())
    findings = preflight._method(_engine(method, str(path)), preflight._text(target),
                                 json.loads(path.read_text()), "")
    assert findings and all(f.fatal and f.check == "drafter" for f in findings)
    got, err = run(f"{PRED} --method {method} --draft-config {path}", folder, capsys)
    assert got == 2
    assert one_line(err) == f"specmoe: error: {findings[0].message}".replace(
        str(path), f"--draft-config {path}", 1)


def test_the_hardware_file_overlays_as_the_workflow_does(folder):
    """An H100 entry of a --hardware-file that gives one key is the shipped H100 with that key
    changed, as the workflow resolves its configuration's `hardware` (Config.hardware), so TP 2
    is priced with the shipped NVLink bandwidth."""
    import copy

    import yaml

    from specmoe.config import Config
    from specmoe.cost import predictor
    from specmoe.cost.costmodel import Hardware

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["hardware"] = {**cfg.get("hardware", {}), "H100": {"hbm_bandwidth_gbs": 3000}}
    schema = REPO / "workflow/schemas/config.schema.yaml"
    workflow = Hardware.from_config("H100", Config.load(cfg, schema).hardware["H100"])
    command, caveats = predictor.hardware("H100", str(folder / "hw-h100.yaml"))
    assert command == workflow
    assert command.hbm_bandwidth == 3000e9 and command.nvlink_bandwidth > 0
    assert caveats == [f"hardware H100 from {folder / 'hw-h100.yaml'}: its numbers are the "
                       "file's over the shipped entry"]


def test_the_kv_head_defaults_are_transformers():
    """KV_HEADS_DEFAULT is what transformers' config class of each model type reads where a
    config.json has no num_key_value_heads ("heads": the number of attention heads)."""
    transformers = pytest.importorskip("transformers")
    from specmoe.cost.hfconfig import KV_HEADS_DEFAULT

    checked = 0
    for model_type, default in KV_HEADS_DEFAULT.items():
        # a head count every class accepts (hidden 4096 = 32 heads x 128)
        c = transformers.CONFIG_MAPPING[model_type](num_attention_heads=32, hidden_size=4096)
        want = 32 if default == "heads" else default
        text = getattr(c, "text_config", None)  # a multimodal wrapper: its language model's
        got = getattr(c, "num_key_value_heads", None) or getattr(text, "num_key_value_heads", None)
        assert got == want, model_type
        checked += 1
    assert checked == len(KV_HEADS_DEFAULT)


def test_a_config_without_kv_heads_is_read_with_its_model_types_default(folder, capsys):
    """Qwen3-MoE's config.json without num_key_value_heads is priced with transformers' default
    of Qwen3MoeConfig (4), as the file that states it, not with one KV head per attention head."""
    answers = []
    for path in (folder / "qwen-no-kv.json", QWEN):
        assert cli.main(["te", "--config", str(path), "--tp", "2", "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0] == answers[1]
