"""Small wording helpers the report's modules share; it imports nothing, so a light module
(report.timing) takes them without the analysis modules (report.prose)."""

from __future__ import annotations


def and_join(words: list[str]) -> str:
    """"a", "a and b", "a, b and c"; "" for none."""
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)
