"""Every configuration value checked against what it means (#42): a corpus of configurations that
parse and have the right types but cannot be right, one table. Each case is an edit of config.yaml
(merged as `--configfile` merges a file), the exit status the workflow's parse gives it and a
pattern its one line on stderr must match; a value that is possible but unusual passes (status 0)
with one warning line naming the consequence.

Cases run `specmoe.config.for_workflow`, what workflow/rules/common.smk runs when the workflow is
parsed (it stops with status 1 and the message, `sys.exit`), with the prompt table the
configuration names (`tiny.prompts`), offline (the preflight without vLLM's own checks). A sample
runs through `snakemake -n` itself, and vLLM's own checks run offline from the shipped config.json
files (both slow).
"""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from specmoe import yamlfile
from specmoe.config import for_workflow
from specmoe.errors import InputError
from test_bad_inputs import (BASE, EAGLE, GLM, MTP, QWEN, both, hf_cache, merge, model,  # noqa: F401
                             one_line, study)
from wf import REPO

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
OK = None  # accepted: nothing on stderr
SF, TF = "synth-fine", "tiny-fine"


def synth(name=SF, **kw):
    """An edit: update the generator of the synthetic model `name`."""
    def edit(c):
        next(m for m in c["models"] if m["name"] == name)["synthetic"].update(kw)
    return edit


def table(text: str | bytes | None, name="prompts.csv"):
    """An edit: tiny.prompts names a file written in the case's folder ({d}), with `text` (None:
    the folder itself)."""
    def edit(c, d):
        path = d / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        elif text is not None:
            path.write_text(text)
        c["tiny"]["prompts"] = str(path if text is not None else d)
    edit.needs_folder = True
    return edit


COST_ONLY = {"name": "qwen-cost", "source": "hf", "repo_id": "Qwen/Qwen3-30B-A3B", "cost_only": True}

