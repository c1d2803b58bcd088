"""Pipeline stages that build models and run engines (torch / vLLM, the `cpu` or `gpu` extra)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from . import prompts as prompt_table
from . import tiny
from .errors import InputError
from .provenance import provenance, write_json

log = logging.getLogger("specmoe")


def tokenizer_stage(tiny_cfg: dict, out_dir) -> None:
    """Byte-level BPE tokenizer plus the encoded training and held-out corpora (tokens .npy)."""
    every = int(tiny_cfg.get("heldout_every", 10))
    train_files = tiny.corpus_files(False, every)
    held_files = tiny.corpus_files(True, every)
    log.info("corpus: %d training files, %d held-out files", len(train_files), len(held_files))
    tmp_tok = Path(out_dir).with_name(f".{Path(out_dir).name}.tokenizer")
    tiny.train_tokenizer(train_files, int(tiny_cfg["vocab_size"]), tmp_tok)
    train = tiny.encode(tmp_tok, train_files, int(tiny_cfg.get("max_train_tokens", 4_000_000)))
    held = tiny.encode(tmp_tok, held_files, int(tiny_cfg.get("max_heldout_tokens", 200_000)))
    log.info("encoded %d training and %d held-out tokens", train.size, held.size)
    manifest = {"vocab_size": int(tiny_cfg["vocab_size"]), "heldout_every": every,
                "train_files": len(train_files), "heldout_files": len(held_files),
                "train_tokens": int(train.size), "heldout_tokens": int(held.size),
                "corpus_digest": tiny.corpus_digest(train_files + held_files),
                "tokenizer_digest": tiny.tokenizer_digest(tmp_tok)}
    with tiny.atomic_dir(out_dir) as tmp:
        for f in tmp_tok.iterdir():
            f.rename(tmp / f.name)
        np.save(tmp / "train_tokens.npy", train)
        np.save(tmp / "heldout_tokens.npy", held)
        write_json(tmp / "manifest.json", manifest, provenance(tiny_cfg, stage="tokenizer"))
    tmp_tok.rmdir()


def train_stage(model_cfg: dict, tiny_cfg: dict, tokenizer_dir, out_dir, trained: bool = True,
                progress: bool = True) -> dict:
    """Train (or, for the random control, only initialise) one tiny model and save it, on the
    config's tiny.train.threads whatever the machine (the weights depend on the thread count)."""
    arch = tiny.arch_from_dict(model_cfg["arch"])
    train = dict(tiny_cfg.get("train", {}))
    spec = tiny.spec_from_dict({**train, "steps": model_cfg.get("steps", 1),
                                "seed": model_cfg.get("seed", 0)})
    arch.validate()
    spec.validate()  # bad input fails here, before torch is even imported
    tok_dir = Path(tokenizer_dir)
    vocab = int(tiny_cfg["vocab_size"])
    model = tiny.build_model(arch, vocab, spec.seed, aux_coef=spec.aux_coef)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("%s: %s model, %.2fM parameters", model_cfg["name"], arch.kind, n_params / 1e6)
    held = np.load(tok_dir / "heldout_tokens.npy")
    result = {"steps": 0, "train_loss": None, "wall_s": 0.0, "tokens_seen": 0}
    if trained:
        result = tiny.train(model, np.load(tok_dir / "train_tokens.npy"), spec, progress=progress)
    import torch

    torch.set_num_threads(spec.threads)
    heldout_loss = tiny.evaluate(model, held, spec.seq_len, spec.eval_batches, spec.batch_size)
    name = model_cfg["name"] + ("" if trained else "-random")
    manifest = {"name": name, "trained": trained, "heldout_loss": heldout_loss,
                "parameters": int(n_params), **result, **tiny.describe(arch, spec),
                "tokenizer_digest": tiny.tokenizer_digest(tok_dir)}
    log.info("%s: held-out loss %.3f after %d steps (%.0f s)", name, heldout_loss,
             result["steps"], result["wall_s"])
    prov = provenance({"model": model_cfg, "tiny": tiny_cfg, "trained": trained},
                      model={"name": name, "source": "tiny",
                             "revision": f"seed{spec.seed}-steps{result['steps']}"},
                      stage="train" if trained else "random")
    manifest["provenance"] = prov
    tiny.save_model(model, tok_dir, out_dir, manifest)
    return manifest


