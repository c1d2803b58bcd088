"""How serving.Server's processes start and stop, with a stand-in server (tests/fakeserver.py: a
process that answers what Server asks of an engine, started the way Server starts vLLM's), no
engine: a job stopped by a signal stops its servers, a server is seen up soon after it listens,
and the failure of one of two servers started side by side arrives at once."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from specmoe.errors import SpecmoeError
from specmoe.runtime import serving

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def fake_engine(**args) -> dict:
    """Engine arguments for Server that start tests/fakeserver.py with `args` (its flags)."""
    return {"model": "m", "env": {"PYTHONPATH": str(TESTS)}, **args}


def fake_server(log_path=None, startup_timeout: float = 60, **args) -> serving.Server:
    return serving.Server(fake_engine(**args), log_path, startup_timeout=startup_timeout,
                          module="fakeserver")


def running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie that no one reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pids_in(lines) -> list[int]:
    """The fake server's pid and its engine core's, from its output."""
    return [int(m[1]) for line in lines if (m := re.match(r"fakeserver (?:engine core )?pid "
                                                          r"(\d+)", line))]


def kill_all(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# a rule's script (the adapter run_rule, as workflow/scripts/*.py call it) whose stage, "up",
# starts a server and then works until it is stopped, or, "starting", starts two side by side
# (as run_series, _start_all) that never come up; its job's facts as Snakemake gives them
JOB = textwrap.dedent("""
    import contextlib, sys, time
    from dataclasses import dataclass
    from types import SimpleNamespace
    from specmoe.contracts import run_rule
    from specmoe.runtime.serving import Server, _start_all

    @dataclass(frozen=True)
    class Params:
        INPUTS = ()
        OUTPUTS = ("up",)

    def stage(inputs, outputs, params, log):
        engine = {"model": "m", "env": {"PYTHONPATH": sys.argv[2]}, "engine_core": True}
        if sys.argv[3] == "starting":
            engine["listen_after"] = -1
            with contextlib.ExitStack() as stack:
                _start_all(stack, [Server(engine, log, startup_timeout=3600,
                                          module="fakeserver") for _ in range(2)])
        with Server(engine, log, startup_timeout=120, module="fakeserver"):
            open(outputs.up, "w").write("up")
            time.sleep(3600)

    smk = SimpleNamespace(rule="serve", input={}, output={"up": sys.argv[1] + "/up"},
                          params=SimpleNamespace(), wildcards=SimpleNamespace(),
                          log=[sys.argv[1] + "/job.log"], threads=1, resources={})
    run_rule(smk, stage, Params)
""")


@pytest.mark.parametrize("stage,servers", [("up", 1), ("starting", 2)])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_job_stopped_by_a_signal_stops_its_servers_and_their_engine_cores(tmp_path, sig,
                                                                             stage, servers):
    """A server runs in a session of its own (a signal to the job's process group does not reach
    it): Snakemake or SLURM cancelling a job (SIGTERM) or a closed terminal (SIGHUP) left the
    API server and its engine core running, reparented to init, with the port, the memory and
    the GPU's memory. The job now stops them as it does on KeyboardInterrupt, whether they are
    up or still starting."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    job = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path), str(TESTS), stage],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = tmp_path / "job.log"
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        # each server and its engine core running (and the one server up)
        while len(pids) < 2 * servers or (stage == "up" and not (tmp_path / "up").exists()):
            assert job.poll() is None, job.stdout.read()
            assert time.monotonic() < deadline, "the job's servers never started"
            time.sleep(0.05)
            pids = pids_in(log.read_text().splitlines()) if log.exists() else []
        assert all(running(p) for p in pids)
        job.send_signal(sig)  # the job's process alone, as `kill` or a scheduler's first signal
        code = job.wait(timeout=60)
        deadline = time.monotonic() + 5
        while any(running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if running(p)], "the job left its server's processes running"
        assert code == 128 + sig  # the shell's code of a process stopped by `sig`
        assert f"stopped by {signal.Signals(sig).name}" in log.read_text()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        kill_all(pids)


