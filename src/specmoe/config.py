"""The configuration resolved once: models, drafters, runs and the engine jobs they imply.

`Config.load(config, schema)` validates a configuration against its schema (specmoe.checks.schema, which
writes the schema's defaults into it) and resolves it (`Config.resolve`) into typed, frozen
objects. The defaults that the schema cannot express are filled here, once: a model's hardware (a
variant's is its target's, else `costmodel.DEFAULT_HARDWARE`), its K (the top-level `ks`), the
prompt table of the tiny models (`prompts.DEFAULT_SOURCE`), an engine section's settings
(specmoe.kinds.ENGINE_DEFAULTS) and vLLM's share of GPU memory (GPU_MEMORY_UTILIZATION). The
workflow's rules, the GPU plan, the preflight and the stages read these objects; which jobs a
model has (captures per run, one serving series per engine, one profile per drafter at the
model's first K) and what each job's engine is are decided here and nowhere else. Every key:
config/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from .checks import configcheck
from .checks.preflight import GPU_MEMORY_UTILIZATION
from . import paths
from .sources import published
from .contracts.analysis import SpeedupParams
from .cost.costmodel import DEFAULT_HARDWARE
from .cudagraphs import cuda_graph_config, tokens_per_request
from .errors import InputError
from .kinds import ENGINE_DEFAULTS, engine_arg, engine_context, kind, on_gpu_hardware
from .names import control_name, job_label, repo_key
from .measured.profiling import prompts_needed
from .runs import Run, dataset_parts, datasets_in, max_batch_of
from .sources.prompts import DEFAULT_SOURCE

# A GPU job's SLURM memory and runtime (minutes) where neither the model's `gpu` entry nor the
# configuration's sets them (and the GPU plan has no estimate of the runtime).
GPU_JOB_DEFAULTS = {"mem_mb": 64000, "runtime": 120}


def gpu_job_cpus(tp: int, timed: bool) -> int:
    """A GPU engine job's CPUs on a cluster where neither the model's `gpu` entry nor the
    configuration's sets `cpus`: vLLM's TP workers busy-poll their broadcast queue and its engine
    core loops, a core each, beside the job's own process; a timed job (a sweep: its API server
    and bench client too, whose timing a starved core distorts; a profile) takes twice that."""
    return max(8, 2 * tp + 2) if timed else tp + 2


# A model's precision as the engine's dtype (bf16, fp16, fp32; auto and fp8 keep the section's).
PRECISION_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


# A vLLM engine on a CPU serving a tiny model: resident memory stays near 3.3 GB (the sweeps'
# benchmarks), a job ends within minutes (minutes, doubled on each retry).
CPU_ENGINE = {"mem_mb": 8000, "runtime": 60}
# The settings of the sweep section that only the analysis reads (rule speedup's record: a change
# reruns no sweep).
SWEEP_ANALYSIS_KEYS = tuple(SpeedupParams.SWEEP_KEYS.values())


def with_precision(section: dict, m: dict) -> dict:
    """An engine config section with the model's precision (bf16, fp16, fp32) as its dtype."""
    if m.get("precision") in PRECISION_DTYPE:
        section["dtype"] = PRECISION_DTYPE[m["precision"]]
    return section


@dataclass(frozen=True)
class Job:
    """One engine job of a model, its rule one of the engine job kinds (specmoe.kinds); empty
    fields: none."""
    rule: str
    model: str
    drafter: str = ""
    k: int | str = ""
    dataset: str = ""
    # a drafter served alone (sweep_ar): the dtype and tensor-parallel degree its SD engines give
    # it (Config.sd_serving); 0: not such a job
    dtype: str = ""
    tp: int = 0

    def __post_init__(self):
        kind(self.rule)  # an unknown kind is an error

    @property
    def label(self) -> str:
        return job_label(self.rule, self.model, self.drafter, self.k, self.dataset, self.dtype,
                         self.tp)


@dataclass(frozen=True)
class Drafter:
    name: str
    source: str  # tiny, hf or self (the target's own MTP layers)
    method: str
    entry: MappingProxyType = field(repr=False)

    @property
    def served_alone(self) -> bool:
        """Is it served alone for the draft cost c? Separate draft models only (EAGLE heads and
        MTP layers cannot run alone)."""
        return self.source == "tiny" or self.method == "draft_model"


@dataclass(frozen=True)
class Model:
    """A model of the runs, its defaults filled. `entry` is its configuration as the stages read
    it (a variant's merged with its target's, an untrained control's with its own name)."""
    name: str
    source: str  # tiny, synthetic, hf or variant
    hardware: str
    ks: tuple[int, ...]
    datasets: tuple[str, ...]
    drafters: tuple[str, ...]
    precision: str
    tp: int
    sweep: bool  # its own flag: serve it in sweeps and profiles where the config has both
    entry: MappingProxyType = field(repr=False)
    variant_of: str | None = None
    control_of: str | None = None  # an untrained "-random" control of this tiny target

    def runs(self) -> list[Run]:
        return [Run(self.name, d, k, ds) for d in self.drafters for k in self.ks
                for ds in self.datasets]


def with_engine_arg_names(config: dict) -> dict:
    """The configuration with each engine_args key (a model's, configcheck.ENGINE_ARGS_SECTIONS')
    as vLLM reads it (kinds.engine_arg: max-model-len is max_model_len), so that the checks, the
    preflight and the engines read one key where vLLM takes either spelling (a server's command
    line given both took the later); `config` itself is left as it is. configcheck.structure
    refuses a key given in both spellings first."""
    def named(args: dict) -> dict:
        return {engine_arg(k): v for k, v in args.items()}

    out = dict(config)
    out["models"] = [{**m, "engine_args": named(m["engine_args"])} if m.get("engine_args") else m
                     for m in config.get("models") or []]
    for path in configcheck.ENGINE_ARGS_SECTIONS:
        section = configcheck.section_at(config, path)
        if section.get("engine_args"):
            out = configcheck.with_section_at(
                out, path, {**section, "engine_args": named(section["engine_args"])})
    return out


def _frozen(d: dict) -> MappingProxyType:
    return MappingProxyType(dict(d))


