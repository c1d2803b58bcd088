"""Routing capture inside vLLM: every verification window, rejected drafts included.

vLLM's own `enable_return_routed_experts` keeps only committed tokens, so it cannot answer
accepted-vs-rejected questions. Here a `vllm.general_plugins` entry point (registered in
pyproject.toml, inert unless SPECMOE_CAPTURE=1) patches the model runner in every worker:

- `load_model`: after the target is loaded, and so before any compile or CUDA-graph capture, bind our
  recorder to the target's MoE routers with vLLM's `bind_routed_experts_capturer`. Router top-k goes
  through `BaseRouter._select_experts`, which calls `capture_fn(topk_ids)` with logical expert ids;
  the recorder writes them into a static device buffer (graph-safe). The drafter is not bound. The
  recorder keeps the ids of the layers bound (`moe_layer_ids`: dense layers, such as DeepSeek's and
  GLM's first_k_dense_replace, have no router and are not bound); assembly refuses a capture whose
  routers reported in other layers than these (a bound router that never fired would otherwise
  leave its layer out of the trace, and every per-layer statistic would be over another layer set).
- `execute_model`: before the step, read the scheduled tokens and drafts per request and mark the
  step's rows of the buffer unfilled (-1: a router that does not report shows, never an earlier
  step's routing); after the forward, copy the routing rows and the input ids of this step to
  host memory once.
- `sample_tokens`: the step's layout is bound to the output object it returns, and recorded when
  that output gives its tokens (at once, or at `get_output()` under async scheduling and for every
  Model Runner V2 step): accepted drafts = len(sampled_token_ids) - 1 per request; the step's
  windows are then complete and kept in host memory (numpy arrays, no per-token Python objects).
  Steps are never paired through shared state: with async scheduling (on by default on CUDA)
  EngineCore's batch queue runs step n + 1 before reading step n's tokens, and with TP > 1 a
  worker's output thread reads them while the worker runs on. An output nobody reads (V2's
  warm-up) records nothing, in rows mode (teacher forcing) too.
- The driver calls `collective_rpc("specmoe_flush")` (a worker extension, so nothing is pickled)
  after generation: rank 0 writes its windows as an .npz shard and returns the path; `assemble`
  turns shards plus the request outputs into a routing trace.

Which model runner a worker has (V1, or V2 in vllm/v1/worker/gpu/) is read from the runner's class.
Rows of one step are laid out per request in V1's `input_batch.req_ids` order, or as V2's step
InputBatch says; a decode window of a request with n drafts is its 1 + n scheduled rows: position 0
is the last committed token, 1..n the drafts. Prefill chunks are not windows and are skipped. The
trace's metadata names the runner and whether async scheduling was on; captured acceptance that
differs from vLLM's own per-step counts stops the capture, and so do windows whose committed
tokens are not the request's output and a preempted request (its resumption commits a token
outside any window). Capture records with tensor
parallelism only: pipeline, data or context parallelism and adaptive verification are refused
(check_layout), before the engine starts and again in the worker.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import tempfile
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecmoeError
from ..kinds import ONE_RANK_SIZES  # the configuration refuses them too

if TYPE_CHECKING:
    from ..routing.trace import Trace

log = logging.getLogger("specmoe")
ENV = "SPECMOE_CAPTURE"
ENV_DIR = "SPECMOE_CAPTURE_DIR"
# "windows" (default): SD verification windows; "rows": every scheduled row of every step, for the
# teacher-forced reading of given token sequences (teacher_forced_routing)
ENV_MODE = "SPECMOE_CAPTURE_MODE"
# vLLM releases whose model-runner internals this module was written against and tested with.
SUPPORTED_VLLM = ("0.32",)


def vllm_version() -> str:
    """vLLM's version (runtime.engine's, looked up here so that tests can stand in for it)."""
    from .engine import vllm_version as version

    return version()


def check_version() -> None:
    v = vllm_version()
    if not any(v == s or v.startswith(s + ".") for s in SUPPORTED_VLLM):
        raise SpecmoeError(f"routing capture supports vLLM {', '.join(SUPPORTED_VLLM)}.x, found {v}: "
                           "the model-runner hooks would be silently wrong on other versions")


def check_layout(sizes: dict, adaptive_verification: bool) -> None:
    """Refuse a layout whose recorded rows would not be the step's: sizes {name: value} of
    ONE_RANK_SIZES; adaptive verification (vLLM's varlen decode) sizes windows other than as the
    scheduler's drafts say. vLLM's routed-experts capture refuses the same."""
    bad = [f"{k} = {sizes[k]}" for k in ONE_RANK_SIZES if int(sizes[k]) > 1]
    if adaptive_verification:
        bad.append("enable_adaptive_verification")
    if bad:
        raise SpecmoeError(f"routing capture cannot record under {', '.join(bad)}: its rows would "
                           "not be the step's tokens (capture runs with tensor parallelism only)")


def check_engine_layout(engine: dict) -> None:
    """check_layout on engine arguments, before the engine starts (vLLM's defaults where unset)."""
    spec = engine.get("speculative_config") or {}
    check_layout({k: engine.get(k) or 1 for k in ONE_RANK_SIZES},
                 bool(spec.get("enable_adaptive_verification")))


# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py, also its CPU subclass); the rest are V1.
V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"


def runner_kind(runner) -> str:
    """'v2' or 'v1', from the runner's class: never from its state at some step (V2's warm-up
    ends with a step that leaves no execute_model_state behind)."""
    return "v2" if any(c.__module__ == V2_RUNNER_MODULE for c in type(runner).__mro__) else "v1"


def _host(t) -> np.ndarray:
    """A host copy that the next step cannot overwrite: on the CPU the static buffers are host
    memory already, and .cpu() would return them as they are (a view), while under async
    scheduling the next step's forward runs before this step's tokens are sampled."""
    return t.to("cpu", copy=True).numpy()


class Recorder:
    """Lives in a worker: a static routing buffer plus the windows recorded so far.

    A step's layout goes from its execute_model to its own sample_tokens (adjacent calls in the
    worker) and is then bound to the output object that sample_tokens returns; nothing is shared
    between steps. Under async scheduling EngineCore's batch queue runs step n + 1 before it asks
    for step n's tokens, and with TP > 1 the worker's output thread asks for them
    (get_output): each output still finds its own step's layout.
    """

    def __init__(self, runner) -> None:
        import torch

        vllm_config = runner.vllm_config
        spec = vllm_config.speculative_config
        check_layout({k: getattr(vllm_config.parallel_config, k) for k in ONE_RANK_SIZES},
                     spec is not None and spec.enable_adaptive_verification)
        cfg = runner.model_config
        self.num_layers = cfg.get_total_num_hidden_layers()
        self.top_k = cfg.get_num_experts_per_tok()
        self.num_experts = cfg.get_num_experts()
        self.buffer = torch.full((runner.max_num_tokens, self.num_layers, self.top_k), -1,
                                 dtype=torch.int16 if self.num_experts < 2**15 else torch.int32,
                                 device=runner.device)
        self.runner = runner_kind(runner)
        self.async_scheduling = bool(vllm_config.scheduler_config.async_scheduling)
        self.layers_seen: set[int] = set()
        self.bound_layers: list[int] | None = None  # set by attach
        self.pending: dict | None = None  # a step between its execute_model and sample_tokens
        self.chunks: list[dict] = []
        self.step_of: dict[str, int] = {}
        self.preempted: list[str] = []  # a request per resumption after a preemption
        self.capture_s = 0.0
        self.lock = threading.Lock()  # sampled tokens may arrive on the output thread
        self.mode = os.environ.get(ENV_MODE, "windows")

    def attach(self, model, bind) -> None:
        """Bind the recorder to the model's MoE routers (bind: vLLM's bind_routed_experts_capturer)
        and keep the ids of the layers bound: the layers whose routing the capture must hold."""
        bind(model, self)
        self.bound_layers = moe_layer_ids(model)

    def capture(self, layer_id: int, topk_ids) -> None:  # called inside the forward
        self.layers_seen.add(layer_id)
        self.buffer[: topk_ids.shape[0], layer_id] = topk_ids

    # -- per step -------------------------------------------------------------------------------
    def before_step(self, scheduler_output) -> dict:
        """Before the step's forward (execute_model, outside any CUDA graph, on its stream): the
        slots of its rows are unfilled (-1) until their routers report. vLLM's profiling run and
        every earlier step wrote them: a layer whose router does not report in this step would
        leave an earlier step's routing in place, which no check could tell from this step's."""
        total = scheduler_output.total_num_scheduled_tokens
        self.buffer[:total].fill_(-1)
        self.preempted += resumed_requests(scheduler_output)
        return {"total": total,
                "num_scheduled": dict(scheduler_output.num_scheduled_tokens),
                "drafts": {r: len(t) for r, t in
                           scheduler_output.scheduled_spec_decode_tokens.items()}}

    def after_forward(self, runner, step: dict) -> dict | None:
        """The step's windows with host copies of their rows; None for a step without any (no
        tokens, no forward, only prefill chunks)."""
        if not step["total"]:
            return None
        t0 = time.perf_counter()
        if self.mode == "rows":  # teacher forcing: every row, kept when the output is read
            step = self._rows(runner, step)
            self._took(t0)
            return step
        if self.runner == "v1":
            step = self._after_forward_v1(runner, step)
        else:
            state = runner.execute_model_state  # set by this step's forward, cleared by sampling
            step = None if state is None else self._after_forward_v2(state.input_batch, step)
        self._took(t0)
        return step

    def _after_forward_v1(self, runner, step: dict) -> dict | None:
        """V1: rows in runner.input_batch.req_ids order, the scheduler's counts per request."""
        sched, drafts = step["num_scheduled"], step["drafts"]
        req_ids, starts, n_drafts = [], [], []
        start = 0
        for r in runner.input_batch.req_ids:
            n = sched.get(r, 0)
            d = drafts.get(r, 0)
            # a decode window: 1 + drafts rows of a request that has produced output already
            if n == 1 + d and (d or len(runner.requests[r].output_token_ids) > 0):
                req_ids.append(r)
                starts.append(start)
                n_drafts.append(d)
            start += n
        if not req_ids:
            return None
        return dict(step, req_ids=req_ids, starts=starts, n_drafts=n_drafts,
                    routing=_host(self.buffer[:start]),
                    input_ids=_host(runner.input_ids.gpu[:start]))

    def _after_forward_v2(self, batch, step: dict) -> dict | None:
        """Model Runner V2: the step's InputBatch carries the layout (vLLM 0.32's
        vllm/v1/worker/gpu/input_batch.py)."""
        counts = np.asarray(batch.num_scheduled_tokens[: batch.num_reqs], dtype=np.int64)
        drafts = (np.zeros_like(counts) if batch.num_draft_tokens_per_req is None else
                  np.asarray(batch.num_draft_tokens_per_req[: batch.num_reqs], dtype=np.int64))
        starts = np.asarray(batch.query_start_loc_np[: batch.num_reqs], dtype=np.int64)
        decoding = ~np.asarray(batch.is_prefilling_np[: batch.num_reqs], dtype=bool)
        ok = np.flatnonzero(decoding & (counts == 1 + drafts))
        if not ok.size:
            return None
        total = int(batch.num_tokens)
        return dict(step, req_ids=[batch.req_ids[i] for i in ok], starts=starts[ok].tolist(),
                    n_drafts=drafts[ok].tolist(), routing=_host(self.buffer[:total]),
                    input_ids=_host(batch.input_ids[:total]))

    def _rows(self, runner, step: dict) -> dict | None:
        """Rows mode: the routing and input ids of every row of the step, with the request each
        row belongs to (rows laid out per request as in _after_forward_v1/_v2), as a step that
        after_sample keeps: a step whose output nobody reads (V2's warm-up) is no reading."""
        if self.runner == "v1":
            sched = step["num_scheduled"]
            layout = [(r, sched.get(r, 0)) for r in runner.input_batch.req_ids]
            total = sum(n for _, n in layout)
            ids = runner.input_ids.gpu[:total]
        else:
            state = runner.execute_model_state
            if state is None:
                return None
            batch = state.input_batch
            counts = np.asarray(batch.num_scheduled_tokens[: batch.num_reqs], dtype=np.int64)
            layout = list(zip(batch.req_ids[: batch.num_reqs], counts.tolist()))
            total = int(batch.num_tokens)
            ids = batch.input_ids[:total]
        layout = [(r, int(n)) for r, n in layout if n]
        if not layout:
            return None
        return {"rows": {"experts": _host(self.buffer[:total]),
                         "token_id": _host(ids).astype(np.int32), "rows": layout}}

    def bind(self, step: dict | None, out):
        """Tie a step's windows to the output that carries its sampled tokens. An async output
        (async scheduling, and every V2 step) has them when the engine calls get_output; one the
        engine never asks for (V2's warm-up) records nothing."""
        if step is None or out is None:
            return out
        if hasattr(out, "get_output"):
            get = out.get_output

            def get_output():
                nonlocal step
                res = get()
                if step is not None:  # vLLM asks once; a second call must not record twice
                    self.after_sample(step, res)
                    step = None
                return res

            out.get_output = get_output
        elif hasattr(out, "req_id_to_index"):
            self.after_sample(step, out)
        return out

    def after_sample(self, p: dict, output) -> None:
        with self.lock:
            if "rows" in p:  # rows mode: the step's every row
                self.chunks.append(p["rows"])
                return
            t0 = time.perf_counter()
            index, sampled = output.req_id_to_index, output.sampled_token_ids
            keep, meta = [], []
            for r, start, d in zip(p["req_ids"], p["starts"], p["n_drafts"]):
                i = index.get(r)
                if i is None:
                    continue
                step = self.step_of.get(r, 0)
                self.step_of[r] = step + 1
                keep.append((start, d))
                meta.append((r, step, d, max(len(sampled[i]) - 1, 0) if d else 0))
            if keep:
                idx = np.concatenate([np.arange(s, s + 1 + d) for s, d in keep])
                self.chunks.append({"experts": p["routing"][idx],
                                    "token_id": p["input_ids"][idx].astype(np.int32),
                                    "windows": meta})
            self.capture_s += time.perf_counter() - t0

    def _took(self, t0: float) -> None:
        with self.lock:
            self.capture_s += time.perf_counter() - t0

    def flush(self, out_dir: str) -> str | None:
        """Write the recorded windows as one .npz shard; returns its path (None if empty)."""
        with self.lock:
            chunks, self.chunks = self.chunks, []
        if not chunks:
            return None
        if self.bound_layers is None:
            raise SpecmoeError("routing capture: the recorder was never bound to the target's MoE "
                               "routers (Recorder.attach): which layers it must hold is unknown")
        layers = sorted(self.layers_seen)
        bound = np.array(self.bound_layers, dtype=np.int64)
        if self.mode == "rows":
            fd, path = tempfile.mkstemp(prefix="rows-", suffix=".npz", dir=out_dir)
            os.close(fd)
            np.savez(path, experts=np.concatenate([c["experts"] for c in chunks])[:, layers],
                     token_id=np.concatenate([c["token_id"] for c in chunks]),
                     req=np.array([r for c in chunks for r, n in c["rows"] for _ in range(n)]),
                     layers=np.array(layers), bound_layers=bound, num_experts=self.num_experts)
            return path
        experts = np.concatenate([c["experts"] for c in chunks])[:, layers]
        token_id = np.concatenate([c["token_id"] for c in chunks])
        metas = [m for c in chunks for m in c["windows"]]
        req = np.array([m[0] for m in metas])
        step = np.array([m[1] for m in metas], np.int32)
        n_drafts = np.array([m[2] for m in metas], np.int8)
        accepted = np.array([m[3] for m in metas], np.int8)
        fd, path = tempfile.mkstemp(prefix="capture-", suffix=".npz", dir=out_dir)
        os.close(fd)
        np.savez(path, experts=experts, token_id=token_id, req=req, step=step, n_drafts=n_drafts,
                 accepted=accepted, layers=np.array(layers), bound_layers=bound,
                 num_experts=self.num_experts,
                 capture_s=self.capture_s, runner=self.runner,
                 async_scheduling=self.async_scheduling,
                 preempted=np.array(self.preempted, dtype=str))
        return path


def resumed_requests(scheduler_output) -> list[str]:
    """The requests a step resumes after a preemption with output committed: vLLM recomputes their
    tokens in a prefill, which commits a token outside any window. The V1 runner gets them in
    scheduled_cached_reqs.resumed_req_ids; Model Runner V2 as new requests whose prefill tokens
    hold their output too (vLLM 0.32's Scheduler.schedule)."""
    cached = scheduler_output.scheduled_cached_reqs
    outputs = dict(zip(cached.req_ids, cached.num_output_tokens))
    return ([r for r in cached.req_ids if r in cached.resumed_req_ids and outputs[r] > 0]
            + [n.req_id for n in scheduler_output.scheduled_new_reqs
               if n.prefill_token_ids is not None and len(n.prefill_token_ids) > n.prompt_len])


def _install() -> None:
    from vllm.model_executor.layers.fused_moe.routed_experts_capturer import (
        bind_routed_experts_capturer,
    )

    for cls, step_methods in patch_targets():
        if cls.__dict__.get("_specmoe_patched"):  # not inherited: each class is patched once
            continue
        if "load_model" in cls.__dict__:
            cls.load_model = _wrap_load(cls.__dict__["load_model"], bind_routed_experts_capturer)
        if step_methods:
            cls.execute_model = _wrap_execute(cls.execute_model)
            cls.sample_tokens = _wrap_sample(cls.sample_tokens)
        cls._specmoe_patched = True


def patch_targets() -> list[tuple[type, bool]]:
    """The model-runner classes to patch, each with whether its execute_model/sample_tokens are
    wrapped (the bases; subclasses inherit the wrapped methods)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    targets = [(GPUModelRunner, True)]
    for module, name, base in (
        ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", False),
        (V2_RUNNER_MODULE, "GPUModelRunner", True),  # Model Runner V2
    ):
        try:
            targets.append((getattr(__import__(module, fromlist=[name]), name), base))
        except Exception:  # noqa: BLE001 - V2 imports Triton-only code on some platforms
            continue
    return targets


def moe_layer_ids(model) -> list[int]:
    """The ids of the layers whose routers vLLM 0.32's bind_routed_experts_capturer binds: those of
    its capture sources and MoE runners (it binds every one of them, or raises). A dense layer has
    neither."""
    from vllm.model_executor.layers.fused_moe.routed_experts_capturer import (
        RoutedExpertsCaptureSource,
    )
    from vllm.model_executor.layers.fused_moe.layer import MoERunner

    return sorted({int(m.layer_id) for m in model.modules()
                   if isinstance(m, (RoutedExpertsCaptureSource, MoERunner))})


def shard_layers(shards: list) -> tuple[list[int], list[int]]:
    """The layers the shards' routing holds and the MoE layers the recorder was bound to, which
    must be the same: a bound router that never reported would leave its layer out of the trace
    (and every per-layer statistic would be over another layer set), one that reported unbound is
    not the target's."""
    layers = bound = None
    for s in shards:
        if "bound_layers" not in s.files:
            raise SpecmoeError("routing capture: a shard does not record the MoE layers the "
                               "recorder was bound to: its layers cannot be checked")
        seen, want = s["layers"].tolist(), s["bound_layers"].tolist()
        if seen != want:
            missing = sorted(set(want) - set(seen))
            extra = sorted(set(seen) - set(want))
            raise SpecmoeError(
                f"routing capture: the recorder was bound to MoE layers {want}, the routers "
                f"reported in layers {seen}: missing {missing}"
                + (f", not bound {extra}" if extra else "")
                + ": a bound layer's router never ran through the hooked forward")
        if layers is not None and (seen, want) != (layers, bound):
            raise SpecmoeError(f"routing capture: one shard holds layers {layers}, another "
                               f"{seen}: their rows are not of one model")
        layers, bound = seen, want
    return layers, bound


def _wrap_load(orig, bind):
    @functools.wraps(orig)
    def load_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        self._specmoe = Recorder(self)
        self._specmoe.attach(self.model, bind)
        log.info("specmoe: routing capture bound to %s, MoE layers %s (model runner %s)",
                 type(self.model).__name__, self._specmoe.bound_layers, self._specmoe.runner)
        return out

    return load_model


def _wrap_execute(orig):
    @functools.wraps(orig)
    def execute_model(self, scheduler_output, *args, **kwargs):
        rec = getattr(self, "_specmoe", None)
        if rec is None or kwargs.get("dummy_run"):  # V2's dummy runs (profiling, DP) are no steps
            return orig(self, scheduler_output, *args, **kwargs)
        step = rec.before_step(scheduler_output)
        rec.pending = None
        out = orig(self, scheduler_output, *args, **kwargs)
        step = rec.after_forward(self, step)
        if out is not None and (hasattr(out, "get_output") or hasattr(out, "req_id_to_index")):
            return rec.bind(step, out)  # sampled (or nothing to sample) within execute_model
        rec.pending = step
        return out

    return execute_model


def _wrap_sample(orig):
    @functools.wraps(orig)
    def sample_tokens(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        rec = getattr(self, "_specmoe", None)
        if rec is None:
            return out
        step, rec.pending = rec.pending, None
        return rec.bind(step, out)

    return sample_tokens


def register() -> None:
    """The vllm.general_plugins entry point: patch the runners when SPECMOE_CAPTURE=1."""
    if os.environ.get(ENV) != "1":
        return
    check_version()
    _install()


class CaptureExtension:
    """Mixed into vLLM's worker class (engine argument worker_extension_cls)."""

    def specmoe_flush(self) -> str | None:
        """Write this worker's shard (rank 0 of each tensor-parallel group only)."""
        rec = getattr(getattr(self, "model_runner", None), "_specmoe", None)
        if rec is None:
            raise SpecmoeError("routing capture is not installed in this worker (SPECMOE_CAPTURE=1 "
                               "must be set before the engine starts)")
        if getattr(self, "rank", 0) % max(1, self.parallel_config.tensor_parallel_size):
            return None
        return rec.flush(os.environ[ENV_DIR])


# --- driver side ----------------------------------------------------------------------------------

def capture_generate(prompts: list[str], max_tokens: int, engine: dict, shard_dir: str,
                     repetition_penalty: float = 1.0, clock=None) -> dict:
    """Greedy SD generation with capture on; adds shard paths and per-request outputs. clock:
    as engine.generate's."""
    from .engine import generate

    check_engine_layout(engine)
    with capture_environment(shard_dir, "windows"):
        check_version()
        engine = dict(engine, worker_extension_cls="specmoe.runtime.capture.CaptureExtension",
                      per_request_spec_decode_metrics="detailed")
        return generate(prompts, max_tokens, engine, collect=_collect,
                        repetition_penalty=repetition_penalty, clock=clock)


@contextlib.contextmanager
def capture_environment(shard_dir: str, mode: str):
    """Capture on for the engines started inside (ENV, ENV_DIR and ENV_MODE are inherited by
    the engine's processes, where the plugin reads them), and the process's environment back as
    it was after, also when the engine fails: left set, every later engine of the process and of
    its children (a test run's Snakemake jobs, a sweep's `vllm serve`) loaded the recorder, and
    one of a dense drafter stopped with vLLM's "No supported MoE router found"."""
    from .engine import scoped_environ

    with scoped_environ({ENV: "1", ENV_DIR: shard_dir, ENV_MODE: mode}):
        yield


def _collect(llm, outs) -> dict:
    shards = [p for p in llm.collective_rpc("specmoe_flush") if p]
    requests = []
    for o in outs:
        c = o.outputs[0]
        m = c.spec_decode_metrics
        requests.append({"request_id": o.request_id, "token_ids": list(c.token_ids),
                         "prompt_token_ids": list(o.prompt_token_ids),
                         "per_step_accepted": list(m.per_step_accepted) if m else [],
                         "per_step_drafted": list(m.per_step_drafted) if m else []})
    return {"shards": shards, "requests": requests}


def teacher_forced_routing(sequences: list[list[int]], engine: dict, shard_dir: str) -> dict:
    """Prefill each token sequence (one greedy token is sampled and dropped) with capture in rows
    mode: the routing of every position of every sequence, as the engine computes it when it reads
    exactly these tokens. The matched untrained control reads its target's tokens this way
    (specmoe.stages.traces.control_capture_stage); rows_of_sequences turns the result into
    per-sequence routing."""
    from .startup import StartClock

    clock = StartClock()  # before vLLM's import: the engine's start includes it (report.timing)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from .engine import open_llm

    check_engine_layout(engine)
    # rows mode for this engine only: a later capture in this process records windows
    with capture_environment(shard_dir, "rows"):
        check_version()
        engine = dict(engine, worker_extension_cls="specmoe.runtime.capture.CaptureExtension")
        with open_llm(engine, clock) as llm:
            t0 = time.perf_counter()
            outs = llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in s])
                                 for s in sequences],
                                SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=False)
            took = time.perf_counter() - t0
            shards = [p for p in llm.collective_rpc("specmoe_flush") if p]
    # the engine's start (vLLM's import to ready), as capture_generate's result records it
    return {"shards": shards, "request_ids": [o.request_id for o in outs], "generate_s": took,
            "startup_s": t0 - clock.t0, "engine_start": clock.summary()}


