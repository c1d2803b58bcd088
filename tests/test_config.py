"""The configuration resolved once (specmoe.config): defaults filled in one place, variants and
controls as the rules and the GPU plan see them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specmoe.config import Config
from specmoe.cost.costmodel import DEFAULT_HARDWARE
from specmoe.errors import InputError
from wf import REPO

def resolved(path="config.yaml", edit=None) -> Config:
    cfg = yaml.safe_load((REPO / path).read_text())
    if edit:
        edit(cfg)
    return Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")

def test_a_variant_runs_on_its_targets_hardware():
    """A variant names no hardware: it is its target's (the schema's default used to override it)."""
    c = resolved()
    assert c.models["tiny-fine"].hardware == "CPU"
    assert c.variants["tiny-fine-bf16"].hardware == "CPU"
    assert c.variants["tiny-fine-bf16"].precision == "bf16"
    assert c.models["synth-fine"].hardware == DEFAULT_HARDWARE

def test_an_untrained_control_runs_at_its_targets_first_k_and_dataset():
    def more(cfg):
        cfg["models"][0]["ks"] = [5, 3]
        cfg["models"][0]["datasets"] = ["heldout-code", "tinybench"]

    c = resolved(edit=more)
    name = c.raw["models"][0]["name"]
    ctl = c.models[f"{name}-random"]
    assert (ctl.ks, ctl.datasets, ctl.control_of) == ((5,), ("heldout-code",), name)
    assert name not in c.swept or f"{name}-random" not in c.swept

def test_a_study_model_takes_the_top_level_ks_and_the_plan_its_jobs():
    c = resolved("config/paper.yaml")
    written = {m["name"]: m for m in c.raw["models"]}
    name = next(n for n in c.hf_swept if "ks" not in written[n])
    m = c.models[name]
    assert m.ks == c.ks
    rules = [j.rule for j in c.engine_jobs(name)]
    # no series without SD of its own: each SD series measures its no-SD points beside it
    assert rules.count("sweep_ar") == 0
    assert rules.count("sweep_sd") == len(m.drafters) * len(m.ks)
    assert rules.count("profile") == len(m.drafters)
    assert rules.count("capture") == len(m.runs())

@pytest.mark.parametrize("name,precision,fmt", [("gpt-oss-120b-tp4", "bf16", "mxfp4"),
                                                  ("gpt-oss-120b-tp4", "fp8", "mxfp4"),
                                                  ("qwen3-30b-fp8-tp1", "fp16", "fp8")])
def test_a_quantised_checkpoint_in_another_precision_is_refused(name, precision, fmt):
    """vLLM serves a quantised checkpoint in its own format whatever the precision asked (a float
    dtype sets the activations only; another --quantization it refuses), so the configuration
    that would price it in that precision stops in one line naming the model."""
    from test_bad_inputs import model
    from test_preflight import paper

    with pytest.raises(InputError) as exc:
        paper(model(name, precision=precision))
    assert str(exc.value).count("\n") == 0
    assert re.match(rf"config: model {name}: \S+ config.json: precision {precision} on a "
                    rf"checkpoint quantised with {fmt}: .*use precision auto$", str(exc.value))

def test_the_stages_that_price_a_study_model_refuse_that_precision_too(tmp_path):
    """A config.json downloaded after the configuration check ran: the weight model (study_dims)
    refuses the precision as the check does."""
    from specmoe.checks.preflight import shipped_config_path
    from specmoe.cost.weights import weight_model_table

    cfg = tmp_path / "config.json"
    cfg.write_text(shipped_config_path("openai/gpt-oss-120b").read_text())
    with pytest.raises(InputError, match="precision bf16 on a checkpoint quantised with mxfp4"):
        weight_model_table([{"name": "g", "config": cfg, "precision": "bf16", "tp": 4,
                             "ks": [3]}])

def test_contradictions_stop_the_resolution():
    def bad(cfg):
        cfg["models"][0]["hardware"] = "TPU"

    with pytest.raises(InputError, match="hardware 'TPU' is not defined"):
        resolved(edit=bad)

@pytest.mark.parametrize("literal", ['"H100"', '"builtin:v1"'])
def test_each_default_is_written_once(literal):
    """The default hardware and prompt table: one definition in the library, none in the rules
    or the schema."""
    files = [*(REPO / "src/specmoe").rglob("*.py"), *(REPO / "workflow").rglob("*.smk"),
             REPO / "workflow/schemas/config.schema.yaml"]
    hits = [f"{f.name}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines())
            if re.search(re.escape(literal), line)]
    assert len(hits) == 1, hits

def test_each_gpu_engine_takes_vllms_memory_share_from_one_key():
    """gpu.memory_utilization (0.9, vLLM's own default) reaches every GPU engine's arguments and
    the preflight; a model's own gpu entry overrides it; a CPU engine gets none."""
    c = resolved("config/paper.yaml")
    args = c.engine_settings("qwen3-30b-fp8-tp2", "sweep")["engine_args"]
    assert args["gpu_memory_utilization"] == 0.9 and args["tensor_parallel_size"] == 2
    assert args["max_model_len"] == 36864  # the model's engine_args over the section's

    def lower(cfg):
        next(m for m in cfg["models"] if m["name"] == "gpt-oss-120b-tp4")["gpu"] = {
            "memory_utilization": 0.8}

    c = resolved("config/paper.yaml", lower)
    assert c.engine_of(next(j for j in c.gpu_jobs() if j.model == "gpt-oss-120b-tp4")
                       ).utilization == 0.8
    cpu = resolved("config.yaml")
    assert "gpu_memory_utilization" not in cpu.engine_settings("tiny-fine", "sweep").get(
        "engine_args", {})

def test_engine_args_spelt_with_dashes_are_the_engines_one_value():
    """vLLM reads max-model-len as max_model_len: the configuration resolves each engine_args key
    to that spelling once, so the preflight's engine, the prompts' check and the server's command
    line all read the value the engine gets (once: given both spellings, the command line took
    the later); the configuration as given is left as it was."""
    from specmoe.runtime.engine import engine_kwargs
    from specmoe.runtime.serving import server_argv

    cfg = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    qwen = next(m for m in cfg["models"] if m["name"] == "qwen3-30b-fp8-tp2")
    qwen["engine_args"] = {"max-model-len": 8192}
    c = Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")
    assert qwen["engine_args"] == {"max-model-len": 8192}
    args = c.engine_settings("qwen3-30b-fp8-tp2", "sweep")["engine_args"]
    assert args["max_model_len"] == 8192 and "max-model-len" not in args
    jobs = [j for j in c.gpu_jobs() if j.model == "qwen3-30b-fp8-tp2"]
    assert {c.engine_of(j).max_model_len for j in jobs} == {8192}
    assert {x.max_model_len for x in c.contexts() if x.model == "qwen3-30b-fp8-tp2"} == {8192}
    argv = server_argv(engine_kwargs("m", max_model_len=4096, extra=args), 8000)
    assert [v for f, v in zip(argv, argv[1:]) if f == "--max-model-len"] == ["8192"]

def test_a_gpu_jobs_engine_as_the_rules_start_it():
    c = resolved("config/paper.yaml")
    jobs = {(j.rule, j.dataset): j for j in c.gpu_jobs() if j.model == "qwen3-30b-fp8-tp2"}
    cap = c.engine_of(jobs[("capture", "speed-bench-32k")])
    assert (cap.max_model_len, cap.batch, cap.output_tokens) == (36864, 16, 256)
    assert cap.prompt_tokens == {"speed-bench-32k": 32768.0} and cap.method == "eagle3"
    sweep = c.engine_of(jobs[("sweep_sd", "")])
    assert sweep.batch == 128 and sweep.method == "eagle3" and not sweep.offline_server
    assert set(sweep.prompt_tokens) == {"mt-bench", "speed-bench-32k"}
    # a separate draft model is served alone for the draft cost: its own GPU job
    assert any(j.rule == "sweep_ar" and j.model == "qwen2-0.5b" for j in c.gpu_jobs())

def test_a_datasets_max_batch_caps_its_own_series_points_alone():
    """datasets.<name>.max_batch, resolved once: a series measures that dataset at the
    schedule's batch sizes up to it (its record carries them, the stage reads them), every other
    dataset at all of them; the engine still serves the schedule's largest batch."""
    from specmoe.contracts import Named
    from specmoe.contracts.engines import SweepSdParams
    from specmoe.stages.measure import SweepSettings

    c = resolved("config/paper.yaml")
    everything = [(int(p["batch"]), int(p["prompts"])) for p in c.raw["sweep"]["schedule"]]
    assert c.max_batch("speed-bench-32k") == 32 and c.max_batch("mt-bench") is None
    assert c.sweep_schedule("speed-bench-32k") == [p for p in everything if p[0] <= 32]
    assert c.sweep_schedule("mt-bench") == everything
    w = Named({"model": "qwen3-30b-fp8-tp2", "drafter": "eagle3-qwen3-30b", "k": "3"})
    settings = SweepSettings.of(SweepSdParams.from_config(c, w).settings)
    assert list(settings.points("speed-bench-32k")) == c.sweep_schedule("speed-bench-32k")
    assert list(settings.points("mt-bench")) == everything
    sweep = c.engine_of(next(j for j in c.gpu_jobs()
                             if j.model == w["model"] and j.rule == "sweep_sd"))
    assert sweep.batch == 128 and sweep.batches == {"speed-bench-32k": 32}
    # a series without a capped dataset: its record as it was
    other = SweepSdParams.from_config(c, Named({**w, "model": "qwen3-30b-fp8-tp1"}))
    assert "dataset_schedules" not in other.settings

def test_a_max_batch_below_the_schedules_smallest_batch_is_refused_in_one_line():
    def cap(cfg):
        cfg["sweep"]["schedule"] = [p for p in cfg["sweep"]["schedule"] if p["batch"] >= 4]
        cfg["datasets"]["speed-bench-32k"]["max_batch"] = 2

    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", cap)
    assert ("config: datasets.speed-bench-32k.max_batch 2 is below the sweep schedule's "
            "smallest batch 4: its series would measure no point") in str(err.value).splitlines()

def test_a_profile_above_its_datasets_max_batch_is_refused_in_one_line():
    """A model is profiled on its first dataset, and the profile's TE is set beside the sweep's
    at the same batch size: none where that dataset's series stops below it."""
    def first(cfg):
        m = next(m for m in cfg["models"] if m["name"] == "gpt-oss-120b-tp4")
        m["datasets"] = ["speed-bench-32k", "mt-bench"]
        cfg["datasets"]["speed-bench-32k"]["max_batch"] = 8

    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", first)
    assert str(err.value) == (
        "config: model gpt-oss-120b-tp4: profiled on its first dataset speed-bench-32k at batch "
        "sizes [16], above its max_batch 8: the profile's TE is set beside the sweep's at the "
        "same batch size (put another dataset first)")

    def joined(cfg):  # a joined set is capped by its parts' caps (the check read none)
        first(cfg)
        m = next(m for m in cfg["models"] if m["name"] == "gpt-oss-120b-tp4")
        m["datasets"] = ["mt-bench+speed-bench-32k"]

    with pytest.raises(InputError, match=r"first dataset mt-bench\+speed-bench-32k at batch "
                                         r"sizes \[16\], above its max_batch 8"):
        resolved("config/paper.yaml", joined)

def test_prompt_lengths_come_from_the_configuration_the_table_or_the_plan():
    c = resolved("config/paper.yaml")
    assert c.prompt_tokens("mt-bench") == (70.0, "configured")
    assert c.prompt_tokens("tinybench")[1] == "prompt table"
    assert 5 < c.prompt_tokens("tinybench")[0] < 100

    def unstated(cfg):
        cfg["datasets"]["aya"].pop("prompt_tokens")

    assert resolved("config/paper.yaml", unstated).prompt_tokens("aya") == (512.0, "assumed")

def test_warnings_name_what_runs_but_not_as_expected():
    def a100(cfg):
        cfg["hardware"]["A100"] = {"hbm_bandwidth_gbs": 2039, "peak_tflops": {"bf16": 312}}
        cfg["models"][3]["hardware"] = "A100"

    (line,) = resolved(edit=a100).warnings()
    assert line.startswith("config: hardware A100 is not a GPU the step model was calibrated on")
    unset = resolved("config/paper.yaml").warnings()
    assert any(w.startswith("config: no repo_id for qwen3-next-80b-bf16-tp4") for w in unset)

def test_a_dataset_of_runs_without_a_repo_id_is_named_at_parse_time():
    """paper.yaml's header says a repo_id of null is warned of at parse time; spec-bench's
    (repo_id null, read by runs) was not, and its download_dataset job failed at run time."""
    (line,) = [w for w in resolved("config/paper.yaml").warnings() if "no repo_id" in w]
    assert "dataset spec-bench" in line and "fill it in before their downloads run" in line

    def unused(cfg):  # a dataset no run reads downloads nothing: nothing to fill in
        for m in cfg["models"]:
            if "spec-bench" in (m.get("datasets") or []):
                m["datasets"].remove("spec-bench")

    assert not any("spec-bench" in w for w in resolved("config/paper.yaml", unused).warnings())

def test_the_schema_knows_the_speculative_methods_the_engine_serves():
    """One list of methods (specmoe.names.SPEC_METHODS), which the schema's enum must repeat and
    the step model must price (its families)."""
    from specmoe.names import SPEC_METHODS
    from specmoe.cost.stepmodel import FAMILIES

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    drafter = schema["properties"]["drafters"]["items"]["properties"]
    assert tuple(drafter["method"]["enum"]) == SPEC_METHODS
    assert set(SPEC_METHODS) <= set(FAMILIES)

def test_the_default_configuration_sweeps_the_studys_batch_sizes():
    from specmoe.names import STUDY_BATCH_SIZES

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    assert tuple(cfg["batch_sizes"]) == STUDY_BATCH_SIZES

def test_every_engine_rule_is_a_kind_and_an_unknown_kind_is_an_error(tmp_path):
    """The engine rules (capture and each `use rule capture as ...`) are exactly the kinds of
    specmoe.kinds; a job, a rule's settings or the engine script of another kind stops with a line
    naming the known ones (the script once ran the profile stage for any rule it did not know)."""
    import runpy
    from types import SimpleNamespace

    from specmoe.config import Job
    from specmoe.kinds import KINDS, kind

    rules = "".join((REPO / "workflow/rules" / f).read_text() for f in ("traces.smk",
                                                                          "measure.smk"))
    # the rules whose script is the engine script (capture_control runs its own stage)
    blocks = re.split(r"^(?=rule |use rule )", rules, flags=re.M)
    engine = {re.match(r"rule (\w+):", b).group(1) for b in blocks
              if b.startswith("rule ") and "scripts/engine.py" in b} | set(
        re.findall(r"^use rule capture as (\w+) with:", rules, re.M))
    assert engine == set(KINDS)
    assert {k.section for k in KINDS.values()} == {"capture", "sweep", "profiling"}
    assert [n for n, k in KINDS.items() if not k.sd] == ["sweep_ar"]
    cfg = resolved()
    assert cfg.served_datasets("profile", "tiny-fine") == ["tinybench+heldout-code+heldout-prose"]
    assert cfg.served_datasets("capture", "tiny-fine", "heldout-code") == ["heldout-code"]
    assert cfg.job_settings("sweep_ar", "tiny-fine") == cfg.sweep_params("tiny-fine")
    for call in (lambda: kind("capture_forced"), lambda: Job("capture_forced", "tiny-fine"),
                 lambda: cfg.job_settings("capture_forced", "tiny-fine")):
        with pytest.raises(ValueError, match=r"unknown engine job kind 'capture_forced' \(known: "
                                             r"capture, sweep_ar, sweep_sd, profile"):
            call()
    stub = SimpleNamespace(rule="capture_forced", input={}, params=SimpleNamespace(job={}),
                           log=[str(tmp_path / "engine.log")])
    with pytest.raises(ValueError, match="unknown engine job kind 'capture_forced'"):
        runpy.run_path(str(REPO / "workflow/scripts/engine.py"),
                       init_globals={"snakemake": stub}, run_name="__main__")


LAUNCHER = Path(os.environ.get("SPECMOE_LAUNCHER_PYTHON", REPO / ".venv-slurm" / "bin" / "python"))
# The SLURM plugin's own sbatch line for one job's resources (Snakemake's ResourceList, as the
# plugin gets it), run in the launcher's environment where the plugin is installed.
SBATCH_LINE = """
import json, sys
from types import SimpleNamespace
from snakemake.iocontainers import ResourceList
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string
job = SimpleNamespace(resources=ResourceList(fromdict=json.loads(sys.argv[1])), threads=1,
                      name="capture", is_group=lambda: False)
params = dict(run_uuid="u", slurm_logfile="l", comment_str="c", account="", partition="",
              workdir=".")
print(get_submit_command(job, params) + set_gres_string(job))
"""

def test_a_gpu_constraint_reaches_sbatch_as_the_slurm_plugin_builds_it():
    """`gpu.constraint` is SLURM's node constraint (`-C`), the GPU model stays the hardware's
    (`--gpus=h100:TP`): the plugin refuses `a&b` as a GPU model. Without one there is no `-C`."""
    assert LAUNCHER.exists(), f"no launcher environment at {LAUNCHER}"

    def constrain(cfg):
        cfg["gpu"]["constraint"] = "hopper&nvlink"

    name = "qwen3-30b-fp8-tp2"
    for edit, flag in ((constrain, "-C 'hopper&nvlink'"), (None, None)):
        c = resolved("config/paper.yaml", edit)
        assert c.gpu_model(name) == "h100"  # the hardware's, whatever the constraint
        res = {"gpu": c.gpus(name), "gpu_model": c.gpu_model(name),
               "constraint": c.gpu_constraint(name), "mem_mb": c.engine_mem_mb(name),
               "runtime": 60}
        # Snakemake leaves a resource evaluated to None out of the job's resources
        res = {k: v for k, v in res.items() if v is not None}
        out = subprocess.run([str(LAUNCHER), "-c", SBATCH_LINE, json.dumps(res)],
                             capture_output=True, text=True, check=True).stdout
        assert "--gpus=h100:2" in out, out
        assert (flag in out) if flag else (" -C " not in out), out

def _paper_merged() -> dict:
    """config.yaml with config/paper.yaml merged over it, as `--configfile config/paper.yaml`."""
    from snakemake.utils import update_config

    cfg: dict = {}
    for f in ("config.yaml", "config/paper.yaml"):
        update_config(cfg, yaml.safe_load((REPO / f).read_text()))
    return cfg

def test_a_drafter_served_alone_runs_on_its_targets_hardware():
    """The draft cost c divides the drafter's TPOT by its target's: the drafter's series without
    SD runs on the target's hardware for every swept run (paper.yaml's B200 Mixtral drafts with
    its own entry)."""
    c = Config.load(_paper_merged(), REPO / "workflow/schemas/config.schema.yaml")
    alone = [r for r in c.sweep_runs() if c.drafters[r.drafter].served_alone]
    assert {c.model(r.model).hardware for r in alone} >= {"H100", "B200"}
    for r in alone:
        assert c.hardware_of(r.drafter) == c.model(r.model).hardware, r

def test_a_drafter_served_alone_for_targets_on_two_hardwares_is_refused():
    """One series without SD, on its first target's hardware: a second hardware's target would
    mix GPUs in its draft cost c, so the configuration is refused in one line."""
    cfg = _paper_merged()
    b200 = next(m for m in cfg["models"] if m["name"] == "mixtral-8x7b-fp8-tp1-b200")
    b200["drafters"] = ["mixtral-draft"]
    with pytest.raises(InputError) as exc:
        Config.load(cfg, REPO / "workflow/schemas/config.schema.yaml")
    line = str(exc.value)
    assert len(line.splitlines()) == 1, line
    assert re.match(r"^config: drafter mixtral-draft: served alone .* targets on 2 \(H100: "
                    r"mixtral-8x7b-bf16-tp2, mixtral-8x7b-fp8-tp1; B200: "
                    r"mixtral-8x7b-fp8-tp1-b200\): declare one drafter entry per hardware", line)


def test_a_tiny_drafter_for_tiny_targets_priced_on_two_hardwares_is_accepted():
    """A tiny drafter's series runs on this machine's cores beside its targets' whatever
    hardware prices them: its draft cost divides TPOTs of one machine."""
    c = resolved(edit=lambda cfg: cfg["models"][0].update(hardware="H100"))
    assert {c.models["tiny-fine"].hardware, c.models["tiny-coarse"].hardware} == {"H100", "CPU"}
    assert "tiny-drafter" in c.served


def test_one_repeat_is_refused():
    """A point measured once has no spread of repeats: no speedup interval, no curve's shape
    (measured.sweep.series_estimates), so the schema asks for two."""
    with pytest.raises(InputError) as exc:
        resolved(edit=lambda c: c["sweep"].update(repeats=1))
    assert str(exc.value) == "config: sweep.repeats: must be an integer >= 2 (got 1)"


# Pairs of configurations that differ only in whether a default of the tiny section is written out
# (the value the engine or the training uses either way): each pair gets one verdict.
def _long_prompts(c, d):
    (d / "long.csv").write_text("prompt_id,dataset,category,text\n"
                                f"a,tinybench,x,{'word ' * 1400}\nb,heldout-code,x,hi\n")
    c["tiny"]["prompts"] = str(d / "long.csv")
    c["tiny"]["capture"]["engine_args"] = {"max_model_len": 2048}
    c["sweep"]["max_model_len"] = c["profiling"]["max_model_len"] = 2048


def _no_tinybench(c, d):
    (d / "nb.csv").write_text("prompt_id,dataset,category,text\na,heldout-code,x,hi\n")
    c["tiny"]["prompts"] = str(d / "nb.csv")
    for m in c["models"]:
        if m["source"] in ("tiny", "variant"):
            m["datasets"] = ["heldout-code"]


def _short_training(c, d):
    for e in c["models"] + c["drafters"]:
        if e.get("source") == "tiny":
            e["steps"] = 20


def _small_heldout(c, d):
    c["tiny"]["max_heldout_tokens"] = 1500


WRITTEN_OR_NOT = [  # (label, edit, the tiny section's key as a path, its default)
    ("a long prompt and the SD check's output", _long_prompts, "sd_check.max_tokens", 64),
    ("a prompt table without tinybench", _no_tinybench, "sd_check.dataset", "tinybench"),
    ("training shorter than its warm-up", _short_training, "train.warmup", 30),
    ("a held-out set below one batch", _small_heldout, "train", {"seq_len": 128,
                                                                 "batch_size": 16}),
]


@pytest.mark.parametrize("label,edit,key,default", WRITTEN_OR_NOT,
                         ids=[c[0] for c in WRITTEN_OR_NOT])
def test_a_tiny_default_gives_one_verdict_written_or_not(label, edit, key, default, tmp_path,
                                                         monkeypatch):
    """The tiny section's defaults are the schema's: a check reads the same value whether the
    key is written out or left to its default (the parse's errors and warnings alike)."""
    import copy

    from specmoe.config import for_workflow

    monkeypatch.chdir(tmp_path)
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    edit(base, tmp_path)
    verdicts = []
    for written in (False, True):
        cfg = copy.deepcopy(base)
        *head, last = key.split(".")
        node = cfg["tiny"]
        for k in head:
            node = node[k]
        if written:
            node[last] = copy.deepcopy(default)
        else:
            node.pop(last, None)
        try:
            _, notes = for_workflow(cfg, REPO / "workflow/schemas/config.schema.yaml",
                                    preflight=False)
            verdicts.append(("accepted", [n for n in notes if n.startswith("config:")]))
        except InputError as exc:
            verdicts.append(("refused", str(exc)))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] == "refused" or verdicts[0][1], verdicts[0]  # each case is caught


