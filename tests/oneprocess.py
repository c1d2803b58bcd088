"""Several engines in one child process, as a CPU job runs them (specmoe.runtime.engine.run_each),
for tests that share one child: each call's outcome kept apart, so that each test sees its own
engine's failure. Nothing here imports vLLM at import time: the child unpickles these functions
before its first engine starts, and that engine's start must still include vLLM's import."""


def each_or_error(fn, *args):
    """fn(*args) as ("ok", its result), or ("error", the traceback): several engines in one child
    process (specmoe.runtime.engine.run_each), each test seeing its own engine's failure."""
    import traceback

    try:
        return "ok", fn(*args)
    except Exception:  # noqa: BLE001 - handed to the test of that architecture
        return "error", traceback.format_exc()


def result_of(outcome):
    """each_or_error's result, or the test fails with the child's traceback."""
    import pytest

    status, value = outcome
    if status != "ok":
        pytest.fail(f"the engine failed in the shared child:\n{value}")
    return value


def capture_with_async_scheduling(*args, **kwargs):
    """capture_generate in an engine with async scheduling on, as vLLM 0.32 runs on CUDA: its
    CPU platform (vllm/platforms/cpu.py, check_and_update_config) turns it off after VllmConfig
    chose it, so the switch is kept as it was chosen. The engine core runs in this process, so
    EngineCore.step_with_batch_queue drives the steps. The patch stays for the rest of the
    process: run it after the child's other engines."""
    from vllm.platforms.cpu import CpuPlatform

    from specmoe.runtime import capture

    update = CpuPlatform.check_and_update_config.__func__

    def keep_async_scheduling(cls, vllm_config):
        chosen = vllm_config.scheduler_config.async_scheduling
        update(cls, vllm_config)
        vllm_config.scheduler_config.async_scheduling = chosen

    CpuPlatform.check_and_update_config = classmethod(keep_async_scheduling)
    return capture.capture_generate(*args, **kwargs)
