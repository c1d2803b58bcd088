"""Kernel profiling of target forward passes inside a vLLM engine (torch.profiler).

A worker extension (engine argument worker_extension_cls) labels every forward pass while a profile is
open: the target model's forward and the drafter model's forward, each in a `record_function`
range named `specmoe_target|nreq|ntok|nwin` (see profiling.label), where nwin counts requests whose
scheduled rows are exactly one decode or verification window (1 + drafts). vLLM computes the
logits and samples outside the model's forward: the target's LM head and the runner's sampling
(sampler or rejection sampler) run in `specmoe_head` ranges that count as part of the target step
they follow (with_heads), the drafter's LM head in drafter ranges (TARGET_HEADS, SAMPLING,
DRAFTER_HEADS). Both of vLLM's model
runners call the target as `runner.model(...)` (V1 through `_model_forward`; Model Runner V2,
which vLLM 0.32 picks on CUDA with Triton unless VLLM_USE_V2_MODEL_RUNNER=0, directly in eager
mode); the drafter is `runner.drafter.model` in V1 and `runner.speculator.model` in V2. Each
profile records which runner ran it (`model_runner`: vLLM's own choice, the worker's
use_v2_model_runner) and how its engine ran (`engine_mode`: compilation and CUDA graph modes,
async scheduling); a profile not run in eager mode is refused (profiling.EAGER). MoE blocks are the modules that own one of vLLM's MoE layers (moe_blocks).
The driver runs B concurrent requests per batch size, one profile each, and keeps the steady
steps: decode = B windows of 1 token (engine without SD), verify = B windows of K+1 tokens
(engine with SD). Prefill and mixed steps never match those shapes.

On CUDA the profile records device kernels with their grid sizes (engine in eager mode, so kernels are
launched one by one from inside the labelled range); on CPU, host ops with their self times.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from ..measured import profiling
from ..errors import InputError, SpecmoeError

log = logging.getLogger("specmoe")
WARMUP_STEPS = 2  # steady steps dropped at the start of each profile


class ProfileExtension:
    """Mixed into vLLM's worker class: open and close a labelled torch.profiler session."""

    def specmoe_profile_start(self) -> None:
        import torch

        runner = self.model_runner
        target, draft_model = forward_models(runner)
        orig_exec = runner.execute_model
        shape = {"step": (0, 0, 0)}

        def execute_model(scheduler_output, *args, **kwargs):
            sched = scheduler_output.num_scheduled_tokens
            drafts = scheduler_output.scheduled_spec_decode_tokens
            nwin = sum(1 for r, n in sched.items() if n == 1 + len(drafts.get(r, ())))
            shape["step"] = (len(sched), sum(sched.values()), nwin)
            return orig_exec(scheduler_output, *args, **kwargs)

        self._specmoe_wrapped = []

        def wrap(obj, attr, name, group=None):
            setattr(obj, attr, _labelled(getattr(obj, attr), name, group))
            self._specmoe_wrapped.append((obj, attr))

        runner.execute_model = execute_model
        self._specmoe_wrapped.append((runner, "execute_model"))
        wrap(target, "forward", lambda *a, **kw: profiling.label("target", *shape["step"]))
        # the LM head and the sampling, which both runners run outside the model's forward
        heads: list = []
        for obj, attr in target_heads(runner, target):
            wrap(obj, attr, lambda *a, **kw: profiling.label("head", *shape["step"]), heads)
        for block in moe_blocks(target):
            wrap(block, "forward", lambda *a, **kw: profiling.MOE_BLOCK)
            for shared in shared_experts(block):
                wrap(shared, "forward", lambda *a, **kw: profiling.SHARED_EXPERTS)
        if draft_model is not None:
            def draft_label(*args, **kwargs):
                ids = kwargs.get("input_ids", args[0] if args else None)
                ntok = int(ids.shape[0]) if ids is not None else 0
                return profiling.label("drafter", shape["step"][0], ntok, 0)

            # its forward, its LM head and EAGLE-3's hidden-state FC (tokens by hidden state
            # row): drafter_per_step sums them
            drafting: list = []
            for attr in ("forward", *DRAFTER_HEADS):
                if attr == "forward" or hasattr(draft_model, attr):
                    wrap(draft_model, attr, draft_label, drafting)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._specmoe_prof = torch.profiler.profile(activities=activities)
        self._specmoe_prof.__enter__()

    def specmoe_profile_stop(self, path_pattern: str) -> dict | None:
        import torch

        self._specmoe_prof.__exit__(None, None, None)
        for obj, attr in self._specmoe_wrapped:
            if attr in vars(obj):
                delattr(obj, attr)  # back to the class's method
        rank = getattr(self, "rank", 0)
        path = path_pattern.format(rank=rank)
        self._specmoe_prof.export_chrome_trace(path)
        self._specmoe_prof = None
        info = {"path": path, "rank": rank,
                "device": "cuda" if torch.cuda.is_available() else "cpu",
                "model_runner": model_runner(getattr(self, "use_v2_model_runner", False)),
                "engine_mode": engine_mode(self.vllm_config)}
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            info.update(sm_count=props.multi_processor_count, gpu=props.name)
        return info