def rows_of_sequences(result: dict, sequences: list) -> tuple[list[np.ndarray], dict]:
    """Per sequence its routing [positions, layers, k] from teacher_forced_routing's shards, and
    the shards' layers and number of experts. Every position of every sequence must have been
    read exactly once, in order, with the sequence's own token: anything else stops the capture
    (a row missing, read twice or of another token would pair routing with the wrong input)."""
    shards = [np.load(p) for p in result["shards"]]
    if not shards:
        raise SpecmoeError("teacher-forced capture recorded no rows")
    layers, bound = shard_layers(shards)
    experts = np.concatenate([s["experts"] for s in shards])
    token_id = np.concatenate([s["token_id"] for s in shards])
    req = np.concatenate([s["req"] for s in shards])
    index = {r: i for i, r in enumerate(result["request_ids"])}
    names, inverse = np.unique(req, return_inverse=True)
    seq_of = np.array([_request_index(str(r), index) for r in names.tolist()])[inverse]
    order = np.argsort(seq_of, kind="stable")  # rows of one sequence stay in reading order
    bounds = np.searchsorted(seq_of[order], np.arange(len(sequences) + 1))
    out = []
    for i, seq in enumerate(sequences):
        rows = order[bounds[i]:bounds[i + 1]]
        want = np.asarray(seq, dtype=np.int64)
        if rows.size != want.size or not np.array_equal(token_id[rows].astype(np.int64), want):
            raise SpecmoeError(
                f"teacher-forced capture: sequence {i} ({want.size} tokens) was read as "
                f"{rows.size} rows with other tokens or in another order: its routing would not "
                "be of its own input")
        out.append(experts[rows].astype(np.int64))
    unfilled = [i for i, e in enumerate(out) if (e < 0).any()]
    if unfilled:
        raise SpecmoeError(f"teacher-forced capture: unfilled routing slots in sequence "
                           f"{unfilled[0]} ({len(unfilled)} sequence(s) in all): the recorder "
                           "missed a forward pass")
    return out, {"layers": layers, "bound_layers": bound,
                 "num_experts": int(shards[0]["num_experts"])}


