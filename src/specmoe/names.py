"""Names the pipeline derives from the configuration's: a tiny target's untrained control, an
engine job's label; the speculative methods it knows and the study's batch sizes."""

from .runs import path_of

CONTROL_SUFFIX = "-random"
# vLLM's speculative methods the pipeline serves (the drafters' `method` in
# workflow/schemas/config.schema.yaml lists the same; tests/test_config.py checks it).
SPEC_METHODS = ("draft_model", "eagle", "eagle3", "mtp")
# The method the step model assumes where a model names no drafter (a synthetic model, `specmoe
# predict` without --method): a one-layer head, EAGLE-3, the study's most common.
DEFAULT_METHOD = "eagle3"
# The study's batch sizes (config.yaml's `batch_sizes` and `specmoe predict`'s default).
STUDY_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
# A model's tensor-parallel degree and precision where none is given: the configuration schema's
# models[].tp and models[].precision defaults, which `specmoe te` and `predict` take too
# (tests/test_configcheck.py holds them equal).
MODEL_TP, MODEL_PRECISION = 1, "auto"
# What the fit of a synthetic generator's process to a published overlap curve depends on
# (specmoe.routing.synth.SynthParams.process_fit), besides the curve: rule synth_fit's params.
FIT_KEYS = ("fit_to", "num_experts", "top_k")


def control_name(target: str) -> str:
    """The untrained control of a tiny target: the same architecture, initialised and not trained
    (the routing baseline every trained target is set beside)."""
    return target + CONTROL_SUFFIX


def job_label(rule: str, model: str, drafter: str = "", k="", dataset: str = "",
              dtype: str = "", tp: int | str = "") -> str:
    """An engine job as its output path names it (a run's path form, specmoe.runs): "sweep_sd
    qwen3-30b-fp8-tp1/eagle3-qwen3-30b/K3"; a drafter served alone in a dtype at a TP
    (specmoe.paths.SWEEP_AR): "sweep_ar qwen2-0.5b/ar-auto-tp2"."""
    if dtype or tp:
        return f"{rule} {model}/ar-{dtype}-tp{tp}"
    return f"{rule} {path_of(model, drafter, k, dataset)}"


def repo_key(entry) -> str:
    """The file name of a model's or drafter's download: owner--name of its repo id."""
    repo = entry.get("repo_id")
    return repo.replace("/", "--") if repo else f"unset--{entry['name']}"
