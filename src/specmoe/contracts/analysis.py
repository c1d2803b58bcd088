"""The contracts of the analysis rules (workflow/rules/analysis.smk; their stages:
specmoe.stages.analysis). See specmoe.contracts for what a record holds."""

from __future__ import annotations

from dataclasses import dataclass

from .. import paths as P
from ..names import DEFAULT_METHOD, FIT_KEYS
from . import canonical, run_of

# What a cost model depends on of its model: dimensions, checkpoint config, precision, TP and
# hardware name (not its drafters or datasets).
COST_KEYS = ("name", "source", "dims", "hf_config", "precision", "tp", "hardware", "revision")


def cost_entry(cfg, name: str) -> dict:
    """A model's entry as the cost model and the step model read it (COST_KEYS)."""
    m = cfg.models[name].entry
    return canonical({k: m[k] for k in COST_KEYS if k in m})


@dataclass(frozen=True)
class SynthFitParams:
    """Rule synth_fit: the fit of a synthetic model's process to the published overlap curve of
    its `fit_to` (specmoe.stages.analysis.synth_fit_stage); no input, output json. It depends on
    what the fit reads of the generator (specmoe.names.FIT_KEYS: fit_to, N, k), not on
    its K, requests or seed: every synthetic trace of the model reads the one fit."""

    INPUTS = ()
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.synth_fit_stage"

    fit: dict

    @classmethod
    def from_config(cls, cfg, w) -> "SynthFitParams":
        syn = cfg.models[w.model].entry["synthetic"]
        return cls(fit=canonical({k: syn[k] for k in FIT_KEYS if k in syn}))

    @staticmethod
    def fitted(cfg, name: str) -> bool:
        """Whether a synthetic model's process is fitted to a published curve (it has fit_to)."""
        return bool(cfg.models[name].entry.get("synthetic", {}).get("fit_to"))


@dataclass(frozen=True)
class SynthTraceParams:
    """Rule synth_trace: a synthetic model's routing trace for one run
    (specmoe.stages.analysis.synth_trace_stage); input fit (rule synth_fit's, where the model
    has fit_to), output trace. It depends on the generator's parameters (the model's name,
    source and `synthetic` entry) and the run."""

    INPUTS = ("fit",)
    OUTPUTS = ("trace",)
    STAGE = "specmoe.stages.analysis.synth_trace_stage"

    model: dict
    run: dict

    @classmethod
    def from_config(cls, cfg, w) -> "SynthTraceParams":
        m = cfg.models[w.model].entry
        return cls(model=canonical({k: m[k] for k in ("name", "source", "synthetic") if k in m}),
                   run=run_of(w))

    @staticmethod
    def inputs(cfg, w) -> dict[str, str]:
        """The job's named inputs (for unpack): its model's fit, where it has one."""
        return ({"fit": P.SYNTH_FIT.format(model=w.model)}
                if SynthFitParams.fitted(cfg, w.model) else {})


@dataclass(frozen=True)
class CostmodelParams:
    """Rule costmodel: TE at batch 1 and vs batch size and the synthetic drafters' cost ratio
    (specmoe.stages.analysis.costmodel_stage) from the run's overlaps (input overlap) and IPF
    fit (input ipf); input checkpoint (a study model's config.json, a tiny model's checkpoint,
    nothing for a synthetic model) only orders the job after it; output json. It depends on the
    model's cost entry (COST_KEYS), its one hardware entry and the `draft_cost` section."""

    INPUTS = ("overlap", "ipf", "checkpoint")
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.costmodel_stage"

    model: dict
    hardware: dict
    draft: dict | None

    @classmethod
    def from_config(cls, cfg, w) -> "CostmodelParams":
        hw = cfg.model(w.model).hardware
        return cls(model=cost_entry(cfg, w.model),
                   hardware=canonical({hw: cfg.hardware[hw]} if hw in cfg.hardware else {}),
                   draft=cfg.draft_cost)


