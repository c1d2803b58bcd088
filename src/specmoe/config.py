"""The configuration resolved once: models, drafters, runs and the engine jobs they imply.

`Config.resolve(config)` takes a configuration that its schema has validated (Snakemake's
`validate` writes the schema's defaults into it) and builds typed, frozen objects from it. The
defaults that the schema cannot express are filled here, once: a model's hardware (a variant's is
its target's, else `costmodel.DEFAULT_HARDWARE`), its K (the top-level `ks`), the prompt table of
the tiny models (`prompts.DEFAULT_SOURCE`). The workflow's rules, the GPU bill and the stages read
these objects; which jobs a model has (captures per run, one serving series per engine, one
profile per drafter at the model's first K) is decided here and nowhere else. Every key:
config/README.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType

from . import configcheck
from .costmodel import DEFAULT_HARDWARE
from .errors import InputError
from .names import control_name
from .prompts import DEFAULT_SOURCE


@dataclass(frozen=True)
class Run:
    """One routing capture / cost model: a target, its drafter, K and a dataset."""
    model: str
    drafter: str
    k: int
    dataset: str

    def as_dict(self) -> dict:
        return {"model": self.model, "drafter": self.drafter, "k": self.k,
                "dataset": self.dataset}


@dataclass(frozen=True)
class Job:
    """One engine job (capture, sweep_ar, sweep_sd, profile) of a model; empty fields: none."""
    rule: str
    model: str
    drafter: str = ""
    k: int | str = ""
    dataset: str = ""


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


def repo_key(entry) -> str:
    """The file name of a model's or drafter's download: owner--name of its repo id."""
    repo = entry.get("repo_id")
    return re.sub(r"[/]", "--", repo) if repo else f"unset--{entry['name']}"


def _frozen(d: dict) -> MappingProxyType:
    return MappingProxyType(dict(d))


class Config:
    """The resolved configuration (build it with `Config.resolve`)."""

    def __init__(self, config: dict):
        """Resolve a configuration whose structure is sound (configcheck.structure)."""
        self.raw = config
        self.ks = tuple(config["ks"])
        self.hardware = dict(config["hardware"])
        self.datasets = dict(config.get("datasets") or {})
        self.prompts = (config.get("tiny") or {}).get("prompts", DEFAULT_SOURCE)
        self.sweep = dict(config.get("sweep") or {})
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
                model = self._model({**m, "hf_config": f"results/downloads/{repo_key(m)}"
                                     ".config.json"})
                self.hf[m["name"]] = model
                if not m.get("cost_only"):  # cost-only: the weight-model table, no runs
                    self.models[m["name"]] = model
            elif m["source"] == "tiny":
                target = self.models[m["name"]] = self._model(
                    {**m, "hf_config": f"results/models/{m['name']}/config.json"})
                # the untrained control runs at the model's first K and dataset: the routing
                # baseline
                r = control_name(m["name"])
                self.models[r] = self._model(
                    {**m, "name": r, "hf_config": f"results/models/{r}/config.json",
                     "ks": list(target.ks[:1]), "datasets": list(target.datasets[:1])},
                    control_of=m["name"])
            else:
                self.models[m["name"]] = self._model(m)

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
        """The checks of the resolved models and the settings (configcheck)."""
        every = [self.model(m["name"]) for m in self.raw["models"]]
        return (configcheck.models(every, self.drafters, self.hardware, self.datasets, self.ks,
                                   prompt_datasets)
                + configcheck.settings(self.raw, prompt_datasets))

    def _model(self, m: dict, control_of: str | None = None) -> Model:
        hardware = m.get("hardware") or DEFAULT_HARDWARE  # a variant's: its target's
        return Model(name=m["name"], source=m["source"], hardware=hardware,
                     ks=tuple(int(k) for k in m.get("ks", self.ks)),
                     datasets=tuple(m["datasets"]), drafters=tuple(m["drafters"]),
                     precision=m["precision"], tp=int(m["tp"]),
                     sweep=bool(m.get("sweep", True)),
                     entry=_frozen({**m, "hardware": hardware}),
                     variant_of=m.get("variant_of"), control_of=control_of)

    # --- which models do what ----------------------------------------------------------------

    def names(self, source: str) -> list[str]:
        return [n for n, m in self.models.items() if m.source == source]

    @property
    def tiny_targets(self) -> dict[str, Model]:
        return {n: m for n, m in self.models.items() if m.source == "tiny" and not m.control_of}

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

    def sweep_runs(self) -> list[Run]:
        """The runs that are swept (variants' included)."""
        swept = set(self.swept) | set(self.hf_swept)
        every = self.runs() + [r for m in self.variants.values() for r in m.runs()]
        return [r for r in every if r.model in swept]

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
        first = next((m for m in self.raw["models"] if name in m["drafters"]), None)
        return self.model(first["name"]).hardware if first else DEFAULT_HARDWARE

    def on_gpu(self, name: str) -> bool:
        """Does this model's engine run on a GPU? A study model does unless its hardware is a
        CPU; tiny models run on this machine's cores."""
        if not self.from_download(name):
            return False
        return self.hardware.get(self.hardware_of(name), {}).get("device", "gpu") == "gpu"

    def entry(self, name: str) -> dict:
        """The configuration entry of a model or drafter."""
        if name in self.drafters:
            return dict(self.drafters[name].entry)
        return dict(self.model(name).entry)

    def gpu_resources(self, name: str) -> dict:
        """Snakemake's standard resources of one model's GPU jobs (gpu = TP), memory and hours from
        the model's `gpu` entry over the config's defaults."""
        m = self.entry(name)
        g = {**(self.raw.get("gpu") or {}), **(m.get("gpu") or {})}
        hw = self.hardware.get(self.hardware_of(name), {})
        return {"gpu": int(m.get("tp", 1)),
                "gpu_model": g.get("constraint") or hw.get("gpu_model") or "",
                "mem_mb": int(g.get("mem_mb", 64000)), "runtime": int(g.get("runtime", 120))}

    def gpus(self, name: str) -> int:
        """GPUs of one model's engine jobs: its TP on a GPU, none on a CPU."""
        return self.gpu_resources(name)["gpu"] if self.on_gpu(name) else 0

    # --- the engine jobs: one decision for the rules and the GPU bill ---------------------------

    def engine_jobs(self, name: str) -> list[Job]:
        """The engine jobs of one target: a capture per run; where it is swept, one serving series
        without SD and one per drafter and K, and one profile per drafter at its first K (the
        decode profile does not depend on K, and the study profiles one K)."""
        m = self.models[name]
        jobs = [Job("capture", name, r.drafter, r.k, r.dataset) for r in m.runs()]
        if name in self.swept or name in self.hf_swept:
            jobs.append(Job("sweep_ar", name))
            jobs += [Job("sweep_sd", name, d, k) for d in m.drafters for k in m.ks]
            jobs += [Job("profile", name, d, m.ks[0], m.datasets[0]) for d in m.drafters]
        return jobs

    def profiled(self) -> list[Job]:
        """Every profile job (variants are not profiled: their kernels are their target's)."""
        return [j for n in [*self.swept, *self.hf_swept] if n in self.models
                for j in self.engine_jobs(n) if j.rule == "profile"]


def problems(config: dict, prompt_datasets: set[str] | None = None) -> list[str]:
    """Every contradiction of a configuration that its schema has validated (empty: it can run):
    first what resolving it needs, then each resolved model and the settings."""
    found = configcheck.structure(config)
    return found or Config(config).problems(prompt_datasets)