def test_a_stage_stopped_by_sigterm_runs_its_cleanup_and_the_handlers_are_restored(tmp_path):
    """run_rule turns SIGTERM into Terminated (a SystemExit with the shell's code 143) in the
    stage, whose `finally` blocks run; the job's log names the signal; the handlers the job had
    before are back after it."""
    from specmoe.contracts import Terminated, run_rule

    cleaned = []
    # the job's own handlers before: recording, so that a run_rule that does not handle the
    # signal leaves this test running (the signal's default action would end pytest)
    got = []
    mine = {s: signal.signal(s, lambda signum, frame: got.append(signum))
            for s in (signal.SIGTERM, signal.SIGHUP)}
    before = {s: signal.getsignal(s) for s in mine}

    def stage(inputs, outputs, params):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal's handler raises before this ends
            cleaned.append("not stopped")
        finally:
            cleaned.append("cleaned up")

    @dataclass(frozen=True)
    class Params:
        INPUTS = ()
        OUTPUTS = ()

    smk = SimpleNamespace(rule="serve", input={}, output={}, params=SimpleNamespace(),
                          log=[str(tmp_path / "job.log")])
    try:
        with pytest.raises(Terminated) as stopped:
            run_rule(smk, stage, Params)
        assert stopped.value.code == 143 and cleaned == ["cleaned up"] and got == []
        assert "stage serve stopped by SIGTERM" in (tmp_path / "job.log").read_text()
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        for s, handler in mine.items():
            signal.signal(s, handler)


def test_a_started_server_is_seen_up_within_a_short_poll_of_listening(monkeypatch):
    """Server asked for /health every 0.5 s while the engine started: up to half a second of
    every engine start (its startup_s, its `up` milestone and serve_ready phase) was the poll's.
    A server that listens 2 s after it started is now asked many times over those 2 s."""
    asked = []
    urlopen = urllib.request.urlopen

    def counting(url, *args, **kwargs):
        if isinstance(url, str) and url.endswith("/health"):
            asked.append(time.perf_counter())
        return urlopen(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", counting)
    with fake_server(listen_after=2.0) as server:
        listening = float(next(line for line in server.tail if "listening at" in line).split()[-1])
        seen = server.clock.t0 + server.startup_s
    # the poll's interval (0.5 s before) bounds the gaps between questions; on a loaded machine
    # a gap may be longer than the interval, never many times over on average
    before = [t for t in asked if t < listening]
    assert len(before) >= 12, f"asked {len(before)} times in the 2 s before the server listened"
    assert seen - listening < 0.5


@pytest.mark.parametrize("failing", [0, 1])
def test_a_server_that_fails_to_start_stops_the_other_at_once(failing, caplog):
    """Two servers start side by side (an interleaved pair); the first's failure used to wait
    for the second's start (its whole startup timeout, up to an hour on a GPU) before it was
    raised. Now the other start is cancelled: the error comes at once, is the failing server's
    (logged once, with its last lines), and no process of either server is left."""
    servers = [fake_server(startup_timeout=30, listen_after=-1, engine_core=True)
               for _ in range(2)]
    servers[failing] = fake_server(startup_timeout=30, exit_code=3)
    t0 = time.perf_counter()
    try:
        with pytest.raises(SpecmoeError, match="exited with code 3 while starting"):
            with contextlib.ExitStack() as stack:
                serving._start_all(stack, servers)
        took = time.perf_counter() - t0
        assert took < 5, f"the error came after {took:.1f} s"
        assert not [s for s in servers if serving._group_alive(s.proc.pid)]
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and "exited with code 3" in errors[0], errors
    finally:
        kill_all(pids_in(line for s in servers for line in s.tail))


def test_a_server_that_exits_while_its_engine_core_runs_has_its_engine_core_stopped():
    """Server.stop did nothing once the server's own process had exited: an API server that died
    while starting left its engine core (which holds the memory, the GPU's on a GPU) running."""
    server = fake_server(exit_code=3, engine_core=True)
    try:
        with pytest.raises(SpecmoeError, match="exited with code 3 while starting"):
            server.__enter__()
        assert len(pids_in(server.tail)) == 2
        assert not serving._group_alive(server.proc.pid), "its engine core is still running"
    finally:
        kill_all(pids_in(server.tail))


def test_a_failed_start_names_the_engines_first_exception_past_its_last_lines(caplog):
    """vLLM's API server prints its own long traceback ("Engine core initialization failed. See
    root cause above.") below its engine core's: the 40 last lines kept for the error held only
    the former, and a CI failure of the study-cpu case could not say why its engine died. The
    error now names the first exception the engine printed as well."""
    server = fake_server(exit_code=1, traceback_lines=60)
    try:
        with pytest.raises(SpecmoeError) as err:
            server.__enter__()
        assert "ValueError: the engine core's own cause" not in server.tail
        assert "its first exception: ValueError: the engine core's own cause" in str(err.value)
        assert "See root cause above." in str(err.value)
    finally:
        kill_all(pids_in(server.tail))