def sd_check_stage(target_dir, drafter_dir, k: int, sd_cfg: dict, prompts_source: str,
                   dataset: str, out, engine_log: str | None = None) -> dict:
    """Speculative vs plain greedy decoding on the prompt set: equality and acceptance length."""
    from .engine import check_inputs, sd_check

    check_inputs(target_dir, drafter_dir, k)
    rows = prompt_table.load(prompts_source, [dataset])[: int(sd_cfg.get("prompts", 24))]
    if not rows:
        raise InputError(f"dataset {dataset} has no prompts")
    res = sd_check(target_dir, drafter_dir, k, [r.text for r in rows],
                   int(sd_cfg.get("max_tokens", 64)), log_path=engine_log, seed=0,
                   dtype=sd_cfg.get("dtype", "auto"),
                   kv_cache_mib=int(sd_cfg.get("kv_cache_mib", 512)))
    res["prompt_ids"] = [r.prompt_id for r in rows]
    res["target"], res["drafter"], res["dataset"] = str(target_dir), str(drafter_dir), dataset
    spec = res["spec"]
    log.info("SD equals plain: %s; acceptance length %.3f", res["sd_equals_plain"],
             spec.get("acceptance_length", float("nan")))
    write_json(out, res, provenance({"k": k, "sd": sd_cfg, "prompts": prompts_source},
                                    model={"name": Path(target_dir).name, "source": "tiny",
                                           "revision": None},
                                    stage="sd_check", drafter=Path(drafter_dir).name))
    return res


def distinct_prompts(rows: list, limit: int | None) -> list:
    """The prompts a capture runs: each distinct prompt once, at most `limit`. Greedy decoding
    commits the same tokens for a repeated prompt, so a repeat would count one prompt's windows
    again in every statistic (pseudo-replication); a small set stays small."""
    seen, out = set(), []
    for r in prompt_table.interleave(rows):
        if r.text not in seen:
            seen.add(r.text)
            out.append(r)
    return out[:limit] if limit else out


def capture_stage(target_dir, drafter_dir, k: int, run: dict, cap_cfg: dict, prompts_source: str,
                  out, engine_log: str | None = None) -> None:
    """Run the target with SD over the prompt table, capturing every verification window."""
    import tempfile

    from .capture import assemble, capture_generate
    from .engine import check_inputs, engine_kwargs, run_in_child
    from .trace import write_trace

    check_inputs(target_dir, drafter_dir, k)
    rows = distinct_prompts(prompt_table.load(prompts_source, [run["dataset"]]),
                            int(cap_cfg.get("prompts", 0)) or None)
    engine = engine_kwargs(target_dir, drafter_dir, k, seed=0,
                           kv_cache_mib=int(cap_cfg.get("kv_cache_mib", 512)),
                           max_num_seqs=int(cap_cfg["max_num_seqs"]),
                           dtype=cap_cfg.get("dtype", "auto"),
                           extra=dict(cap_cfg.get("engine_args") or {}))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".shards-") as shard_dir:
        res = run_in_child(capture_generate, [r.text for r in rows],
                           int(cap_cfg["max_tokens"]), engine, shard_dir,
                           log_path=engine_log, timeout=float(cap_cfg.get("timeout_s", 1800)),
                           repetition_penalty=float(cap_cfg.get("repetition_penalty", 1.0)))
        tr = assemble(res, rows, run, k)
    cap = tr.meta["capture"]
    log.info("captured %d windows (%d short), %d rows; accepted cross-check: %d mismatches in %d "
             "steps", cap["windows"], cap["short_windows"], len(tr),
             cap["accepted_crosscheck"]["mismatches"], cap["accepted_crosscheck"]["steps"])
    write_trace(out, tr, provenance(
        {"run": run, "capture": cap_cfg, "prompts": prompts_source},
        model=model_provenance(run["model"], target_dir), stage="capture", engine=engine_label()))


