"""A TE is checked against its physical bounds whether or not it has an interval."""

from __future__ import annotations

import pandas as pd
import pytest

from specmoe.measured import sweep
from specmoe.report import prose


@pytest.mark.parametrize("v, status", [(1.2, "above 1: not physical"),
                                       (-0.1, "below 0: not physical")])
def test_a_te_without_interval_is_checked_against_its_bounds(v, status):
    """_te_text checked [0, 1] only where an interval existed: a TE of 1.2 without one read
    '1.20'."""
    assert sweep.bound_status(v) == status
    said = prose._te_text(pd.Series({"te_costmodel": v}), "te_costmodel")
    assert said.startswith(status) and f"raw ratio {v:.2f}, not a TE" in said, said
    assert prose._te_text(pd.Series({"te_costmodel": 0.6}), "te_costmodel") == "0.60"