def engine_mode(vllm_config) -> dict:
    """How the worker's engine runs its steps, as the worker sees it (vLLM resolves
    enforce_eager, the platform and the compilation config into these): compilation mode, CUDA
    graph mode and async scheduling."""
    cc = vllm_config.compilation_config
    return {"compilation_mode": getattr(cc.mode, "name", str(cc.mode)),
            "cudagraph_mode": getattr(cc.cudagraph_mode, "name", str(cc.cudagraph_mode)),
            "async_scheduling": bool(vllm_config.scheduler_config.async_scheduling)}


def model_runner(use_v2: bool) -> str:
    """vLLM's model runner by its use_v2_model_runner: "v2" (Model Runner V2) or "v1"."""
    return "v2" if use_v2 else "v1"


def engine_runs(vllm_config) -> dict:
    """How an engine runs by its vLLM config, as a profile records it: {"model_runner":
    model_runner, "engine_mode": engine_mode} (a served engine's: api_server.report_engine_runs)."""
    return {"model_runner": model_runner(vllm_config.use_v2_model_runner),
            "engine_mode": engine_mode(vllm_config)}


def forward_models(runner) -> tuple:
    """(target model, drafter model or None) of vLLM's V1 or V2 model runner: the modules whose
    forward each runner calls once per step (V1: `_model_forward` calls `runner.model`; V2 calls
    `runner.model` itself; the drafter is V1's `drafter.model`, V2's `speculator.model`)."""
    drafter = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    return runner.model, getattr(drafter, "model", None)


# the target's logits (V2 with a batch sharder: compute_logits_local) and the runner's sampling,
# which holds the sampler and the rejection sampler: V1's GPUModelRunner._sample, V2's sample
# (its samplers are no nn.Modules: their __call__ cannot be wrapped on the instance)
TARGET_HEADS, SAMPLING = ("compute_logits", "compute_logits_local"), ("_sample", "sample")
# the drafter's work outside its forward: its logits (get_top_tokens: its local-argmax path
# under tensor parallelism) and EAGLE-3's combine_hidden_states (the FC over the target's
# auxiliary hidden states, which V1's proposer and V2's speculator call before the forward;
# it calls no other labelled method, and the ranges of one group do not nest: _labelled)
DRAFTER_HEADS = ("compute_logits", "get_top_tokens", "combine_hidden_states")


def target_heads(runner, target) -> list[tuple]:
    """(object, method name) of the target's head work vLLM runs after the model's forward in
    each step: the logits and the sampling. A runner with no sampling method this code knows is
    refused: its steps would leave out the sampler."""
    sampling = [(runner, a) for a in SAMPLING if callable(getattr(runner, a, None))]
    if not sampling:
        raise SpecmoeError(f"{type(runner).__name__} has none of the sampling methods "
                           f"{', '.join(SAMPLING)} that the profiler labels")
    return [(target, a) for a in TARGET_HEADS if hasattr(target, a)] + sampling


def moe_blocks(model) -> list:
    """The outermost MoE blocks of a model: each module that owns one of vLLM's MoE layers (the
    layer's parent: Qwen3MoeSparseMoeBlock, MixtralMoE, DeepseekV2MoE, GPT-OSS's MLPBlock,
    Glm4MoeLite, ...), whatever its class is called. Its forward holds the router, the experts
    and the shared experts where the model has them."""
    from .moebackend import moe_layers

    owners = dict.fromkeys(name.rpartition(".")[0] for name, _ in moe_layers(model))
    found, prefixes = [], []
    for name in owners:
        if any((name + ".").startswith(p) for p in prefixes):
            continue
        found.append(model.get_submodule(name))
        prefixes.append(name + ".")
    return found