# (label, edit, exit status, the line's pattern)
CASES = [
    # --- keys far from every known key (the regression: they passed with status 0) ---
    ("a top-level key far from any", merge(bogus=1), 1,
     r"^config: bogus: unknown key \(known: ks, batch_sizes, .*tiny\)$"),
    ("a top-level mapping far from any", merge(foo_bar={"x": 1}), 1,
     r"^config: foo_bar: unknown key \(known: ks, "),
    ("a sweep key far from any", merge(sweep={"zzz": 1}), 1,
     r"^config: sweep\.zzz: unknown key \(known: schedule, output_len, "),
    ("a model key far from any", model(SF, qqqq=1), 1,
     r"^config: models\[3\]\.qqqq \(model 'synth-fine'\): unknown key \(known: name, source, "),
    ("a tiny key far from any", merge(tiny={"xyzzy": 2}), 1,
     r"^config: tiny\.xyzzy: unknown key \(known: prompts, vocab_size, "),
    ("a hardware key far from any", lambda c: c["hardware"]["CPU"].update(qq=1), 1,
     r"^config: hardware\.CPU\.qq: unknown key \(known: hbm_bandwidth_gbs, "),
    # --- each number within the range its meaning gives it (the schema) ---
    ("a shape margin of 500%", merge(sweep={"shape_margin": 5}), 1,
     r"^config: sweep\.shape_margin: must be a number >= 0 and < 1 \(got 5\)$"),
    ("a shape margin of 100%", merge(sweep={"shape_margin": 1}), 1,
     r"^config: sweep\.shape_margin: must be a number >= 0 and < 1 \(got 1\)$"),
    ("an acceptance length of 100", merge(plan={"tau": 100}), 1,
     r"^config: plan\.tau: must be a number >= 1 and <= 9 \(got 100\)$"),
    ("a SLURM limit below the estimate", merge(plan={"safety": 0.5}), 1,
     r"^config: plan\.safety: must be a number >= 1 \(got 0\.5\)$"),
    ("an engine spread of e-fold", merge(sweep={"engine_log_sd": 2}), 1,
     r"^config: sweep\.engine_log_sd: must be a number >= 0 and <= 1 \(got 2\)$"),
    ("an engine spread measured on a device the sweeps do not know",
     merge(sweep={"engine_log_sd_device": "gpu"}), 1,
     r"^config: sweep\.engine_log_sd_device: must be one of cpu, cuda, null \(got 'gpu'\); "
     r"did you mean 'cpu'\?$"),
    ("an engine spread that names no device", merge(sweep={"engine_log_sd_device": None}), 1,
     r"^config: sweep\.engine_log_sd 0\.043 names no device: set sweep\.engine_log_sd_device "
     r"to the one it was measured on \(cpu or cuda\); only series swept there take it$"),
    ("no engine spread and no device", merge(sweep={"engine_log_sd": 0,
                                                    "engine_log_sd_device": None}), 0, OK),
    ("a learning rate of 5", merge(tiny={"train": {"lr": 5}}), 1,
     r"^config: tiny\.train\.lr: must be a number > 0 and <= 1 \(got 5\)$"),
    ("the former shuffle seed", merge(shuffle_seed=0), 1,
     r"^config: shuffle_seed: replaced by shuffle_null \(true or false\): the shuffle null is "
     r"exact, no permutation is drawn, so a seed's value changed nothing$"),
    ("a negative training seed", model(TF, seed=-3), 1,
     r"^config: models\[0\]\.seed \(model 'tiny-fine'\): must be an integer >= 0 \(got -3\)$"),
    ("a negative drafter seed", lambda c: c["drafters"][0].update(seed=-1), 1,
     r"^config: drafters\[0\]\.seed \(drafter 'tiny-drafter'\): must be an integer >= 0"),
    ("a negative generator seed", synth(seed=-2), 1,
     r"^config: models\[3\]\.synthetic\.seed \(model 'synth-fine'\): must be an integer >= 0"),
    ("overlaps past K = 8", model(SF, overlaps=[0.3] * 9), 1,
     r"^config: models\[3\]\.overlaps \(model 'synth-fine'\): must have at most 8 item\(s\) "
     r"\(got 9\)$"),
    ("an overlap above 1", model(SF, overlaps=[0.3, 1.2]), 1,
     r"models\[3\]\.overlaps\[1\] .*: must be a number >= 0 and <= 1 \(got 1\.2\)$"),
    ("a misspelt peak dtype", lambda c: c["hardware"]["CPU"]["peak_tflops"].update(bf61=1), 1,
     r"^config: hardware\.CPU\.peak_tflops\.bf61: unknown key; did you mean 'bf16'\?$"),
    ("a peak dtype in capitals", lambda c: c["hardware"]["CPU"]["peak_tflops"].update(FP32=1),
     1, r"^config: hardware\.CPU\.peak_tflops\.FP32: unknown key; did you mean 'fp32'\?$"),
    ("a peak of a format that multiplies in another",
     lambda c: c["hardware"]["CPU"]["peak_tflops"].update(mxfp4=1), 1,
     r"^config: hardware\.CPU\.peak_tflops\.mxfp4: unknown key"),
    ("a hardware key nothing reads", lambda c: c["hardware"]["CPU"].update(sm_count=2), 1,
     r"^config: hardware\.CPU\.sm_count: unknown key"),
    ("a batch size twice", merge(batch_sizes=[1, 2, 2]), 1,
     r"^config: batch_sizes: lists a value twice \(got \[1, 2, 2\]\): give each once$"),
    ("a profiled batch twice", merge(profiling={"batch_sizes": [1, 1]}), 1,
     r"^config: profiling\.batch_sizes: lists a value twice"),
    ("a drafter twice", model(TF, drafters=["tiny-drafter", "tiny-drafter"]), 1,
     r"^config: models\[0\]\.drafters \(model 'tiny-fine'\): lists a value twice"),
    ("a dataset twice", model("tiny-coarse", datasets=["heldout-code", "heldout-code"]), 1,
     r"^config: models\[2\]\.datasets \(model 'tiny-coarse'\): lists a value twice"),
    ("a NaN learning rate", merge(tiny={"train": {"lr": float("nan")}}), 1,
     r"^config: tiny\.train\.lr: must be a finite number \(got nan\)$"),
    ("an infinite bandwidth", lambda c: c["hardware"]["CPU"].update(hbm_bandwidth_gbs=float("inf")),
     1, r"^config: hardware\.CPU\.hbm_bandwidth_gbs: must be a finite number \(got inf\)$"),
    ("a NaN acceptance probability", synth("synth-coarse", accept_prob=[0.5, float("nan")]), 1,
     r"^config: models\[4\]\.synthetic\.accept_prob\[1\] \(model 'synth-coarse'\): must be a "
     r"finite number \(got nan\)$"),
    ("a NaN shape margin", merge(sweep={"shape_margin": float("nan")}), 1,
     r"^config: sweep\.shape_margin: must be a finite number \(got nan\)$"),
    ("an acceptance length at its bound", merge(plan={"tau": 9}), 0, OK),
    ("a SLURM limit at its estimate", merge(plan={"safety": 1}), 0, OK),
    ("a wide but possible shape margin", merge(sweep={"shape_margin": 0.5}), 0, OK),
    # --- settings that must hold together ---
    ("outputs past the tiny engines' context", merge(sweep={"output_len": 1000}), 1,
     r"^config: sweep\.output_len 1000 \+ the longest prompt \(about 29 tokens\) \+ K\+1 = 1035 "
     r"exceed the tiny engines' max_model_len 1024: vLLM refuses those requests$"),
    # the captures at the sweeps' context (a shorter one is refused: test_engine_precision)
    ("outputs within a longer context", merge(sweep={"output_len": 1000, "max_model_len": 2048},
                                              tiny={"capture": {"max_model_len": 2048}}),
     0, OK),
    ("a context past the tiny models' positions", merge(sweep={"max_model_len": 4096}), 1,
     r"^config: sweep\.max_model_len 4096 exceeds the tiny models' 2048 positions"),
    ("a profile past the tiny engines' context", merge(profiling={"max_tokens": 1020}), 1,
     r"^config: profiling\.max_tokens 1020 \+ the longest prompt .* = 1055 exceed"),
    ("a capture past the tiny engines' context", merge(tiny={"capture": {"max_tokens": 2000}}), 1,
     r"^config: tiny\.capture\.max_tokens 2000 \+ the longest prompt .* exceed the tiny "
     r"engines' max_model_len 1024"),
    ("an SD check past the tiny engines' context", merge(tiny={"sd_check": {"max_tokens": 999}}),
     1, r"^config: tiny\.sd_check\.max_tokens 999 \+ the longest prompt \(about 29 tokens\) \+ "
     r"K\+1 = 1032 exceed"),
    ("a fine model beside a coarse study model", model(TF, compare_with="Mixtral-8x7B"), 1,
     r"^config: model tiny-fine: compare_with 'Mixtral-8x7B' routes 2 of 8 experts, this model "
     r"8 of 64: compare it with a study model of its own k of N \(Qwen2-57B\)$"),
    ("a synthetic model beside another granularity", model(SF, compare_with="GLM-4.7-Flash"), 1,
     r"^config: model synth-fine: compare_with 'GLM-4\.7-Flash' routes 4 of 64 experts, this "
     r"model 8 of 128: .*\(Qwen3-235B, Qwen3-30B\)$"),
    ("a granularity the study does not have", both(
        model("tiny-coarse", compare_with="Qwen3-30B"),
        lambda c: c["models"][2]["arch"].update(num_experts=16, top_k=2)), 1,
     r"model tiny-coarse: compare_with 'Qwen3-30B' routes 8 of 128 experts, this model 2 of "
     r"16: .*\(the study has none\)$"),
    ("a study model beside another study model", study({**GLM, "compare_with": "Qwen3-30B"}), 1,
     r"^config: model glm: compare_with 'Qwen3-30B' routes 8 of 128 experts, this model 4 of "
     r"64: .*\(GLM-4\.7-Flash\)$"),
    ("a study model of its own granularity", study({**GLM, "compare_with": "GLM-4.7-Flash"}), 0,
     OK),
    ("cost-only with drafters and datasets", study({**COST_ONLY, "drafters": ["mtp"],
                                                    "datasets": ["tinybench"]}), 1,
     r"^config: model qwen-cost: cost_only: true gives it no runs, yet it lists drafters and "
     r"datasets: their jobs would not run \(remove them, or cost_only\)$"),
    ("cost-only with datasets", study({**COST_ONLY, "datasets": ["tinybench"]}), 1,
     r"^config: model qwen-cost: cost_only: true gives it no runs, yet it lists datasets:"),
    ("cost-only on a tiny model", model(TF, cost_only=True), 1,
     r"^config: model tiny-fine: cost_only applies to study models \(source hf\); a tiny model "
     r"has no download to cut short: leave it out$"),
    ("cost-only on a synthetic model", model(SF, cost_only=True), 1,
     r"^config: model synth-fine: cost_only applies to study models"),
    ("cost-only alone", study(COST_ONLY), 0, OK),
    ("a study model without runs or cost_only",
     study({k: v for k, v in GLM.items() if k != "drafters"}), 1,
     r"^config: models\[5\] \(model 'glm'\): missing key 'drafters' \(required unless cost_only "
     r"true\)$"),
    ("an acceptance length past K+1", study(GLM, plan={"tau": 5}), 1,
     r"^config: plan\.tau 5 exceeds K\+1 = 4 of model glm's K=3 jobs: an SD step commits at "
     r"most K\+1 tokens, so the GPU plan would underestimate their runtime"),
    ("an acceptance length at K+1", study(GLM, plan={"tau": 4}), 0, OK),
    ("an acceptance length past K+1 with no GPU job", merge(plan={"tau": 8}), 0, OK),
    ("servers given up before they start", study(GLM, sweep={"startup_timeout_s": 60}), 1,
     r"^config: sweep\.startup_timeout_s 60 is shorter than the engine start-up the GPU plan "
     r"assumes \(plan\.startup_s 300\): the sweeps would give up"),
    ("sequences longer than the training corpus",
     merge(tiny={"max_train_tokens": 2000, "train": {"seq_len": 2048}}), 1,
     r"^config: tiny\.max_train_tokens \(2000\) leaves no training sequence of "
     r"tiny\.train\.seq_len 2048 \+ 1 tokens: training would stop at its first step$"),
    ("a study model on a CPU with a short start-up",
     both(study({**GLM, "hardware": "CPU", "precision": "auto"}),
          merge(sweep={"startup_timeout_s": 60})), 0, OK),
    ("an acceptance length past K+1 of a study model on a CPU",
     both(study({**GLM, "hardware": "CPU", "precision": "auto"}), merge(plan={"tau": 6})), 0,
     OK),
    # --- possible but unusual: one warning line naming the consequence ---
    ("no warm-up", merge(sweep={"warmups": 0}), 0,
     r"^config: sweep\.warmups 0: no warm-up request before a batch size is first measured, so "
     r"its first repeat includes the engine's warm-up"),
    # one measurement gives no interval (no spread of repeats) and so no curve's shape
    ("one repeat", merge(sweep={"repeats": 1}), 1,
     r"^config: sweep\.repeats: must be an integer >= 2 \(got 1\)$"),
    ("a billion training steps", model(TF, steps=1_000_000_000), 0,
     r"^config: tiny-fine: steps 1,000,000,000: training runs that many optimizer steps on "
     r"this machine .*\(1,428,571 times the default's 700\)$"),
    ("a billion drafter steps", lambda c: c["drafters"][0].update(steps=10**9), 0,
     r"^config: tiny-drafter: steps 1,000,000,000: training runs"),
    ("a warm-up as long as training", merge(tiny={"train": {"warmup": 700}}), 0,
     r"^config: tiny\.train\.warmup 700 is not below the steps of tiny-fine \(700\), tiny-coarse "
     r"\(700\): their learning rate never reaches tiny\.train\.lr$"),
    ("a billion generator steps", synth(steps=10**9), 0,
     r"^config: synth-fine: synthetic requests x steps x K\+1 x layers x top_k = "
     r"[\d,]+ expert choices in one trace \(about [\d,]+ GiB in memory\)"),
    ("many but fewer training steps", model(TF, steps=20_000), 0, OK),
    # --- a check that cannot run is an error ---
    ("a prompt table that is not shipped", merge(tiny={"prompts": "builtin:v2"}), 1,
     r"^config: tiny\.prompts: builtin:v2: no such prompt table \(or use one of builtin:v1\); "
     r"every dataset check reads it$"),
    ("a prompt table that is missing", merge(tiny={"prompts": "/no/such/prompts.csv"}), 1,
     r"^config: tiny\.prompts: /no/such/prompts\.csv: no such prompt table"),
    ("a prompt table without its columns", table("id,words\n1,hello\n"), 1,
     r"^config: tiny\.prompts: .*prompts\.csv: prompt table lacks column\(s\) prompt_id, "
     r"dataset, category, text; every dataset check reads it$"),
    ("an empty prompt table", table(""), 1, r"prompt table lacks column\(s\) prompt_id"),
    ("a prompt table that is a folder", table(None), 1,
     r"^config: tiny\.prompts: .*: is a directory, not a prompt table \(a CSV file\)"),
    ("a prompt table that is binary", table(bytes(range(128, 256)) * 4), 1,
     r"^config: tiny\.prompts: .*prompts\.csv: not a text file \(a prompt table is a UTF-8 CSV "
     r"file\)"),
    ("a prompt table with a prompt twice",
     table("prompt_id,dataset,category,text\na,tinybench,x,hi\na,tinybench,x,ho\n"), 1,
     r"prompts\.csv: duplicate prompt_id 'a'; every dataset check reads it$"),
    ("a prompt table with an empty prompt",
     table("prompt_id,dataset,category,text\na,tinybench,x,hi\nb,tinybench,x,\n"), 1,
     r"prompts\.csv: prompt 'b' is empty; every dataset check reads it$"),
    # --- found by a review: each passed the parse and failed in a job, or ran wrong ---
    ("a synthetic fit to a study model of another granularity",
     synth(fit_to="Mixtral-8x7B"), 1,
     r"^config: model synth-fine: synthetic\.fit_to Mixtral-8x7B: its curve is of 2 of 8 "
     r"experts \(N/k = 4\), this generator routes 8 of 128"),
    ("a variant compared with a study model of its own choosing",
     model("tiny-fine-bf16", compare_with="Mixtral-8x7B"), 1,
     r"^config: model tiny-fine-bf16: a variant takes 'compare_with' from tiny-fine"),
    ("a variant on other hardware", model("tiny-fine-bf16", hardware="H100"), 1,
     r"^config: model tiny-fine-bf16: a variant takes 'hardware' from tiny-fine"),
    ("engine arguments on a tiny model (never applied)",
     model(TF, engine_args={"max_model_len": 256}), 1,
     r"^config: model tiny-fine: engine_args apply to downloaded \(hf\) models"),
    ("the capture's dtype overridden in its engine arguments",
     merge(tiny={"capture": {"engine_args": {"dtype": "half"}}}), 1,
     r"^config: tiny\.capture\.engine_args\.dtype is set by"),
    ("the sweep's context past the tiny models' positions through engine_args",
     merge(sweep={"engine_args": {"max_model_len": 4096}}), 1,
     r"^config: sweep\.max_model_len 4096 exceeds the tiny models' 2048 positions"),
    # names of hardware and datasets: text that can name a file (YAML reads 4090: as a number)
    ("a GPU named by a number", lambda c: c["hardware"].update(
        {4090: {"hbm_bandwidth_gbs": 1008, "peak_tflops": {"bf16": 165}}}), 1,
     r"^config: hardware: the name 4090 is read as a number, not a name: quote it \('4090'\)$"),
    ("a GPU named by a number that a model runs on", both(
        lambda c: c["hardware"].update({4090: c["hardware"].pop("CPU")}),
        lambda c: [m.update(hardware="4090") for m in c["models"] if m.get("hardware") == "CPU"]),
     1, r"^config: hardware: the name 4090 is read as a number, not a name"),
    ("a dataset named by a number", merge(datasets={2024: {"format": "mt-bench",
                                                           "repo_id": "a/b"}}), 1,
     r"^config: datasets: the name 2024 is read as a number, not a name: quote it \('2024'\)$"),
    ("a GPU name with a space", lambda c: c["hardware"].update(
        {"my gpu": {"hbm_bandwidth_gbs": 1008, "peak_tflops": {"bf16": 165}}}), 1,
     r"^config: hardware: the name 'my gpu' must be letters, digits, '\.', '_' and '-', starting "
     r"with a letter or digit$"),
    # engine_args keys as vLLM reads them ('-' is '_'): one value, the engine's, checked
    ("the sweep's context spelt with dashes past the tiny models' positions",
     merge(sweep={"engine_args": {"max-model-len": 4096}}), 1,
     r"^config: sweep\.max_model_len 4096 exceeds the tiny models' 2048 positions"),
    ("the capture's context spelt with dashes past the tiny models' positions",
     merge(tiny={"capture": {"engine_args": {"max-model-len": 4096}}}), 1,
     r"^config: tiny\.capture\.max_model_len 4096 exceeds the tiny models' 2048 positions"),
    ("the sweep's outputs past its engine_args context",
     merge(sweep={"engine_args": {"max_model_len": 64}}), 1,
     r"^config: sweep\.output_len 48 \+ the longest prompt \(about 29 tokens\) \+ K\+1 = 83 "
     r"exceed the tiny engines' max_model_len 64: vLLM refuses those requests$"),
    ("the sweep's outputs past its context spelt with dashes",
     merge(sweep={"engine_args": {"max-model-len": 64}}), 1,
     r"^config: sweep\.output_len 48 \+ .* exceed the tiny engines' max_model_len 64"),
    ("an engine argument in both spellings",
     merge(sweep={"engine_args": {"max-model-len": 512, "max_model_len": 1024}}), 1,
     r"^config: sweep\.engine_args: max-model-len and max_model_len are one engine argument, "
     r"max_model_len \(vLLM reads '-' as '_'\): give it once$"),
    ("a study model's engine argument in both spellings",
     study({**GLM, "engine_args": {"enforce-eager": True, "enforce_eager": True}}), 1,
     r"^config: model glm: engine_args: enforce-eager and enforce_eager are one engine "
     r"argument"),
    # an engine's context in engine_args: an integer of at least 64, as the sections' own
    ("a word for an engine's context", merge(sweep={"engine_args": {"max_model_len": "big"}}),
     1, r"^config: sweep\.engine_args\.max_model_len: must be an integer >= 64 \(got 'big'\)$"),
    ("a list for the capture engines' context",
     merge(tiny={"capture": {"engine_args": {"max_model_len": [1]}}}), 1,
     r"^config: tiny\.capture\.engine_args\.max_model_len: must be an integer >= 64 "
     r"\(got \[1\]\)$"),
    ("a context of no tokens spelt with dashes",
     merge(profiling={"engine_args": {"max-model-len": 0}}), 1,
     r"^config: profiling\.engine_args\.max-model-len: must be an integer >= 64 \(got 0\)$"),
    # specmoe's own engine argument (the engines' environment) is not the user's to set: it
    # reached the offline engines' LLM(env=...) as an argument vLLM does not know
    ("the engines' environment in engine_args", merge(sweep={"engine_args": {"env": {"A": "1"}}}),
     1, r"^config: sweep\.engine_args\.env is set by the pipeline"),
    # the other engine arguments specmoe reads itself: a word "false" was true to it
    ("eager profiles spelt as a word", merge(profiling={"engine_args": {"enforce_eager": "false"}}),
     1, r"^config: profiling\.engine_args\.enforce_eager: must be true or false \(got 'false'\)$"),
    ("a batched-token budget of none",
     merge(sweep={"engine_args": {"max-num-batched-tokens": 0}}), 1,
     r"^config: sweep\.engine_args\.max-num-batched-tokens: must be an integer >= 1 \(got 0\)$"),
    ("a negative context of a study model",
     study({**GLM, "engine_args": {"max_model_len": -5}}), 1,
     r"^config: models\[5\]\.engine_args\.max_model_len \(model 'glm'\): must be an integer "
     r">= 64 \(got -5\)$"),
    # a tiny drafter is trained as a separate draft model, dense
    ("a tiny drafter served as an EAGLE head",
     lambda c: c["drafters"][0].update(method="eagle"), 1,
     r"^config: drafter tiny-drafter: method eagle: a tiny drafter is a separate draft model, "
     r"served and predicted as one \(method draft_model\): leave method out$"),
    ("a tiny drafter served as MTP layers", lambda c: c["drafters"][0].update(method="mtp"), 1,
     r"^config: drafter tiny-drafter: method mtp: a tiny drafter is a separate draft model"),
    ("a MoE tiny drafter", lambda c: c["drafters"][0].update(arch={
        **{k: v for k, v in c["drafters"][0]["arch"].items() if k != "intermediate"},
        "kind": "moe", "num_experts": 8, "top_k": 2, "expert_intermediate": 32}), 1,
     r"^config: drafter tiny-drafter: arch kind moe: a draft model is sized and priced as dense "
     r"\(every layer's FFN read whole\): give a tiny drafter arch kind dense$"),
    # an arch gives the sizes its kind reads, and no other's (they were accepted and ignored)
    ("a dense tiny drafter with experts", lambda c: c["drafters"][0]["arch"].update(
        num_experts=8, top_k=2), 1,
     r"^config: drafters\[0\]\.arch \(drafter 'tiny-drafter'\): num_experts, top_k: not read "
     r"for kind dense: leave them out$"),
    ("a tiny MoE with a dense MLP width", lambda c: c["models"][2]["arch"].update(
        intermediate=64), 1,
     r"^config: models\[2\]\.arch \(model 'tiny-coarse'\): intermediate: not read for kind "
     r"moe: leave it out$"),
    ("a profiled batch size the sweep does not run", merge(profiling={"batch_sizes": [1, 64]}), 1,
     r"^config: profiling\.batch_sizes \[64\]: not in the sweep's schedule \[1, 2, 4, 8\]"),
    ("profiles without batch 1", merge(profiling={"batch_sizes": [4]}), 1,
     r"^config: profiling\.batch_sizes \[4\]: include 1 \(the three-step correction"),
    ("batch sizes out of order", merge(batch_sizes=[8, 1, 4]), 1,
     r"^config: batch_sizes \[8, 1, 4\]: list the batch sizes in ascending order$"),
    ("a draft-ratio batch size twice", merge(draft_cost={"batch_sizes": [1, 1, 2]}), 1,
     r"^config: draft_cost\.batch_sizes: lists a value twice"),
    ("an empty prompt table name", merge(tiny={"prompts": ""}), 1,
     r"^config: tiny\.prompts: must not be empty \(leave the key out for its default\)$"),
    # a synthetic model's dimensions: its cost model's job failed on what the parse accepted
    ("a synthetic model's dims of its layers alone", model(SF, dims={"num_layers": 48}), 1,
     r"^config: models\[3\]\.dims \(model 'synth-fine'\): missing key 'hidden' \(required for "
     r"source synthetic\)$"),
    ("a synthetic model without dims or hf_config", lambda c: c["models"][3].pop("dims"), 1,
     r"^config: model synth-fine: a synthetic model needs dims or hf_config \(a config\.json\), "
     r"the dimensions its cost model prices$"),
    ("a synthetic model's hf_config that is not there",
     both(lambda c: c["models"][3].pop("dims"), model(SF, hf_config="/no/such/config.json")), 1,
     r"^config: model synth-fine: hf_config /no/such/config\.json: no such file"),
    # a download named as a prompt table's dataset silently replaced it for the tiny models
    ("a download named as a dataset of the prompt table",
     merge(datasets={"tinybench": {"format": "mt-bench", "repo_id": "philschmid/mt-bench",
                                   "files": ["question.jsonl"]}}), 1,
     r"^config: datasets\.tinybench: the prompt table has a dataset of this name, which its "
     r"download would replace for every model: give the download another name$"),
    ("a download of its own name", merge(datasets={"mt-bench": {
        "format": "mt-bench", "repo_id": "philschmid/mt-bench", "files": ["question.jsonl"]}}),
     0, OK),
    ("hardware without the tiny models' fp32 peak",
     lambda c: c["hardware"]["CPU"].update(peak_tflops={"bf16": 0.2}), 1,
     r"^config: hardware CPU: no peak_tflops\.fp32, the precision the tiny models tiny-fine, "
     r"tiny-coarse compute in"),
]


