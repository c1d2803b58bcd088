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
from ..kinds import (ENGINE_DEFAULTS, KINDS, ONE_RANK_SIZES, engine_arg, engine_context,
                     on_gpu_hardware)
from ..names import control_name
from ..runs import dataset_parts, max_batch_of
from .schema import did_you_mean


def _not_in(value: str, known, what: str = "defined") -> str:
    """'; did you mean X?' where a known name is close, else the known names."""
    hint = did_you_mean(value, known)
    if hint:
        return f"; did you mean '{hint}'?"
    return f" ({what}: {', '.join(sorted(map(str, known))) or 'none'})"


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
    for where, args, profiled in engine_args_of(config):
        out += _engine_args_problems(where, args, profiled)
    for what, entries in (("model", models), ("drafter", drafters)):
        for name, n in Counter(e["name"] for e in entries).items():
            if n > 1:
                out.append(f"{what} name '{name}' is used by {n} entries: names must be unique")
    for d in drafters:  # the schema lets a downloaded drafter take any method
        if d["source"] == "hf" and d.get("method") == "mtp":
            out.append(f"drafter {d['name']}: method mtp runs the target's own MTP layers, "
                       "which no download provides (its engine jobs would refuse the drafter "
                       "model): give it source self without repo_id, or a downloaded drafter's "
                       "method (draft_model, eagle or eagle3)")
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
        # compare_with and hardware too: the checkpoint routes as its target's and runs on its
        # hardware (a variant with compare_with Mixtral-8x7B was set beside a curve of 2 of 8)
        for key in ("arch", "steps", "seed", "dims", "synthetic", "repo_id", "compare_with",
                    "hardware", "engine_args"):
            if key in m:
                out.append(f"model {m['name']}: a variant takes '{key}' from {base['name']}; "
                           "leave it out")
        if m.get("precision") == "fp8":
            out.append(f"model {m['name']}: precision fp8 needs a GPU; a tiny model's variant "
                       "can be bf16, fp16 or fp32")
    if any(m["source"] == "tiny" for m in models) and "tiny" not in config:
        out.append("models with source 'tiny' need the 'tiny' section")
    out += _unread_keys(config)
    for m in models:
        out += [f"model {m['name']}: {p}" for p in _cost_only_problems(m)]
        if m["source"] == "synthetic":
            out += [f"model {m['name']}: {p}" for p in _synthetic_dims_problems(m)]
    return out


# The keys an entry of each source may carry: those its stages read, and those another check
# refuses with its own line (cost_only, engine_args, tp of a model that is not downloaded; what a
# variant takes from its target). Any other key is one the entry's source never reads.
_MODEL_COMMON = {"name", "source", "hardware", "ks", "drafters", "datasets", "compare_with",
                 "precision", "tp", "sweep", "engine_args", "cost_only"}
MODEL_KEYS = {
    "hf": _MODEL_COMMON | {"repo_id", "revision", "trust_remote_code", "gpu", "overlaps"},
    "tiny": _MODEL_COMMON | {"arch", "steps", "seed", "dims"},
    "synthetic": _MODEL_COMMON | {"synthetic", "dims", "hf_config"},
    "variant": _MODEL_COMMON | {"variant_of", "arch", "steps", "seed", "dims", "synthetic",
                                "repo_id"},
}
DRAFTER_KEYS = {"tiny": {"name", "source", "method", "arch", "steps", "seed"},
                "hf": {"name", "source", "method", "repo_id", "revision", "trust_remote_code"},
                "self": {"name", "source", "method"}}
# What the source reads instead of a key it does not, where one line can say it.
_INSTEAD = {("hf", "hf_config"): "its download's config.json is",
            ("hf", "dims"): "its download's config.json gives its dimensions",
            ("tiny", "hf_config"): "its trained checkpoint's config.json is",
            ("tiny", "gpu"): "its engines run on this machine's cores",
            ("variant", "gpu"): "its engines run on this machine's cores",
            ("variant", "hf_config"): "its target's trained checkpoint's config.json is",
            ("synthetic", "gpu"): "it has no engine"}
# Dataset keys read for one format only.
DATASET_FORMAT_KEYS = {"languages": {"aya"}}


