"""Errors that carry a one-line, user-facing message."""


class SpecmoeError(Exception):
    """Base class: the message is one line that says what is wrong."""


class InputError(SpecmoeError, ValueError):
    """Bad user input: an argument, a config value or a file."""


class TraceError(InputError):
    """A routing-trace file that is missing, truncated, corrupt or of the wrong schema."""