def parse(edit, folder, cache_dir) -> tuple[int, str]:
    """(exit status, stderr) of the workflow's parse of config.yaml with the edit."""
    cfg = copy.deepcopy(BASE)
    if getattr(edit, "needs_folder", False):
        edit(cfg, folder)
    else:
        edit(cfg)
    try:
        _, notes = for_workflow(cfg, SCHEMA, cache_dir=cache_dir, with_vllm=False)
    except InputError as exc:
        return 1, f"{exc}\n"
    return 0, "".join(f"{n}\n" for n in notes if not re.match(r"preflight: \d+ GPU jobs", n))


@pytest.mark.parametrize("label,edit,status,pattern", CASES, ids=[c[0] for c in CASES])
def test_a_value_is_checked_against_its_meaning(label, edit, status, pattern, hf_cache, tmp_path,
                                                 monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    monkeypatch.chdir(tmp_path)  # a fresh run's parse, not one beside the checkout's results/
    got, err = parse(edit, tmp_path, tmp_path / "cache")
    assert got == status, err
    if pattern is OK:
        assert err == "", err
    else:
        assert re.search(pattern, one_line(err)), err


def test_two_unusual_values_are_two_lines(tmp_path, monkeypatch):
    """One warning line per value, each naming its own consequence."""
    monkeypatch.chdir(tmp_path)  # a fresh run's parse, not one beside the checkout's results/
    cfg = copy.deepcopy(BASE)
    merge(sweep={"warmups": 0}, tiny={"train": {"warmup": 700}})(cfg)
    _, notes = for_workflow(cfg, SCHEMA, cache_dir=tmp_path, with_vllm=False)
    assert [n.split(":")[1].strip() for n in notes] == ["sweep.warmups 0",
                                                        "tiny.train.warmup 700 is not below the "
                                                        "steps of tiny-fine (700), tiny-coarse (700)"]


# --- a key given twice: each configuration file read strictly --------------------------------

# (label, the file's text, the line's pattern; None: it reads)
YAML_FILES = [
    ("a top-level key twice", "ks: [3]\nbatch_sizes: [1]\nks: [5]\n",
     r"^{f}: line 3: key 'ks' is given twice \(first on line 1\); YAML would keep the last "
     r"silently: give it once$"),
    ("a nested key twice", "sweep:\n  repeats: 3\n  warmups: 2\n  repeats: 1\n",
     r"^{f}: line 4: key 'repeats' is given twice \(first on line 2\)"),
    ("a key twice in a flow mapping", "plan: {tau: 2.5, tau: 3}\n",
     r"^{f}: line 1: key 'tau' is given twice \(first on line 1\)"),
    ("a key twice in a list's entry",
     "models:\n  - name: a\n    source: tiny\n    name: b\n",
     r"^{f}: line 4: key 'name' is given twice \(first on line 2\)"),
    ("a hardware entry twice", "hardware:\n  H100: {memory_gib: 80}\n  H100: {memory_gib: 94}\n",
     r"^{f}: line 3: key 'H100' is given twice"),
    ("a JSON key twice", '{"ks": [3], "ks": [5]}',
     r"^{f}: line 1: key 'ks' is given twice"),
    ("a number key twice", "draft_cost:\n  1: a\n  1: b\n", r"key '1' is given twice"),
    ("YAML that does not parse", "ks: [3\n", r"^{f}: line 2: not valid YAML \(expected ','"),
    ("a YAML merge key", "base: &b {x: 1}\nother:\n  <<: *b\n  x: 2\n", None),
    ("keys that differ in case", "ks: [3]\nKS: [5]\n", None),
    ("equal values under different parents", "a: {x: 1}\nb: {x: 1}\n", None),
]


@pytest.mark.parametrize("label,text,pattern", YAML_FILES, ids=[c[0] for c in YAML_FILES])
def test_a_configuration_file_with_a_key_twice_is_refused(label, text, pattern, tmp_path):
    f = tmp_path / "case.yaml"
    f.write_text(text)
    if pattern is None:
        yamlfile.load(f)
        return
    with pytest.raises(InputError) as exc:
        for_workflow(copy.deepcopy(BASE), SCHEMA, with_vllm=False, files=[REPO / "config.yaml", f])
    assert re.search(pattern.replace("{f}", re.escape(str(f))), one_line(str(exc.value)))


@pytest.mark.parametrize("content,pattern", [
    (None, r": is a directory, not a YAML file$"),
    (bytes(range(128, 256)), r": not a text file \(not UTF-8\): a YAML file is text$"),
    ("missing", r": no such file$"),
], ids=["a directory", "a binary file", "a file that is not there"])
def test_a_configuration_file_that_is_not_yaml_text(content, pattern, tmp_path):
    f = tmp_path / "case.yaml"
    if content is None:
        f.mkdir()
    elif isinstance(content, bytes):
        f.write_bytes(content)
    with pytest.raises(InputError) as exc:
        yamlfile.load(f)
    assert re.search(pattern, one_line(str(exc.value)))


def test_the_shipped_configurations_read_strictly():
    for path in [REPO / "config.yaml", *(REPO / "config").glob("*.yaml"),
                 *(REPO / ".test").glob("*/config.yaml")]:
        yamlfile.load(path)


def test_the_corpus_is_broad():
    """At least 60 cases of the classes of #42, each label once."""
    labels = [c[0] for c in CASES + YAML_FILES]
    assert len(labels) >= 60 and len(set(labels)) == len(labels)


# --- through Snakemake itself, and vLLM's own checks offline -----------------------------------

# (label, the --configfile's text, exit status, the line's pattern (warnings: among the lines))
DRY_RUNS = [
    ("a top-level key far from any", "bogus: 1\n", 1, r"^config: bogus: unknown key \(known: "),
    ("a key twice in --configfile", "sweep:\n  repeats: 3\n  repeats: 1\n", 1,
     r"^\S*case\.yaml: line 3: key 'repeats' is given twice \(first on line 2\)"),
    ("a prompt table that is not shipped", "tiny: {prompts: 'builtin:v2'}\n", 1,
     r"^config: tiny\.prompts: builtin:v2: no such prompt table"),
    ("a shape margin of 500%", "sweep: {shape_margin: 5}\n", 1,
     r"^config: sweep\.shape_margin: must be a number >= 0 and < 1 \(got 5\)$"),
    ("cost-only with drafters and datasets",
     "models:\n  - {name: q, source: hf, repo_id: Qwen/Qwen3-30B-A3B, cost_only: true, "
     "drafters: [x], datasets: [tinybench]}\n", 1,
     r"^config: model q: cost_only: true gives it no runs"),
    ("no warm-up", "sweep: {warmups: 0}\n", 0, r"^config: sweep\.warmups 0: no warm-up request"),
]


@pytest.mark.slow
def test_a_sample_through_snakemake(tmp_path):
    """`snakemake -n` with each case as --configfile: the status, the one line after Snakemake's
    own two (a warning: among the dry run's lines, once), no traceback."""
    from wf import dry_runs, snakemake

    def check(wd, case):
        label, text, status, pattern = case
        (wd / "case.yaml").write_text(text)
        r = snakemake(wd, "-n", configfile="case.yaml", check=False, timeout=300)
        ours = [ln for ln in r.stderr.splitlines()
                if not ln.startswith(("Using workflow", "Config file"))]
        hits = [ln for ln in ours if re.search(pattern, ln)]
        ok = r.returncode == status and "Traceback" not in r.stderr and (
            len(ours) == 1 == len(hits) if status else len(hits) == 1)
        if not ok:
            return f"{label}: status {r.returncode}\n{r.stderr[-1500:]}"

    failures = [f for f in dry_runs(tmp_path, DRY_RUNS, check) if f]
    assert not failures, "\n\n".join(failures)


# --- a --configfile Snakemake itself cannot load ----------------------------------------------

# Snakemake loads every --configfile in its front end, before the Snakefile (and so the workflow's
# own checks) runs: what it cannot load ended in its traceback (a directory, a binary file, a file
# that is not there) or a two-line WorkflowError naming no file (YAML that does not parse, a
# document that is not a mapping). The logger plugin the workflow profile enables
# (src/snakemake_logger_plugin_specmoe) makes each one line on stderr, the file named, worded as
# `specmoe.yamlfile` words the files the workflow reads itself.
MISSING = object()  # the file is not there
# (label, the file's content (None: a directory), Snakemake's options, the line's pattern)
UNLOADABLE = [
    ("a directory", None, ["-n"], r"^case\.yaml: is a directory, not a YAML file$"),
    ("a directory, not a dry run", None, ["--cores", "1"],
     r"^case\.yaml: is a directory, not a YAML file$"),
    ("a binary file", bytes(range(128, 256)), ["-n"],
     r"^case\.yaml: not a text file \(not UTF-8\): a YAML file is text$"),
    ("latin-1 text", "sweep: {repeats: 3}  # Größe\n".encode("latin-1"), ["-n"],
     r"^case\.yaml: not a text file \(not UTF-8\): a YAML file is text$"),
    ("a file that is not there", MISSING, ["-n"], r"^case\.yaml: no such file$"),
    ("YAML that does not parse", "ks: [3\n", ["-n"],
     r"^case\.yaml: line 2: not valid YAML \(expected ','"),
    ("a list, not a mapping", "- 1\n- 2\n", ["-n"], r"^case\.yaml: .*keys at top level"),
    ("a binary file with --verbose", bytes(range(128, 256)), ["-n", "--verbose"],
     r"^case\.yaml: not a text file \(not UTF-8\): a YAML file is text$"),
]


def test_snakemake_finds_the_plugin_and_both_profiles_enable_it():
    """Snakemake finds logger plugins by module name (snakemake_logger_plugin_*) on sys.path: the
    editable install's path to src/ is enough, in the engines' and the launcher's environment."""
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    import snakemake_logger_plugin_specmoe as plugin

    assert LoggerPluginRegistry().get_plugin("specmoe").log_handler is plugin.LogHandler
    for profile in ("default", "slurm"):
        settings = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
        assert settings["logger"] == ["specmoe"], profile


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory):
    from wf import copy_workflow

    return copy_workflow(tmp_path_factory.mktemp("unloadable") / "wf")