class Config:
    """The resolved configuration (build it with `Config.resolve`)."""

    def __init__(self, config: dict):
        """Resolve a configuration whose structure is sound (configcheck.structure); its
        engine_args keys under vLLM's names (with_engine_arg_names)."""
        self.raw = config = with_engine_arg_names(config)
        self.ks = tuple(config["ks"])
        self.hardware = published.with_gpus(config["hardware"])  # the shipped GPUs' numbers
        self.datasets = dict(config.get("datasets") or {})
        self.prompts = (config.get("tiny") or {}).get("prompts", DEFAULT_SOURCE)
        self.sweep = dict(config.get("sweep") or {})
        self.batch_sizes = list(config.get("batch_sizes") or [])  # the analysis's batch sizes
        self.shuffle_null = bool(config["shuffle_null"])
        self.draft_cost = config.get("draft_cost")
        # sweeps and profiles run only where both sections are present
        self.measures = "sweep" in config and "profiling" in config
        self.drafters = {d["name"]: Drafter(d["name"], d["source"], d["method"],
                                            _frozen(d))
                         for d in config.get("drafters") or []}
        entries = {m["name"]: m for m in config["models"]}
        self.models: dict[str, Model] = {}    # every model with runs (controls included)
        self.variants: dict[str, Model] = {}  # swept only: a tiny checkpoint, other settings
        self.hf: dict[str, Model] = {}        # the study's models, cost-only ones included
        for m in config["models"]:
            if m["source"] == "variant":
                base = entries[m["variant_of"]]
                self.variants[m["name"]] = self._model({**base, **m})
                continue
            if m["source"] == "hf":
                model = self._model({**m, "hf_config": paths.download(repo_key(m), "config")})
                self.hf[m["name"]] = model
                if not m.get("cost_only"):  # cost-only: the weight-model table, no runs
                    self.models[m["name"]] = model
            elif m["source"] == "tiny":
                target = self.models[m["name"]] = self._model(
                    {**m, "hf_config": paths.model_config(m["name"])})
                # the untrained control runs at the model's first K and dataset: the routing
                # baseline
                r = control_name(m["name"])
                self.models[r] = self._model(
                    {**m, "name": r, "hf_config": paths.model_config(r),
                     "ks": list(target.ks[:1]), "datasets": list(target.datasets[:1])},
                    control_of=m["name"])
            else:
                self.models[m["name"]] = self._model(m)

    @classmethod
    def load(cls, config: dict, schema_path, prompt_datasets: set[str] | None = None) -> "Config":
        """Validate `config` against its schema (filling the schema's defaults) and resolve it;
        InputError listing every problem, one per line."""
        from .checks import schema

        schema.check(config, schema_path)
        return cls.resolve(config, prompt_datasets)

    @classmethod
    def resolve(cls, config: dict, prompt_datasets: set[str] | None = None) -> "Config":
        """The resolved configuration; InputError listing every problem, one per line, if it
        cannot run (prompt_datasets: the datasets of the tiny models' prompt table, None: not
        checked)."""
        found = configcheck.structure(config)
        resolved = None if found else cls(config)
        found = found or resolved.problems(prompt_datasets)
        if found:
            raise InputError("config: " + "\nconfig: ".join(found))
        return resolved

    def problems(self, prompt_datasets: set[str] | None = None) -> list[str]:
        """The checks of the resolved models and the settings (configcheck), then, where they
        find nothing, the serving series' CUDA graphs (graph_problems: it reads the jobs, which
        need the models' drafters and datasets sound)."""
        every = [self.model(m["name"]) for m in self.raw["models"]]
        found = (configcheck.models(every, self.drafters, self.hardware, self.datasets, self.ks,
                                    prompt_datasets)
                 + configcheck.settings(self.raw, prompt_datasets,
                                        [n for n in self.names("hf") if self.on_gpu(n)]))
        return found or (self.graph_problems() + self.profile_problems()
                         + self.capture_context_problems())

    def capture_context_problems(self) -> list[str]:
        """Captured models that are swept too whose capture engines start with a shorter context
        (kinds.engine_context, as the engine stages start them) than their sweeps': the captures
        would leave out prompts that the sweeps of the same runs serve (paper.yaml's captures
        ran at 1024 tokens beside sweeps at 4096). One line per section and contexts, naming
        every model it applies to."""
        found: dict[tuple[str, int, int], list[str]] = {}
        for name in self.captured:
            if name not in self.swept and name not in self.hf_swept:
                continue
            cap = engine_context(self.job_settings("capture", name))
            sweep = engine_context(self.job_settings("sweep_sd", name))
            if cap < sweep:
                where = "tiny.capture" if self.models[name].source == "tiny" else "capture"
                found.setdefault((where, cap, sweep), []).append(name)
        return [f"{where}.max_model_len {cap} is below the sweep's {sweep} "
                f"({'model' if len(ms) == 1 else 'models'} {', '.join(ms)}): the captures would "
                f"leave out prompts that the sweeps of the same runs serve; set {where}."
                f"max_model_len to at least {sweep}"
                for (where, cap, sweep), ms in found.items()]

    def graph_problems(self) -> list[str]:
        """The serving series on a GPU whose engine_args' compilation_config would leave verify
        steps without CUDA graphs, refused here, when the configuration loads: the series'
        engines take their graph sizes from cuda_graph_config at the series' largest batch
        (specmoe.runtime.engine.engine_kwargs, graph_k; a series with enforce_eager runs no
        graphs; a separate draft model's series, its first draft pass too), which refused them
        only on the GPU node, after the jobs had queued (a
        compilation_config in sweep.engine_args stopped each of the study's series there); and
        those whose max_num_batched_tokens is below a step at that batch
        (_step_budget_problem). One line per finding, naming every model it applies to."""
        found: dict[tuple[str, str], list[str]] = {}  # (where, problem): its models

        def note(j, key: str, problem: str) -> None:
            own = key in (self.entry(j.model).get("engine_args") or {})
            where = "its own engine_args" if own else f"{kind(j.rule).section}.engine_args"
            models = found.setdefault((where, problem), [])
            if j.model not in models:
                models.append(j.model)

        for j in self.gpu_jobs():
            if not (kind(j.rule).series and j.k):
                continue  # a drafter served alone (sweep_ar) has no verify steps
            args = self.engine_settings(j.model, kind(j.rule).section)["engine_args"]
            budget = self._step_budget_problem(j, args)
            if budget:
                note(j, "max_num_batched_tokens", budget)
            if args.get("enforce_eager"):
                continue  # no graphs to capture
            try:
                cuda_graph_config(args.get("compilation_config"), self.series_batch(j.model),
                                  int(j.k), draft_model=self.drafters[j.drafter].served_alone)
            except InputError as exc:
                note(j, "compilation_config", str(exc))
        return [f"{'model' if len(ms) == 1 else 'models'} {', '.join(ms)} ({where}): {problem}"
                for (where, problem), ms in found.items()]

    def _step_budget_problem(self, j, args: dict) -> str | None:
        """A serving series' max_num_batched_tokens (given, or vLLM's default on the model's GPU:
        preflight.batched_tokens) below one step at its largest batch B: B (K + 1) tokens, and a
        draft model's extra input slot a request (B (K + 2)). vLLM's scheduler spends those from
        that budget, so fewer requests than the point's batch would verify a step while the
        target without SD decodes all of them (and it drops capture sizes above it, warning
        only). None: no problem, or a GPU of unknown memory and no budget given (the preflight
        refuses that hardware: its jobs' memory cannot be sized either)."""
        from .checks.preflight import batched_tokens
        from .cost.costmodel import capacity

        draft = self.drafters[j.drafter].served_alone
        b, k = self.series_batch(j.model), int(j.k)
        need = b * tokens_per_request(k, draft)
        given = args.get("max_num_batched_tokens")
        hw_name = self.hardware_of(j.model)
        cap = capacity(self.hardware.get(hw_name, {}))
        if not given and cap is None:
            return None  # vLLM's default unknown: the preflight refuses the hardware (memory)
        tokens = batched_tokens(cap[0] / 2**30 if cap else 0.0, False, args, hw_name,
                                self.hardware.get(hw_name, {}))  # a series: vLLM's server
        if tokens >= need:
            return None
        what = "" if given else f" (vLLM's default on {hw_name}'s {cap[1]})"
        per = (f"K + 2 = {k + 2} tokens a request: K + 1 verified and a draft model's extra "
               f"input slot" if draft else f"K + 1 = {k + 1} tokens a request")
        return (f"max_num_batched_tokens {tokens}{what} is below the {need} tokens of a step at "
                f"batch {b} with K = {k} ({per}): vLLM would verify fewer requests a step than "
                f"the batch; set max_num_batched_tokens to at least {need}")

    def profile_problems(self) -> list[str]:
        """Profiles whose engine starts cannot each have prompts of their own: each decode/verify
        pair of starts profiles its own prompts at the largest batch size, engines x that many
        distinct ones (runtime.kernelprof.profile_calls refuses fewer, on the job's node, after
        the job has queued), refused here where the dataset's size is known before its download
        (_prompts_at_most: a tiny model's prompt table, a dataset's max_prompts)."""
        short: dict[str, list[str]] = {}  # the problem: its models
        for j in self.profiled():
            prof = self.job_settings(j.rule, j.model)
            need = prompts_needed(prof["engines"], prof["batch_sizes"])
            have = self._run_prompts_at_most(j.dataset)
            if have is not None and have < need:
                short.setdefault(
                    f"{prof['engines']} engine starts at batch {max(prof['batch_sizes'])} need "
                    f"{need} distinct prompts of {j.dataset}, each pair of starts its own, and it "
                    f"has at most {have}: fewer engines or a smaller largest batch size",
                    []).append(j.model)
        return [f"profiling of {', '.join(models)}: {problem}"
                for problem, models in short.items()]

    def series_batch(self, name: str) -> int:
        """The largest batch a serving series of `name` runs (its engines' max_num_seqs): the
        largest point of the schedules of the datasets it is swept on (sweep_schedule;
        configcheck refuses a dataset whose max_batch leaves it none)."""
        return max(b for ds in self.sweep_datasets(name) for b, _ in self.sweep_schedule(ds))

    def _model(self, m: dict, control_of: str | None = None) -> Model:
        hardware = m.get("hardware") or DEFAULT_HARDWARE  # a variant's: its target's
        return Model(name=m["name"], source=m["source"], hardware=hardware,
                     ks=tuple(int(k) for k in m.get("ks", self.ks)),
                     datasets=tuple(m.get("datasets") or ()),
                     drafters=tuple(m.get("drafters") or ()),
                     precision=m["precision"], tp=int(m["tp"]),
                     sweep=bool(m["sweep"]),
                     entry=_frozen({**m, "hardware": hardware}),
                     variant_of=m.get("variant_of"), control_of=control_of)

    # --- which models do what ----------------------------------------------------------------

    def names(self, source: str) -> list[str]:
        return [n for n, m in self.models.items() if m.source == source]

    @property
    def tiny_targets(self) -> dict[str, Model]:
        return {n: m for n, m in self.models.items() if m.source == "tiny" and not m.control_of}

    @property
    def controls(self) -> list[str]:
        """The untrained controls: each reads its target's own windows (rule capture_control)."""
        return [n for n, m in self.models.items() if m.control_of]

    @property
    def captured(self) -> list[str]:
        """The models whose engine captures their traces (rule capture): tiny and study models,
        not the controls, which read their targets' windows."""
        return [n for n in self.names("tiny") + self.names("hf") if n not in self.controls]

    @property
    def tiny_drafters(self) -> dict[str, Drafter]:
        return {n: d for n, d in self.drafters.items() if d.source == "tiny"}

    @property
    def swept(self) -> list[str]:
        """Tiny targets and their variants measured by sweeps (controls are not)."""
        if not self.measures:
            return []
        return [n for n, m in [*self.tiny_targets.items(), *self.variants.items()] if m.sweep]

    @property
    def hf_swept(self) -> list[str]:
        return [n for n in self.names("hf") if self.measures and self.models[n].sweep]

    def runs(self) -> list[Run]:
        return [r for m in self.models.values() for r in m.runs()]

    def runs_served_by(self, name: str) -> int:
        """How many runs (model, drafter, K, dataset; variants' and controls' included) serve a
        checkpoint, as their target, the target of their variant or control, or their drafter:
        every engine job of a run waits for it. The tiny trainings start in this order
        (workflow/rules/models.smk), so that on two cores the drafter and the target with the
        most engine jobs train first, and those jobs start beside the last training."""
        every = self.runs() + [r for m in self.variants.values() for r in m.runs()]
        base = {n: m.variant_of or m.control_of or n
                for n, m in [*self.models.items(), *self.variants.items()]}
        return sum(name in (r.drafter, r.model, base.get(r.model)) for r in every)

    def sweep_runs(self) -> list[Run]:
        """The runs that are swept (variants' included)."""
        swept = set(self.swept) | set(self.hf_swept)
        every = self.runs() + [r for m in self.variants.values() for r in m.runs()]
        return [r for r in every if r.model in swept]

    @property
    def served(self) -> list[str]:
        """Engines of the series without SD (rule sweep_ar): the drafters served alone for the
        draft cost c (separate draft models only: EAGLE heads and MTP layers cannot run alone).
        A swept target has none: each of its SD series measures its no-SD points beside the SD
        ones (specmoe.stages.measure.sweep_stage), and the speedup divides by those."""
        return sorted({r.drafter for r in self.sweep_runs()
                       if self.drafters[r.drafter].served_alone})

    def sd_serving(self, name: str) -> tuple[str, int]:
        """The dtype and tensor-parallel degree of the SD series of swept model `name` (its sweep
        section in its precision, at its TP), which vLLM gives the separate draft model inside it
        too: its speculative config builds the draft's model config with the target's dtype and
        sets the draft's TP to the target's (SpeculativeConfig._verify_and_get_draft_tp; V1's
        draft-model runner refuses any other). fp8 is the target's quantization, which a
        separate draft model does not take: it is loaded in its own checkpoint's format."""
        if name not in self._sd_serving:  # once per model: every sweep_ar job's params,
            settings = self.job_settings("sweep_sd", name)  # inputs and datasets ask for it
            self._sd_serving[name] = (
                str(settings.get("dtype") or ENGINE_DEFAULTS["dtype"]),
                int((settings.get("engine_args") or {}).get("tensor_parallel_size", 1)))
        return self._sd_serving[name]

    @cached_property
    def _sd_serving(self) -> dict[str, tuple[str, int]]:
        return {}  # sd_serving's answers (a Config is read-only once resolved)

    def drafter_serving(self, name: str) -> list[tuple[str, int]]:
        """The (dtype, TP) a drafter served alone is served in: one series per dtype and TP of
        the SD series it drafts in (sd_serving), so that its draft cost c divides times of one
        precision and one sharding (a drafter served in the sweep section's float32 drafted in a
        bf16 variant's bfloat16; one served on one GPU drafted over a TP-2 target's two)."""
        return sorted({self.sd_serving(r.model) for r in self.sweep_runs() if r.drafter == name})

    def alone_jobs(self) -> list[Job]:
        """The series of the drafters served alone (rule sweep_ar), one per drafter, dtype and
        TP."""
        return [j for d in self.served for j in self.engine_jobs(d)]

    def model(self, name: str) -> Model:
        """A model, variant or study model (cost-only included) by name."""
        for group in (self.models, self.variants, self.hf):
            if name in group:
                return group[name]
        raise KeyError(name)

    def from_download(self, name: str) -> bool:
        """Is this model (or drafter served alone) a study model, served from its download?"""
        d = self.drafters.get(name)
        return name in self.hf or (d is not None and d.source in ("hf", "self"))

    def hardware_of(self, name: str) -> str:
        """A model's hardware; a drafter runs on its first target's."""
        if name not in self.drafters:
            return self.model(name).hardware
        first = next((m for m in self.raw["models"] if name in m.get("drafters", ())), None)
        return self.model(first["name"]).hardware if first else DEFAULT_HARDWARE

    def on_gpu(self, name: str) -> bool:
        """Does this model's engine run on a GPU? A study model does unless its hardware is a
        CPU; tiny models run on this machine's cores."""
        if not self.from_download(name):
            return False
        return on_gpu_hardware(self.hardware.get(self.hardware_of(name)))

    def entry(self, name: str) -> dict:
        """The configuration entry of a model or drafter."""
        if name in self.drafters:
            return dict(self.drafters[name].entry)
        return dict(self.model(name).entry)

    def gpu_entry(self, name: str) -> dict:
        """A model's `gpu` settings: its own entry's over the configuration's `gpu` defaults."""
        return {**(self.raw.get("gpu") or {}), **(self.entry(name).get("gpu") or {})}

    def gpu_resources(self, name: str) -> dict:
        """Snakemake's standard resources of one model's GPU jobs (gpu = TP, the GPU model of its
        hardware), SLURM's node constraint (`-C`, None where unset), memory and hours from the
        model's `gpu` entry over the config's defaults."""
        m, g = self.entry(name), self.gpu_entry(name)
        hw = self.hardware.get(self.hardware_of(name), {})
        return {"gpu": int(m.get("tp", 1)),
                "gpu_model": hw.get("gpu_model") or "",
                "constraint": g.get("constraint"),
                "mem_mb": int(g.get("mem_mb", GPU_JOB_DEFAULTS["mem_mb"])),
                "runtime": int(g.get("runtime", GPU_JOB_DEFAULTS["runtime"]))}

    def memory_utilization(self, name: str) -> float:
        """vLLM's gpu_memory_utilization of a model's (or drafter's) GPU jobs."""
        return float(self.gpu_entry(name).get("memory_utilization", GPU_MEMORY_UTILIZATION))

    def gpus(self, name: str, tp: int | str | None = None) -> int:
        """GPUs of one model's engine jobs: its TP on a GPU, none on a CPU; tp: a drafter served
        alone's series' (Job.tp, the SD series' it drafts in)."""
        if not self.on_gpu(name):
            return 0
        return int(tp) if tp else self.gpu_resources(name)["gpu"]

    # --- the engine jobs: one decision for the rules and the GPU plan ---------------------------

    def engine_jobs(self, name: str) -> list[Job]:
        """The engine jobs of one target: a capture per run; where it is swept, one serving series
        per drafter and K (each with its own no-SD points: the target has no series without SD
        of its own), and one profile per drafter at its first K (the decode profile does not
        depend on K, and the study profiles one K). A drafter served alone: its series without
        SD, one in each dtype and TP it drafts in (drafter_serving)."""
        if name in self.drafters:
            return [Job("sweep_ar", name, dtype=t, tp=tp) for t, tp in self.drafter_serving(name)]
        m = self.models[name]
        jobs = [Job("capture", name, r.drafter, r.k, r.dataset) for r in m.runs()]
        if name in self.swept or name in self.hf_swept:
            jobs += [Job("sweep_sd", name, d, k) for d in m.drafters for k in m.ks]
            jobs += [Job("profile", name, d, m.ks[0], m.datasets[0]) for d in m.drafters]
        return jobs

    @property
    def hf_alone(self) -> list[str]:
        """The separate draft models that the study models' SD series serve alone too (rule
        sweep_ar, for the draft cost c)."""
        return sorted({j.drafter for n in self.names("hf") for j in self.engine_jobs(n)
                       if j.rule == "sweep_sd" and self.drafters[j.drafter].served_alone})

    def study_jobs(self) -> list[Job]:
        """Every engine job of the study models and of the separate draft models served alone
        (on a GPU or on CPU hardware): the preflight's."""
        return [j for n in [*self.names("hf"), *self.hf_alone] for j in self.engine_jobs(n)]

    def gpu_jobs(self) -> list[Job]:
        """Every engine job on a GPU: the study models' jobs, and the series of each separate draft
        model that is served alone for the draft cost."""
        return [j for j in self.study_jobs() if self.on_gpu(j.model)]

    def engine_settings(self, name: str, section: str) -> dict:
        """An engine section (sweep, profiling, capture) for a study model or a drafter served
        alone: its TP, precision, engine arguments and, on a GPU, vLLM's memory share (a drafter
        served alone: TP 1 here, its series' TP in job_settings)."""
        m = self.entry(name)  # a model, or a drafter served alone (its own format)
        base = self.engine_section(section)
        extra = {**(base.get("engine_args") or {}), **(m.get("engine_args") or {})}
        extra["tensor_parallel_size"] = int(m.get("tp", 1))
        if m.get("precision", "auto") == "fp8":
            extra["quantization"] = "fp8"
        with_precision(base, m)
        if m.get("trust_remote_code"):
            extra["trust_remote_code"] = True
        if self.on_gpu(name):
            extra["gpu_memory_utilization"] = self.memory_utilization(name)
        base["engine_args"] = extra
        return base

    def job_settings(self, rule: str, name: str, dtype: str = "", tp: int = 0) -> dict:
        """The engine settings of a job of kind `rule` (specmoe.kinds) of model `name`: a study
        model's (or a drafter served alone) section with its TP, precision and engine arguments;
        a tiny model's sweep settings, its `tiny.capture` section or the profiling section, each
        in its precision (a precision is how the checkpoint is served, in every job of it). A
        series' settings hold, under `dataset_schedules`, the points of each dataset it serves
        that has a max_batch (the others: the schedule's). dtype, tp: a drafter served alone,
        the dtype and TP of the SD series it drafts in (Job.dtype, Job.tp, drafter_serving)."""
        what = kind(rule)
        if (dtype or tp) and not (rule == "sweep_ar" and name in self.drafters):
            raise ValueError(f"job_settings: a dtype and TP ({dtype}, {tp}) are a drafter served "
                             f"alone's, not {rule} of {name}'s")
        if bool(dtype) != bool(tp):
            raise ValueError(f"job_settings: {name}: a dtype ({dtype!r}) and a TP ({tp!r}) "
                             "together, or neither")
        if self.from_download(name):
            settings = self.engine_settings(name, what.section)
        elif what.series:
            settings = self.sweep_params(name)
        else:  # a tiny target's (or its control's) capture and profile: in its precision too
            return with_precision(self.section(what.section, tiny=what.section == "capture"),
                                  dict(self.model(name).entry))
        if dtype:
            serving = self.drafter_serving(name)
            if (dtype, int(tp)) not in serving:
                its = ", ".join(f"{t} at TP {n}" for t, n in serving) or "none"
                raise InputError(f"drafter {name} drafts in no SD series of dtype {dtype} at TP "
                                 f"{tp} (its: {its})")
            settings["dtype"] = dtype
            args = settings.get("engine_args") or {}
            if int(args.get("tensor_parallel_size", 1)) != int(tp):
                settings["engine_args"] = {**args, "tensor_parallel_size": int(tp)}
        if what.series:  # a dataset with a max_batch: its own points (sweep_schedule)
            capped = {ds: [{"batch": b, "prompts": n} for b, n in self.sweep_schedule(ds)]
                      for ds in self.sweep_datasets(name, dtype, tp)
                      if self.max_batch(ds) is not None}
            if capped:
                settings["dataset_schedules"] = capped
        return settings

    def served_datasets(self, rule: str, name: str, dataset: str = "",
                        dtype: str = "", tp: int = 0) -> list[str]:
        """The datasets whose prompts a job of kind `rule` serves: its run's `dataset`, every
        dataset its model is swept on (a drafter served alone in `dtype` at TP `tp`: those of the
        runs it drafts for in SD series of that dtype and TP), or its model's first."""
        what = kind(rule).datasets
        if what == "run":
            return [dataset]
        if what == "swept":
            return self.sweep_datasets(name, dtype, tp)
        return list(self.models[name].datasets[:1])

    def engine_of(self, job: Job):
        """What a GPU job's engine is, for the preflight (specmoe.checks.preflight.Engine)."""
        from .checks.preflight import Engine

        what = kind(job.rule)
        settings = self.engine_settings(job.model, what.section)
        if job.dtype:  # a drafter served alone, in the dtype and TP of the SD series it drafts in
            settings["dtype"] = job.dtype
            settings["engine_args"]["tensor_parallel_size"] = job.tp
        args = settings["engine_args"]
        max_len = engine_context(settings)
        batches = {}  # a series' datasets with a max_batch: the largest batch each runs at
        if what.stage == "capture":
            batch, out = int(settings["max_num_seqs"]), int(settings["max_tokens"])
        elif what.stage == "profile":
            batch, out = max(settings["batch_sizes"]), int(settings["max_tokens"])
        else:
            batch = self.series_batch(job.model)
            batches = {ds: max(b for b, _ in self.sweep_schedule(ds))
                       for ds in self._job_datasets(job) if self.max_batch(ds) is not None}
            out = int(settings["output_len"])
        d = self.drafters.get(job.drafter)
        method = d.method if d is not None and what.sd else None
        entry = self.entry(job.model)
        return Engine(job=job.label, model=job.model, entry=entry,
                      hardware=self.hardware.get(self.hardware_of(job.model), {}),
                      hardware_name=self.hardware_of(job.model),
                      tp=job.tp or int(entry.get("tp", 1)),
                      precision=entry.get("precision", "auto"),
                      method=method, drafter=dict(d.entry) if method and method != "mtp" else None,
                      k=int(job.k or 0), max_model_len=max_len, batch=batch, output_tokens=out,
                      prompt_tokens={ds: self.prompt_tokens(ds)[0]
                                     for ds in self._job_datasets(job)},
                      batches=batches,
                      utilization=self.memory_utilization(job.model),
                      offline_server=not what.series,
                      dtype=str(settings.get("dtype") or ENGINE_DEFAULTS["dtype"]),
                      engine_args=dict(args))

    def contexts(self) -> list:
        """Every engine job of the tiny and study models (controls included) with its engine's
        context as the engine stages set it, for the prompts' check
        (specmoe.checks.contextfit.Context)."""
        from .checks.contextfit import Context

        out = []
        for name in [*self.names("tiny"), *self.names("hf")]:
            for job in self.engine_jobs(name):
                what = kind(job.rule)
                settings = self.job_settings(job.rule, name)
                limit = engine_context(settings)
                if what.series:
                    datasets = self.sweep_datasets(name)
                    reserved = int(settings["output_len"]) + self.draft_slack(name)
                else:
                    datasets = [job.dataset]
                    reserved = int(settings["max_tokens"]) + int(job.k) + 1
                manifests = tuple(paths.download(repo_key(self.entry(name)), mode)
                                  for mode in ("full", "config")) \
                    if self.from_download(name) else ()
                out.append(Context(job.label, name,
                                   tuple(datasets_in(datasets)),
                                   limit, reserved, manifests))
        return out

    def preflight(self, cache_dir=None, with_vllm: bool = True):
        """The preflight of every engine job of the study models (study_jobs;
        specmoe.checks.preflight.Report): on a GPU every check, on CPU hardware the model's shape
        (TP, context, speculative method) where its config.json is offline."""
        from .checks import preflight

        return preflight.run([self.engine_of(j) for j in self.study_jobs()], cache_dir,
                             with_vllm)

    def _job_datasets(self, job: Job) -> list[str]:
        """The datasets whose prompts a job's engine meets: a capture's or profile's one, a
        series' every dataset of its model (a drafter alone: of the models it drafts for)."""
        if job.dataset:
            names = [job.dataset]
        elif job.model in self.drafters:
            names = [ds for m in self.models.values() if job.model in m.drafters
                     for ds in m.datasets]
        else:
            names = list(self.models[job.model].datasets)
        return datasets_in(names)

    def prompt_tokens(self, dataset: str) -> tuple[float, str]:
        """(mean prompt length in tokens, where it comes from) before any download:
        `datasets.<name>.prompt_tokens`, the prompt table's own (4 characters per token), or the
        GPU plan's assumption `plan.prompt_tokens`."""
        given = (self.datasets.get(dataset) or {}).get("prompt_tokens")
        if given:
            return float(given), "configured"
        if dataset not in self.datasets:
            from .cost.plan import table_prompt_tokens

            tokens = table_prompt_tokens(self.prompts, dataset)
            if tokens is not None:
                return tokens, "prompt table"
        from .cost.plan import PlanAssumptions

        return PlanAssumptions.from_dict(self.raw.get("plan")).prompt_tokens, "assumed"

    def prompts_read(self, dataset: str) -> int | None:
        """The most prompts of a downloaded dataset's table any job reads (None: a job reads
        them all, or none reads it): a capture its section's `prompts` (each distinct prompt
        once), a serving series its schedule's smallest point on it (the prompt set its larger
        points cycle through: stages.measure), a profile engines x its largest batch size
        (measured.profiling.prompts_needed); of a joined set ("a+b"), as many of each part."""
        from .measured.profiling import prompts_needed

        reads: list[int | None] = []
        for name in self.captured:
            if any(dataset in dataset_parts(ds) for ds in self.models[name].datasets):
                reads.append(self.job_settings("capture", name).get("prompts"))
        if self.measures:
            for r in self.sweep_runs():
                if dataset in dataset_parts(r.dataset):
                    reads.append(min(n for _, n in self.sweep_schedule(r.dataset)))
        for j in self.profiled():
            if dataset in dataset_parts(j.dataset):
                prof = self.job_settings(j.rule, j.model)
                reads.append(prompts_needed(prof["engines"], prof["batch_sizes"]))
        return None if not reads or None in reads else max(int(n) for n in reads)

    def max_prompts_unread(self) -> list[str]:
        """A downloaded dataset's max_prompts (in all: Aya's is per language) above the most
        prompts its jobs read (prompts_read): prompts no job uses (the study oversamples past a
        set's size; these series cycle one prompt set: docs/method.md). A warning: a smaller
        schedule run on a set whose max_prompts is its true size (MT-Bench's 80, which the GPU
        plan and the profile check read before the download) reads fewer, and may."""
        out = []
        for name, spec in self.datasets.items():
            limit = spec.get("max_prompts")
            if not limit or spec.get("format") == "aya":
                continue
            read = self.prompts_read(name)
            if read is not None and limit > read:
                out.append(f"config: datasets.{name}.max_prompts {limit}: its jobs read at most "
                           f"{read} of its prompts (capture.prompts, the sweep schedule's smallest "
                           "point, which its larger points cycle through, profiling's engines x "
                           f"largest batch): the table keeps {limit - read} that no job uses")
        return out

    def capture_prompts(self, name: str, dataset: str) -> int | None:
        """How many prompts a capture of `name` on `dataset` runs (each distinct prompt once, at
        most its section's `prompts`: sources.prompts.distinct_prompts), where that is known
        before any download: the least of `prompts` and the dataset's size (each part's
        `max_prompts`: sources.prompts.prompt_limits; a dataset of the tiny models' prompt
        table, its distinct prompts there). None: not known (a downloaded set without
        max_prompts, and no `prompts`)."""
        limit = self.job_settings("capture", name).get("prompts")
        caps = [int(n) for n in (limit, self._run_prompts_at_most(dataset)) if n]
        return min(caps) if caps else None

    def _run_prompts_at_most(self, dataset: str) -> int | None:
        """A run's datasets' prompts at most, before their download: the sum over its parts
        ("a+b+c"; None where one part's is not known)."""
        sizes = [self._prompts_at_most(p) for p in dataset_parts(dataset)]
        return None if None in sizes else sum(sizes)

    def _prompts_at_most(self, dataset: str) -> int | None:
        """A dataset's prompts at most, before its download (None: not known)."""
        spec = self.datasets.get(dataset)
        from .sources import prompts as prompt_table

        if spec is None:  # the tiny models' prompt table: read it
            try:
                return len(prompt_table.distinct_prompts(
                    prompt_table.load(self.prompts, [dataset]), None))
            except (InputError, OSError):
                return None
        return prompt_table.prompt_limits(spec)[1]

    def warnings(self) -> list[str]:
        """What may run, but not as the user expects: unusual values (configcheck.unusual),
        study models, drafters and datasets of runs without a repository, GPUs the step model was
        not calibrated on."""
        out = configcheck.unusual(self.raw) + self.max_prompts_unread()
        unset = [n for n, m in self.hf.items() if not m.entry.get("repo_id")]
        unset += [n for n, d in self.drafters.items() if d.source == "hf"
                  and not d.entry.get("repo_id")]
        used = datasets_in(ds for m in self.models.values() for ds in m.datasets)
        unset += [f"dataset {d}" for d in used
                  if d in self.datasets and not self.datasets[d].get("repo_id")]
        if unset:
            out.append(f"config: no repo_id for {', '.join(unset)} (the study names none): fill it "
                       "in before their downloads run; the DAG below includes them")
        from .sources.published import load

        calibrated = set(load("hardware")["gpu"])
        for hw in sorted({m.hardware for m in self.models.values() if m.source != "tiny"}):
            if on_gpu_hardware(self.hardware.get(hw)) and hw not in calibrated:
                out.append(f"config: hardware {hw} is not a GPU the step model was calibrated on "
                           f"({', '.join(sorted(calibrated))}): its predictions and the GPU plan "
                           "there are extrapolations")
        return out

    def profiled(self) -> list[Job]:
        """Every profile job (variants are not profiled: their kernels are their target's)."""
        return [j for n in [*self.swept, *self.hf_swept] if n in self.models
                for j in self.engine_jobs(n) if j.rule == "profile"]

    # --- the study's downloads, the GPU plan and the comparison with the study ------------------

    @cached_property
    def repos(self) -> dict[str, dict]:
        """The repositories downloaded from the Hub, by file name (owner--name): repo id, revision,
        whether any model of it needs remote code, and the names of the models and drafters in it."""
        out: dict[str, dict] = {}
        entries = [m.entry for m in self.hf.values()]
        entries += [d.entry for d in self.drafters.values() if d.source == "hf"]
        for e in entries:
            r = out.setdefault(repo_key(e), {"repo_id": e.get("repo_id"),
                                             "revision": e.get("revision"),
                                             "trust_remote_code": False, "names": []})
            r["trust_remote_code"] |= bool(e["trust_remote_code"])
            r["names"].append(e["name"])
        return out

    @property
    def planned(self) -> list[str]:
        """Study models and draft models served alone (hf_alone) whose GPU jobs the plan
        estimates (a repo id is needed for config.json)."""
        return [n for n in self.plan_engines if self.entry(n).get("repo_id")]

    @property
    def plan_engines(self) -> list[str]:
        """Every engine whose jobs the GPU plan lists, planned or not: the study models and the
        draft models served alone."""
        return [*self.names("hf"), *self.hf_alone]

    @cached_property
    def study(self) -> dict[str, dict]:
        """Models whose results sit beside the study's published numbers (compare_with, or a study
        checkpoint): name -> the study model and the variant (precision, TP, hardware)."""
        return {m["name"]: entry for m in self.raw["models"]
                if (entry := published.study_entry(
                    self.entry(m["name"]), methods={d: self.drafters[d].method
                                                    for d in self.model(m["name"]).drafters
                                                    if d in self.drafters})) is not None}

    @property
    def predicted(self) -> list[str]:
        """Models the step model predicts: every model with runs but the untrained controls."""
        return [n for n, m in self.models.items() if not m.control_of]

    # --- each rule's settings: its params, so that a job reruns when these change, only these ---

    def section(self, name: str, tiny: bool = False) -> dict:
        """A section of the configuration as written (tiny: the `tiny` section's)."""
        top = (self.raw.get("tiny") or {}) if tiny else self.raw
        return dict(top.get(name) or {})

    def sd_check_run(self) -> tuple[int, str]:
        """The SD check's K and dataset (tiny.sd_check's, the schema's defaults filled)."""
        sd = self.section("sd_check", tiny=True)
        return int(sd["k"]), sd["dataset"]

    def engine_section(self, section: str) -> dict:
        """An engine section (sweep, profiling, capture) as its jobs read it: the sweep's without
        its analysis-only settings (SWEEP_ANALYSIS_KEYS, rule speedup's: a change reruns no
        sweep, of a tiny model or a study model)."""
        base = self.section(section)
        if section == "sweep":
            base = {k: v for k, v in base.items() if k not in SWEEP_ANALYSIS_KEYS}
        return base

    def sweep_params(self, name: str) -> dict:
        """The sweep settings that change a measurement (engine_section: not the analysis-only
        ones), in the model's precision (a drafter served alone: as configured)."""
        m = self.variants.get(name) or self.models.get(name)
        return with_precision(self.engine_section("sweep"), dict(m.entry) if m else {})

    def sweep_datasets(self, name: str, dtype: str = "", tp: int = 0) -> list[str]:
        """The datasets one served engine measures: its model's swept datasets, or for a drafter
        served alone, those of the runs it drafts for (dtype, tp: in SD series of that dtype and
        TP only, its series in that dtype and TP, Job.dtype and Job.tp)."""
        alone = name in self.drafters and self.drafters[name].served_alone
        return sorted({r.dataset for r in self.sweep_runs()
                       if r.model == name or (alone and r.drafter == name and (
                           not dtype or self.sd_serving(r.model) == (dtype, int(tp))))})

    def max_batch(self, dataset: str) -> int | None:
        """The largest batch size the sweeps measure `dataset` at (runs.max_batch_of)."""
        return max_batch_of(self.datasets, dataset)

    def sweep_schedule(self, dataset: str) -> list[tuple[int, int]]:
        """The (batch, prompts) points a serving series measures on `dataset`: the sweep
        schedule's, up to the dataset's max_batch. The series, the GPU plan and the preflight
        read each dataset's points here."""
        cap = self.max_batch(dataset)
        return [(int(p["batch"]), int(p["prompts"])) for p in self.sweep.get("schedule") or []
                if cap is None or int(p["batch"]) <= cap]

    def prompting(self, name: str, datasets) -> dict:
        """How an engine of `name` receives the prompts of `datasets` (specmoe.sources.promptfit):
        each dataset's chat_template setting (false where the configuration has none)."""
        return {"chat_template": {ds: bool((self.datasets.get(ds) or {}).get("chat_template"))
                                  for ds in datasets_in(datasets)}}

    def draft_slack(self, name: str) -> int:
        """The tokens the serving series of `name` (target or drafter) keep free for drafts: K+1
        at the largest K it is swept at (0 where it is swept at none), in its series with and
        without SD alike, so that they measure the same prompts."""
        ks = [r.k for r in self.sweep_runs() if name in (r.model, r.drafter)]
        return max(ks) + 1 if ks else 0

    def engine_mem_mb(self, name: str) -> int:
        return self.gpu_resources(name)["mem_mb"] if self.on_gpu(name) else CPU_ENGINE["mem_mb"]

    def gpu_model(self, name: str) -> str:
        return self.gpu_resources(name)["gpu_model"] if self.on_gpu(name) else ""

    def gpu_constraint(self, name: str) -> str | None:
        """SLURM's `-C` of a model's engine jobs; None (no constraint) where the `gpu` entries
        set none or the engine runs on a CPU: Snakemake leaves a None resource out."""
        return self.gpu_resources(name)["constraint"] if self.on_gpu(name) else None

    def gpu_cpus(self, name: str, timed: bool, tp: int | str | None = None) -> int:
        """CPUs of one of a model's GPU engine jobs on a cluster: `gpu.cpus` of the model's
        entry over the configuration's, else gpu_job_cpus of its TP (tp: a drafter served
        alone's series', as gpus)."""
        return int(self.gpu_entry(name).get("cpus")
                   or gpu_job_cpus(int(tp) if tp else self.gpu_resources(name)["gpu"], timed))