SHARED_NAMES = ("shared_expert", "shared_experts")  # Qwen2-MoE / Qwen3-Next; DeepSeek, GLM, Kimi


def shared_experts(block) -> list:
    """The shared-expert MLPs inside a MoE block (modules named shared_expert or shared_experts,
    once each though the block and its fused-MoE layer both hold them): dense MLPs that every
    token runs, which the weight model counts as dense."""
    return [m for name, m in block.named_modules()
            if name.rpartition(".")[2] in SHARED_NAMES and m is not None]


def _labelled(fn, name, group: list | None = None):
    """fn inside a profiler range; name(*args, **kwargs) gives the range's name at each call.
    Wrappers that share the list `group` open no range inside one another's (V2's sample calls
    compute_logits: a nested range would count its time twice)."""
    import torch

    def forward(*args, **kwargs):
        if group:  # inside a range of its group
            return fn(*args, **kwargs)
        with torch.profiler.record_function(name(*args, **kwargs)):
            if group is None:
                return fn(*args, **kwargs)
            group.append(fn)
            try:
                return fn(*args, **kwargs)
            finally:
                group.pop()

    return forward


def profile_generate(prompts_by_batch: dict[int, list[str]], max_tokens: int, engine: dict,
                     trace_dir: str) -> dict:
    """In an engine child: one profile per batch size, B requests running together."""
    from .startup import StartClock

    clock = StartClock()  # before vLLM's import: the engine's start includes it
    from vllm import SamplingParams

    from .engine import open_llm

    engine = dict(engine, worker_extension_cls="specmoe.runtime.kernelprof.ProfileExtension")
    with open_llm(engine, clock) as llm:
        startup_s = time.perf_counter() - clock.t0  # the engine's start (report.timing)
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        first = next(iter(prompts_by_batch.values()))
        llm.generate(first[:2], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
                     use_tqdm=False)  # warm-up outside any profile
        out = {}
        for batch, texts in prompts_by_batch.items():
            llm.collective_rpc("specmoe_profile_start")
            t0 = time.perf_counter()
            llm.generate(texts, params, use_tqdm=False)
            wall = time.perf_counter() - t0
            infos = [i for i in llm.collective_rpc(
                "specmoe_profile_stop", args=(f"{trace_dir}/b{batch}-rank{{rank}}.json.gz",)) if i]
            out[batch] = {"traces": infos, "generate_s": wall}
        return {**out, "startup_s": startup_s, "engine_start": clock.summary()}


def summarise(trace_path: str | Path, batch: int, window: int, device: str) -> dict:
    """Steady steps of one profile: B requests, each one window of `window` tokens (1 = decode),
    profiled on `device` (its worker's: profiling.steps_from_chrome_trace)."""
    with gzip.open(trace_path, "rt") if str(trace_path).endswith(".gz") else open(trace_path) as fh:
        trace = json.load(fh)
    steps = with_heads(profiling.steps_from_chrome_trace(trace, device, str(trace_path)))
    target = [s for s in steps if s.role == "target" and s.nreq == batch and s.nwin == batch
              and s.ntok == batch * window]
    # the first steps warm up (kept where there were few, they inflated the step time 3x)
    target = target[WARMUP_STEPS:]
    # on CUDA, a step none of whose kernels the profiler recorded has no device time
    missing = sum(not math.isfinite(s.time_us) for s in target)
    target = [s for s in target if math.isfinite(s.time_us)]
    if not target:
        shapes = sorted({(s.nreq, s.ntok, s.nwin) for s in steps if s.role == "target"})
        raise SpecmoeError(f"{trace_path}: no steady step with {batch} windows of {window} tokens "
                           f"after the {WARMUP_STEPS} warm-up steps"
                           + (f" ({missing} without recorded kernels)" if missing else "")
                           + f" (target step shapes nreq/ntok/nwin seen: {shapes[:12]})")
    if missing:
        log.warning("%s: %d steady step(s) without recorded kernels left out", trace_path,
                    missing)
    drafter_us, drafter_missing = drafter_per_step(steps, target)
    if drafter_missing:
        log.warning("%s: %d steady step(s) with a drafter range without recorded kernels left "
                    "out of the drafter time", trace_path, drafter_missing)
    return {"steps": target, "drafter_us_per_step": drafter_us,
            "wall_us": sum(s.time_us for s in target) / len(target),
            "steps_without_kernels": missing, "drafter_steps_without_kernels": drafter_missing}


