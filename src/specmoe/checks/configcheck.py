"""Cross-checks of a configuration that its schema cannot express, run when the workflow is parsed:
every reference resolves and no two numbers contradict each other. Each problem is one line naming
the entry and the value, so that a configuration that cannot run stops before any job starts.

Two passes (specmoe.config.problems runs them): `structure` on the configuration as written (what
resolving it needs: unique names, variants of tiny models), then `models` and `settings` on the
resolved models (specmoe.config.Model: defaults filled, a variant merged with its target once).
"""

from __future__ import annotations

from collections import Counter

from ..cost.costmodel import compute_dtype
from ..errors import InputError
from ..names import control_name
from .schema import did_you_mean


def _not_in(value: str, known, what: str = "defined") -> str:
    """'; did you mean X?' where a known name is close, else the known names."""
    hint = did_you_mean(value, known)
    if hint:
        return f"; did you mean '{hint}'?"
    return f" ({what}: {', '.join(sorted(known)) or 'none'})"


def _hardware_numbers(hardware: dict) -> list[str]:
    """An entry that is not a GPU the package ships needs its own bandwidth and peaks."""
    from ..sources.published import gpus

    shipped = gpus()
    return [f"hardware.{name}: needs hbm_bandwidth_gbs and peak_tflops (not a GPU the package "
            f"ships: {', '.join(shipped)})" for name, e in hardware.items()
            if name not in shipped and not {"hbm_bandwidth_gbs", "peak_tflops"} <= set(e or {})]


def structure(config: dict) -> list[str]:
    """What resolving the configuration needs: unique names, a control's name free, variants of
    tiny models that set only what a variant may; one revision per repository; known study
    models to compare with."""
    out: list[str] = []
    models = config.get("models") or []
    drafters = config.get("drafters") or []
    out += _hardware_numbers(config.get("hardware") or {})
    for what, entries in (("model", models), ("drafter", drafters)):
        for name, n in Counter(e["name"] for e in entries).items():
            if n > 1:
                out.append(f"{what} name '{name}' is used by {n} entries: names must be unique")
    both = {m["name"] for m in models} & {d["name"] for d in drafters}
    for name in sorted(both):
        out.append(f"'{name}' is both a model and a drafter: give them different names")
    taken = {m["name"] for m in models} | {d["name"] for d in drafters}
    for m in models:
        if m["source"] == "tiny" and control_name(m["name"]) in taken:
            out.append(f"model '{control_name(m['name'])}' clashes with the untrained control of "
                       f"tiny model '{m['name']}'")
    for k, n in Counter(config.get("ks") or []).items():
        if n > 1:
            out.append(f"ks lists K={k} {n} times")
    revisions: dict[str, dict] = {}  # one repository is downloaded once, at one revision
    for e in [*models, *drafters]:
        if e.get("source") == "hf" and e.get("repo_id"):
            revisions.setdefault(e["repo_id"], {})[e["name"]] = e.get("revision")
    for repo, by_name in revisions.items():
        if len(set(by_name.values())) > 1:
            asks = ", ".join(f"{n} at {r!r}" for n, r in by_name.items())
            out.append(f"{repo} is asked for at different revisions ({asks}): one repository, "
                       "one revision")
    if any(m.get("compare_with") for m in models):
        from ..sources.published import study_models

        study = study_models()
        for m in models:
            if m.get("compare_with") and m["compare_with"] not in study:
                out.append(f"model {m['name']}: compare_with '{m['compare_with']}' is not a model "
                           "of the study" + _not_in(m["compare_with"], study, "one of"))
    by_name = {m["name"]: m for m in models}
    for m in models:
        if m["source"] != "variant":
            continue
        base = by_name.get(m["variant_of"])
        if base is None or base["source"] != "tiny":
            tiny = [n for n, e in by_name.items() if e["source"] == "tiny"]
            out.append(f"model {m['name']}: variant_of '{m['variant_of']}' is not a tiny model of "
                       "this configuration (a variant serves a tiny model's checkpoint)"
                       + _not_in(m["variant_of"], tiny, "tiny models"))
            continue
        for key in ("arch", "steps", "seed", "dims", "synthetic", "repo_id"):
            if key in m:
                out.append(f"model {m['name']}: a variant takes '{key}' from {base['name']}; "
                           "leave it out")
        if m.get("precision") == "fp8":
            out.append(f"model {m['name']}: precision fp8 needs a GPU; a tiny model's variant "
                       "can be bf16, fp16 or fp32")
    if any(m["source"] == "tiny" for m in models) and "tiny" not in config:
        out.append("models with source 'tiny' need the 'tiny' section")
    return out