@pytest.mark.parametrize("label,content,options,pattern", UNLOADABLE,
                         ids=[c[0] for c in UNLOADABLE])
def test_a_configfile_snakemake_cannot_load_is_one_line(label, content, options, pattern,
                                                        workflow_copy):
    """Status 1, nothing on stdout, and on stderr Snakemake's line naming the profile and ours
    (with --verbose, Snakemake's debug output, its full traceback among it, comes first)."""
    import shutil

    from wf import snakemake

    f = workflow_copy / "case.yaml"
    if f.is_dir():
        shutil.rmtree(f)
    elif f.exists():
        f.unlink()
    if content is None:
        f.mkdir()
    elif isinstance(content, bytes):
        f.write_bytes(content)
    elif isinstance(content, str):
        f.write_text(content)
    r = snakemake(workflow_copy, *options, configfile="case.yaml", check=False, timeout=300)
    if "--verbose" in options:
        assert r.returncode == 1 and re.search(pattern, r.stderr.splitlines()[-1]), r.stderr
        return
    ours = [ln for ln in r.stderr.splitlines() if not ln.startswith("Using workflow")]
    assert (r.returncode, r.stdout, len(ours)) == (1, "", 1), f"{r.stdout}\n{r.stderr}"
    assert re.search(pattern, ours[0]), ours[0]