def following(steps: list[profiling.Step], role: str) -> dict[int, list[profiling.Step]]:
    """The ranges of `role` that follow each target step, by the step's id: vLLM runs the
    target's head and drafts the next window after the target's forward in the same engine step,
    so each range belongs to the last target step that started before it."""
    targets = sorted((s for s in steps if s.role == "target"), key=lambda s: s.ts)
    own: dict[int, list[profiling.Step]] = {id(t): [] for t in targets}
    starts = np.array([t.ts for t in targets])
    for s in steps:
        i = int(np.searchsorted(starts, s.ts, side="right")) - 1 if s.role == role else -1
        if i >= 0:
            own[id(targets[i])].append(s)
    return own


def with_heads(steps: list[profiling.Step]) -> list[profiling.Step]:
    """The ranges with each target step's heads (its logits and sampling: profiling.HEAD) made
    part of it: their events, and their time on the host and the device added to its own (a
    step none of whose head kernels was recorded has no device time, as one without kernels)."""
    heads = following(steps, "head")
    out = []
    for s in steps:
        if s.role == "head":
            continue
        if heads.get(id(s)):
            hs = heads[id(s)]
            dev = [s.device_us, *(h.device_us for h in hs)]
            s = dataclasses.replace(
                s, dur_us=s.dur_us + sum(h.dur_us for h in hs),
                events=s.events + [e for h in hs for e in h.events],
                device_us=None if None in dev else sum(dev))
        out.append(s)
    return out


def drafter_per_step(steps: list[profiling.Step],
                     steady: list[profiling.Step]) -> tuple[float, int]:
    """Mean drafter time per steady target step, and the steady steps left out of it because one
    of their drafter ranges has no time (on CUDA, none of its kernels was recorded: the step's
    other ranges alone would undercount its drafting, silently; such a step is left out as a
    target step without kernels is, summarise). Each drafter range (a forward or its LM head)
    belongs to the target step it follows (following: vLLM drafts the next window after the
    verify pass of the same engine step), so a non-steady step in between keeps its own
    drafting; steady steps that drafted nothing (the last step of a request) are left out of the
    mean. Times are device times on CUDA (profiling.Step.time_us). NaN where no steady step has
    drafter time (a profile without drafting, or whose drafter kernels were not recorded): no
    drafter time is no measurement, not a free drafter (profile_summary refuses it)."""
    own = following(steps, "drafter")
    per, missing = [], 0
    for t in steady:
        times = [d.time_us for d in own.get(id(t), [])]
        if not all(math.isfinite(x) for x in times):
            missing += 1
        elif times:
            per.append(sum(times))
    return (float(np.mean(per)) if per else float("nan")), missing


def profile_model(target_dir, drafter_dir, k: int, batches: list[int], texts: list[str],
                  max_tokens: int, engine_opts: dict, trace_dir, engines: int,
                  log_path: str | None = None, timeout: float = 1800) -> dict:
    """Decode (no SD) and verify (SD, K drafts) profiles at each batch size on `engines` engine
    starts of each (profiling.engines, the configured count), decode and verify alternating
    (ABAB: a drift of the machine spreads over both), each pair on prompts of its own
    (profile_calls); each pair of starts compared, the values with their intervals over the
    starts."""
    from .engine import run_each

    calls = profile_calls(target_dir, drafter_dir, k, batches, texts, max_tokens, engine_opts,
                          trace_dir, engines)
    got = run_each(profile_generate, calls, log_path=log_path, timeout=timeout / 2)
    return profile_summary(got[0::2], got[1::2], k, batches)