def _request_index(internal: str, index: dict) -> int:
    """The submitted request an engine-internal id belongs to (internal ids are the external id
    plus a suffix)."""
    if internal in index:
        return index[internal]
    base = internal.rsplit("-", 1)[0]
    if base not in index:
        raise SpecmoeError(f"captured request {internal} matches no submitted request")
    return index[base]


def assemble(result: dict, prompts: list, run: dict, k_draft: int) -> "Trace":
    """Shards + request outputs -> a routing trace sorted by (request, step, position).

    prompts: the Prompt rows in the order they were submitted (request i is prompts[i]).
    """
    from ..routing.trace import Trace, status_for

    shards = [np.load(p) for p in result["shards"]]
    if not shards:
        raise SpecmoeError("capture recorded no verification windows")
    layers, bound = shard_layers(shards)
    cat = lambda key: np.concatenate([s[key] for s in shards])  # noqa: E731
    experts, token_id = cat("experts"), cat("token_id")
    req, step, n_drafts, accepted = cat("req"), cat("step"), cat("n_drafts"), cat("accepted")
    ext_index = {r["request_id"]: i for i, r in enumerate(result["requests"])}
    request_index = functools.partial(_request_index, index=ext_index)

    preempted = cat("preempted")
    if preempted.size:
        i = request_index(str(preempted[0]))
        raise SpecmoeError(
            f"routing capture: request {i} ({result['requests'][i]['request_id']}) was preempted "
            f"during capture ({preempted.size} preemption(s) in all): its routing has a gap; raise "
            "the KV cache (kv_cache_mib on a CPU, gpu.memory_utilization on a GPU)")
    request = np.array([request_index(r) for r in req.tolist()], np.int32)
    lengths = n_drafts.astype(np.int64) + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    live = _inside_requests(result["requests"], request, step, accepted)
    order = np.lexsort((step, request))
    order = order[live[order]]
    if not order.size:
        raise SpecmoeError(
            f"routing capture: all {live.size} captured window(s) came after their request's last "
            "output token (async scheduling runs a step past a request's end; max_tokens 1 ends "
            "it at its prefill's token): no verification window to record")
    rows = np.concatenate([np.arange(starts[w], starts[w] + lengths[w]) for w in order])
    win = np.repeat(order, lengths[order])
    position = np.concatenate([np.arange(lengths[w]) for w in order]).astype(np.int8)
    acc_rows = accepted[win]
    n = rows.size
    columns = {
        "request": request[win],
        "prompt_id": np.array([prompts[i].prompt_id for i in request[win]]),
        "category": np.array([prompts[i].category for i in request[win]]),
        "model": np.full(n, run["model"]), "drafter": np.full(n, run["drafter"]),
        "dataset": np.full(n, run["dataset"]),
        "k_draft": np.full(n, k_draft, np.int8),
        "step": step[win].astype(np.int32),
        "position": position,
        "n_drafts": n_drafts[win].astype(np.int8),
        "accepted": acc_rows.astype(np.int8),
        "status": status_for(position, acc_rows),
        "token_id": token_id[rows].astype(np.int32),
    }
    checked = _crosscheck(result["requests"], request[live], step[live], n_drafts[live],
                          accepted[live])
    _check_committed(result["requests"], columns)
    meta = {"run": run, "slice_datasets": {p.category: p.dataset for p in prompts},
            # what each request read before its first window: the matched control reads it too
            "prompt_token_ids": [None if r.get("prompt_token_ids") is None else
                                 list(map(int, r["prompt_token_ids"])) for r in result["requests"]],
            "capture": {
        "windows": int(order.size), "short_windows": int((n_drafts[live] < k_draft).sum()),
        "windows_after_finish": int((~live).sum()),
        # the layers routed (every MoE layer the recorder was bound to, shard_layers)
        "layers": layers, "bound_layers": bound,
        "capture_s": float(sum(s["capture_s"] for s in shards)),
        # each verify step's accepted and drafted counts equal vLLM's (_crosscheck)
        "accepted_crosscheck": {"steps": checked, "mismatches": 0},
        # which model runner recorded, and whether async scheduling was on (None: not in the shard)
        **{key: (kind(shards[0][key]) if key in shards[0].files else None)
           for key, kind in (("runner", str), ("async_scheduling", bool))},
        "generate_s": result.get("generate_s"),
        # the engine's start (vLLM's import to ready; specmoe.report.timing splits it off)
        "startup_s": result.get("startup_s")}}
    routed = experts[rows].astype(np.int64)
    unfilled = np.argwhere(routed < 0)
    if unfilled.size:  # the recorder missed a forward pass for these rows: never expert 0
        r, layer = int(unfilled[0][0]), int(unfilled[0][1])
        raise SpecmoeError(
            f"routing capture: unfilled routing slot at request {int(columns['request'][r])}, "
            f"step {int(columns['step'][r])}, position {int(columns['position'][r])}, layer "
            f"{int(shards[0]['layers'][layer])} ({len(unfilled)} slot(s) in all): the recorder "
            "missed a forward pass of the target")
    return Trace(experts=routed, columns=columns,
                 num_experts=int(shards[0]["num_experts"]), k_draft=k_draft, meta=meta)