def _unread_keys(config: dict) -> list[str]:
    """One line for each key an entry carries that its source never reads (a model's, a
    drafter's; a dataset's for its format), and a model's gpu settings where its hardware's
    device is a CPU (the rules read them only for engines on a GPU)."""
    from ..cost.costmodel import DEFAULT_HARDWARE

    out = []
    for what, entries, allowed in (("model", config.get("models") or [], MODEL_KEYS),
                                   ("drafter", config.get("drafters") or [], DRAFTER_KEYS)):
        for e in entries:
            src = e["source"]
            # trust_remote_code false (the schema fills it into every entry) asks nothing
            for key in sorted(set(e) - allowed[src] - ({"trust_remote_code"} if not
                                                        e.get("trust_remote_code") else set())):
                why = _INSTEAD.get((src, key))
                out.append(f"{what} {e['name']}: {key} is not read for source {src}"
                           + (f" ({why})" if why else "") + ": leave it out")
    hardware = config.get("hardware") or {}
    for m in config.get("models") or []:
        hw = m.get("hardware") or DEFAULT_HARDWARE
        if m["source"] == "hf" and "gpu" in m and not on_gpu_hardware(hardware.get(hw)):
            out.append(f"model {m['name']}: gpu is not read on hardware {hw}, whose device is "
                       "cpu (its engines run on this machine's cores): leave it out")
    for name, d in (config.get("datasets") or {}).items():
        for key, formats in DATASET_FORMAT_KEYS.items():
            if key in (d or {}) and d.get("format") not in formats:
                out.append(f"datasets.{name}: {key} is not read for format {d.get('format')} "
                           f"(only for {', '.join(sorted(formats))}): leave it out")
    return out


def _synthetic_dims_problems(m: dict) -> list[str]:
    """A synthetic model's cost model reads its dimensions from `dims` or from the config.json
    `hf_config` names (specmoe.stages.analysis.model_dims): one of them, the file there (a path
    is read from the workflow's folder)."""
    from pathlib import Path

    if not m.get("dims") and not m.get("hf_config"):
        return ["a synthetic model needs dims or hf_config (a config.json), the dimensions its "
                "cost model prices"]
    if m.get("hf_config") and not Path(m["hf_config"]).is_file():
        return [f"hf_config {m['hf_config']}: no such file (its cost model reads its dimensions "
                "there)"]
    return []


def _tiny_drafter_problems(d) -> list[str]:
    """A tiny drafter is trained here as a separate draft model (specmoe.config.Drafter): its
    engines serve it as one (method draft_model), and a draft model is sized and priced as
    dense (specmoe.checks.preflight.drafter_problems refuses a MoE one)."""
    out = []
    if d.method != "draft_model":
        out.append(f"method {d.method}: a tiny drafter is a separate draft model, served and "
                   "predicted as one (method draft_model): leave method out")
    if (d.entry.get("arch") or {}).get("kind") == "moe":
        out.append("arch kind moe: a draft model is sized and priced as dense (every layer's FFN "
                   "read whole): give a tiny drafter arch kind dense")
    return out


def _cost_only_problems(m: dict) -> list[str]:
    """cost_only gives a study model no runs: drafters and datasets listed beside it would be
    runs that silently vanish."""
    if not m.get("cost_only"):
        return []
    if m["source"] != "hf":
        return [f"cost_only applies to study models (source hf); a {m['source']} model has no "
                "download to cut short: leave it out"]
    listed = [k for k in ("drafters", "datasets") if m.get(k)]
    if listed:
        return [f"cost_only: true gives it no runs, yet it lists {' and '.join(listed)}: their "
                "jobs would not run (remove them, or cost_only)"]
    return []