def test_the_training_defaults_are_the_schemas():
    """An untrained control's settings beyond its evaluation's are TrainSpec's defaults: the
    schema's tiny.train defaults, the one place a trained model's come from."""
    from dataclasses import fields

    from specmoe.checks.schema import load_schema
    from specmoe.runtime.tiny import TrainSpec

    train = load_schema(REPO / "workflow/schemas/config.schema.yaml")[
        "properties"]["tiny"]["properties"]["train"]["properties"]
    ours = {f.name: f.default for f in fields(TrainSpec) if f.name in train}
    assert ours == {k: v["default"] for k, v in train.items()}


def test_an_engines_start_up_limit_has_one_default_the_schemas():
    """sweep.startup_timeout_s's default is the schema's alone: the serving runtime takes the
    limit from its caller (the sweep stage passes the section's), with no default of its own."""
    import inspect

    from specmoe.runtime import serving

    for fn in (serving.Server.__init__, serving.run_series):
        limit = inspect.signature(fn).parameters["startup_timeout"]
        assert limit.default is inspect.Parameter.empty and limit.kind is limit.KEYWORD_ONLY, fn
    c = resolved()
    assert c.sweep["startup_timeout_s"] == 600  # filled by the validation


def test_a_models_sweep_flag_defaults_in_the_schema():
    """A model's `sweep` is filled by the validation (true), so the checks and the resolved
    models read the one value."""
    c = resolved()
    assert all(m["sweep"] is True for m in c.raw["models"])
    assert all(m.sweep for m in c.models.values())


