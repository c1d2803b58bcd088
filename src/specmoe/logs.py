"""Logging for pipeline stages: everything, failures included, goes to the rule's log file."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Iterator

from .errors import SpecmoeError

log = logging.getLogger("specmoe")
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # every line of a job's log


@contextlib.contextmanager
def logged(path: str | Path, stage: str) -> Iterator[logging.Logger]:
    """Send the specmoe logger (and Python warnings) to `path`; log a failure before re-raising."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    open(path, "w").close()  # start empty, then append: engine children append to the same file
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    start = time.perf_counter()
    log.info("stage %s started", stage)
    try:
        yield log
    except SpecmoeError as exc:  # a problem of the input or the setup: one line, no traceback
        log.error("stage %s failed: %s", stage, exc)
        sys.stderr.write(f"specmoe: {stage}: {exc}\n")
        raise SystemExit(1) from None
    except Exception:  # anything else is a bug: its traceback
        log.exception("stage %s failed", stage)
        raise
    else:
        log.info("stage %s done in %.1f s", stage, time.perf_counter() - start)
    finally:
        root.removeHandler(handler)
        handler.close()


def one(files):
    """A rule input that may be absent, one file, or a one-file list: the file or None."""
    if files is None or isinstance(files, str):
        return files or None
    files = list(files)
    if len(files) > 1:
        raise ValueError(f"expected at most one file, got {files}")
    return files[0] if files else None