def _inside_requests(requests, request, step, accepted) -> np.ndarray:
    """Which windows lie inside their request's generation: those before which fewer tokens were
    committed (the prefill's one, then accepted + 1 per window) than the request's output holds.
    Under async scheduling the engine schedules a request's next step before it has the tokens of
    the step that finishes it; vLLM drops that step's tokens, and its window verifies nothing."""
    inside = np.ones(request.size, dtype=bool)
    for i, r in enumerate(requests):
        w = np.flatnonzero(request == i)
        w = w[np.argsort(step[w], kind="stable")]
        committed = 1 + np.concatenate([[0], np.cumsum(accepted[w].astype(np.int64) + 1)[:-1]])
        inside[w] = committed < len(r["token_ids"])
    return inside


def _check_committed(requests, columns: dict) -> None:
    """The tokens a request's windows commit, in step order (position 0, the last committed token,
    then the accepted drafts), must be its output: the first is the token its prefill sampled, and
    each window's bonus token is the next window's position 0. The output may end inside the last
    window (max_tokens) or hold one token more (the last window's bonus), nothing else: a row laid
    out off its step reads another token (the accepted counts alone would not show it)."""
    committed = columns["position"] <= columns["accepted"]
    for i, r in enumerate(requests):
        rows = np.flatnonzero(committed & (columns["request"] == i))
        ours = columns["token_id"][rows].astype(np.int64)
        out = np.asarray(r["token_ids"], dtype=np.int64)
        n = min(ours.size, out.size)
        name = f"request {i} ({r.get('request_id', i)})"
        bad = np.flatnonzero(ours[:n] != out[:n])
        if bad.size:
            j, row = int(bad[0]), int(rows[bad[0]])
            raise SpecmoeError(
                f"routing capture: {name}, step {int(columns['step'][row])}, position "
                f"{int(columns['position'][row])}: the window reads token {ours[j]}, the engine "
                f"committed {out[j]} as output token {j}: rows and tokens are not of one step")
        if out.size > ours.size + 1:
            raise SpecmoeError(
                f"routing capture: {name}: its windows commit {ours.size + 1} of its {out.size} "
                "output tokens: the others were committed outside any captured window")