def models(resolved: list, drafters: dict, hardware: dict, datasets: dict, ks: tuple,
           prompt_datasets: set[str] | None) -> list[str]:
    """Each resolved model (specmoe.config.Model; variants included) against the hardware,
    drafters (name -> specmoe.config.Drafter) and datasets it names, and its own numbers."""
    out: list[str] = []
    no_fp32: dict[str, list[str]] = {}  # hardware -> the tiny models priced there
    for d in drafters.values():
        if d.source == "tiny":
            out += [f"drafter {d.name}: {e}" for e in _arch_problems(d.entry.get("arch") or {})]
            out += [f"drafter {d.name}: {e}" for e in _tiny_drafter_problems(d)]
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
        if tiny and m.tp != 1:  # its engines pass no TP; the comparison would name this one
            out.append(f"{where}: tp {m.tp}: a tiny model is trained and served on one CPU "
                       "worker (vLLM's uni executor), TP 1: leave tp out")
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
            parts = dataset_parts(ds)
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
        if e.get("engine_args") and src in ("tiny", "synthetic"):
            # a tiny model's engines run under the sweep's, tiny.capture's and profiling's own
            out.append(f"{where}: engine_args apply to downloaded (hf) models; a tiny model's "
                       "engines take sweep.engine_args, tiny.capture.engine_args and "
                       "profiling.engine_args")
        peaks = (hardware.get(m.hardware) or {}).get("peak_tflops") or {}
        if src == "hf" and m.precision == "fp8" and m.hardware in hardware and "fp8" not in peaks:
            out.append(f"{where}: precision fp8 on hardware {m.hardware}, which has no fp8 peak "
                       "(peak_tflops.fp8)")
        if src == "hf" and m.precision != "auto":
            out += [f"{where}: {p}" for p in _precision_problems(e, m.precision)]
        if src == "hf" and e.get("cost_only"):  # no engine job: the preflight checks none
            out += [f"{where}: tp {m.tp}: {p}" for p in _cost_only_tp_problems(e, m.tp)]
        own = e.get("overlaps") or []
        if own and len(own) < max(m.ks):  # the IPF column fits ov(1..K): NaN at every K beyond
            out.append(f"{where}: overlaps has {len(own)} distances, fewer than K={max(m.ks)}: the "
                       "weight-model table's IPF column needs the overlap at every distance "
                       "1..K (give one per distance, or leave overlaps out for its study "
                       "model's published ones)")
        if src == "tiny" and m.hardware in hardware and "fp32" not in peaks:
            # a tiny checkpoint computes in float32 (its config.json), priced at that peak
            no_fp32.setdefault(m.hardware, []).append(m.name)
        dt = (e.get("dims") or {}).get("dtype")
        if dt and m.hardware in hardware and compute_dtype(dt) not in peaks:
            out.append(f"{where}: dims.dtype {dt} on hardware {m.hardware}, which has no "
                       f"peak_tflops.{compute_dtype(dt)}")
        dims = e.get("dims") or {}
        if dims.get("top_k", 0) > dims.get("num_experts", float("inf")):
            out.append(f"{where}: dims.top_k={dims['top_k']} exceeds dims.num_experts="
                       f"{dims['num_experts']}")
        if e.get("compare_with") and not m.control_of and src != "variant":  # its target's
            out += [f"{where}: {p}" for p in _granularity_problems(e)]
    out += [f"hardware {hw}: no peak_tflops.fp32, the precision the tiny models "
            f"{', '.join(names)} compute in (their checkpoints are float32)"
            for hw, names in no_fp32.items()]
    out += _alone_hardware_problems(resolved, drafters)
    return out


def _alone_hardware_problems(resolved: list, drafters: dict) -> list[str]:
    """A draft model from a download served alone (specmoe.config.Drafter.served_alone) has one
    series without SD, on one hardware (specmoe.config.Config.hardware_of: its first target's);
    a target on other hardware would divide its TPOT by that series' (the draft cost c of two
    GPUs). A tiny drafter's engines run on this machine's cores beside its targets', whatever
    hardware prices them."""
    out = []
    for d in drafters.values():
        if not d.served_alone or d.source != "hf":
            continue
        where: dict[str, list[str]] = {}
        for m in resolved:  # its study models (a tiny one: refused in `models`)
            if d.name in m.drafters and m.source == "hf":
                where.setdefault(m.hardware, []).append(m.name)
        if len(where) > 1:
            on = "; ".join(f"{hw}: {', '.join(names)}" for hw, names in where.items())
            out.append(f"drafter {d.name}: served alone for the draft cost on one hardware, it "
                       f"drafts for targets on {len(where)} ({on}): declare one drafter entry per "
                       "hardware (same repo_id and revision, another name)")
    return out