def table_datasets(config: dict) -> set[str]:
    """The datasets of the tiny models' prompt table (`tiny.prompts`, else the embedded one).
    Every dataset check of a configuration reads it, so a table that cannot be read (missing,
    unknown, without its columns) is an InputError in one line, not checks left out."""
    import csv

    from .sources import prompts as prompt_table

    source = (config.get("tiny") or {}).get("prompts") or DEFAULT_SOURCE
    try:
        return {p.dataset for p in prompt_table.load(source)}
    except InputError as exc:
        why = str(exc)
    except IsADirectoryError:
        why = f"{source}: is a directory, not a prompt table (a CSV file)"
    except UnicodeDecodeError:
        why = f"{source}: not a text file (a prompt table is a UTF-8 CSV file)"
    except (OSError, csv.Error) as exc:
        why = f"{source}: cannot be read as a prompt table ({exc})"
    raise InputError(f"config: tiny.prompts: {why}; every dataset check reads it")


def read_strictly(files) -> None:
    """Each configuration file read again with a YAML loader that refuses a key given twice
    (Snakemake's keeps the last silently); InputError naming the file, the key and its lines."""
    from . import yamlfile

    for f in files:
        yamlfile.load(f)


def for_workflow(config: dict, schema_path, prompt_datasets: set[str] | None = None,
                 cache_dir=None, preflight: bool = True, with_vllm: bool = True,
                 files=()) -> tuple[Config, list[str]]:
    """What the workflow runs when it is parsed: the configuration files it was merged from read
    strictly (read_strictly), the configuration validated and resolved against its prompt table
    (prompt_datasets; None: the one `tiny.prompts` names, table_datasets), every engine job of
    the study models preflighted (specmoe.checks.preflight; on CPU hardware their shape only;
    with vLLM's own checks of the GPU jobs unless with_vllm is False) and
    every engine job's prompts checked against its context where the prompt table and the
    tokenizer exist by then (specmoe.checks.contextfit); (Config, the warnings to show). Both
    checks keep their answers in cache_dir by what they depend on (specmoe.checks.memo).
    InputError with every problem, one line each, where it cannot run: before any job starts."""
    from .checks import schema

    read_strictly(files)
    schema.check(config, schema_path)
    if prompt_datasets is None:
        prompt_datasets = table_datasets(config)
    cfg = Config.resolve(config, prompt_datasets)
    notes = cfg.warnings()
    if preflight and cfg.study_jobs():
        report = cfg.preflight(cache_dir, with_vllm)
        if report.fatal:
            raise InputError("\n".join(report.lines(True)))
        notes += report.lines(False) + [report.summary()]
    if preflight:  # every engine job's prompts against its context, where they exist by now
        from .checks import contextfit

        problems, more = contextfit.check(cfg, cache_dir)
        if problems:
            raise InputError("\n".join(problems))
        notes += more
    return cfg, notes


def problems(config: dict, prompt_datasets: set[str] | None = None) -> list[str]:
    """Every contradiction of a configuration that its schema has validated (empty: it can run):
    first what resolving it needs, then each resolved model and the settings."""
    found = configcheck.structure(config)
    return found or Config(config).problems(prompt_datasets)
