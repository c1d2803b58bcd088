"""vLLM's OpenAI API server (`python -m vllm.entrypoints.openai.api_server`, what `vllm serve`
runs), with its engine core forked from the server on a CPU instead of spawned.

vLLM starts the engine core of a served engine in a process of its own, with the start method
VLLM_WORKER_MULTIPROC_METHOD names: its command line sets `spawn` where that is unset
(vllm/entrypoints/serve/utils/api_utils.py, cli_env_setup), and its CPU platform forces `spawn`
whatever it was (CpuPlatform.check_and_update_config). A spawned engine core imports vLLM and
torch a second time: about 7 of a tiny engine's 17-21 s of start-up on two cores. On a CPU the
server runs no OpenMP region before the engine core starts (what makes forking a process with
torch unsafe), and the engine core's worker runs inside it (the "uni" executor,
VLLM_ENABLE_V1_MULTIPROCESSING=0), so no process of vLLM's is started from the fork. So on a CPU
this entry point sets `fork` where the variable is unset (a value of the user's is kept) and keeps
the platform from overriding it, then runs vLLM's own server unchanged; on any other platform it
changes nothing (a GPU keeps vLLM's spawned engine core, whose CUDA state must not be forked).

    python -m specmoe.runtime.api_server --host 127.0.0.1 --port N [vLLM's server arguments]
"""

from __future__ import annotations

import os
import runpy

VAR = "VLLM_WORKER_MULTIPROC_METHOD"
MARK = "specmoe: engine processes started by"  # startup.StartClock reads this line


def fork_on_cpu() -> bool:
    """On a CPU: VAR `fork` where unset, and the platform's config check leaves VAR as it was.
    True where it applies (a CPU)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    os.environ.setdefault(VAR, "fork")
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
    """Print the start method vLLM's process manager gets for the engine core (one line per
    process it starts, `MARK <method>`): what happened, for the start's record
    (specmoe.runtime.startup)."""
    import sys

    from vllm.v1.engine import utils

    get = utils.get_mp_context

    def get_and_report():
        ctx = get()
        print(f"{MARK} {ctx.get_start_method()}", file=sys.stderr, flush=True)
        return ctx

    utils.get_mp_context = get_and_report


def main() -> None:
    fork_on_cpu()
    report_start_method()
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