def engine_inputs(target, drafter=None, method: str | None = None, gpu: bool = False,
                  what: str = "engine"):
    """(target dir, drafter) for the engine stages from rule inputs: a model directory or a download
    manifest (its snapshot in the HF cache); the drafter as a path (a separate draft model) or, for
    EAGLE/EAGLE-3/MTP, a {"method", "model"} spec. GPU rules stop at once without CUDA."""
    from .engine import require_cuda
    from .hub import snapshot_of

    if gpu:
        require_cuda(what)
    target_dir = snapshot_of(target)
    d = snapshot_of(drafter) if drafter else None
    if method in (None, "draft_model"):
        return target_dir, d
    return target_dir, {"method": method, "model": str(d) if d else None}


def with_job_runtime(cfg: dict, runtime_min) -> dict:
    """An engine section whose timeouts follow the job's runtime (minutes; a cluster job's limit),
    so that an engine stuck at start-up fails the job with its own message before the scheduler
    kills it. Without a runtime (a local run) the section is unchanged."""
    if not isinstance(runtime_min, (int, float)) or runtime_min <= 0:
        return cfg
    budget = float(runtime_min) * 60 * 0.95
    return {**cfg, "timeout_s": budget,
            "startup_timeout_s": min(float(cfg.get("startup_timeout_s", budget)), budget)}


def rule_engine_inputs(inputs, params, what: str):
    """engine_inputs from a rule's input (target, optional drafter) and params (optional method
    and gpu): the preamble every engine rule script shares."""
    from .logs import one

    return engine_inputs(inputs.target, one(inputs.get("drafter")), params.get("method"),
                         gpu=params.get("gpu", False), what=what)


def engine_label() -> str:
    """The engine, for provenance: vLLM version and device."""
    from .capture import vllm_version
    from .engine import device

    return f"vllm {vllm_version()} ({device()})"


def model_identity(model_dir) -> dict:
    """What identifies a checkpoint for caching measurements: name, revision and creation time from
    the pipeline's manifest, else a hash of its config.json."""
    import json

    from .provenance import config_hash

    if isinstance(model_dir, dict):  # an EAGLE/MTP spec
        return {"method": model_dir["method"],
                **(model_identity(model_dir["model"]) if model_dir.get("model") else {})}
    p = Path(model_dir)
    if p.parent.name == "snapshots":  # a Hugging Face cache snapshot: the commit is the revision
        return {"name": p.parent.parent.name, "revision": p.name}
    man = p / "manifest.json"
    if man.exists():
        prov = json.loads(man.read_text()).get("provenance", {})
        return {"name": p.name, "revision": (prov.get("model") or {}).get("revision"),
                "created": prov.get("created")}
    cfg = p / "config.json"
    return {"name": p.name, "config": config_hash(json.loads(cfg.read_text())) if cfg.exists()
            else None}


def model_provenance(name: str, model_dir) -> dict:
    """The model entry of a result's provenance: its name in the configuration, where its
    checkpoint comes from ("hf": a Hugging Face cache snapshot, "tiny": trained by the pipeline,
    "local": a directory of another origin) and its revision."""
    ident = model_identity(model_dir)
    p = Path(model_dir["model"] if isinstance(model_dir, dict) else model_dir)
    source = ("hf" if p.parent.name == "snapshots" else
              "tiny" if (p / "manifest.json").exists() else "local")
    return {"name": name, "source": source, "revision": ident.get("revision")}


def _engine_opts(cfg: dict) -> dict:
    """Engine options of a sweep/profiling config section."""
    return {"dtype": cfg.get("dtype", "auto"), "kv_cache_mib": int(cfg.get("kv_cache_mib", 512)),
            "max_model_len": int(cfg.get("max_model_len", 1024)), "seed": 0,
            "extra": dict(cfg.get("engine_args") or {})}


