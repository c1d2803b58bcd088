"""Which files each job reads and what a run makes, from the resolved configuration
(specmoe.config) and the pipeline's patterns (specmoe.paths).

The rules' input functions are one line each over `Files` (workflow/rules/common.smk), so what a
job reads is decided here, without Snakemake, and tested as a library function. A model or
drafter is named as in the configuration; `pattern` arguments are specmoe.paths patterns.
"""

from __future__ import annotations

from pathlib import Path

from . import paths as P
from .config import Config
from .names import repo_key
from .names import control_name
from .runs import Run
from .sources import published
from .sources.prompts import BUILTIN


def _paths(named: dict) -> list[str]:
    """The files of a job's named inputs (each a path or a list of paths)."""
    return [p for v in named.values() for p in ([v] if isinstance(v, str) else v)]


class Files:
    def __init__(self, cfg: Config):
        self.cfg = cfg

    # --- what the run makes ----------------------------------------------------------------------

    def targets(self) -> list[str]:
        """The report, the GPU plan of the study's models (Config.planned: no job reads it), and
        the tiny models with their controls and SD checks."""
        return [P.REPORT_MD] + ([P.PLAN_MD] if self.cfg.planned else []) + self.tiny_targets()

    def tiny_targets(self) -> list[str]:
        """The tiny models with their drafters, controls and SD checks."""
        cfg = self.cfg
        tiny = cfg.tiny_targets
        if not tiny:
            return []
        drafters = sorted({d for m in tiny.values() for d in m.drafters})
        k, dataset = cfg.sd_check_run()
        out = [P.model(n) for n in [*tiny, *drafters]]
        out += [P.model(control_name(n)) for n in tiny]
        out += [Run(m, d, k, dataset).fill(P.SD_CHECK)
                for m, target in tiny.items() for d in target.drafters]
        return out

    def of_runs(self, pattern: str) -> list[str]:
        """`pattern` expanded over every configured run."""
        return [r.fill(pattern) for r in self.cfg.runs()]

    def of_swept_runs(self, pattern: str, variants: bool = True) -> list[str]:
        """`pattern` expanded over the runs that are swept (without variants: those that are
        profiled and captured too)."""
        return [r.fill(pattern) for r in self.cfg.sweep_runs()
                if variants or r.model not in self.cfg.variants]

    def profiles(self) -> list[str]:
        """Kernel profiles: one per target and drafter, at the model's first K."""
        return sorted({P.PROFILE.format(**vars(j)) for j in self.cfg.profiled()})

    def benchmarks(self) -> list[str]:
        """The benchmark file (paths.benchmark_of its output) of every job the configuration
        declares but the report rules' (tables, figures, the GPU plan, the index: named by rule,
        paths.report_benchmark): its tiny models, controls and SD checks, each run's trace and
        analyses, the sweeps, profiles and predictions, and the downloads and prompt tables that
        these jobs and the plan read. Sorted, each once."""
        from .contracts import Named
        from .contracts.analysis import SynthFitParams
        from .contracts.engines import CaptureParams, ProfileParams, SweepArParams, SweepSdParams
        from .contracts.report import PlanParams, WeightModelParams

        cfg = self.cfg
        runs, swept = cfg.runs(), cfg.sweep_runs()
        tiny = self.tiny_targets()
        outs = [P.TOKENIZER, *tiny] if tiny else []
        outs += [P.SYNTH_FIT.format(model=n) for n in cfg.names("synthetic")
                 if SynthFitParams.fitted(cfg, n)]
        outs += [r.fill(p) for r in runs for p in (P.TRACE, P.OVERLAP, P.IPF, P.COSTMODEL,
                                                   P.ACCEPTANCE)]
        outs += [r.fill(p) for r in swept for p in (P.SWEEP_SD, P.SPEEDUP)]
        outs += [P.SWEEP_AR.format(model=j.model, dtype=j.dtype, tp=j.tp) for j in cfg.alone_jobs()]
        outs += self.profiles()
        outs += [P.PREDICT.format(model=m) for m in cfg.predicted]
        # what these jobs read that a job makes: downloads and prompt tables (each engine job's
        # inputs from its record, given the wildcards its output path has)
        captured = set(cfg.captured)
        engine = [(CaptureParams, r.as_dict()) for r in runs if r.model in captured]
        engine += [(rec, {"model": j.model, "drafter": j.drafter, "k": j.k})
                   for rec, jobs in ((SweepSdParams, swept), (ProfileParams, cfg.profiled()))
                   for j in jobs]
        engine += [(SweepArParams, {"model": j.model, "dtype": j.dtype, "tp": j.tp})
                   for j in cfg.alone_jobs()]
        reads = [rec.inputs(cfg, self, Named(w)) for rec, w in engine]
        reads += [self.predict_inputs(m) for m in cfg.predicted]
        reads += [{"checkpoint": self.checkpoint(r.model)} for r in runs]
        reads += [WeightModelParams.inputs(cfg)] if cfg.hf else []
        reads += [PlanParams.inputs(cfg)] if cfg.planned else []
        made = sorted({p for named in reads for p in _paths(named)
                       if p.startswith(("results/downloads/", "results/prompts/"))})
        made += [P.DATASET_DOWNLOAD.format(dataset=Path(p).stem) for p in made
                 if p.startswith("results/prompts/")]
        return sorted({P.benchmark_of(p) for p in [*outs, *made]})

    # --- what one job reads ----------------------------------------------------------------------

    def download(self, name: str, mode: str = "full") -> str:
        """A study model's or drafter's download manifest (mode config: its config.json only)."""
        return P.download(repo_key(self.cfg.entry(name)), mode)

    def prompts(self, datasets) -> list[str]:
        """The prompt tables of the downloaded ones among `datasets` (none: the embedded table)."""
        return [P.prompts(ds) for ds in datasets if ds in self.cfg.datasets]

    def tiny_prompts(self) -> list[str]:
        """The tiny models' prompt table where it is a file of the user's (tiny.prompts; none:
        the embedded one): every SD check and every engine job that serves a dataset of it
        (not a downloaded one: contracts.engines.reads_tiny_prompts) reads it, and reruns when
        it changes."""
        return [] if self.cfg.prompts in BUILTIN else [self.cfg.prompts]

    def model_dir(self, name: str) -> str:
        """The checkpoint a tiny target or drafter is served from (a variant's: its target's)."""
        variant = self.cfg.variants.get(name)
        return P.model(variant.variant_of if variant else name)

    def checkpoint(self, name: str) -> list[str]:
        """What a run's cost model and its model's prediction read of its model: a study model's
        config.json, a tiny model's checkpoint, a synthetic model's `hf_config` where it names
        one (its dimensions are read from it: a new one reruns them; else nothing, its `dims`
        are their params)."""
        m = self.cfg.models[name]
        if m.source == "hf":
            return [m.entry["hf_config"]]
        if m.source == "tiny":
            return [P.model(name)]
        return [str(m.entry["hf_config"])] if m.entry.get("hf_config") else []

    def predict_inputs(self, name: str) -> dict[str, str | list[str]]:
        """What rule predict reads for a model, which it predicts at every run (PredictParams):
        a study model's config.json (its download), a model with a trace of its own its
        checkpoint (a tiny target's; a synthetic model's hf_config where it names one), and
        each run's files (predict_run_inputs: overlaps, acceptance length, a separate draft
        model's config.json), each file once, in the order of the model's runs."""
        m = self.cfg.models[name]
        out: dict[str, str | list[str]] = (
            {"config": self.download(name, "config")} if m.source == "hf"
            else {"checkpoint": self.checkpoint(name)})
        for run in m.runs():
            for key, path in self.predict_run_inputs(run).items():
                paths = out.setdefault(key, [])
                if path not in paths:
                    paths.append(path)
        return out

    def predict_run_inputs(self, run: Run) -> dict[str, str]:
        """The files rule predict reads for one run's prediction: a model with a trace of its own
        (tiny, synthetic) the run's overlaps and acceptance length; a study model's run at a K
        past the study's overlap curves (published.overlap_steps: neither its published curve
        nor the prior reaches it) the overlaps its capture measured, its acceptance length
        staying the prior's; a separate draft model's config.json (a tiny drafter's checkpoint,
        else its download's config)."""
        m = self.cfg.models[run.model]
        if m.source != "hf":
            out = {"overlap": run.fill(P.OVERLAP), "acceptance": run.fill(P.ACCEPTANCE)}
        elif run.k > published.overlap_steps():
            out = {"overlap": run.fill(P.OVERLAP)}
        else:
            out = {}
        d = self.cfg.drafters.get(run.drafter)
        if d is not None and d.method == "draft_model":
            out["draft"] = P.model(d.name) if d.source == "tiny" else self.download(d.name,
                                                                                    "config")
        return out

    def engine_target(self, model: str) -> str:
        """What an engine serves: a study model's download manifest, or a tiny checkpoint (a
        variant's: its target's)."""
        return self.download(model) if self.cfg.from_download(model) else self.model_dir(model)

    def engine_drafter(self, model: str, drafter: str) -> list[str]:
        """The drafter's download (none for MTP, which uses the target's own layers), or a tiny
        drafter's checkpoint."""
        if not self.cfg.from_download(model):
            return [P.model(drafter)]
        if self.cfg.drafters[drafter].source == "self":
            return []
        return [self.download(drafter)]