def _short_graphs(cfg):
    """paper.yaml with CUDA graphs of at most 256 tokens for every serving series."""
    cfg["sweep"]["engine_args"] = {"compilation_config": {"max_cudagraph_capture_size": 256}}


def test_cuda_graphs_short_of_a_verify_step_are_refused_when_the_configuration_loads():
    """A compilation_config whose graphs stop below a series' verify step at its largest batch
    was refused only by the series' engine arguments on the GPU node (engine_kwargs), after
    every sweep_sd job of paper.yaml had queued; the configuration loaded with no problem. Now
    it is refused on load, one line per finding naming every model it stops, each line the
    one the engine would have raised."""
    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", _short_graphs)
    lines = str(err.value).splitlines()
    c = resolved("config/paper.yaml")
    series = [j for j in c.gpu_jobs() if j.rule == "sweep_sd"]
    assert series
    from specmoe.runtime import engine

    # a separate draft model's series stops at its first draft pass (K + 2 tokens a request),
    # another method's at its verify step: one line each
    for k, draft in sorted({(int(j.k), c.drafters[j.drafter].served_alone) for j in series}):
        models = sorted({j.model for j in series if int(j.k) == k
                         and c.drafters[j.drafter].served_alone == draft})
        batch = {c.series_batch(m) for m in models}
        assert batch == {128}  # the schedule's largest: the engines' max_num_seqs
        with pytest.raises(InputError) as runtime:
            engine.cuda_graph_config({"max_cudagraph_capture_size": 256}, 128, k,
                                     draft_model=draft)
        mine = [ln for ln in lines if ln.endswith(str(runtime.value))]
        assert len(mine) == 1, (k, lines)
        step = "a draft model's first pass (K + 2" if draft else "a verify step"
        assert f"{step}" in mine[0] and f"at batch 128 with K = {k}" in mine[0]
        assert "(sweep.engine_args)" in mine[0]
        assert sorted(re.match(r"config: models? (.*?) \(", mine[0]).group(1).split(", ")) == models