def experts_of(entry: dict) -> tuple[int, int] | None:
    """(k, N): the experts a configured model routes each token to, of how many (None: not known
    offline)."""
    if entry.get("source") in ("tiny", "variant") and entry.get("arch"):
        a = entry["arch"]  # a moe's top_k and num_experts: the schema requires them
        return (int(a["top_k"]), int(a["num_experts"])) if a["kind"] == "moe" else None
    if entry.get("source") == "synthetic":
        from ..routing.synth import SynthParams

        syn = entry.get("synthetic") or {}
        return (int(syn.get("top_k", SynthParams.top_k)),
                int(syn.get("num_experts", SynthParams.num_experts)))
    if entry.get("source") == "hf":  # shipped, downloaded or cached, as _precision_problems
        cfg = _offline_cfg(entry)
        if cfg is None:  # the download stage checks it (study.check_compare_with)
            return None
        return config_experts(cfg)
    return None


def _offline_cfg(entry: dict) -> dict | None:
    """An hf model's config.json where it is available offline (shipped, downloaded or cached,
    preflight.offline_config); None where it is not, or unreadable: the preflight's fatal line
    names the model then."""
    from .preflight import offline_config

    try:
        return offline_config(entry, entry.get("hf_config"))[0]
    except InputError:
        return None


def config_experts(cfg: dict) -> tuple[int, int] | None:
    """(k, N) of a MoE checkpoint's config.json; None where the file is one the cost model cannot
    read (4 KV heads of 30 attention heads): the preflight and every stage that reads it refuse
    it, naming the model (specmoe.checks.preflight), so nothing is set beside the study's."""
    from ..cost.hfconfig import dims_from_config

    try:
        dims = dims_from_config(cfg)
    except InputError:
        return None
    return int(dims.top_k), int(dims.num_experts)


def _precision_problems(entry: dict, precision: str) -> list[str]:
    """A precision vLLM does not serve the checkpoint in (hfconfig.check_precision: a quantised
    checkpoint keeps its own format), where its config.json is available offline (shipped,
    downloaded or cached); the stages that read it later check it there too (study_dims)."""
    from ..cost.hfconfig import check_precision

    cfg = _offline_cfg(entry)
    if cfg is None:
        return []
    try:
        check_precision(cfg, precision)
    except InputError as exc:
        return [f"{entry['repo_id']} {exc}"]
    return []


def _cost_only_tp_problems(entry: dict, tp: int) -> list[str]:
    """How TP fails to split a cost-only model as vLLM would (hfconfig.tp_problems), where its
    config.json is offline (shipped, downloaded or cached): the weight-model table splits it so,
    and its job stopped on it after the parse. One not offline yet is checked by that job,
    which reads it first (cost.hfconfig.study_dims)."""
    from ..cost.hfconfig import tp_problems

    cfg = _offline_cfg(entry)
    if cfg is None:
        return []
    try:
        found = tp_problems(cfg, tp)
    except InputError as exc:  # a file the table cannot read: its job names it
        return [f"{entry['repo_id']} {exc}"]
    return ["; ".join(found) + " (the weight-model table splits the model as vLLM would)"] \
        if found else []


def _granularity_problems(entry: dict) -> list[str]:
    """compare_with a study model of another k of N (config/README: it must route the same k
    of N experts): its results would sit beside numbers of another routing granularity. A
    downloaded model whose config.json is not offline yet is checked by its download's stage
    (specmoe.stages.study.download_model_stage), which reads it first."""
    own = experts_of(entry)
    if own is None or own[0] > own[1]:  # k > N: said elsewhere
        return []
    return granularity_problems(entry["compare_with"], own)


def granularity_problems(compare_with: str, own: tuple[int, int]) -> list[str]:
    """compare_with against a model's own (k, N): one line where they differ."""
    from ..sources.published import load

    study = {r.model: (int(r.experts_per_token), int(r.num_experts))
             for r in load("models").itertuples()}
    want = study.get(compare_with)
    if want is None or want == own:  # not a study model: `structure` says so
        return []
    same = sorted(n for n, kn in study.items() if kn == own)
    return [f"compare_with '{compare_with}' routes {want[0]} of {want[1]} experts, this "
            f"model {own[0]} of {own[1]}: compare it with a study model of its own k of N ("
            + (", ".join(same) if same else "the study has none") + ")"]


