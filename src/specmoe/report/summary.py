"""What a run prints when it ends: where the report is and its opening paragraph (written by the
report stage to results/report/summary.txt), or why there is none; then where this run's time
went, by stage (specmoe.report.timing, from the jobs' benchmark files)."""

from __future__ import annotations

import time
from pathlib import Path

from . import timing


def end_of_run(summary_path, started: float, root: str | Path | None = None,
               controls=None) -> str:
    """The end-of-run text: the report's summary where this run wrote it, else where an older
    report lies (not rebuilt by this run: its targets did not include the report); with root
    (the working directory), the time breakdown of the jobs this run ran, whose trained models
    and untrained controls (controls: the configuration's, Config.controls) it tells apart."""
    return _report_part(summary_path, started) + (
        "" if root is None else "\n\n" + timing.text(
            timing.collect(root, since=started, controls=controls),
            wall_s=time.time() - started))


def _report_part(summary_path, started: float) -> str:
    p = Path(summary_path)
    if not p.is_file():
        return "specmoe: this run made no report (its targets did not include results/report)."
    from ..provenance import CSV_PROVENANCE

    # its provenance line (stages.report.report_index_stage) is the record's, not the run's news
    text = "\n".join(ln for ln in p.read_text().splitlines()
                     if not ln.startswith(CSV_PROVENANCE)).rstrip()
    if p.stat().st_mtime < started:
        first = text.splitlines()[0] if text else str(p)
        return (f"specmoe: the report was not rebuilt by this run (its targets did not include "
                f"it); the last one: {first.removeprefix('Report: ')}")
    return "\nspecmoe: run complete.\n" + text
