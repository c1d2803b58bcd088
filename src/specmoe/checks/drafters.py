"""Can vLLM load a drafter? Answered without vLLM, so that the SLURM launcher's environment
(.venv-slurm, which has no vLLM) refuses a drafter before anything queues.

vLLM 0.32 serves an EAGLE head as the architecture its EAGLEConfig makes of the head's config.json
(vllm/transformers_utils/configs/eagle.py): method eagle prefixes `Eagle` (LlamaForCausalLM ->
EagleLlamaForCausalLM), eagle3 `Eagle3` unless the name starts or ends with it; a head in the
speculators format (`speculators_config`) gets the architecture of vLLM's speculators reader
(vllm/transformers_utils/configs/speculators/algos.py, by its layer's model_type). The result
must be one of the registry's speculative-decoding models. Method mtp maps the target onto an MTP
module (SpeculativeConfig.hf_config_override).

What vLLM 0.32 has is the shipped table data/vllm_drafters.json: its registry's
speculative-decoding architectures, the speculators reader's map, and the MTP module of each
study checkpoint's architecture. It is generated from the installed vLLM by
specmoe.checks.vllmcheck.drafter_table, and a test asserts that the shipped table equals it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

TABLE = "vllm_drafters.json"
# The speculative methods whose drafter is an EAGLE head: its downloaded config.json is checked
# (eagle_problem).
EAGLE_METHODS = ("eagle", "eagle3")
# Drafters whose config.json is read before their download: the architectures their hub
# repositories declare (model type `mixtral`, listed on the repository's page).
KNOWN_ARCHITECTURES = {"yuhuili/EAGLE-mixtral-instruct-8x7B": ["MixtralForCausalLM"]}
# What works instead where vLLM cannot load an EAGLE head: it serves any causal LM of the target's
# tokenizer as a separate draft model.
ALTERNATIVE = ("a separate draft model with the target's tokenizer (method draft_model) or an "
               "EAGLE-3 head vLLM has")


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped table of what vLLM's drafters can be (see the module's docstring)."""
    return json.loads((resources.files("specmoe") / "data" / TABLE).read_text())


def head_architectures(method: str, cfg: dict) -> list[str]:
    """The architectures vLLM 0.32 serves an EAGLE/EAGLE-3 head's config.json as."""
    spec = cfg.get("speculators_config")
    if spec is not None:
        layer = cfg.get("transformer_layer_config") or {}
        kind = cfg.get("speculators_model_type") or (spec or {}).get("algorithm")
        arch = table()["speculators"].get(str(kind), {}).get(layer.get("model_type", "llama"))
        return [arch] if arch else [f"{kind} speculator of model type "
                                    f"{layer.get('model_type', 'llama')}"]
    archs = list(cfg.get("architectures") or [])
    if cfg.get("model_type") == "eagle":  # vLLM's own EAGLE format: named from its inner model
        archs = list((cfg.get("model") or {}).get("architectures") or archs)
    if method == "eagle":
        return [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    return [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs]


def eagle_problem(name: str, repo: str | None, method: str, cfg: dict) -> str | None:
    """One line where vLLM cannot load the EAGLE head, naming what to use instead; else None."""
    t = table()
    archs = head_architectures(method, cfg)
    if set(archs) & set(t["drafters"]):
        return None
    three = lambda a: a.startswith("Eagle3") or a.endswith("Eagle3")  # noqa: E731
    have = sorted(a for a in t["drafters"] if (three(a) if method == "eagle3"
                                                else a.startswith("Eagle") and not three(a)))
    return (f"vLLM {t['vllm']} cannot load {name} ({repo}, method {method}): it becomes "
            f"{', '.join(archs) or 'no architecture'}, which its registry lacks (its {method} "
            f"heads: {', '.join(have)}); use {ALTERNATIVE}")


def mtp_problem(model: str, target_cfg: dict, with_vllm: bool) -> str | None:
    """One line where vLLM 0.32 has no MTP module for the target's architecture; None where the
    table maps it. An architecture the table does not list is vLLM's to check (vllmcheck); without
    vLLM that check cannot run, which is a problem too."""
    arch = (target_cfg.get("architectures") or ["?"])[0]
    t = table()
    if arch in t["mtp"]:
        mapped = t["mtp"][arch]
        return None if mapped else (f"vLLM {t['vllm']} has no MTP module for {arch} "
                                    f"({model}): use an EAGLE head or a draft model")
    if with_vllm:
        return None
    return (f"{arch} ({model}) is not in the shipped table of vLLM {t['vllm']}'s MTP modules "
            f"(specmoe/data/{TABLE}) and vLLM is not installed here to ask: launch from the "
            "engines' environment once, or add it to the table")
