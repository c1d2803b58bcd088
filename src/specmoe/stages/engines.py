"""What the engine stages (capture, sweeps, profiles) share: the served checkpoint and drafter from
a rule's inputs, timeouts that follow a cluster job's runtime, and the model and engine of a
result's provenance (torch / vLLM, the `cpu` or `gpu` extra)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..kinds import ENGINE_DEFAULTS

log = logging.getLogger("specmoe")


def setting(cfg: dict, key: str):
    """An engine section's setting, or its default."""
    return cfg.get(key, ENGINE_DEFAULTS[key])


def engine_inputs(target, drafter=None, method: str | None = None, gpu: bool = False,
                  what: str = "engine"):
    """(target dir, drafter) for the engine stages from rule inputs: a model directory or a download
    manifest (its snapshot in the HF cache); the drafter as a path (a separate draft model) or, for
    EAGLE/EAGLE-3/MTP, a {"method", "model"} spec. GPU rules stop at once without CUDA."""
    from ..runtime.engine import require_cuda
    from ..sources.hub import snapshot_of

    if gpu:
        require_cuda(what)
    target_dir = snapshot_of(target)
    d = snapshot_of(drafter) if drafter else None
    if method in (None, "draft_model"):
        return target_dir, d
    return target_dir, {"method": method, "model": str(d) if d else None}


def served(inputs, params):
    """(target dir, drafter) an engine rule's job serves (its record: specmoe.contracts.engines):
    inputs.target and inputs.drafter (absent: none) through engine_inputs."""
    from ..contracts import one

    return engine_inputs(inputs.target, one(inputs.get("drafter")), params.method, params.gpu,
                         params.label)


def tiny_prompts(inputs, params) -> str:
    """The tiny models' prompt table as a job reads it: a file of the user's among its inputs
    (inputs.tiny_prompts), else the embedded one that params.prompts names."""
    from ..contracts import one

    return one(inputs.get("tiny_prompts")) or params.prompts


def prompt_tables(inputs, params, datasets) -> dict:
    """Each dataset's prompt table for an engine rule's job: its downloaded one among
    inputs.prompts (results/prompts/<dataset>.csv), else the tiny models' (tiny_prompts)."""
    tables = {Path(f).stem: f for f in inputs.get("prompts", [])}
    return {ds: tables.get(ds) or tiny_prompts(inputs, params) for ds in datasets}


def with_job_runtime(cfg: dict, runtime_min) -> dict:
    """An engine section whose timeouts follow the job's runtime (minutes; a cluster job's limit),
    so that an engine stuck at start-up fails the job with its own message before the scheduler
    kills it. Without a runtime (a local run) the section is unchanged."""
    if not isinstance(runtime_min, (int, float)) or runtime_min <= 0:
        return cfg
    budget = float(runtime_min) * 60 * 0.95
    return {**cfg, "timeout_s": budget,
            "startup_timeout_s": min(float(cfg.get("startup_timeout_s", budget)), budget)}


def engine_label(version: str | None = None) -> str:
    """The engine, for provenance: vLLM version and device. version: the one the engine's
    process reported (runtime.engine.generate), so that this process need not import vLLM (and
    torch) only to read it."""
    from ..runtime.engine import device

    if version is None:
        from ..runtime.capture import vllm_version

        version = vllm_version()
    return f"vllm {version} ({device()})"


def checkpoint_origin(model_dir) -> str:
    """Where a checkpoint comes from: "hf" (a Hugging Face cache snapshot), "tiny" (trained by the
    pipeline: it has the pipeline's manifest) or "local" (a directory of another origin)."""
    p = Path(model_dir)
    if p.parent.name == "snapshots":
        return "hf"
    return "tiny" if (p / "manifest.json").exists() else "local"


def model_identity(model_dir) -> dict:
    """What identifies a checkpoint for caching measurements: a snapshot's commit; name and
    revision from the pipeline's manifest with the digest of its files (tiny_digest: a retrained
    checkpoint that differs is another, one trained the same is the same); else a hash of its
    config.json."""
    import json

    from ..provenance import config_hash

    if isinstance(model_dir, dict):  # an EAGLE/MTP spec
        return {"method": model_dir["method"],
                **(model_identity(model_dir["model"]) if model_dir.get("model") else {})}
    p = Path(model_dir)
    origin = checkpoint_origin(p)
    if origin == "hf":  # the commit is the revision
        return {"name": p.parent.parent.name, "revision": p.name}
    if origin == "tiny":
        prov = json.loads((p / "manifest.json").read_text()).get("provenance", {})
        return {"name": p.name, "revision": (prov.get("model") or {}).get("revision"),
                "digest": tiny_digest(p)}
    cfg = p / "config.json"
    return {"name": p.name, "config": config_hash(json.loads(cfg.read_text())) if cfg.exists()
            else None}


def tiny_digest(model_dir: Path) -> str:
    """A hash of a tiny checkpoint's files (weights, config, tokenizer), its manifest left out:
    the manifest records the training's wall time and when it ran, which differ between two
    trainings of the same weights (its time in a drafter's identity made every trace captured
    with it, and that trace's config hash, differ between two runs of one configuration)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(model_dir.iterdir()):
        if f.is_file() and f.name != "manifest.json" and not f.name.startswith("."):
            h.update(b"%s\0%d\0" % (f.name.encode(), f.stat().st_size))
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]


def model_provenance(name: str, model_dir) -> dict:
    """The model entry of a result's provenance: its name in the configuration, where its
    checkpoint comes from (checkpoint_origin) and its revision."""
    target = model_dir["model"] if isinstance(model_dir, dict) else model_dir
    return {"name": name, "source": checkpoint_origin(target),
            "revision": model_identity(model_dir).get("revision")}


def engine_opts(cfg: dict) -> dict:
    """Engine options of a sweep/profiling config section."""
    return {"dtype": setting(cfg, "dtype"), "kv_cache_mib": int(setting(cfg, "kv_cache_mib")),
            "max_model_len": int(setting(cfg, "max_model_len")), "seed": 0,
            "extra": dict(cfg.get("engine_args") or {})}


def engine_prompts(rows: list, engine: dict, prompting: dict | None, reserved: int,
                   what: str) -> tuple[list, dict]:
    """A job's prompts as its engine receives them, before the engine starts
    (specmoe.sources.promptfit): rendered with the target's chat template where the dataset says
    so, those longer than the engine's context with `reserved` tokens added left out; (rows,
    what was done per dataset, for the output's metadata)."""
    from ..sources import promptfit

    tok = promptfit.load_tokenizer(engine["model"], bool(engine.get("trust_remote_code")))
    rows, info = promptfit.prepare(rows, tok, (prompting or {}).get("chat_template") or {},
                                   int(engine["max_model_len"]), reserved, what)
    log.info("prompts: %s", promptfit.summary_line(info))
    return rows, info
