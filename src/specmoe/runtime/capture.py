"""Routing capture inside vLLM: every verification window, rejected drafts included.

vLLM's own `enable_return_routed_experts` keeps only committed tokens, so it cannot answer
accepted-vs-rejected questions. Here a `vllm.general_plugins` entry point (registered in
pyproject.toml, inert unless SPECMOE_CAPTURE=1) patches the model runner in every worker:

- `load_model`: after the target is loaded, and so before any compile or CUDA-graph capture, bind our
  recorder to the target's MoE routers with vLLM's `bind_routed_experts_capturer`. Router top-k goes
  through `BaseRouter._select_experts`, which calls `capture_fn(topk_ids)` with logical expert ids;
  the recorder writes them into a static device buffer (graph-safe). The drafter is not bound.
- `execute_model`: before the step, read the scheduled tokens and drafts per request; after the
  forward, copy the routing rows and the input ids of this step to host memory once.
- `sample_tokens`: accepted drafts = len(sampled_token_ids) - 1 per request; the step's windows are
  then complete and kept in host memory (numpy arrays, no per-token Python objects).
- The driver calls `collective_rpc("specmoe_flush")` (a worker extension, so nothing is pickled)
  after generation: rank 0 writes its windows as an .npz shard and returns the path; `assemble`
  turns shards plus the request outputs into a routing trace.

Rows of one step are laid out per request in `input_batch.req_ids` order; a decode window of a request
with n drafts is its 1 + n scheduled rows: position 0 is the last committed token, 1..n the drafts.
Prefill chunks are not windows and are skipped.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecmoeError

if TYPE_CHECKING:
    from ..routing.trace import Trace

log = logging.getLogger("specmoe")
ENV = "SPECMOE_CAPTURE"
ENV_DIR = "SPECMOE_CAPTURE_DIR"
# vLLM releases whose model-runner internals this module was written against and tested with.
SUPPORTED_VLLM = ("0.32",)


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def check_version() -> None:
    v = vllm_version()
    if not any(v == s or v.startswith(s + ".") for s in SUPPORTED_VLLM):
        raise SpecmoeError(f"routing capture supports vLLM {', '.join(SUPPORTED_VLLM)}.x, found {v}: "
                           "the model-runner hooks would be silently wrong on other versions")


class Recorder:
    """Lives in a worker: a static routing buffer plus the windows recorded so far."""

    def __init__(self, runner) -> None:
        import torch

        cfg = runner.model_config
        self.num_layers = cfg.get_total_num_hidden_layers()
        self.top_k = cfg.get_num_experts_per_tok()
        self.num_experts = cfg.get_num_experts()
        self.buffer = torch.full((runner.max_num_tokens, self.num_layers, self.top_k), -1,
                                 dtype=torch.int16 if self.num_experts < 2**15 else torch.int32,
                                 device=runner.device)
        self.layers_seen: set[int] = set()
        self.pending: dict | None = None
        self.chunks: list[dict] = []
        self.step_of: dict[str, int] = {}
        self.capture_s = 0.0

    def capture(self, layer_id: int, topk_ids) -> None:  # called inside the forward
        self.layers_seen.add(layer_id)
        self.buffer[: topk_ids.shape[0], layer_id] = topk_ids

    # -- per step -------------------------------------------------------------------------------
    def before_step(self, runner, scheduler_output) -> None:
        self.pending = {"num_scheduled": dict(scheduler_output.num_scheduled_tokens),
                        "drafts": {r: len(t) for r, t in
                                   scheduler_output.scheduled_spec_decode_tokens.items()}}

    def after_forward(self, runner) -> None:
        if self.pending is None:
            return
        state = getattr(runner, "execute_model_state", None)
        if state is not None and hasattr(state, "input_batch"):
            return self._after_forward_v2(state.input_batch)
        t0 = time.perf_counter()
        sched, drafts = self.pending["num_scheduled"], self.pending["drafts"]
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
        if req_ids:
            self.pending.update(req_ids=req_ids, starts=starts, n_drafts=n_drafts,
                                routing=self.buffer[:start].cpu().numpy(),
                                input_ids=runner.input_ids.gpu[:start].cpu().numpy())
        else:
            self.pending = None
        self.capture_s += time.perf_counter() - t0

    def _after_forward_v2(self, batch) -> None:
        """Model Runner V2: the step's InputBatch carries the layout (written for vLLM 0.32's
        vllm/v1/worker/gpu/input_batch.py; not exercised on CPU, where V2 needs Triton)."""
        t0 = time.perf_counter()
        counts = np.asarray(batch.num_scheduled_tokens[: batch.num_reqs], dtype=np.int64)
        drafts = (np.zeros_like(counts) if batch.num_draft_tokens_per_req is None else
                  np.asarray(batch.num_draft_tokens_per_req[: batch.num_reqs], dtype=np.int64))
        starts = np.asarray(batch.query_start_loc_np[: batch.num_reqs], dtype=np.int64)
        decoding = ~np.asarray(batch.is_prefilling_np[: batch.num_reqs], dtype=bool)
        ok = np.flatnonzero(decoding & (counts == 1 + drafts))
        total = int(batch.num_tokens)
        if ok.size:
            self.pending.update(req_ids=[batch.req_ids[i] for i in ok],
                                starts=starts[ok].tolist(), n_drafts=drafts[ok].tolist(),
                                routing=self.buffer[:total].cpu().numpy(),
                                input_ids=batch.input_ids[:total].cpu().numpy())
        else:
            self.pending = None
        self.capture_s += time.perf_counter() - t0

    def after_sample(self, output) -> None:
        p, self.pending = self.pending, None
        if p is None:
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

    def flush(self, out_dir: str) -> str | None:
        """Write the recorded windows as one .npz shard; returns its path (None if empty)."""
        if not self.chunks:
            return None
        layers = sorted(self.layers_seen)
        experts = np.concatenate([c["experts"] for c in self.chunks])[:, layers]
        token_id = np.concatenate([c["token_id"] for c in self.chunks])
        metas = [m for c in self.chunks for m in c["windows"]]
        req = np.array([m[0] for m in metas])
        step = np.array([m[1] for m in metas], np.int32)
        n_drafts = np.array([m[2] for m in metas], np.int8)
        accepted = np.array([m[3] for m in metas], np.int8)
        fd, path = tempfile.mkstemp(prefix="capture-", suffix=".npz", dir=out_dir)
        os.close(fd)
        np.savez(path, experts=experts, token_id=token_id, req=req, step=step, n_drafts=n_drafts,
                 accepted=accepted, layers=np.array(layers), num_experts=self.num_experts,
                 capture_s=self.capture_s)
        self.chunks = []
        return path


def _install() -> None:
    from vllm.model_executor.layers.fused_moe.routed_experts_capturer import (
        bind_routed_experts_capturer,
    )
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    classes, bases = [GPUModelRunner], [GPUModelRunner]
    for module, name, base in (
        ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", False),
        ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", True),  # Model Runner V2
    ):
        try:
            cls = getattr(__import__(module, fromlist=[name]), name)
        except Exception:  # noqa: BLE001 - V2 imports Triton-only code on some platforms
            continue
        classes.append(cls)
        if base:
            bases.append(cls)
    for cls in classes:
        if cls.__dict__.get("_specmoe_patched"):  # not inherited: each class is patched once
            continue
        if "load_model" in cls.__dict__:
            cls.load_model = _wrap_load(cls.__dict__["load_model"], bind_routed_experts_capturer)
        if cls in bases:
            cls.execute_model = _wrap_execute(cls.execute_model)
            cls.sample_tokens = _wrap_sample(cls.sample_tokens)
        cls._specmoe_patched = True


def _wrap_load(orig, bind):
    @functools.wraps(orig)
    def load_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        self._specmoe = Recorder(self)
        bind(self.model, self._specmoe)
        log.info("specmoe: routing capture bound to %s", type(self.model).__name__)
        return out

    return load_model


def _wrap_execute(orig):
    @functools.wraps(orig)
    def execute_model(self, scheduler_output, *args, **kwargs):
        rec = getattr(self, "_specmoe", None)
        if rec is not None:
            rec.before_step(self, scheduler_output)
        out = orig(self, scheduler_output, *args, **kwargs)
        if rec is not None:
            rec.after_forward(self)
            if out is not None and hasattr(out, "req_id_to_index"):  # sampled within execute
                rec.after_sample(out)
        return out

    return execute_model


def _wrap_sample(orig):
    @functools.wraps(orig)
    def sample_tokens(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        rec = getattr(self, "_specmoe", None)
        if rec is None or out is None:
            return out
        if hasattr(out, "get_output"):  # async scheduling: tokens arrive with get_output()
            get = out.get_output

            def get_output():
                res = get()
                rec.after_sample(res)
                return res

            out.get_output = get_output
        elif hasattr(out, "req_id_to_index"):
            rec.after_sample(out)
        return out

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
                     repetition_penalty: float = 1.0) -> dict:
    """Greedy SD generation with capture on; adds shard paths and per-request outputs."""
    from .engine import generate

    os.environ[ENV] = "1"  # inherited by the engine's processes, where the plugin reads it
    os.environ[ENV_DIR] = shard_dir
    check_version()
    engine = dict(engine, worker_extension_cls="specmoe.runtime.capture.CaptureExtension",
                  per_request_spec_decode_metrics="detailed")
    return generate(prompts, max_tokens, engine, collect=_collect,
                    repetition_penalty=repetition_penalty)


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


def assemble(result: dict, prompts: list, run: dict, k_draft: int) -> "Trace":
    """Shards + request outputs -> a routing trace sorted by (request, step, position).

    prompts: the Prompt rows in the order they were submitted (request i is prompts[i]).
    """
    from ..routing.trace import Trace, status_for

    shards = [np.load(p) for p in result["shards"]]
    if not shards:
        raise SpecmoeError("capture recorded no verification windows")
    cat = lambda key: np.concatenate([s[key] for s in shards])  # noqa: E731
    experts, token_id = cat("experts"), cat("token_id")
    req, step, n_drafts, accepted = cat("req"), cat("step"), cat("n_drafts"), cat("accepted")
    ext_index = {r["request_id"]: i for i, r in enumerate(result["requests"])}

    def request_index(internal: str) -> int:
        if internal in ext_index:
            return ext_index[internal]
        base = internal.rsplit("-", 1)[0]  # internal ids are the external id plus a suffix
        if base not in ext_index:
            raise SpecmoeError(f"captured request {internal} matches no submitted request")
        return ext_index[base]

    request = np.array([request_index(r) for r in req.tolist()], np.int32)
    lengths = n_drafts.astype(np.int64) + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    order = np.lexsort((step, request))
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
    mism, checked = _crosscheck(result["requests"], request, step, n_drafts, accepted)
    meta = {"run": run, "slice_datasets": {p.category: p.dataset for p in prompts},
            "capture": {
        "windows": int(order.size), "short_windows": int((n_drafts < k_draft).sum()),
        "layers": shards[0]["layers"].tolist(), "capture_s": float(sum(s["capture_s"] for s in shards)),
        "accepted_crosscheck": {"steps": checked, "mismatches": mism},
        "generate_s": result.get("generate_s")}}
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


def _crosscheck(requests, request, step, n_drafts, accepted) -> tuple[int, int]:
    """Our accepted counts against vLLM's per_step_accepted (steps with drafts, in order)."""
    mism = checked = 0
    for i, r in enumerate(requests):
        ref = r.get("per_step_accepted") or []
        m = (request == i) & (n_drafts > 0)
        ours = accepted[m][np.argsort(step[m], kind="stable")].tolist()
        for a, b in zip(ours, ref):
            checked += 1
            mism += a != b
        mism += abs(len(ours) - len(ref))
    return mism, checked