def settings(config: dict, prompt_datasets: set[str] | None, gpu_models=()) -> list[str]:
    """The sweep's schedule (and each dataset's max_batch on it), the GPU plan's assumptions and
    the tiny models' settings (the tiny section's defaults are the schema's, filled in by its
    validation; gpu_models: the models with runs whose engines run on a GPU,
    specmoe.config.Config.on_gpu's, the jobs the GPU plan prices)."""
    out: list[str] = []
    sweep = config.get("sweep") or {}
    out += _batch_list_problems(config)
    for p in sweep.get("schedule") or []:
        if p["prompts"] < p["batch"]:
            out.append(f"sweep.schedule: batch {p['batch']} has {p['prompts']} prompts, fewer than "
                       "its batch size (max concurrency) needs")
    for b, n in Counter(p["batch"] for p in sweep.get("schedule") or []).items():
        if n > 1:
            out.append(f"sweep.schedule lists batch {b} {n} times")
    out += _max_batch_problems(config)
    if sweep.get("engine_log_sd") and not sweep.get("engine_log_sd_device"):
        out.append(f"sweep.engine_log_sd {sweep['engine_log_sd']:g} names no device: set "
                   "sweep.engine_log_sd_device to the one it was measured on (cpu or cuda); "
                   "only series swept there take it")
    # a downloaded dataset of a prompt table's name would replace the table's for the tiny
    # models too (an engine reads a dataset under `datasets` from its download)
    for name in sorted(set(config.get("datasets") or {}) & set(prompt_datasets or ())):
        out.append(f"datasets.{name}: the prompt table has a dataset of this name, which its "
                   "download would replace for every model: give the download another name")
    tiny = config.get("tiny") or {}
    sd = tiny.get("sd_check") or {}  # the schema's defaults filled, where there is a tiny section
    targets = any(m["source"] == "tiny" for m in config.get("models") or [])
    if targets and prompt_datasets is not None and sd["dataset"] not in prompt_datasets:
        out.append(f"tiny.sd_check.dataset '{sd['dataset']}' is not in the prompt table"
                   + _not_in(sd["dataset"], prompt_datasets, "it has"))
    if ("sweep" in config) != ("profiling" in config):
        have, lack = ("sweep", "profiling") if "sweep" in config else ("profiling", "sweep")
        out.append(f"{have} is set without {lack}: sweeps and profiles run only when both "
                   f"sections are present (add {lack}, or remove {have})")
    out += _plan_problems(config, gpu_models)
    out += _tiny_context_problems(config)
    if tiny:  # the schema's defaults filled
        train = tiny["train"]
        if tiny["max_train_tokens"] <= train["seq_len"] + 1:
            out.append(f"tiny.max_train_tokens ({tiny['max_train_tokens']}) leaves no training "
                       f"sequence of tiny.train.seq_len {train['seq_len']} + 1 tokens: training "
                       "would stop at its first step")
        if tiny["max_heldout_tokens"] < train["seq_len"] * train["batch_size"]:
            out.append(f"tiny.max_heldout_tokens ({tiny['max_heldout_tokens']}) is smaller than "
                       f"one evaluation batch (seq_len x batch_size = "
                       f"{train['seq_len'] * train['batch_size']})")
    return out


def _batch_list_problems(config: dict) -> list[str]:
    """Batch-size lists in ascending order (a curve is drawn in their order: [8, 1, 4] zig-zags),
    and, where models are profiled, the profiled batch sizes where the sweep has points (TE three
    ways joins them by batch size: elsewhere its sweep columns were silently empty) with batch 1
    among them (the three-step correction's)."""
    out = []
    lists = {"batch_sizes": config.get("batch_sizes"),
             "draft_cost.batch_sizes": (config.get("draft_cost") or {}).get("batch_sizes"),
             "profiling.batch_sizes": (config.get("profiling") or {}).get("batch_sizes")}
    for key, bs in lists.items():
        if bs and list(bs) != sorted(bs):
            out.append(f"{key} {list(bs)}: list the batch sizes in ascending order")
    # where a model is profiled at all (a tiny model, or a downloaded one served)
    runs = any(m.get("source") == "tiny" or (m.get("source") == "hf" and not m.get("cost_only"))
               for m in config.get("models") or [])
    profiled = (lists["profiling.batch_sizes"] or []) if runs else []
    swept = {int(p["batch"]) for p in (config.get("sweep") or {}).get("schedule") or []}
    off = [b for b in profiled if swept and b not in swept]
    if off:
        out.append(f"profiling.batch_sizes {off}: not in the sweep's schedule {sorted(swept)}; "
                   "the profile's TE is set beside the sweep's at the same batch size")
    if profiled and 1 not in profiled:
        out.append(f"profiling.batch_sizes {list(profiled)}: include 1 (the three-step correction "
                   "is at batch 1)")
    return out


