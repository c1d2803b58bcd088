"""A Snakemake logger plugin (`--logger specmoe`, set in profiles/default) that gives a
`--configfile` Snakemake cannot read one line instead of a Python traceback.

Snakemake 9 loads every `--configfile` in its command-line front end, before the Snakefile runs
(snakemake/common/configfile.py: `load_configfile`, `_load_configfile`). A file that is not there,
a directory, a binary file (any OSError or UnicodeDecodeError of `open` or the read) reaches
`snakemake.exceptions.print_exception`, which logs the whole traceback as the message of one
ERROR record (its "Full Traceback" DEBUG record shows only with --verbose); YAML that does not
parse becomes a two-line WorkflowError that names no file. Logger plugins are set up before that
load, so this one adds a filter to Snakemake's logger: the ERROR record of an exception raised
inside those two functions, recognised by the exception being handled (`sys.exc_info()`: cli.py
logs the record inside its `except`), is replaced by one line on stderr, where the workflow's own
refusals go, worded by `specmoe.yamlfile` as for the configuration files the workflow reads
itself. Every other record passes unchanged; the handler writes nothing (Snakemake keeps its own
stream handler), so all other output is Snakemake's.

This module is separate from the library (`specmoe` never imports snakemake). Snakemake imports
every module named `snakemake_logger_plugin_*` to list `--logger`'s choices: importing it only
defines classes.
"""

from __future__ import annotations

import logging
import os
import sys

from snakemake_interface_logger_plugins.base import LogHandlerBase

SNAKEMAKE_LOGGER = "snakemake.logging"  # snakemake.logging's `logger`
_LOADER = os.path.join("snakemake", "common", "configfile.py")
_ARGUMENT = {"load_configfile": "configpath", "_load_configfile": "configpath_or_obj"}


def configfile_of(exc: BaseException) -> str | os.PathLike | None:
    """The file Snakemake was loading as a configfile when `exc` was raised (None: not raised
    while loading one)."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in _ARGUMENT and code.co_filename.endswith(_LOADER):
            path = tb.tb_frame.f_locals.get(_ARGUMENT[code.co_name])
            return path if isinstance(path, (str, os.PathLike)) else None
        tb = tb.tb_next
    return None


def line_for(path: str | os.PathLike, exc: BaseException) -> str:
    """The one line for a configfile Snakemake could not read: `specmoe.yamlfile`'s, which reads
    the file as the workflow reads its own (not there, a directory, not UTF-8 text, another
    OSError, not YAML); Snakemake's reason where that reads it."""
    from specmoe.errors import InputError
    from specmoe.yamlfile import load

    try:
        load(path)
    except InputError as refused:
        return " ".join(str(refused).split("\n"))
    # It reads (a document that is not a mapping, or changed since): say what Snakemake met.
    reason = " ".join(str(exc).split())
    kind = "" if type(exc).__name__ == "WorkflowError" else f"{type(exc).__name__}: "
    return f"{os.fspath(path)}: {kind}{reason}"


class ConfigfileLine(logging.Filter):
    """Replaces the ERROR record of an exception raised while Snakemake loaded a configfile with
    one line on stderr; passes every other record as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        try:
            exc = sys.exc_info()[1]
            if exc is None or getattr(record, "exception", None) != type(exc).__name__:
                return True
            path = configfile_of(exc)
            if path is None:
                return True
            line = line_for(path, exc)
        except Exception:  # never lose Snakemake's own message to a fault here
            return True
        print(line, file=sys.stderr, flush=True)
        return False


FILTER = ConfigfileLine()


class LogHandler(LogHandlerBase):
    """Installs FILTER on Snakemake's logger while Snakemake's logging is set up; logs nothing."""

    def __post_init__(self) -> None:
        self.setLevel(logging.CRITICAL + 1)  # the queue listener hands it no record
        logging.getLogger(SNAKEMAKE_LOGGER).addFilter(FILTER)  # once: addFilter skips a repeat

    def emit(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        logging.getLogger(SNAKEMAKE_LOGGER).removeFilter(FILTER)
        super().close()

    @property
    def writes_to_stream(self) -> bool:
        return False  # Snakemake keeps its own stream handler: its output is unchanged

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True  # no record reaches emit: Snakemake's default filter would be idle

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False