def test_the_engine_refuses_what_the_configuration_refuses(monkeypatch):
    """The check on load and the engine's own (the last guard, kept) read the same settings: a
    series' engine arguments on CUDA, as the sweep stage builds them from the job's settings,
    raise the line the configuration gives for that model and K."""
    from specmoe.runtime import engine
    from specmoe.stages.engines import engine_opts

    c = resolved("config/paper.yaml")
    job = next(j for j in c.gpu_jobs() if j.rule == "sweep_sd")
    settings = c.job_settings(job.rule, job.model)
    settings["engine_args"] = {**settings["engine_args"],
                               "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8]}}
    monkeypatch.setattr(engine, "device", lambda: "cuda")
    with pytest.raises(InputError) as runtime:
        engine.engine_kwargs("t", None, None, max_num_seqs=c.engine_of(job).batch,
                             graph_k=int(job.k),
                             draft_model_series=c.drafters[job.drafter].served_alone,
                             **engine_opts(settings))

    def own(cfg):
        m = next(m for m in cfg["models"] if m["name"] == job.model)
        m["engine_args"] = {**(m.get("engine_args") or {}),
                            "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8]}}

    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", own)
    assert f"config: model {job.model} (its own engine_args): {runtime.value}" in \
        str(err.value).splitlines()


def test_eager_series_and_the_papers_own_settings_load():
    """enforce_eager runs no graphs (engine_kwargs leaves compilation_config as it is): nothing
    to refuse; paper.yaml as shipped loads."""
    def eager(cfg):
        _short_graphs(cfg)
        cfg["sweep"]["engine_args"]["enforce_eager"] = True

    resolved("config/paper.yaml", eager)
    resolved("config/paper.yaml")


def test_loading_the_configuration_imports_no_engine():
    """The configuration is the analysis side's: checking CUDA graph sizes on load
    (specmoe.cudagraphs) imports neither vLLM nor torch."""
    code = ("import sys, yaml\nfrom specmoe.config import Config\n"
            "cfg = yaml.safe_load(open('config/paper.yaml'))\n"
            "Config.load(cfg, 'workflow/schemas/config.schema.yaml')\n"
            "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.stdout.strip() == "[]"


def test_a_configuration_with_other_problems_names_them_before_its_graphs():
    """The graph check reads the series' jobs, which need every drafter defined: a model naming
    an unknown drafter gets configcheck's one line, not a KeyError from the jobs."""
    def unknown(cfg):
        _short_graphs(cfg)
        cfg["models"][0]["drafters"] = ["nope"]

    with pytest.raises(InputError, match="drafter 'nope' is not defined under 'drafters'"):
        resolved("config/paper.yaml", unknown)


@pytest.mark.parametrize("key, value, said", [
    ("block_size", "big", "must be an integer >= 1 (got 'big')"),
    ("block-size", 0, "must be an integer >= 1 (got 0)"),
    ("enable_prefix_caching", "no", "must be true or false (got 'no')"),
    ("compilation_config", "O3", "must be a mapping (got 'O3')"),
    ("mamba_ssm_cache_dtype", "fp32",
     "must be one of auto, float32, float16, bfloat16 (got 'fp32')"),
    ("mamba-cache-dtype", 3, "must be one of auto, float32, float16, bfloat16 (got 3)"),
])
def test_the_engine_args_specmoe_reads_itself_are_typed(key, value, said):
    """The preflight reads these engine_args itself (block_size: int(...) or 16; prefix caching:
    its truth; the Mamba state dtypes, vLLM's four) and the series' graphs read compilation_config: a wrong
    type loaded, then block_size: big was a ValueError traceback where the workflow parses,
    block_size: 0 became 16 silently, "no" counted as prefix caching on. Each is one line now,
    at the key, in either spelling, wherever engine_args are given."""
    def wrong(cfg):
        cfg["sweep"]["engine_args"] = {key: value}
        cfg["models"][0]["engine_args"] = {key: value}

    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", wrong)
    lines = str(err.value).splitlines()
    assert f"config: sweep.engine_args.{key}: {said}" in lines, lines
    assert any(ln.startswith(f"config: models[0].engine_args.{key} (model ") and ln.endswith(said)
               for ln in lines), lines


def test_engine_args_of_the_right_types_load():
    def right(cfg):
        cfg["sweep"]["engine_args"] = {"block-size": 32, "enable_prefix_caching": False,
                                       "compilation_config": {"max_cudagraph_capture_size": 1024},
                                       "mamba_ssm_cache_dtype": "float32",
                                       "mamba_cache_dtype": "auto"}

    assert resolved("config/paper.yaml", right).sweep["engine_args"]["block_size"] == 32


def test_profiles_that_need_more_prompts_than_their_dataset_has_are_refused_on_load():
    """Each decode/verify pair of a profile's engine starts profiles prompts of its own, engines x
    the largest batch size distinct ones; kernelprof refused fewer only on the job's node, after
    the job had queued, and paper.yaml's profiles (3 starts at batch 32: 96) of MT-Bench's 80
    prompts would all have stopped there. Refused on load, one line naming every model; the
    shipped paper.yaml and config.yaml load; a tiny model's prompt table counts as its size."""
    def at(batches, engines=None):
        def edit(cfg):
            cfg["profiling"]["batch_sizes"] = batches
            if engines:
                cfg["profiling"]["engines"] = engines
        return edit

    c = resolved("config/paper.yaml")
    assert c.profiled() and c.profile_problems() == []
    with pytest.raises(InputError) as err:
        resolved("config/paper.yaml", at([1, 8, 32]))
    [line] = str(err.value).splitlines()
    assert line.endswith("3 engine starts at batch 32 need 96 distinct prompts of mt-bench, each "
                         "pair of starts its own, and it has at most 80: fewer engines or a "
                         "smaller largest batch size")
    assert all(j.model in line for j in c.profiled())
    assert resolved("config/paper.yaml", at([1, 8, 32], engines=2)).profile_problems() == []
    tiny = resolved()
    assert tiny.profiled() and tiny.profile_problems() == []
    # the tiny models' runs profile their run's datasets together: their prompts add up
    [ds] = {j.dataset for j in tiny.profiled()}
    have = sum(tiny._prompts_at_most(p) for p in ds.split("+"))
    assert have > 80
    engines = have // 8 + 1
    with pytest.raises(InputError, match=rf"{engines} engine starts at batch 8 need "
                                         rf"{8 * engines} distinct prompts of {re.escape(ds)}, "
                                         rf".* at most {have}:"):
        resolved("config.yaml", at([1, 8], engines=engines))