def _max_batch_problems(config: dict) -> list[str]:
    """A dataset's max_batch (datasets.<name>.max_batch) below the sweep's smallest batch size
    (its series would measure nothing), or below a batch size profiled on it (a model's first
    dataset: the profile's TE is set beside the sweep's at the same batch size)."""
    out = []
    datasets = config.get("datasets") or {}
    smallest = min((p["batch"] for p in (config.get("sweep") or {}).get("schedule") or []),
                   default=None)
    for name, d in datasets.items():
        if smallest is not None and d.get("max_batch") is not None and d["max_batch"] < smallest:
            out.append(f"datasets.{name}.max_batch {d['max_batch']} is below the sweep "
                       f"schedule's smallest batch {smallest}: its series would measure no point")
    profiled = (config.get("profiling") or {}).get("batch_sizes") or []
    for m in config.get("models") or []:
        first = (m.get("datasets") or [""])[0]
        cap = max_batch_of(datasets, first)  # a joined set's: the least of its parts
        above = [b for b in profiled if cap is not None and b > cap]
        if above and m["sweep"] and "sweep" in config:
            out.append(f"model {m['name']}: profiled on its first dataset {first} at batch sizes "
                       f"{above}, above its max_batch {cap}: the profile's TE is set beside the "
                       "sweep's at the same batch size (put another dataset first)")
    return out


def _plan_problems(config: dict, gpu_models=()) -> list[str]:
    """The GPU plan's assumptions against the runs it prices: an acceptance length no SD step of
    theirs can reach, an engine start-up longer than the sweeps wait for."""
    from ..cost.plan import PlanAssumptions

    runs = [m for m in config.get("models") or [] if m["name"] in set(gpu_models)]
    if not runs:
        return []
    out = []
    plan = PlanAssumptions.from_dict(config.get("plan"))
    k, name = min((min(m.get("ks") or config["ks"]), m["name"]) for m in runs)
    if plan.tau > k + 1:
        out.append(f"plan.tau {plan.tau:g} exceeds K+1 = {k + 1} of model {name}'s K={k} jobs: an "
                   "SD step commits at most K+1 tokens, so the GPU plan would underestimate their "
                   "runtime and SLURM would stop them early")
    sweep = config.get("sweep") or {}
    if "sweep" in config and "profiling" in config and \
            sweep["startup_timeout_s"] < plan.startup_s:  # the schema's default filled
        out.append(f"sweep.startup_timeout_s {sweep['startup_timeout_s']:g} is shorter than the "
                   f"engine start-up the GPU plan assumes (plan.startup_s {plan.startup_s:g}): "
                   "the sweeps would give up on their servers before they start")
    return out