def sweep_series_stage(target_dir, drafter_dir, k: int | None, series: dict, sweep_cfg: dict,
                       prompts_source, out, engine_log: str | None = None) -> None:
    """One serving series: one engine (with or without SD) over the batch sizes of the schedule,
    for each dataset of `series["datasets"]` in turn (datasets do not change the engine, so they
    share one start-up).

    prompts_source: the prompt table of every dataset, or {dataset: its prompt table}. Points go
    to `<out without .json>.points/<dataset>/b<B>.json` as they are measured (resume: see
    serving.run_series); `out` lists them once the series is complete.
    """
    import time

    from .capture import vllm_version
    from .engine import check_inputs, device, engine_kwargs
    from .serving import run_series

    check_inputs(target_dir, drafter_dir, k)
    sched = [(int(p["batch"]), int(p["prompts"])) for p in sweep_cfg["schedule"]]
    # one prompt set for every point: the smallest point's prompts; larger points cycle through it
    texts = {}
    for ds in series["datasets"]:
        src = prompts_source[ds] if isinstance(prompts_source, dict) else prompts_source
        rows = prompt_table.schedule(prompt_table.load(src, [ds]), max(n for _, n in sched),
                                     set_size=min(n for _, n in sched))
        texts[ds] = [r.text for r in rows]
    engine = engine_kwargs(target_dir, drafter_dir, k, max_num_seqs=max(b for b, _ in sched),
                           in_process=False, **_engine_opts(sweep_cfg))
    key_base = {"engine": {n: v for n, v in engine.items() if n != "model"},
                "target": model_identity(target_dir),
                "drafter": model_identity(drafter_dir) if drafter_dir else None,
                "vllm": vllm_version(), "device": device()}
    prov = provenance({"series": series, "sweep": sweep_cfg, "prompts": prompts_source},
                      model=model_provenance(series.get("model", Path(target_dir).name),
                                             target_dir),
                      stage="sweep", engine=engine_label())
    t0 = time.perf_counter()
    points = run_series(engine, str(target_dir), texts, sched,
                        int(sweep_cfg["output_len"]), int(sweep_cfg["warmups"]),
                        Path(str(out).removesuffix(".json") + ".points"), key_base, prov,
                        log_path=engine_log,
                        startup_timeout=float(sweep_cfg["startup_timeout_s"]),
                        repeats=int(sweep_cfg["repeats"]))
    measured = [p for pts in points.values() for p in pts if not p["reused"]]
    write_json(out, {"series": series, "engine": key_base["engine"],
                     "datasets": {ds: {"points": pts, "measured": sum(not p["reused"] for p in pts)}
                                  for ds, pts in points.items()},
                     "engine_starts": 1 if measured else 0,
                     "engine_startup_s": measured[0]["engine_startup_s"] if measured else 0.0,
                     "wall_s": time.perf_counter() - t0}, prov)


def profile_stage(target_dir, drafter_dir, k: int, run: dict, prof_cfg: dict, prompts_source: str,
                  out, trace_dir, engine_log: str | None = None) -> None:
    """Kernel/op profiles of the target's decode and verify forward passes (kernelprof)."""
    import time

    from .kernelprof import profile_model

    rows = prompt_table.load(prompts_source, [run["dataset"]])
    batches = [int(b) for b in prof_cfg["batch_sizes"]]
    rows = prompt_table.schedule(rows, max(batches))
    opts = _engine_opts(prof_cfg)
    opts["extra"].setdefault("enforce_eager", True)  # kernels launched one by one, inside the ranges
    t0 = time.perf_counter()
    res = profile_model(target_dir, drafter_dir, k, batches, [r.text for r in rows],
                        int(prof_cfg["max_tokens"]), opts, trace_dir, log_path=engine_log,
                        timeout=float(prof_cfg.get("timeout_s", 1800)))
    write_json(out, {"run": run, **res, "wall_s": time.perf_counter() - t0}, provenance(
        {"run": run, "profiling": prof_cfg, "prompts": prompts_source},
        model=model_provenance(run["model"], target_dir), stage="profile", engine=engine_label()))
