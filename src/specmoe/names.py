"""Names the pipeline derives from the configuration's: a tiny target's untrained control, an
engine job's label; the speculative methods it knows."""

CONTROL_SUFFIX = "-random"
# vLLM's speculative methods the pipeline serves (config/schema.yaml's drafters' `method` lists the
# same; tests/test_config.py checks it).
SPEC_METHODS = ("draft_model", "eagle", "eagle3", "mtp")


def control_name(target: str) -> str:
    """The untrained control of a tiny target: the same architecture, initialised and not trained
    (the routing baseline every trained target is set beside)."""
    return target + CONTROL_SUFFIX


def job_label(rule: str, model: str, drafter: str = "", k="", dataset: str = "") -> str:
    """An engine job as its output path names it: "sweep_sd qwen3-30b-fp8-tp1/eagle3-qwen3-30b/K3"."""
    parts = [model, drafter, f"K{k}" if k not in ("", None) else "", dataset]
    return f"{rule} " + "/".join(p for p in parts if p)
