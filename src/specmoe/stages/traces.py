"""Routing traces from a real engine: every verification window of the target during SD (rule
capture; torch / vLLM, the `cpu` or `gpu` extra). Synthetic traces are made by the analysis
stages (specmoe.stages.analysis.synth_trace)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..kinds import engine_context
from ..sources import prompts as prompt_table
from ..sources.prompts import distinct_prompts
from ..provenance import provenance
from .engines import (engine_label, engine_prompts, model_identity, model_provenance,
                      prompt_tables, served, setting, with_job_runtime)

logger = logging.getLogger("specmoe")


def capture_prompts(rows: list, engine: dict, prompting: dict | None, reserved: int, what: str,
                    limit: int | None, max_tokens: int, shard_dir: str,
                    repetition_penalty: float = 1.0) -> dict:
    """In the engine's process: the run's prompts as the engine receives them (engine_prompts,
    with the target's tokenizer: transformers, which vLLM imports anyway, is imported once per
    job, not in the rule's process too), each distinct prompt once (distinct_prompts), then the
    capture (runtime.capture.capture_generate). The engine's start counts from this function's
    start, the prompts' check and every import included. Its result adds the prompts sent
    ("rows") and what was done per dataset ("prompting")."""
    from ..runtime.capture import capture_generate
    from ..runtime.startup import StartClock

    clock = StartClock()
    rows, fit = engine_prompts(rows, engine, prompting, reserved, what)
    rows = distinct_prompts(rows, limit)
    res = capture_generate([r.text for r in rows], max_tokens, engine, shard_dir,
                           repetition_penalty=repetition_penalty, clock=clock)
    return {**res, "rows": rows, "prompting": fit}


def capture_stage(inputs, outputs, params, log: str | None = None, runtime=None) -> None:
    """Rule capture (its contract: specmoe.contracts.engines.CaptureParams): the run's target
    (inputs.target) with SD (inputs.drafter) over the prompts of its dataset (its downloaded table
    among inputs.prompts, else the tiny models'), every verification window captured into
    outputs.trace. log: the job's log, which the engine's processes append to; runtime: the job's
    runtime in minutes (a cluster job's limit; the engine's timeouts follow it, the provenance's
    config hash does not: a retry with a longer limit captures the same trace)."""
    import tempfile

    from ..runtime.capture import assemble
    from ..runtime.engine import check_inputs, device, engine_kwargs, run_in_child
    from ..runtime.startup import describe
    from ..routing.trace import write_trace

    run = params.job
    k = run["k"]
    target_dir, drafter_dir = served(inputs, params)
    cap_cfg = with_job_runtime(params.settings, runtime)
    prompts_source = prompt_tables(inputs, params, [run["dataset"]])[run["dataset"]]
    out, prompting = outputs.trace, params.prompting
    check_inputs(target_dir, drafter_dir, k)
    engine = engine_kwargs(target_dir, drafter_dir, k, seed=0,
                           max_model_len=engine_context(cap_cfg),
                           kv_cache_mib=int(setting(cap_cfg, "kv_cache_mib")),
                           max_num_seqs=int(cap_cfg["max_num_seqs"]),
                           dtype=setting(cap_cfg, "dtype"),
                           extra=dict(cap_cfg.get("engine_args") or {}))
    moe = {}
    if device() == "cuda":  # a MoE kernel that capture can bind to (moebackend, #40)
        from ..runtime.moebackend import capture_engine

        engine = capture_engine(engine)
        moe = {"moe_backend": engine.get("moe_backend", "auto")}
        logger.info("capture: MoE backend %s", moe["moe_backend"])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".shards-") as shard_dir:
        res = run_in_child(capture_prompts, prompt_table.load(prompts_source, [run["dataset"]]),
                           engine, prompting, int(cap_cfg["max_tokens"]) + k + 1,
                           f"capture of {run['model']}", int(cap_cfg.get("prompts", 0)) or None,
                           int(cap_cfg["max_tokens"]), shard_dir,
                           log_path=log, timeout=float(setting(cap_cfg, "timeout_s")),
                           untimed=True,
                           repetition_penalty=float(setting(cap_cfg, "repetition_penalty")))
        rows, fit = res.pop("rows"), res.pop("prompting")
        tr = assemble(res, rows, run, k)
    logger.info("engine start: %s", describe(res.get("engine_start")))
    tr.meta["prompting"] = fit
    cap = tr.meta["capture"]
    logger.info("captured %d windows (%d short), %d rows; cross-check with vLLM's per-step "
                "accepted and drafted counts: %d mismatches in %d steps", cap["windows"],
                cap["short_windows"], len(tr), cap["accepted_crosscheck"]["mismatches"],
                cap["accepted_crosscheck"]["steps"])
    # the drafter's checkpoint (its snapshot's commit) and method decide the windows and their
    # acceptance as the target's does its routing: both in the hash and in the record, as a
    # sweep's points key on them (stages.measure); run names the drafter only. prompting (each
    # dataset's chat_template) decides the prompts' tokens, and so every window
    drafter = {"drafter": model_identity(drafter_dir) if drafter_dir else None,
               "method": params.method}
    write_trace(out, tr, provenance(
        {"run": run, "capture": params.settings, "prompts": prompts_source,
         "prompting": prompting, **drafter, **moe},
        model=model_provenance(run["model"], target_dir), **drafter, stage="capture",
        engine=engine_label(res.get("vllm")), engine_start=res.get("engine_start")))


# --- the matched untrained control: its target's tokens, teacher-forced -----------------------

def teacher_forced_inputs(tr) -> tuple[list[list[int]], list[int]]:
    """What each verification window of a target's trace read, as one token sequence per window
    (in the trace's window order) and the number of its last positions that are the window.

    "The same window" is the same tokens in the same context: the window of request r at step s,
    with tokens (t0, d1..dn) (t0 the last committed token, d the drafts), read r's prompt, then
    the tokens committed before it, C(s) = (t0, d1..d_a) of every earlier window of r (a: its
    accepted drafts), then its own n + 1 tokens, causally. A prefill of prompt + C(s) + (t0,
    d1..dn) gives every one of those n + 1 positions the same token at the same position with
    the same tokens before it, so its last n + 1 rows are the routing of exactly the window's
    inputs; rejected drafts are read in their window and nowhere else, as the target read them.
    The computation differs only in kind (one prefill instead of decode steps and a verify
    pass): numerically, not in what is read."""
    prompts = tr.meta.get("prompt_token_ids")
    if not prompts or any(p is None for p in prompts):
        raise InputError("the target's trace does not record its prompts' token ids (captured "
                         "before they were kept): capture the target again")
    starts, lengths = tr.windows()
    req = tr.columns["request"][starts].astype(np.int64)
    acc = tr.columns["accepted"][starts].astype(np.int64)
    tok = tr.columns["token_id"].astype(np.int64)
    seqs, spans, committed, last = [], [], [], None
    for w, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
        if req[w] != last:
            last = req[w]
            committed = list(prompts[last])
        window = tok[s:s + n].tolist()
        seqs.append(committed + window)
        spans.append(n)
        committed = committed + window[:1 + int(acc[w])]
    return seqs, spans


def control_capture_stage(inputs, outputs, params, log: str | None = None,
                          runtime=None) -> None:
    """Rule capture_control (its contract: specmoe.contracts.engines.CaptureControlParams): the
    matched untrained control's trace. The control checkpoint (inputs.control) reads its trained
    target's own windows (inputs.trace; teacher_forced_inputs) through the same engine settings
    as the target's capture, so every routing statistic of the two compares routing of identical
    inputs. The trace (outputs.trace) keeps the target's columns (request, step, position,
    acceptance: the control verifies nothing) with the control's routing. log and runtime: as
    capture_stage's."""
    import tempfile

    from ..routing.trace import Trace, read_trace, write_trace
    from ..runtime.capture import rows_of_sequences, teacher_forced_routing
    from ..runtime.engine import check_inputs, engine_kwargs, run_in_child

    control_dir, target_trace, run = inputs.control, inputs.trace, params.run
    cap_cfg, out = with_job_runtime(params.settings, runtime), outputs.trace
    check_inputs(control_dir)
    tr = read_trace(target_trace)
    if tr.meta.get("capture", {}).get("teacher_forced"):
        raise InputError(f"{target_trace}: a teacher-forced trace, not a target's own capture")
    seqs, spans = teacher_forced_inputs(tr)
    engine = engine_kwargs(control_dir, seed=0, max_model_len=engine_context(cap_cfg),
                           kv_cache_mib=int(setting(cap_cfg, "kv_cache_mib")),
                           max_num_seqs=int(cap_cfg["max_num_seqs"]),
                           dtype=setting(cap_cfg, "dtype"),
                           extra=dict(cap_cfg.get("engine_args") or {}))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".shards-") as shard_dir:
        res = run_in_child(teacher_forced_routing, seqs, engine, shard_dir, log_path=log,
                           timeout=float(setting(cap_cfg, "timeout_s")), untimed=True)
        routing, info = rows_of_sequences(res, seqs)
    target_layers = tr.meta.get("capture", {}).get("layers")
    if target_layers is not None and list(target_layers) != info["layers"]:
        raise InputError(f"control {run['model']} routes in layers {info['layers']}, its target "
                         f"in {target_layers}: not the same architecture")
    experts = np.concatenate([r[-n:] for r, n in zip(routing, spans)])
    n = len(experts)
    columns = {**tr.columns, "model": np.full(n, run["model"])}
    target_run = tr.meta.get("run", {})
    # the target's trace by its path and its own config hash: another capture of the target (its
    # drafter, its settings) at the same path is another input
    target_hash = (tr.meta.get("provenance") or {}).get("config_hash")
    meta = {"run": run, "slice_datasets": tr.meta.get("slice_datasets"),
            "prompting": tr.meta.get("prompting"),
            "prompt_token_ids": tr.meta.get("prompt_token_ids"),
            # the layers routed: every MoE layer the recorder was bound to (capture.shard_layers)
            "capture": {"windows": len(spans), "layers": info["layers"],
                        "bound_layers": info["bound_layers"],
                        "generate_s": res.get("generate_s"),
                        # the engine's start (specmoe.report.timing splits it off)
                        "startup_s": res.get("startup_s"),
                        "teacher_forced": {"target": target_run.get("model"),
                                           "target_trace": str(target_trace),
                                           "target_config_hash": target_hash,
                                           "sequences": len(seqs)}}}
    out_tr = Trace(experts=experts, columns=columns, num_experts=info["num_experts"],
                   k_draft=tr.k_draft, meta=meta)
    logger.info("teacher-forced %s on %s's %d windows (%d rows)", run["model"],
                target_run.get("model"), len(spans), n)
    write_trace(out, out_tr, provenance(
        {"run": run, "capture": params.settings, "teacher_forced_on": str(target_trace),
         "target_config_hash": target_hash},
        model=model_provenance(run["model"], control_dir), stage="capture_control",
        engine=engine_label(), engine_start=res.get("engine_start")))
