import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from budget import budget
from specmoe.routing.synth import SynthParams, generate


def pytest_configure(config):
    """tests/budget.py's hooks for every fixture, session-scoped ones included (a conftest's own
    hooks reach only the nodes below its folder, and a session fixture's node is the session)."""
    import budget as budget_hooks

    config.pluginmanager.register(budget_hooks, "specmoe-setup-budget")


@pytest.fixture(scope="session")
def small_trace():
    """A synthetic trace with stickiness, skew and acceptance tied to overlap."""
    return generate(SynthParams(num_experts=32, top_k=4, num_layers=3, k_draft=3, skew=0.7,
                                stickiness=0.4, requests=40, steps=30, accept_prob=0.7,
                                accept_overlap_tie=2.0, categories=["a", "b"], seed=7))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
@budget(1800)
def tiny_models(tmp_path_factory):
    """A tokenizer, a briefly trained tiny MoE target and dense drafter (about 30 s on 2 cores).
    One training thread: two threads that wait on each other slow down many times over when other
    processes share the cores (15 minutes under load in CI), one thread only in proportion."""
    pytest.importorskip("torch")
    from specmoe.contracts import Named
    from specmoe.contracts.models import TokenizerParams, TrainParams
    from specmoe.stages import models as modelstages

    root = tmp_path_factory.mktemp("models")
    tiny_cfg = {"vocab_size": 512, "heldout_every": 10, "max_train_tokens": 300_000,
                "max_heldout_tokens": 20_000,
                "train": {"seq_len": 64, "batch_size": 16, "lr": 0.004, "warmup": 10,
                          "eval_batches": 2, "threads": 1}}
    tok = Named({"tokenizer": root / "tokenizer"})
    modelstages.tokenizer_stage(Named({}), Named({"dir": root / "tokenizer"}),
                                TokenizerParams(tiny_cfg))
    target = {"name": "t", "arch": {"kind": "moe", "hidden": 64, "layers": 2, "heads": 2,
                                    "kv_heads": 1, "head_dim": 32, "num_experts": 16,
                                    "top_k": 4, "expert_intermediate": 16}, "steps": 150}
    drafter = {"name": "d", "arch": {"kind": "dense", "hidden": 64, "layers": 1, "heads": 2,
                                     "kv_heads": 1, "head_dim": 32, "intermediate": 128},
               "steps": 150}
    for m, out in ((target, "t"), (drafter, "d")):
        modelstages.train_stage(tok, Named({"dir": root / out}), TrainParams(m, tiny_cfg, True),
                                progress=False)
    return root


@pytest.fixture(scope="session")
def shrunk_tokenizer(tmp_path_factory) -> Path:
    """shrunk.served_pair's tokenizer, trained once a session (shrunk.train_tokenizer)."""
    from shrunk import train_tokenizer

    return train_tokenizer(tmp_path_factory.mktemp("shrunk") / "tokenizer")


# --- no process outlives the suite ---------------------------------------------------------------
# Every process the tests start (engines, Snakemake, SLURM daemons, Chromium and the processes they
# fork) inherits this marker in its environment; at the end of the session any still alive is
# named, killed, and fails the session.
SESSION_MARK = f"SPECMOE_TEST_SESSION={uuid.uuid4().hex}"
os.environ["SPECMOE_TEST_SESSION"] = SESSION_MARK.split("=", 1)[1]


def leftover_processes() -> dict[int, str]:
    """Live processes other than this one whose environment carries this session's marker."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if SESSION_MARK.encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie has ended; its parent has not reaped it yet
            cmd = (proc / "cmdline").read_bytes()
            if b"multiprocessing.resource_tracker" in cmd and _parent(proc) == os.getpid():
                continue  # this process's own resource tracker: it ends when this process does
            found[int(proc.name)] = cmd.replace(b"\0", b" ").decode(errors="replace").strip()[:120]
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def _parent(proc: Path) -> int:
    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])


def pytest_sessionfinish(session, exitstatus):
    deadline = time.time() + 10  # processes being torn down as the last test ends
    while (left := leftover_processes()) and time.time() < deadline:
        time.sleep(0.5)
    if not left:
        return
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    lines = "\n".join(f"  {pid}: {cmd}" for pid, cmd in sorted(left.items()))
    session.config.get_terminal_writer().line(
        f"\n{len(left)} process(es) started by the tests outlived them (now killed):\n{lines}",
        red=True)
    session.exitstatus = 1


@pytest.fixture(scope="session")
def study_drafters_cache(tmp_path_factory) -> Path:
    """A Hugging Face cache (hub folder) holding stand-ins of config/paper.yaml's drafters'
    config.json (hubfake.STUDY_DRAFTERS: not the published files, which the Hub alone has)."""
    from hubfake import lay_out_study_drafters

    return lay_out_study_drafters(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture
def study_drafters(study_drafters_cache, monkeypatch) -> Path:
    """This test's preflight reads the study's drafters from study_drafters_cache, offline."""
    monkeypatch.setenv("HF_HUB_CACHE", str(study_drafters_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return study_drafters_cache


@pytest.fixture(scope="session")
def preflight_memo(tmp_path_factory) -> Path:
    """One folder of the workflow's checks' answers (.snakemake/specmoe, specmoe.checks.memo) for
    the workflow copies of this session that ask vLLM's checks the same question (wf.copy_workflow's
    memo), so each question runs vLLM once: not for a test of the checks themselves, which must
    see them run. This session's own folder, not the repository's: an answer is kept by vLLM's
    version, the question and specmoe's own check code (memo.source_digest), not by the
    installed vLLM's files, so one kept by another environment of the same version could be
    stale."""
    return tmp_path_factory.mktemp("preflight-memo")


@pytest.fixture(scope="session")
@budget(900)
def paper_dry_run(study_drafters_cache, preflight_memo, tmp_path_factory) -> tuple[str, float]:
    """`snakemake -n --configfile config/paper.yaml` in a copy of the workflow sharing
    preflight_memo, run once per session with the drafters' stand-ins offline
    (study_drafters_cache): its stdout and stderr, and its wall time in seconds. Read by
    tests/test_paper_coverage.py and tests/test_study_workflow.py."""
    from wf import copy_workflow, snakemake

    wd = copy_workflow(tmp_path_factory.mktemp("paper") / "wf", memo=preflight_memo)
    env = {**os.environ, "HF_HUB_CACHE": str(study_drafters_cache), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    r = snakemake(wd, "-n", configfile="config/paper.yaml", timeout=300, env=env)
    return r.stdout + r.stderr, time.perf_counter() - t0