@pytest.mark.slow
def test_the_configfile_plugin_leaves_a_dry_runs_output_as_it_was(tmp_path):
    """The plugin writes nothing of its own but the line above: the default configuration's dry
    run prints the same with the plugin as without it (the profile's `logger` line removed), but
    for the start date, the workflow id, the jobs' timestamps and the jobs' order, which differ
    between any two runs."""
    import os

    from wf import copy_workflow, snakemake

    wd = copy_workflow(tmp_path / "wf")
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the order within a job's `reason`
    on = snakemake(wd, "-n", env=env)
    profile = wd / "profiles/default/config.yaml"
    text = profile.read_text()
    assert re.search(r"(?m)^logger: \[specmoe\]$", text)
    profile.write_text(re.sub(r"(?m)^logger:.*\n", "", text))
    off = snakemake(wd, "-n", env=env)

    def jobs(out: str) -> list[str]:
        out = re.sub(r"(?m)^  (Date|Workflow ID): .*$", "", out)
        out = re.sub(r"(?m)^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]$", "[time]", out)
        # stripped: the first job printed follows the job stats with one newline more, and
        # which of the jobs ready at the start (tokenizer, synth_fit) comes first varies
        return sorted(block.strip() for block in out.split("\n\n"))

    assert on.stderr == off.stderr
    assert len(jobs(on.stdout)) > 50 and jobs(on.stdout) == jobs(off.stdout)