def _tiny_context_problems(config: dict) -> list[str]:
    """Each engine section the tiny models run under: the context its engine starts with
    (kinds.engine_context: its engine_args' max_model_len, else its own, else the engines'
    default, kinds.ENGINE_DEFAULTS, read when the check runs) within the tiny models'
    positions, and the longest prompt of their table (about 4 characters a token) with the
    section's output and K+1 within it (vLLM refuses a longer request). The config's engine_args
    keys are vLLM's names by now (specmoe.config.with_engine_arg_names)."""
    from ..runtime.tiny import MAX_POSITIONS
    from ..sources import prompts as prompt_table
    from ..cost.plan import CHARS_PER_TOKEN

    tiny_models = [m for m in config.get("models") or [] if m["source"] in ("tiny", "variant")]
    if not tiny_models:
        return []
    tiny = config.get("tiny") or {}
    try:
        rows = prompt_table.load(tiny.get("prompts") or prompt_table.DEFAULT_SOURCE)
    except (InputError, OSError, ValueError):  # config.table_datasets says why
        return []
    prompt = max((len(r.text.encode()) for r in rows), default=0) / CHARS_PER_TOKEN
    k = max(int(k) for m in tiny_models for k in m.get("ks") or config["ks"])
    sd = tiny["sd_check"]  # the schema's defaults filled
    sections = [("tiny.capture", "max_tokens", tiny.get("capture") or {}, k),
                ("tiny.sd_check", "max_tokens", sd, int(sd["k"]))]
    if "sweep" in config and "profiling" in config:
        sections += [("sweep", "output_len", config["sweep"], k),
                     ("profiling", "max_tokens", config["profiling"], k)]
    out = []
    for where, key, section, k_max in sections:
        # the context the engine starts with
        limit = engine_context(section, ENGINE_DEFAULTS["max_model_len"])
        if limit > MAX_POSITIONS:
            out.append(f"{where}.max_model_len {limit} exceeds the tiny models' {MAX_POSITIONS} "
                       "positions (vLLM refuses it)")
        if key not in section:
            continue
        need = int(prompt + 0.999) + int(section[key]) + k_max + 1
        if need > limit:
            out.append(f"{where}.{key} {section[key]} + the longest prompt (about {prompt:.0f} "
                       f"tokens) + K+1 = {need} exceed the tiny engines' max_model_len {limit}: "
                       "vLLM refuses those requests")
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
    # specmoe's own argument (runtime.engine.ENGINE_ENV), not vLLM's: the engines' environment
    "env": "the pipeline (the model runner it pins, runtime.engine.V1_RUNNER_ENV)",
}


# The sections that hold engine_args (each model entry holds its own): the engine jobs' sections
# (specmoe.kinds) and the tiny models' capture engines' (their SD check takes none).
ENGINE_ARGS_SECTIONS = (*dict.fromkeys(k.section for k in KINDS.values()), "tiny.capture")


def section_at(config: dict, path: str) -> dict:
    """The section at a dotted path ("tiny.capture"); empty where there is none."""
    node = config
    for key in path.split("."):
        node = (node or {}).get(key)
    return node or {}


def with_section_at(config: dict, path: str, section: dict) -> dict:
    """A copy of `config` with `section` at a dotted path ("tiny.capture"), each mapping on the
    way copied; `config` itself is left as it is."""
    key, _, rest = path.partition(".")
    return {**config, key: with_section_at(config.get(key) or {}, rest, section) if rest
            else section}


def engine_args_of(config: dict) -> list[tuple[str, dict, bool]]:
    """Every engine_args mapping of a configuration as written: (where it is, the mapping, whether
    it reaches a kernel profile's engine). A study model's (source hf) reach all its engines,
    its profile's among them; a section's, the engines of that section. A tiny or synthetic
    model's, or a variant's, reach no engine (`structure` and `models` refuse them)."""
    out = [(f"model {m['name']}: engine_args", m["engine_args"], True)
           for m in config.get("models") or [] if m["source"] == "hf" and m.get("engine_args")]
    out += [(f"{path}.engine_args", section_at(config, path)["engine_args"], path == "profiling")
            for path in ENGINE_ARGS_SECTIONS if section_at(config, path).get("engine_args")]
    return out


def _engine_args_problems(prefix: str, args: dict | None, profiled: bool = False) -> list[str]:
    """prefix: where the engine_args are ("sweep.engine_args", "model m: engine_args");
    profiled: they reach a kernel profile's engine, which runs in eager mode
    (specmoe.stages.measure.profile_stage). Each key as written (the configuration resolves
    them to vLLM's names, specmoe.kinds.engine_arg, after this check)."""
    out = []
    spellings: dict[str, list[str]] = {}
    for key in args or {}:
        spellings.setdefault(engine_arg(key), []).append(str(key))
    for name, keys in spellings.items():
        if len(keys) > 1:
            out.append(f"{prefix}: {' and '.join(keys)} are one engine argument, {name} (vLLM "
                       "reads '-' as '_'): give it once")
    for key, value in (args or {}).items():
        name = engine_arg(key)
        owner = OWNED_ENGINE_ARGS.get(name)
        if owner:
            out.append(f"{prefix}.{key} is set by {owner}: leave it out of engine_args")
        elif name in ONE_RANK_SIZES and _above_one(value):
            out.append(f"{prefix}.{key} {value}: the engines run with tensor parallelism only "
                       "(a job is given its model's tp GPUs; routing capture records one rank "
                       "of each other layout): leave it out, or set the model's tp")
        elif profiled and name == "enforce_eager" and not value:
            out.append(f"{prefix}.{key} false reaches the kernel profile, which needs eager mode "
                       "(torch.compile drops its MoE ranges, a CUDA graph's kernels share one "
                       "launch): leave it out")
    return out


