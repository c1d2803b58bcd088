"""An engine's start in phases, read from vLLM's own log lines as they arrive.

A served engine's lines come through the server's output pipe (serving.Server timestamps each line
on arrival); an offline engine's through a handler on the `vllm` logger (record creation times),
and, where its engine core runs in a process of its own (vLLM's default, and on CUDA), through
this process's stdout and stderr, which the core and its workers share (engine.OutputTap).
Each milestone is the first line that matches it (model_loaded: the last one before the engine is
ready, the drafter loads after the target), in seconds since the start; a milestone whose line
never came (a quieter VLLM_LOGGING_LEVEL) is None, and so are the phases next to it.

    start -> imported -> engine_core -> worker -> model_load -> model_loaded -> engine_ready
          -> up -> first_token

imported: vLLM imported by the first process (a server's first `(APIServer pid=N)` line; an
offline engine's `from vllm import LLM` returning). engine_core: the engine core initialising
(after its process started, and imported vLLM if it was spawned rather than forked: a served
engine's core is forked on a CPU, specmoe.runtime.api_server). worker: the worker's
distributed init (after its own process and import, under vLLM's multiprocessing executor).
model_load .. model_loaded: the weights of target and drafter. model_loaded .. engine_ready: the
KV cache (and profiling, warm-up). up: the server answers /health, or the LLM object exists.
first_token: the first generated token (a server: of a one-token request right after it came up;
an offline engine: the earliest first token of its requests).
"""

from __future__ import annotations

import logging
import re
import sys
import time

MARKS = (  # (milestone, pattern in vLLM's log lines); imported, up, first_token are set by callers
    ("engine_core", re.compile(r"Initializing a V1 LLM engine")),
    ("worker", re.compile(r"distributed_init_method=")),
    # V1 model runners (CPU, GPU) | Model Runner V2 (vLLM's default on CUDA)
    ("model_load", re.compile(r"Starting to load model|Loading model from scratch")),
    ("model_loaded", re.compile(r"Loading weights took|Model loading took")),
    ("engine_ready", re.compile(r"init engine \(profile, create kv cache")),
)
ORDER = ("imported", "engine_core", "worker", "model_load", "model_loaded", "engine_ready", "up",
         "first_token")
# phase name: the milestone it ends at (it starts at the milestone before that in ORDER)
PHASES = {"import": "imported", "engine_core": "engine_core", "worker": "worker",
          "model_init": "model_load", "model_load": "model_loaded", "kv_cache": "engine_ready",
          "serve_ready": "up", "first_token": "first_token"}
_SERVER_FIRST = re.compile(r"^\(APIServer pid=\d+\)")
# a served engine's process manager (specmoe.runtime.api_server.MARK): how it started the engine
# core: "fork" (a copy of the server, vLLM already imported) or "spawn" (a fresh interpreter)
_START_METHOD = re.compile(r"^specmoe: engine processes started by (?P<method>\w+)")
_PROCESS = re.compile(r"^\((?P<name>[A-Za-z_][\w-]*) pid=(?P<pid>\d+)\)")


class StartClock:
    """Milestones of one engine start, fed with (time, line) as lines arrive."""

    def __init__(self, t0: float | None = None, import_included: bool | None = None) -> None:
        self.t0 = time.perf_counter() if t0 is None else t0
        # whether the start counts vLLM's import: an engine in this process whose clock started
        # before vLLM was imported here, or a server (a fresh process: serving.Server says so)
        self.import_included = ("vllm" not in sys.modules if import_included is None
                                else import_included)
        self.at: dict[str, float] = {}
        self.pids: dict[str, str] = {}  # pid -> the first process name vLLM gave it
        self.start_method: str | None = None  # how a server started its engine core

    def mark(self, name: str, t: float | None = None) -> None:
        if name not in self.at or name == "model_loaded":
            self.at[name] = (time.perf_counter() if t is None else t) - self.t0

    def line(self, text: str, t: float | None = None) -> None:
        t = time.perf_counter() if t is None else t
        if self.start_method is None and (sm := _START_METHOD.match(text)):
            self.start_method = sm["method"]
        m = _PROCESS.match(text)
        if m:
            self.pids.setdefault(m["pid"], m["name"])
        if "imported" not in self.at and _SERVER_FIRST.match(text):
            self.mark("imported", t)
        if "engine_ready" in self.at:
            return
        for name, pattern in MARKS:
            if pattern.search(text):
                self.mark(name, t)

    def summary(self) -> dict:
        """{"at_s": {milestone: s}, "phases_s": {phase: s}, "processes": [vLLM's process
        names], "start_method": how a server started its engine core, "import_included":
        whether the start counts vLLM's import} with None where a milestone's line never came
        (and start_method None for an offline engine)."""
        at = {m: (round(self.at[m], 3) if m in self.at else None) for m in ORDER}
        phases, prev = {}, 0.0
        for phase, end in PHASES.items():
            t = at[end]
            phases[phase] = None if t is None or prev is None else round(t - prev, 3)
            prev = t
        return {"at_s": at, "phases_s": phases, "processes": sorted(self.pids.values()),
                "start_method": self.start_method, "import_included": self.import_included}


def describe(summary: dict | None) -> str:
    """One line for a log: the phases that were seen, and the processes."""
    if not summary:
        return "no engine start"
    parts = [f"{k} {v:.1f} s" for k, v in summary["phases_s"].items() if v is not None]
    how = f", engine core by {summary['start_method']}" if summary.get("start_method") else ""
    return f"{', '.join(parts)} ({len(summary['processes'])} vLLM process(es){how})"


class LogTap:
    """Feeds a StartClock with the records of vLLM's loggers (an engine in this process), with
    the records' own creation times, while the block runs.

    It wraps the log-record factory rather than adding a handler: vLLM configures its logging
    again while an engine starts (dictConfig), which replaces the `vllm` logger's handlers, and
    keeps whatever record factory it finds (wrapping it in its own). Records below vLLM's level
    are never made, so VLLM_LOGGING_LEVEL=WARNING leaves the INFO milestones unknown."""

    def __init__(self, clock: StartClock) -> None:
        self.clock = clock
        self.active = False
        # record.created is wall-clock time: map it onto the clock's perf_counter scale
        self.offset = time.perf_counter() - time.time()

    def take(self, record: logging.LogRecord) -> None:
        try:
            self.clock.pids.setdefault(str(record.process), record.processName or "")
            self.clock.line(record.getMessage(), record.created + self.offset)
        except Exception:  # noqa: BLE001 - timing must never break the engine
            pass

    def __enter__(self) -> "LogTap":
        self.prev = prev = logging.getLogRecordFactory()

        def factory(*args, **kwargs):
            record = prev(*args, **kwargs)
            if self.active and record.name.split(".", 1)[0] == "vllm":
                self.take(record)
            return record

        self.factory = factory
        self.active = True
        logging.setLogRecordFactory(factory)
        return self

    def __exit__(self, *exc) -> None:
        self.active = False  # a pass-through from now on, where vLLM has wrapped it
        if logging.getLogRecordFactory() is self.factory:
            logging.setLogRecordFactory(self.prev)
