"""Routing traces from a real engine: every verification window of the target during SD (rule
capture; torch / vLLM, the `cpu` or `gpu` extra). Synthetic traces are made by the analysis
stages (specmoe.stages.analysis.synth_trace)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..sources import prompts as prompt_table
from ..provenance import provenance
from .engines import engine_label, engine_prompts, model_provenance, setting

log = logging.getLogger("specmoe")


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
                  out, engine_log: str | None = None, prompting: dict | None = None) -> None:
    """Run the target with SD over the prompt table, capturing every verification window.
    prompting: how the engine receives the prompts (specmoe.config.Config.prompting)."""
    import tempfile

    from ..runtime.capture import assemble, capture_generate
    from ..runtime.engine import check_inputs, device, engine_kwargs, run_in_child
    from ..runtime.startup import describe
    from ..routing.trace import write_trace

    check_inputs(target_dir, drafter_dir, k)
    engine = engine_kwargs(target_dir, drafter_dir, k, seed=0,
                           kv_cache_mib=int(setting(cap_cfg, "kv_cache_mib")),
                           max_num_seqs=int(cap_cfg["max_num_seqs"]),
                           dtype=setting(cap_cfg, "dtype"),
                           extra=dict(cap_cfg.get("engine_args") or {}))
    moe = {}
    if device() == "cuda":  # a MoE kernel that capture can bind to (moebackend, #40)
        from ..runtime.moebackend import capture_engine

        engine = capture_engine(engine)
        moe = {"moe_backend": engine.get("moe_backend", "auto")}
        log.info("capture: MoE backend %s", moe["moe_backend"])
    rows, fit = engine_prompts(prompt_table.load(prompts_source, [run["dataset"]]), engine,
                               prompting, int(cap_cfg["max_tokens"]) + k + 1,
                               f"capture of {run['model']}")
    rows = distinct_prompts(rows, int(cap_cfg.get("prompts", 0)) or None)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".shards-") as shard_dir:
        res = run_in_child(capture_generate, [r.text for r in rows],
                           int(cap_cfg["max_tokens"]), engine, shard_dir,
                           log_path=engine_log, timeout=float(setting(cap_cfg, "timeout_s")),
                           repetition_penalty=float(setting(cap_cfg, "repetition_penalty")))
        tr = assemble(res, rows, run, k)
    log.info("engine start: %s", describe(res.get("engine_start")))
    tr.meta["prompting"] = fit
    cap = tr.meta["capture"]
    log.info("captured %d windows (%d short), %d rows; accepted cross-check: %d mismatches in %d "
             "steps", cap["windows"], cap["short_windows"], len(tr),
             cap["accepted_crosscheck"]["mismatches"], cap["accepted_crosscheck"]["steps"])
    write_trace(out, tr, provenance(
        {"run": run, "capture": cap_cfg, "prompts": prompts_source, **moe},
        model=model_provenance(run["model"], target_dir), stage="capture",
        engine=engine_label(res.get("vllm")), engine_start=res.get("engine_start")))
