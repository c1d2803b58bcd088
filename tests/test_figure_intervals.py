"""The report's figures draw the intervals their tables carry, and the comparison keeps them.

Each test builds its figure from the fixture tables of a real run (tests/fixtures/report_tables)
and reads the expected interval from the same table, so they hold after the fixtures are
regenerated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from declared import in_folder
from specmoe.report import figures
from specmoe.report.runs import load
from specmoe.report.tables import Tables
from specmoe.sources import published
from test_report import FIXTURE_STUDY

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"


def _fixture_comparison() -> pd.DataFrame:
    td = Tables.of(in_folder(FIXTURE))
    names = {s.table for s in published.SPECS} | {"three_step_correction"}
    return published.comparison({n: load(td, n) for n in names}, FIXTURE_STUDY)


def test_a_delta_beside_the_published_one_keeps_its_by_request_interval():
    """acceptance_consecutive names the delta's interval delta_low_by_request/high_by_request;
    the comparison read delta_low/delta_high, so every delta row lost its interval."""
    cmp_ = _fixture_comparison()
    ac = load(Tables.of(in_folder(FIXTURE)), "acceptance_consecutive")
    r = ac[(ac["model"] == "synth-fine") & (ac["draft_position"] == 1)].iloc[0]
    row = cmp_[(cmp_["table"] == "acceptance_consecutive") & (cmp_["quantity"] == "delta")
               & (cmp_["model"] == "synth-fine") & (cmp_["key"] == "draft_position 1")].iloc[0]
    assert np.isfinite(r["delta_low_by_request"]) and np.isfinite(r["delta_high_by_request"])
    assert (row["reproduced_low"], row["reproduced_high"]) == pytest.approx(
        (r["delta_low_by_request"], r["delta_high_by_request"]))
    assert row["reproduced_low"] <= row["reproduced"] <= row["reproduced_high"]