@dataclass(frozen=True)
class PredictParams:
    """Rule predict: the step model's TE and speedup at every batch size for every run of one
    model (specmoe.stages.analysis.predict_stage), one job per model whose output json holds one
    prediction per run, in the order of the model's runs. Inputs (specmoe.files.Files.
    predict_inputs; each may be absent): config (a study model's config.json), checkpoint (a
    tiny target's; a synthetic model's hf_config), and each run's files (Files.
    predict_run_inputs): overlap and acceptance (a model with a trace of its own: each run's
    own; a study model's run at a K past the study's overlap curves: its captured overlaps) and
    draft (each separate draft model's config). It depends on the model's cost entry,
    the hardware table, the batch sizes, the study model it stands beside, and per run
    (`predictions`, one entry per run: prediction_of) the run (the report sets its prediction
    beside that run's sweep), its K, its drafter's speculative method (a synthetic model's:
    DEFAULT_METHOD), its KV context (context_of; None: the run serves no prompts, and the step
    model's CONTEXT stands in) and the files of the job's inputs it reads (`files`: overlap,
    acceptance, draft). An entry may leave out its run (None: a prediction for no run) and its
    files (none read)."""

    INPUTS = ("config", "overlap", "acceptance", "checkpoint", "draft")
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.predict_stage"

    model: dict
    hardware: dict
    batch_sizes: list
    study: str | None
    predictions: list

    @classmethod
    def from_config(cls, cfg, w, files) -> "PredictParams":
        """files: the run's specmoe.files.Files (the workflow's FILES), whose predict_run_inputs
        names the files each prediction reads."""
        return cls(model=cost_entry(cfg, w.model), hardware=cfg.hardware,
                   batch_sizes=cfg.batch_sizes,
                   study=(cfg.study.get(w.model) or {}).get("study"),
                   predictions=[cls.prediction_of(cfg, files, run)
                                for run in cfg.models[w.model].runs()])

    @classmethod
    def prediction_of(cls, cfg, files, run) -> dict:
        """One run's entry of `predictions`: the run, its K, its drafter's method, its KV
        context and the files it reads (files.predict_run_inputs)."""
        d = cfg.drafters.get(run.drafter)
        return {"run": run.as_dict(), "k": run.k,
                "method": d.method if d is not None else DEFAULT_METHOD,
                "context": cls.context_of(cfg, run), "files": files.predict_run_inputs(run)}

    @staticmethod
    def context_of(cfg, run) -> dict | None:
        """The KV tokens per sequence the steps of `run` read on average (cost.plan.
        decode_context, which the GPU plan prices a series at too): its dataset's mean prompt
        plus half the output its engine generates, with where each comes from. The output: the
        sweep's output_len where the model is swept (the report sets the prediction beside
        that sweep), else its capture's max_tokens (the only engine that serves the run). The
        prompt: a downloaded dataset's Config.prompt_tokens (datasets.<name>.prompt_tokens, or
        the plan's assumption); a prompt-table dataset's (a joined one "a+b" among them: the
        sets the configuration can join) the mean of the prompts that engine serves, weighted
        as it weighs them: the sweep's prompt set (the schedule's smallest point's prompts,
        interleaved over the slices, sources.prompts.schedule) or the capture's distinct
        prompts (sources.prompts.distinct_prompts). None: a synthetic model, whose routing is
        drawn, serves no prompts."""
        from ..cost.plan import decode_context, rows_prompt_tokens
        from ..runs import dataset_parts
        from ..sources import prompts as prompt_table

        name = run.model
        if cfg.models[name].source == "synthetic":
            return None
        if name in cfg.swept or name in cfg.hf_swept:
            output, output_source = cfg.job_settings("sweep_sd", name)["output_len"], \
                "sweep.output_len"
            size = min(n for _, n in cfg.sweep_schedule(run.dataset))

            def served(rows):
                return prompt_table.schedule(rows, size, set_size=size)
        else:  # a tiny or study model is captured
            capture = cfg.job_settings("capture", name)
            output, output_source = capture["max_tokens"], "capture.max_tokens"

            def served(rows):
                return prompt_table.distinct_prompts(rows, capture.get("prompts"))
        if all(p in cfg.datasets for p in dataset_parts(run.dataset)):  # downloaded
            prompt, source = cfg.prompt_tokens(run.dataset)
        else:
            prompt = rows_prompt_tokens(served(prompt_table.load(cfg.prompts, [run.dataset])))
            source = "prompt table"
        return {"tokens": decode_context(prompt, int(output)), "prompt_tokens": prompt,
                "prompt_source": source, "output_len": int(output),
                "output_source": output_source}


