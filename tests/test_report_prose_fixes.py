"""The report's prose against tables that broke or misled it: three tiny targets of different
granularity, runs listed K descending, controls that do not decide their excess, and a TE that
the sweep does not identify."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from declared import tables_in
from specmoe.report import prose, tables

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"


def _share(kn: float, share: float, half: float = 0.02) -> tuple:
    """A model's entry of the shares _granularity_rows takes: k/N, the temporal share and its
    95% interval."""
    return kn, share, share - half, share + half


def test_three_tiny_targets_of_different_granularity_give_a_row_per_neighbouring_pair():
    """The loop of _granularity_rows reused the name of its `control` parameter (target ->
    control) for the control's status, so the second pair indexed a string: three tiny targets
    of different granularity made routing_targets raise TypeError."""
    shares = {"a": _share(0.125, 0.6), "b": _share(0.25, 0.4), "c": _share(0.5, 0.2),
              "ar": _share(0.125, 0.3), "br": _share(0.25, 0.3), "cr": _share(0.5, 0.3)}
    control = {"a": "ar", "b": "br", "c": "cr"}
    rows = prose._granularity_rows(["a", "b", "c"], shares, control, {})
    assert [(r["model"], r["status"], r["control_status"]) for r in rows] == [
        ("a", prose.SHOWN, prose.UNDECIDED), ("b", prose.SHOWN, prose.UNDECIDED)]
    # the first pair paired by prompt (matched_controls' share_* columns), the second not
    lead = {"share_coarser": "b", "share_paired": True, "comparable": True, "why": "",
            **{f"share_{k}": v for k, v in (
                ("lead", 0.2), ("lead_low", 0.1), ("lead_high", 0.3),
                ("control_lead", 0.0), ("control_lead_low", -0.1), ("control_lead_high", 0.1),
                ("excess", 0.2), ("excess_low", 0.05), ("excess_high", 0.35))}}
    rows = prose._granularity_rows(["a", "b", "c"], shares, control, {"a": lead})
    assert len(rows) == 2 and "paired by prompt" in rows[0]["value"]
    assert rows[1]["target"].startswith("temporal share of b ")