def profile_calls(target_dir, drafter_dir, k: int, batches: list[int], texts: list[str],
                  max_tokens: int, engine_opts: dict, trace_dir, engines: int) -> list[tuple]:
    """profile_generate's arguments for each engine start: the decode engine (no SD) and the
    verify engine (SD, K drafts) in turn, `engines` times, their trace folders made under
    trace_dir (decode/e0, verify/e0, decode/e1, ...). Pair e (its decode and its verify start)
    profiles batch size B on prompts texts[e*B:(e+1)*B] of its own, the same in both of its
    starts: greedy decoding gives one prompt the same tokens and routing in every start, so
    starts on the same prompts would be one measurement repeated, not the independent units
    their intervals count; texts needs engines x the largest batch size distinct prompts (the
    first that many are used). A separate draft model's profile runs the
    model runner its sweeps run (engine_kwargs draft_model_series: V1 on CUDA, where vLLM
    picked Model Runner V2 for the profile and its sweeps ran V1), both of its engines."""
    from .engine import check_inputs, drafter_spec, engine_kwargs

    check_inputs(target_dir, drafter_dir, k)
    if engines < 2:
        raise InputError(f"profiling needs at least 2 engine starts of each kind, its intervals "
                         f"are over them (got {engines})")
    need = profiling.prompts_needed(engines, batches)
    if len(set(texts[:need])) < need:
        raise InputError(f"profiling {engines} engine starts at batch {max(batches)} needs {need} "
                         f"distinct prompts, one set per start (have {len(set(texts[:need]))})")
    trace_dir = Path(trace_dir)
    spec = drafter_spec(drafter_dir)
    draft_model_series = spec is not None and spec["method"] == "draft_model"
    calls = []
    for e in range(engines):
        for mode, drafter in (("decode", None), ("verify", drafter_dir)):
            d = trace_dir / mode / f"e{e}"
            d.mkdir(parents=True, exist_ok=True)
            engine = engine_kwargs(target_dir, drafter, k if drafter else None,
                                   max_num_seqs=max(batches),
                                   draft_model_series=draft_model_series, **engine_opts)
            calls.append(({b: texts[e * b:(e + 1) * b] for b in batches}, max_tokens, engine,
                          str(d)))
    return calls


