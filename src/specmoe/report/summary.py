"""What a run prints when it ends: where the report is and its opening paragraph (written by the
report stage to results/report/summary.txt), or why there is none."""

from __future__ import annotations

from pathlib import Path


def end_of_run(summary_path, started: float) -> str:
    """The end-of-run text: the report's summary where this run wrote it, else where an older
    report lies (not rebuilt by this run: its targets did not include the report)."""
    p = Path(summary_path)
    if not p.is_file():
        return "specmoe: this run made no report (its targets did not include results/report)."
    text = p.read_text().rstrip()
    if p.stat().st_mtime < started:
        first = text.splitlines()[0] if text else str(p)
        return (f"specmoe: the report was not rebuilt by this run (its targets did not include "
                f"it); the last one: {first.removeprefix('Report: ')}")
    return "\nspecmoe: run complete.\n" + text