def models(resolved: list, drafters: dict, hardware: dict, datasets: dict, ks: tuple,
           prompt_datasets: set[str] | None) -> list[str]:
    """Each resolved model (specmoe.config.Model; variants included) against the hardware,
    drafters (name -> specmoe.config.Drafter) and datasets it names, and its own numbers."""
    out: list[str] = []
    for d in drafters.values():
        if d.source == "tiny":
            out += [f"drafter {d.name}: {e}" for e in _arch_problems(d.entry.get("arch") or {})]
    for m in resolved:
        where, src, e = f"model {m.name}", m.source, m.entry
        tiny = src in ("tiny", "variant")  # a variant serves a tiny checkpoint
        if m.hardware not in hardware:
            out.append(f"{where}: hardware '{m.hardware}' is not defined under 'hardware'"
                       + _not_in(m.hardware, hardware))
        for k, n in Counter(e.get("ks") or []).items():  # the top-level ks: `structure`
            if n > 1:
                out.append(f"{where}: ks lists K={k} twice")
                break
        if src == "synthetic":
            out += [f"{where}: {p}" for p in _synthetic_problems(e, m.ks)]
        if src == "tiny":  # a variant's arch is its target's
            out += [f"{where}: {p}" for p in _arch_problems(e.get("arch") or {})]
            if (e.get("arch") or {}).get("kind", "moe") != "moe":
                out.append(f"{where}: a target must be a MoE (arch kind moe)")
        for name in m.drafters:
            d = drafters.get(name)
            if (tiny or src == "hf") and d is None:
                out.append(f"{where}: drafter '{name}' is not defined under 'drafters'"
                           + _not_in(name, drafters))
            elif tiny and d.source != "tiny":
                out.append(f"{where}: drafter '{name}' is a {d.source} drafter; a tiny target "
                           "needs a tiny drafter (its tokenizer)")
            elif src == "hf" and d.source == "tiny":
                out.append(f"{where}: drafter '{name}' is a tiny drafter built here; it does not "
                           "share the tokenizer of a downloaded model")
        for ds in m.datasets:
            parts = ds.split("+")
            if tiny and prompt_datasets is not None:
                missing = [p for p in parts if p not in prompt_datasets]
                if missing:
                    out.append(f"{where}: dataset '{'+'.join(missing)}' is not in the prompt table"
                               + _not_in(missing[0], prompt_datasets, "it has"))
            if src == "hf":
                missing = [p for p in parts if p not in datasets
                           and (prompt_datasets is None or p not in prompt_datasets)]
                if missing:
                    known = set(datasets) | set(prompt_datasets or ())
                    out.append(f"{where}: dataset '{'+'.join(missing)}' is neither under "
                               "'datasets' nor in the prompt table" + _not_in(missing[0], known))
                elif len(parts) > 1 and any(p in datasets for p in parts):
                    out.append(f"{where}: downloaded datasets run one at a time ('{ds}')")
        out += _engine_args_problems(f"{where}: engine_args", e.get("engine_args"))
        peaks = (hardware.get(m.hardware) or {}).get("peak_tflops") or {}
        if src == "hf" and m.precision == "fp8" and m.hardware in hardware and "fp8" not in peaks:
            out.append(f"{where}: precision fp8 on hardware {m.hardware}, which has no fp8 peak "
                       "(peak_tflops.fp8)")
        dt = (e.get("dims") or {}).get("dtype")
        if dt and m.hardware in hardware and compute_dtype(dt) not in peaks:
            out.append(f"{where}: dims.dtype {dt} on hardware {m.hardware}, which has no "
                       f"peak_tflops.{compute_dtype(dt)}")
    return out