@pytest.mark.slow
def test_vllms_own_checks_run_offline_on_the_study(tmp_path, monkeypatch, study_drafters):
    """With HF_HUB_OFFLINE=1, vLLM's own checks of config/paper.yaml run from the shipped
    config.json files of the targets and the cached ones of the drafters (vLLM's engine arguments
    once resolved each repository id through the cache and the checks were 'not checked')."""
    pytest.importorskip("vllm")
    from snakemake.utils import update_config

    from specmoe.config import Config

    cfg = copy.deepcopy(BASE)
    update_config(cfg, yaml.safe_load((REPO / "config/paper.yaml").read_text()))
    report = Config.load(cfg, SCHEMA).preflight(cache_dir=tmp_path / "cache")
    assert report.vllm.startswith("checked with vLLM"), report.vllm
    assert report.fatal == []
    assert not [f for f in report.findings if f.check == "not checked"]


@pytest.mark.slow
def test_the_studys_dry_run_offline_on_a_fresh_clone(tmp_path):
    """#42: `HF_HUB_OFFLINE=1 snakemake -n --configfile config/paper.yaml` with an empty Hugging
    Face cache (a fresh clone) stops in one line naming every drafter whose config.json it lacks
    and how to fetch it, instead of passing with their checks "not checked"."""
    import os

    from wf import copy_workflow, snakemake

    wd = copy_workflow(tmp_path / "wf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "empty-hf"))
    r = snakemake(wd, "-n", configfile="config/paper.yaml", check=False, env=env, timeout=600)
    ours = [ln for ln in r.stderr.splitlines()
            if not ln.startswith(("Using workflow", "Config file"))]
    assert r.returncode == 1 and len(ours) == 1, r.stderr[-3000:]
    assert re.match(r"preflight: no config\.json for drafter qwen2-0\.5b \(Qwen/Qwen2-0\.5B-Instruct"
                    r"\), .*`specmoe download REPO --mode config`", ours[0]), ours[0]
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_vllms_checks_that_fail_to_run_stop_the_dry_run(tmp_path):
    """vLLM's checks crashing (here on a request without its max_model_len) is a fatal line, not
    'not checked'."""
    pytest.importorskip("vllm")
    from specmoe.checks import preflight

    request = {"job": "capture m/d/K3/x", "model": "m", "repo": "o/r",
               "config": preflight.shipped_config("Qwen/Qwen3-30B-A3B"), "method": None,
               "drafter_repo": None, "drafter_config": None, "k": 3, "batch": 1,
               "dtype": "auto", "engine_args": {}}
    found, note = preflight.run_vllm([request], tmp_path / "cache")
    assert note == "failed to run"
    assert not (tmp_path / "cache").exists()  # no answer kept: asked again next time
    assert len(found) == 1 and found[0].fatal
    assert re.match(r"preflight: every GPU job: vLLM's own checks: vLLM [\d.]+'s checks failed "
                    r"to run, so no job is known to start: KeyError: 'max_model_len'$", found[0].line())


@pytest.mark.slow
def test_a_head_vllm_cannot_read_is_refused_with_vllms_reason():
    """vLLM's validation errors span lines; the first alone ("Class validation error for
    validator 'validate_rope':") was the whole message: now its reason is on the one line."""
    pytest.importorskip("vllm")
    from specmoe.checks import vllmcheck

    head = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2880,
            "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 8,
            "intermediate_size": 11520, "vocab_size": 201088}  # head_dim 2880 / 64 = 45: odd
    (found,) = vllmcheck._eagle({"drafter_config": head, "method": "eagle3",
                                 "drafter_repo": "o/head"})
    assert found["check"] == "drafter" and "\n" not in found["message"]
    assert re.match(r"vLLM cannot read drafter o/head's config\.json: .*validate_rope.*: .*even "
                    r"rotary dimension.*head_dim`=45", found["message"]), found["message"]