def _crosscheck(requests, request, step, n_drafts, accepted) -> int:
    """Our windows against vLLM's own count of each request's verify steps, in order: its
    per_step_accepted (accepted drafts) and per_step_drafted (drafts verified); the first
    difference stops the capture. Returns the number of steps checked.

    vLLM's scheduler (Scheduler.update_from_output) counts a step of a request that had drafts
    scheduled (scheduled_spec_decode_tokens, the dict whose lengths the recorder keeps as
    n_drafts; under async scheduling its entries are placeholders, one per draft, counted alike)
    and sampled tokens, unless the request had finished: the windows checked are those inside
    their request (assemble's live ones) that had drafts. Its drafted count leaves out drafts a
    grammar invalidated (num_invalid_spec_tokens; structured output, which a capture does not
    ask for); the window still verifies them, and a difference stops the capture here."""
    checked = 0
    for i, r in enumerate(requests):
        ref = list(r.get("per_step_accepted") or [])
        ref_drafted = list(r.get("per_step_drafted") or [])
        name = f"request {i} ({r.get('request_id', i)})"
        if len(ref_drafted) != len(ref):
            raise SpecmoeError(f"routing capture: {name}: vLLM's per-step counts disagree: "
                               f"{len(ref)} steps' accepted drafts (per_step_accepted), "
                               f"{len(ref_drafted)} steps' drafts (per_step_drafted)")
        m = (request == i) & (n_drafts > 0)
        order = np.argsort(step[m], kind="stable")
        ours, steps = accepted[m][order].tolist(), step[m][order].tolist()
        drafted = n_drafts[m][order].tolist()
        for j, (s, a, b, d, e) in enumerate(zip(steps, ours, ref, drafted, ref_drafted)):
            if d != e:
                raise SpecmoeError(
                    f"routing capture: {name}, step {s} (verify step {j}): a window of {d} "
                    f"drafts captured, vLLM counted {e} drafts: windows and vLLM's steps are not "
                    "of one step")
            if a != b:
                raise SpecmoeError(
                    f"routing capture: {name}, step {s} (verify step {j}): {a} accepted drafts "
                    f"captured, vLLM counted {b}: windows and acceptance are not of one step")
        if len(ours) != len(ref):
            raise SpecmoeError(f"routing capture: {name}: {len(ours)} verify steps captured, vLLM "
                               f"counted {len(ref)}")
        checked += len(ref)
    return checked