def profile_summary(decodes: list[dict], verifies: list[dict], k: int,
                    batches: list[int]) -> dict:
    """The engines' profiles (profile_generate's results, one per engine start of each mode)
    compared at each batch size, each decode start with the verify start beside it
    (profiling.compare_starts): the classes' times per step (the starts' mean) and ratios, f,
    S_moe, S_dense, TE and the draft cost c, each the starts' geometric mean with its interval
    over them (profiling.over_starts) and each start's value; the grids and the costliest ops of
    the pooled steps."""
    if not decodes or len(decodes) != len(verifies):
        raise SpecmoeError(f"profiles of {len(decodes)} decode and {len(verifies)} verify engine "
                           "starts: each start of one needs one of the other")
    rows = []
    for b in batches:
        dec_infos = [d[b]["traces"][0] for d in decodes]
        ver_infos = [v[b]["traces"][0] for v in verifies]
        for i in dec_infos + ver_infos:
            if not profiling.eager(i["engine_mode"]):
                raise SpecmoeError(f"{i['path']}: profiled with {i['engine_mode']}: profiles "
                                   f"need eager mode ({profiling.EAGER}), whose kernels run "
                                   "inside its ranges")
        dec = [summarise(i["path"], b, 1, i["device"]) for i in dec_infos]
        ver = [summarise(i["path"], b, k + 1, i["device"]) for i in ver_infos]
        for i, v in zip(ver_infos, ver):
            if not math.isfinite(v["drafter_us_per_step"]):
                # no drafter ranges (forward_models found no drafter model) or none with
                # recorded kernels: the draft cost would be 0, silently, as the MoE share was
                raise SpecmoeError(f"{i['path']}: no drafter time after any steady verify step "
                                   f"at batch {b}: the drafter's forward was not labelled, or "
                                   "none of its kernels was recorded")
        dec_steps = [s for d in dec for s in d["steps"]]
        ver_steps = [s for v in ver for s in v["steps"]]
        sms = dec_infos[0].get("sm_count", 0)
        for i, (d, v) in enumerate(zip(dec, ver)):
            moe = [profiling.class_times(profiling.mean_events(x["steps"]))["moe"] for x in (d, v)]
            if not (moe[0] > 0 and moe[1] > 0):
                # an MoE target whose MoE layers the profile did not find (moe_blocks) or whose
                # kernels it did not name: its MoE share would be 0 and its ratio NaN, silently
                raise SpecmoeError(
                    f"batch {b}: no MoE time in the profile (engine start {i}: decode "
                    f"{moe[0]:.1f} us, verify {moe[1]:.1f} us per step): none of vLLM's MoE "
                    "layers was found in the target, or none of its kernels was recorded")
        # each (decode, verify) pair of engine starts compared on its own, the starts then
        # summarised (profiling.compare_starts): f, S_moe, S_dense, TE and c with their spread
        # over the starts, the independent unit (profiling.over_starts)
        cmp = profiling.compare_starts([(profiling.mean_events(d["steps"]),
                                         profiling.mean_events(v["steps"]))
                                        for d, v in zip(dec, ver)])
        cost = [v["drafter_us_per_step"] / d["wall_us"] for d, v in zip(dec, ver)]
        c, c_lo, c_hi = profiling.over_starts(cost)
        dec_wall = float(np.mean([d["wall_us"] for d in dec]))
        rows.append({"batch": b, "device": dec_infos[0]["device"], "gpu": dec_infos[0].get("gpu"),
                     "model_runner": {"decode": dec_infos[0]["model_runner"],
                                      "verify": ver_infos[0]["model_runner"]},
                     "engine_mode": {"decode": dec_infos[0]["engine_mode"],
                                     "verify": ver_infos[0]["engine_mode"]},
                     "sm_count": sms, "engines": len(dec), "decode_steps": len(dec_steps),
                     "verify_steps": len(ver_steps), "decode_wall_us": dec_wall,
                     # steady steps left out for want of recorded kernels (CUDA), all starts
                     "steps_without_kernels": sum(x["steps_without_kernels"] for x in dec + ver),
                     # steady verify steps left out of the drafter time (drafter_per_step)
                     "drafter_steps_without_kernels": sum(v["drafter_steps_without_kernels"]
                                                          for v in ver),
                     "verify_wall_us": float(np.mean([v["wall_us"] for v in ver])),
                     "drafter_us_per_step": float(np.mean([v["drafter_us_per_step"]
                                                           for v in ver])),
                     "draft_cost_profiled": c, "draft_cost_profiled_low": c_lo,
                     "draft_cost_profiled_high": c_hi, "draft_cost_profiled_per_start": cost,
                     **cmp,
                     "grids": {"decode": profiling.grid_stats(dec_steps, sms),
                               "verify": profiling.grid_stats(ver_steps, sms)},
                     "top_ops": top_ops(dec_steps, ver_steps)})
        log.info("batch %d: %d engine starts, %d decode / %d verify steps; MoE share %.3f "
                 "(of kernel time %.3f), S_moe %.2f [%.2f, %.2f], S_dense %.2f [%.2f, %.2f], "
                 "c %.3f [%.3f, %.3f], TE %.3f [%.3f, %.3f] (per start %s)", b, len(dec),
                 len(dec_steps), len(ver_steps), cmp["moe_time_share"],
                 cmp["moe_kernel_share"], cmp["moe_time_ratio"],
                 cmp["moe_time_ratio_low"], cmp["moe_time_ratio_high"], cmp["dense_time_ratio"],
                 cmp["dense_time_ratio_low"], cmp["dense_time_ratio_high"], c, c_lo, c_hi,
                 cmp["te_profiled"], cmp["te_profiled_low"], cmp["te_profiled_high"],
                 " / ".join(f"{x:.3f}" for x in cmp["te_profiled_per_start"]))
    runs = [*decodes, *verifies]
    return {"k": k, "batches": rows, "engines": len(decodes),
            "engine_startup_s": sum(r.get("startup_s", 0.0) for r in runs),
            "engine_start": {"decode": decodes[0].get("engine_start"),
                             "verify": verifies[0].get("engine_start")}}


def top_ops(decode: list[profiling.Step], verify: list[profiling.Step], n: int = 12) -> list[dict]:
    """The most expensive op/kernel names (decode + verify time per step) with their class, so that
    a name that falls into "other" by mistake is easy to see in the output."""
    d = {(e.name, e.in_moe): e.duration_us for e in profiling.mean_events(decode)}
    v = {(e.name, e.in_moe): e.duration_us for e in profiling.mean_events(verify)}
    names = sorted(set(d) | set(v), key=lambda x: -(d.get(x, 0.0) + v.get(x, 0.0)))[:n]
    return [{"name": x[0], "in_moe_block": x[1],
             "class": profiling.classify_event(profiling.Event(x[0], 0.0, in_moe=x[1])),
             "decode_us": d.get(x, 0.0), "verify_us": v.get(x, 0.0)} for x in names]
