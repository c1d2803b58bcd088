"""vLLM's OpenAI API server (`python -m vllm.entrypoints.openai.api_server`, what `vllm serve`
runs), with the engine core started the way the environment asks on a CPU, and the start method
reported.

vLLM starts the engine core of a served engine in a process of its own, with the start method
VLLM_WORKER_MULTIPROC_METHOD names: its command line sets `spawn` where that is unset
(vllm/entrypoints/serve/utils/api_utils.py, cli_env_setup), and its CPU platform forces `spawn`
whatever it was (CpuPlatform.check_and_update_config). A spawned engine core imports vLLM and
torch a second time: about 7 of a tiny engine's 17.8 s to its first token on two cores. On a CPU
with the engine core's worker inside it (the "uni" executor, VLLM_ENABLE_V1_MULTIPROCESSING=0),
the server runs no OpenMP region before the engine core starts (what makes forking a process
with torch unsafe) and no process of vLLM's is started from the fork, so serving.Server asks for
`fork` there; this entry point keeps the CPU platform from overriding what was asked (on any
other platform it changes nothing: a GPU keeps vLLM's spawned core, whose CUDA state must not be
forked). It then runs vLLM's own server module unchanged, and prints the start method vLLM's
process manager got (MARK), which the start's record keeps (specmoe.runtime.startup), and how
the engine runs: its model runner and engine mode (RUNS), which every point keeps.

    python -m specmoe.runtime.api_server --host 127.0.0.1 --port N [vLLM's server arguments]
"""

from __future__ import annotations

import os
import runpy

VAR = "VLLM_WORKER_MULTIPROC_METHOD"
MARK = "specmoe: engine processes started by"  # startup.StartClock reads this line
RUNS = "specmoe: engine runs"  # serving.Server reads this line (report_engine_runs)


def keep_start_method_on_cpu() -> bool:
    """On a CPU, the platform's config check leaves VAR as it was; True where it applies."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    cls = type(current_platform)
    check = cls.check_and_update_config.__func__

    def check_keeping_start_method(klass, vllm_config) -> None:
        before = os.environ.get(VAR)
        check(klass, vllm_config)
        if before is None:
            os.environ.pop(VAR, None)
        else:
            os.environ[VAR] = before

    cls.check_and_update_config = classmethod(check_keeping_start_method)
    return True


def report_start_method() -> None:
    """Print the start method vLLM gets each time it asks for a multiprocessing context
    (`MARK <method>`; the first is the engine core's process manager, which the start's record
    keeps, specmoe.runtime.startup): what happened, not what was asked for."""
    import sys

    from vllm.v1.engine import utils

    get = utils.get_mp_context

    def get_and_report():
        ctx = get()
        print(f"{MARK} {ctx.get_start_method()}", file=sys.stderr, flush=True)
        return ctx

    utils.get_mp_context = get_and_report


def report_engine_runs() -> None:
    """Print how the engine runs (`RUNS {"model_runner": ..., "engine_mode": ...}`, JSON, as
    kernelprof.engine_runs reads a vLLM config) once the server has built its vLLM config from
    its arguments, the platform and the environment: the engine core gets that config and
    environment. The CUDA graph mode is the config's, before a worker's attention backend may
    lower it; a drafter's own graphs are its runner's (engine.V1_RUNNER_ENV says which)."""
    import json
    import sys

    from vllm.engine.arg_utils import EngineArgs

    create = EngineArgs.create_engine_config

    def create_and_report(self, *args, **kwargs):
        config = create(self, *args, **kwargs)
        from specmoe.runtime.kernelprof import engine_runs

        print(f"{RUNS} {json.dumps(engine_runs(config))}", file=sys.stderr, flush=True)
        return config

    EngineArgs.create_engine_config = create_and_report


def main() -> None:
    from specmoe.runtime.engine import without_amx_on_cpu

    keep_start_method_on_cpu()
    without_amx_on_cpu()  # before the engine core is forked from this process
    report_start_method()
    report_engine_runs()
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