def _above_one(value) -> bool:
    """A parallel size other than one rank (one that is no number is no size of one either)."""
    try:
        return value is not None and int(value) != 1
    except (TypeError, ValueError):
        return True


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
        elif not out:  # (valid parameters) a curve of another granularity fails in rule
            try:        # synth_fit's job, after the parse
                SynthParams.from_dict({**syn, "k_draft": int(ks[0]) if ks else 3}
                                      ).check_granularity()
            except InputError as exc:
                out.append(f"synthetic.{exc}")
    dims = m.get("dims") or {}
    if "tp" in dims and int(m.get("tp", 1)) not in (1, int(dims["tp"])):
        out.append(f"tp {m['tp']} contradicts dims.tp {dims['tp']} (the cost model reads dims.tp)")
    for key in ("num_experts", "top_k"):
        if key in dims and key in syn and dims[key] != syn[key]:
            out.append(f"dims.{key}={dims[key]} contradicts synthetic.{key}={syn[key]}")
    return out


# Above these, a value is possible but far past what the pipeline was run with: one warning line.
STEPS_WARN = 100_000          # a tiny model's optimizer steps (the default trains 700)
TRACE_CHOICES_WARN = 10**9    # expert choices of one synthetic trace (the default's: 1.6 million)


def unusual(config: dict) -> list[str]:
    """Values a run can take but that change what it measures or what it costs, one warning line
    each naming the consequence (the configuration is validated and resolved)."""
    out = []
    sweep = config.get("sweep") or {}
    if "sweep" in config and "profiling" in config:
        if sweep.get("warmups") == 0:
            out.append("config: sweep.warmups 0: no warm-up request before a batch size is first "
                       "measured, so its first repeat includes the engine's warm-up (config/README "
                       "promises at least the batch size)")
    entries = [*(config.get("models") or []), *(config.get("drafters") or [])]
    trained = [e for e in entries if e.get("source") == "tiny"]
    for e in trained:
        if e["steps"] > STEPS_WARN:
            out.append(f"config: {e['name']}: steps {e['steps']:,}: training runs that many "
                       f"optimizer steps on this machine before any job that needs the model "
                       f"({e['steps'] / 700:,.0f} times the default's 700)")
    # trained models need the tiny section (structure): its train defaults are filled
    warmup = config["tiny"]["train"]["warmup"] if trained else 0
    short = [f"{e['name']} ({e['steps']})" for e in trained if warmup >= e["steps"]]
    if short:
        out.append(f"config: tiny.train.warmup {warmup} is not below the steps of "
                   f"{', '.join(short)}: their learning rate never reaches tiny.train.lr")
    for e in entries:
        if e.get("source") == "synthetic":
            out += _trace_size(e, config)
    return out


def _trace_size(m: dict, config: dict) -> list[str]:
    from ..routing.synth import SynthParams

    syn = {**{f: getattr(SynthParams, f) for f in ("requests", "steps", "num_layers", "top_k")},
           **(m.get("synthetic") or {})}
    window = max(m.get("ks") or config["ks"]) + 1
    choices = syn["requests"] * syn["steps"] * window * syn["num_layers"] * syn["top_k"]
    if choices <= TRACE_CHOICES_WARN:
        return []
    return [f"config: {m['name']}: synthetic requests x steps x K+1 x layers x top_k = "
            f"{choices:,} expert choices in one trace (about {choices * 2 / 2**30:,.0f} GiB "
            "in memory): generating and analysing it may exhaust memory"]
