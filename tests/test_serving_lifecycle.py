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
from pathlib import Path

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
