"""The tiny models built on this machine (rules tokenizer, train_model, random_model) and the
speculative-vs-plain decoding check on a real engine (rule sd_check; torch / vLLM, the `cpu` extra)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..sources import prompts as prompt_table
from ..runtime import tiny
from ..errors import InputError
from ..names import control_name
from ..provenance import atomic_dir, provenance, write_json
from .engines import model_identity, model_provenance, setting, tiny_prompts

logger = logging.getLogger("specmoe")


def tokenizer_stage(inputs, outputs, params) -> None:
    """Rule tokenizer (its contract: specmoe.contracts.models.TokenizerParams): the byte-level BPE
    tokenizer plus the encoded training and held-out corpora (tokens .npy) into outputs.dir, from
    params.tiny."""
    tiny_cfg, out_dir = params.tiny, outputs.dir
    every = int(tiny_cfg["heldout_every"])  # the schema's defaults filled
    train_files = tiny.corpus_files(False, every)
    held_files = tiny.corpus_files(True, every)
    logger.info("corpus: %d training files, %d held-out files", len(train_files), len(held_files))
    tmp_tok = Path(out_dir).with_name(f".{Path(out_dir).name}.tokenizer")
    tiny.train_tokenizer(train_files, int(tiny_cfg["vocab_size"]), tmp_tok)
    train = tiny.encode(tmp_tok, train_files, int(tiny_cfg["max_train_tokens"]))
    held = tiny.encode(tmp_tok, held_files, int(tiny_cfg["max_heldout_tokens"]))
    logger.info("encoded %d training and %d held-out tokens", train.size, held.size)
    manifest = {"vocab_size": int(tiny_cfg["vocab_size"]), "heldout_every": every,
                "train_files": len(train_files), "heldout_files": len(held_files),
                "train_tokens": int(train.size), "heldout_tokens": int(held.size),
                "corpus_digest": tiny.corpus_digest(train_files + held_files),
                "tokenizer_digest": tiny.tokenizer_digest(tmp_tok)}
    with atomic_dir(out_dir) as tmp:
        for f in tmp_tok.iterdir():
            f.rename(tmp / f.name)
        np.save(tmp / "train_tokens.npy", train)
        np.save(tmp / "heldout_tokens.npy", held)
        write_json(tmp / "manifest.json", manifest, provenance(tiny_cfg, stage="tokenizer"))
    tmp_tok.rmdir()


def train_stage(inputs, outputs, params, progress: bool = True) -> dict:
    """Rules train_model and random_model (their contract: specmoe.contracts.models.TrainParams):
    train (or, for the random control, params.trained false, only initialise) one tiny model
    (params.model) on the tokenizer's corpora (inputs.tokenizer) and save it into outputs.dir, on
    the config's tiny.train.threads whatever the machine (the weights depend on the thread
    count)."""
    model_cfg, tiny_cfg, trained = params.model, params.tiny, params.trained
    tokenizer_dir, out_dir = inputs.tokenizer, outputs.dir
    arch = tiny.arch_from_dict(model_cfg["arch"])
    train = dict(tiny_cfg["train"])  # every key (the schema's defaults); a control's: EVAL_KEYS
    spec = tiny.spec_from_dict({**train, "steps": model_cfg.get("steps", 1),
                                **({"seed": model_cfg["seed"]} if "seed" in model_cfg else {})})
    arch.validate()
    spec.validate()  # bad input fails here, before torch is even imported
    # OpenMP's wait policy, set before torch loads it (tiny.TRAIN_OMP_ENV)
    threading = tiny.training_threads(spec.threads)
    # the numerics any x86-64 CPU with AVX2 trains the same weights under (TRAIN_NUMERICS_ENV)
    numerics = tiny.training_numerics()
    logger.info("training threads %d, OpenMP wait policy %s, spin count %s%s", spec.threads,
                threading["OMP_WAIT_POLICY"] or "default", threading["GOMP_SPINCOUNT"] or "default",
                "" if threading["applied"] else " (torch was loaded before: its own settings hold)")
    if not numerics["applied"]:
        logger.warning("torch was loaded before training: its numerics are this machine's, and "
                       "so are the weights (manifest: numerics)")
    tok_dir = Path(tokenizer_dir)
    vocab = int(tiny_cfg["vocab_size"])
    model = tiny.build_model(arch, vocab, spec.seed, aux_coef=spec.aux_coef)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("%s: %s model, %.2fM parameters", model_cfg["name"], arch.kind, n_params / 1e6)
    held = np.load(tok_dir / "heldout_tokens.npy")
    result = {"steps": 0, "train_loss": None, "wall_s": 0.0, "tokens_seen": 0}
    if trained:
        result = tiny.train(model, np.load(tok_dir / "train_tokens.npy"), spec, progress=progress)
    import torch

    torch.set_num_threads(spec.threads)
    heldout_loss = tiny.evaluate(model, held, spec.seq_len, spec.eval_batches, spec.batch_size)
    name = model_cfg["name"] if trained else control_name(model_cfg["name"])
    manifest = {"name": name, "trained": trained, "heldout_loss": heldout_loss,
                "parameters": int(n_params), **result, **tiny.describe(arch, spec),
                "threading": threading, "numerics": numerics,
                "tokenizer_digest": tiny.tokenizer_digest(tok_dir)}
    logger.info("%s: held-out loss %.3f after %d steps (%.0f s)", name, heldout_loss,
                result["steps"], result["wall_s"])
    prov = provenance({"model": model_cfg, "tiny": tiny_cfg, "trained": trained},
                      model={"name": name, "source": "tiny",
                             "revision": f"seed{spec.seed}-steps{result['steps']}"},
                      stage="train" if trained else "random",
                      # a training run's wall time is a timing; a random control's none
                      timed=trained,
                      # the instruction set of torch's CPU kernels (AVX2 where pinned)
                      cpu_capability=torch.backends.cpu.get_cpu_capability())
    manifest["provenance"] = prov
    tiny.save_model(model, tok_dir, out_dir, manifest)
    return manifest


def sd_check_stage(inputs, outputs, params, log: str | None = None) -> dict:
    """Rule sd_check (its contract: specmoe.contracts.models.SdCheckParams): speculative vs plain
    greedy decoding of inputs.target with inputs.drafter at params.k on the first prompts of
    params.dataset in the tiny models' table (engines.tiny_prompts): equality and acceptance
    length, into outputs.json. log: the job's log, which the engine's processes append to."""
    from ..runtime.engine import check_inputs, sd_check

    target_dir, drafter_dir, k, sd_cfg = inputs.target, inputs.drafter, params.k, params.sd
    prompts_source, dataset, out = tiny_prompts(inputs, params), params.dataset, outputs.json
    check_inputs(target_dir, drafter_dir, k)
    rows = prompt_table.load(prompts_source, [dataset])[: int(sd_cfg["prompts"])]
    if not rows:
        raise InputError(f"dataset {dataset} has no prompts")
    res = sd_check(target_dir, drafter_dir, k, [r.text for r in rows],
                   int(sd_cfg["max_tokens"]), log_path=log, seed=0,
                   dtype=setting(sd_cfg, "dtype"),
                   kv_cache_mib=int(setting(sd_cfg, "kv_cache_mib")))
    res["prompt_ids"] = [r.prompt_id for r in rows]
    res["target"], res["drafter"], res["dataset"] = str(target_dir), str(drafter_dir), dataset
    spec = res["spec"]
    logger.info("SD equals plain: %s; acceptance length %.3f", res["sd_equals_plain"],
                spec.get("acceptance_length", float("nan")))
    # the target's name, origin and revision (its training manifest's seed and steps) and the
    # drafter's identity, as every other engine job records them
    write_json(out, res, provenance({"k": k, "sd": sd_cfg, "prompts": prompts_source},
                                    model=model_provenance(Path(target_dir).name, target_dir),
                                    stage="sd_check", drafter=model_identity(drafter_dir),
                                    timed=True))
    return res
