"""engine.OutputTap: the lines an offline engine's core and workers (processes of their own)
write to the descriptors they inherit are timed on arrival and go on where they went before:
stdout to stdout, stderr to stderr. Children here are plain `python -c` processes, no engine."""

import subprocess
import sys

from specmoe.runtime.engine import OutputTap
from specmoe.runtime.startup import StartClock

CHILD = ("import sys\n"
         "sys.stderr.write('(EngineCore_DP0 pid=111) WARNING Initializing a V1 LLM engine\\n')\n"
         "sys.stderr.flush()\n"
         "print('(Worker pid=222) INFO Starting to load model', flush=True)\n")


def test_the_tap_keeps_stderr_on_stderr_and_times_both(capfd):
    """The tap sent fd 1 and fd 2 down one pipe and forwarded everything to the original stdout:
    an engine's warnings and tracebacks landed in stdout while it was on. Each descriptor now
    has its own pipe and goes back to its own target, and both feed the clock."""
    clock = StartClock(import_included=False)
    with OutputTap(clock):
        subprocess.run([sys.executable, "-c", CHILD], check=True)
    out, err = capfd.readouterr()
    assert "Initializing a V1 LLM engine" in err and "Initializing" not in out, (out, err)
    assert "Starting to load model" in out and "Starting" not in err, (out, err)
    assert clock.at.get("engine_core") is not None and clock.at.get("model_load") is not None
    assert sorted(clock.pids) == ["111", "222"]
    # the descriptors are this process's own again after the block
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('after\\n')"],
                   check=True)
    out, err = capfd.readouterr()
    assert err == "after\n" and out == ""


def test_a_line_the_tap_cannot_forward_is_timed_and_counted(caplog):
    """Forwarding errors were swallowed (`except OSError: pass`): a line whose target is gone is
    still timed, the pipe still drained, and the tap says on exit how many lines it lost."""
    import logging
    import os

    saved = os.dup(2)
    read, write = os.pipe()
    os.close(read)  # stderr's target closed: writing to it fails with EPIPE
    os.dup2(write, 2)
    os.close(write)
    clock = StartClock(import_included=False)
    try:
        with caplog.at_level(logging.WARNING, logger="specmoe"):
            with OutputTap(clock):
                subprocess.run([sys.executable, "-c", CHILD], check=True, timeout=30)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    assert clock.at.get("engine_core") is not None and clock.at.get("model_load") is not None
    assert any("could not forward 1 line(s) of fd 2" in r.getMessage() for r in caplog.records), \
        caplog.records