def settings(config: dict, prompt_datasets: set[str] | None) -> list[str]:
    """The sweep's schedule and the tiny models' settings."""
    out: list[str] = []
    sweep = config.get("sweep") or {}
    for p in sweep.get("schedule") or []:
        if p["prompts"] < p["batch"]:
            out.append(f"sweep.schedule: batch {p['batch']} has {p['prompts']} prompts, fewer than "
                       "its batch size (max concurrency) needs")
    for b, n in Counter(p["batch"] for p in sweep.get("schedule") or []).items():
        if n > 1:
            out.append(f"sweep.schedule lists batch {b} {n} times")
    tiny = config.get("tiny") or {}
    sd = tiny.get("sd_check") or {}
    if sd.get("dataset") and prompt_datasets is not None and sd["dataset"] not in prompt_datasets:
        out.append(f"tiny.sd_check.dataset '{sd['dataset']}' is not in the prompt table"
                   + _not_in(sd["dataset"], prompt_datasets, "it has"))
    if ("sweep" in config) != ("profiling" in config):
        have, lack = ("sweep", "profiling") if "sweep" in config else ("profiling", "sweep")
        out.append(f"{have} is set without {lack}: sweeps and profiles run only when both "
                   f"sections are present (add {lack}, or remove {have})")
    for section in ("sweep", "profiling", "capture"):
        out += _engine_args_problems(f"{section}.engine_args",
                                     (config.get(section) or {}).get("engine_args"))
    train = tiny.get("train") or {}
    if tiny and train.get("seq_len") and tiny.get("max_heldout_tokens") and \
            tiny["max_heldout_tokens"] < train["seq_len"] * train.get("batch_size", 1):
        out.append(f"tiny.max_heldout_tokens ({tiny['max_heldout_tokens']}) is smaller than one "
                   f"evaluation batch (seq_len x batch_size = "
                   f"{train['seq_len'] * train.get('batch_size', 1)})")
    return out


# Engine arguments that the configuration sets from its own keys: written in `engine_args` too,
# the two would contradict (the engine takes the later), so they are refused there.
OWNED_ENGINE_ARGS = {
    "model": "the model's repo_id", "tensor_parallel_size": "the model's tp",
    "speculative_config": "the model's drafters and ks", "quantization": "the model's precision",
    "dtype": "the model's precision and the section's dtype",
    "gpu_memory_utilization": "gpu.memory_utilization", "trust_remote_code": "trust_remote_code",
    "max_num_seqs": "the schedule's largest batch (capture: max_num_seqs)",
    "kv_cache_memory_bytes": "kv_cache_mib", "seed": "the pipeline (0)",
}


def _engine_args_problems(prefix: str, args: dict | None) -> list[str]:
    """prefix: where the engine_args are ("sweep.engine_args", "model m: engine_args")."""
    out = []
    for key in args or {}:
        owner = OWNED_ENGINE_ARGS.get(str(key).replace("-", "_"))
        if owner:
            out.append(f"{prefix}.{key} is set by {owner}: leave it out of engine_args")
    return out


def _arch_problems(arch: dict) -> list[str]:
    from ..runtime.tiny import arch_from_dict

    try:
        arch_from_dict(arch).validate()
    except (InputError, TypeError) as exc:
        return [str(exc)]
    return []


def _synthetic_problems(m: dict, ks: tuple) -> list[str]:
    from ..routing.synth import SynthParams

    out = []
    syn = dict(m.get("synthetic") or {})
    for k in ks:
        try:
            SynthParams.from_dict({**syn, "k_draft": int(k)}).validate()
        except InputError as exc:
            out.append(f"synthetic: {exc}")
            break
    if syn.get("fit_to"):
        from ..sources.published import load

        curves = set(load("overlap_by_distance")["model"])
        if syn["fit_to"] not in curves:
            out.append(f"synthetic.fit_to '{syn['fit_to']}' has no published overlap curve"
                       + _not_in(syn["fit_to"], curves, "the study publishes"))
    dims = m.get("dims") or {}
    if "tp" in dims and int(m.get("tp", 1)) not in (1, int(dims["tp"])):
        out.append(f"tp {m['tp']} contradicts dims.tp {dims['tp']} (the cost model reads dims.tp)")
    for key in ("num_experts", "top_k"):
        if key in dims and key in syn and dims[key] != syn[key]:
            out.append(f"dims.{key}={dims[key]} contradicts synthetic.{key}={syn[key]}")
    return out