@dataclass(frozen=True)
class SpeedupParams:
    """Rule speedup: one swept run's speedup, acceptance, draft cost, TE and the curve's shape
    (specmoe.stages.analysis.speedup_stage), from its SD series, which holds the no-SD points
    measured beside its SD points (input sd), and, for a separate draft model, the drafter's own
    series (drafter: none for EAGLE heads and MTP layers, which cannot be served alone); output
    json (results/speedup/<run>.json).

    It depends on the run and on the sweep section's analysis-only settings (SWEEP_KEYS: a change
    reruns this rule, no sweep): the shape's margin, the timing, and the engine spread with the
    device it was measured on (engine_log_sd_device; a series swept on another device takes
    none)."""

    INPUTS = ("sd", "drafter")
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.speedup_stage"
    # field -> its key in the configuration's sweep section
    SWEEP_KEYS = {"margin": "shape_margin", "timing": "timing", "engine_log_sd": "engine_log_sd",
                  "engine_log_sd_df": "engine_log_sd_df",
                  "engine_log_sd_device": "engine_log_sd_device"}

    run: dict
    margin: float | None
    timing: str | None
    engine_log_sd: float | None
    engine_log_sd_df: float | None
    engine_log_sd_device: str | None

    @classmethod
    def from_config(cls, cfg, w) -> "SpeedupParams":
        return cls(run=run_of(w), **{f: cfg.sweep.get(key) for f, key in cls.SWEEP_KEYS.items()})

    @staticmethod
    def drafter_series(cfg, w) -> list[str]:
        """Input drafter: the drafter's own series where it is served alone (for the draft cost
        c; separate draft models only), else none: rule sweep_ar's series of the drafter in the
        dtype and TP of the run's SD series (Config.sd_serving: vLLM gives the draft model the
        target's), so that c divides times of one precision and sharding. Input sd is rule
        sweep_sd's series of the run's model, drafter and K."""
        if not cfg.drafters[w.drafter].served_alone:
            return []
        dtype, tp = cfg.sd_serving(w.model)
        return [P.SWEEP_AR.format(model=w.drafter, dtype=dtype, tp=tp)]


@dataclass(frozen=True)
class OverlapParams:
    """Rule overlap: overlap by distance, baselines, shuffle null and unique experts of one
    trace (specmoe.stages.analysis.overlap_stage; input trace), an untrained control's beside
    its trained target's, request by request (input target: the target's trace of the same run;
    none for any other model); output json. It depends on the batch sizes and whether the
    shuffle null is computed (shuffle_null)."""

    INPUTS = ("trace", "target")
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.overlap_stage"

    batch_sizes: list
    shuffle_null: bool

    @classmethod
    def from_config(cls, cfg, w=None) -> "OverlapParams":
        return cls(batch_sizes=cfg.batch_sizes, shuffle_null=cfg.shuffle_null)

    @staticmethod
    def target_trace(cfg, w) -> list[str]:
        """Input target: an untrained control's trained target's trace of the same run."""
        if w.model not in cfg.controls:
            return []
        return [P.TRACE.format(**{**run_of(w), "model": cfg.models[w.model].control_of})]


@dataclass(frozen=True)
class IpfParams:
    """Rule ipf: the maximum-entropy IPF prediction of unique experts, uniform and skewed
    (specmoe.stages.analysis.ipf_stage), from the run's overlaps (input overlap); output
    json. It depends on the batch sizes."""

    INPUTS = ("overlap",)
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.ipf_stage"

    batch_sizes: list

    @classmethod
    def from_config(cls, cfg, w=None) -> "IpfParams":
        return cls(batch_sizes=cfg.batch_sizes)


@dataclass(frozen=True)
class AcceptanceParams:
    """Rule acceptance: accepted vs first-rejected overlap at each draft position
    (specmoe.stages.analysis.acceptance_stage) of one trace (input trace); output json. It
    depends on which datasets are held out (`datasets.<name>.heldout`)."""

    INPUTS = ("trace",)
    OUTPUTS = ("json",)
    STAGE = "specmoe.stages.analysis.acceptance_stage"

    heldout: list

    @classmethod
    def from_config(cls, cfg, w=None) -> "AcceptanceParams":
        return cls(heldout=[ds for ds, d in cfg.datasets.items() if d.get("heldout")])
