"""Cross-checks of a configuration that its schema cannot express, run when the workflow is parsed:
every reference resolves and no two numbers contradict each other. Each problem is one line naming
the entry and the value, so that a configuration that cannot run stops before any job starts.
"""

from __future__ import annotations

from collections import Counter

from .costmodel import DEFAULT_HARDWARE, compute_dtype
from .errors import InputError
from .names import control_name


def problems(config: dict, prompt_datasets: set[str] | None = None) -> list[str]:
    """Every contradiction found (empty: the configuration is consistent).

    prompt_datasets: the datasets of the prompt table that tiny models read (None: not checked).
    """
    out: list[str] = []
    models = config.get("models") or []
    drafters = config.get("drafters") or []
    hardware = config.get("hardware") or {}
    datasets = config.get("datasets") or {}
    ks = config.get("ks") or []

    for what, entries in (("model", models), ("drafter", drafters)):
        for name, n in Counter(e["name"] for e in entries).items():
            if n > 1:
                out.append(f"{what} name '{name}' is used by {n} entries: names must be unique")
    both = {m["name"] for m in models} & {d["name"] for d in drafters}
    for name in sorted(both):
        out.append(f"'{name}' is both a model and a drafter: give them different names")
    tiny_names = {m["name"] for m in models if m["source"] == "tiny"}
    for name in sorted(tiny_names):
        if control_name(name) in {m["name"] for m in models} | {d["name"] for d in drafters}:
            out.append(f"model '{control_name(name)}' clashes with the untrained control of tiny "
                       f"model '{name}'")
    for name, n in Counter(ks).items():
        if n > 1:
            out.append(f"ks lists K={name} {n} times")

    revisions: dict[str, dict] = {}  # one repository is downloaded once, at one revision
    for e in [*models, *drafters]:
        if e.get("source") == "hf" and e.get("repo_id"):
            revisions.setdefault(e["repo_id"], {})[e["name"]] = e.get("revision")
    for repo, by_name in revisions.items():
        if len(set(by_name.values())) > 1:
            asks = ", ".join(f"{n} at {r!r}" for n, r in by_name.items())
            out.append(f"{repo} is asked for at different revisions ({asks}): one repository, "
                       "one revision")
    study = None
    for m in models:
        if m.get("compare_with"):
            from .published import study_models

            study = study if study is not None else study_models()
            if m["compare_with"] not in study:
                out.append(f"model {m['name']}: compare_with '{m['compare_with']}' is not a model "
                           f"of the study (one of: {', '.join(sorted(study))})")
    by_name = {m["name"]: m for m in models}
    variants = {}  # a variant is checked as its target would be, with its drafters, datasets, K
    for m in models:
        if m["source"] != "variant":
            continue
        base = by_name.get(m["variant_of"])
        if base is None or base["source"] != "tiny":
            out.append(f"model {m['name']}: variant_of '{m['variant_of']}' is not a tiny model of "
                       "this configuration (a variant serves a tiny model's checkpoint)")
            continue
        for key in ("arch", "steps", "seed", "dims", "synthetic", "repo_id"):
            if key in m:
                out.append(f"model {m['name']}: a variant takes '{key}' from {base['name']}; "
                           "leave it out")
        if m.get("precision") == "fp8":
            out.append(f"model {m['name']}: precision fp8 needs a GPU; a tiny model's variant "
                       "can be bf16, fp16 or fp32")
        variants[m["name"]] = {**base, **m, "source": "tiny"}
    models = [variants.get(m["name"], m) for m in models]
    drafter_by_name = {d["name"]: d for d in drafters}
    for d in drafters:
        if d["source"] == "tiny":
            out += [f"drafter {d['name']}: {e}" for e in _arch_problems(d.get("arch") or {})]
    for m in models:
        name, src = m["name"], m["source"]
        where = f"model {name}"
        hw = m.get("hardware") or DEFAULT_HARDWARE
        if hw not in hardware:
            out.append(f"{where}: hardware '{hw}' is not defined under 'hardware' (defined: "
                       f"{', '.join(sorted(hardware)) or 'none'})")
        for k in m.get("ks") or []:
            if list(m.get("ks")).count(k) > 1:
                out.append(f"{where}: ks lists K={k} twice")
                break
        if src == "synthetic":
            out += [f"{where}: {e}" for e in _synthetic_problems(m, ks)]
        if src == "tiny" and name not in variants:  # a variant's arch is its target's
            out += [f"{where}: {e}" for e in _arch_problems(m.get("arch") or {})]
            if (m.get("arch") or {}).get("kind", "moe") != "moe":
                out.append(f"{where}: a target must be a MoE (arch kind moe)")
        for d in m.get("drafters") or []:
            if src in ("tiny", "hf") and d not in drafter_by_name:
                out.append(f"{where}: drafter '{d}' is not defined under 'drafters'")
            elif src == "tiny" and drafter_by_name[d]["source"] != "tiny":
                out.append(f"{where}: drafter '{d}' is a {drafter_by_name[d]['source']} drafter; "
                           "a tiny target needs a tiny drafter (its tokenizer)")
            elif src == "hf" and drafter_by_name[d]["source"] == "tiny":
                out.append(f"{where}: drafter '{d}' is a tiny drafter built here; it does not "
                           "share the tokenizer of a downloaded model")
        for ds in m.get("datasets") or []:
            parts = ds.split("+")
            if src == "tiny" and prompt_datasets is not None:
                missing = [p for p in parts if p not in prompt_datasets]
                if missing:
                    out.append(f"{where}: dataset '{'+'.join(missing)}' is not in the prompt table "
                               f"(it has {', '.join(sorted(prompt_datasets))})")
            if src == "hf":
                missing = [p for p in parts if p not in datasets
                           and (prompt_datasets is None or p not in prompt_datasets)]
                if missing:
                    out.append(f"{where}: dataset '{'+'.join(missing)}' is neither under "
                               "'datasets' nor in the prompt table")
                elif len(parts) > 1 and any(p in datasets for p in parts):
                    out.append(f"{where}: downloaded datasets run one at a time ('{ds}')")
        if src == "hf":
            if m.get("precision") == "fp8" and hw in hardware and \
                    "fp8" not in (hardware[hw].get("peak_tflops") or {}):
                out.append(f"{where}: precision fp8 on hardware {hw}, which has no fp8 peak "
                           "(peak_tflops.fp8)")
        dims = m.get("dims") or {}
        dt = dims.get("dtype")
        if dt and hw in hardware and compute_dtype(dt) not in (
                hardware[hw].get("peak_tflops") or {}):
            out.append(f"{where}: dims.dtype {dt} on hardware {hw}, which has no "
                       f"peak_tflops.{compute_dtype(dt)}")

    sweep = config.get("sweep") or {}
    for p in sweep.get("schedule") or []:
        if p["prompts"] < p["batch"]:
            out.append(f"sweep.schedule: batch {p['batch']} has {p['prompts']} prompts, fewer than "
                       "its batch size (max concurrency) needs")
    batches = [p["batch"] for p in sweep.get("schedule") or []]
    for b, n in Counter(batches).items():
        if n > 1:
            out.append(f"sweep.schedule lists batch {b} {n} times")
    tiny = config.get("tiny") or {}
    sd = tiny.get("sd_check") or {}
    if sd.get("dataset") and prompt_datasets is not None and sd["dataset"] not in prompt_datasets:
        out.append(f"tiny.sd_check.dataset '{sd['dataset']}' is not in the prompt table")
    train = tiny.get("train") or {}
    if tiny and train.get("seq_len") and tiny.get("max_heldout_tokens") and \
            tiny["max_heldout_tokens"] < train["seq_len"] * train.get("batch_size", 1):
        out.append(f"tiny.max_heldout_tokens ({tiny['max_heldout_tokens']}) is smaller than one "
                   f"evaluation batch (seq_len x batch_size = "
                   f"{train['seq_len'] * train.get('batch_size', 1)})")
    return out


def _arch_problems(arch: dict) -> list[str]:
    from .tiny import arch_from_dict

    try:
        arch_from_dict(arch).validate()
    except (InputError, TypeError) as exc:
        return [str(exc)]
    return []


def _synthetic_problems(m: dict, ks: list[int]) -> list[str]:
    from .synth import SynthParams

    out = []
    syn = dict(m.get("synthetic") or {})
    for k in m.get("ks") or ks:
        try:
            SynthParams.from_dict({**syn, "k_draft": int(k)}).validate()
        except InputError as exc:
            out.append(f"synthetic: {exc}")
            break
    dims = m.get("dims") or {}
    for key in ("num_experts", "top_k"):
        if key in dims and key in syn and dims[key] != syn[key]:
            out.append(f"dims.{key}={dims[key]} contradicts synthetic.{key}={syn[key]}")
    return out


def check(config: dict, prompt_datasets: set[str] | None = None) -> None:
    """Raise InputError listing every problem, one per line."""
    found = problems(config, prompt_datasets)
    if found:
        raise InputError("config: " + "\nconfig: ".join(found))
