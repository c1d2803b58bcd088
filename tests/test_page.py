"""How a long table or a curve appears inline in the report (specmoe.report.page): the batch
sizes it shows are the table's own, and its note names those it shows."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from specmoe.report import page, tables

FIXTURE = Path(__file__).parent / "fixtures" / "report_tables"


def _named_sizes(note: str) -> list[int]:
    """The batch sizes a note names: the numbers in its first parenthesis after 'batch size'."""
    m = re.search(r"batch sizes? \(?([\d, ]+)", note)
    assert m, note
    return [int(x) for x in m.group(1).replace(" ", "").strip(",").split(",")]


def curve(batches, models=("m",)) -> pd.DataFrame:
    return pd.DataFrame([{"model": m, "drafter": "d", "k": 3, "dataset": "x", "control_of": None,
                          "routing": r, "batch": b, "te": 0.1 * i}
                         for m in models for r in ("measured", "uniform")
                         for i, b in enumerate(batches)])


def test_a_curve_without_powers_of_4_shows_its_own_batch_sizes():
    """A te_vs_batch table of batch sizes 2, 8, 32, 128 (the schema takes any) was shown as an
    empty frame (columns model, k, batch alone: only powers of 4 were kept) under a note saying
    "Shown: TE by batch size (1, 4, 16, …) … every row is in the files above"."""
    wide, note = page.pivoted(curve([2, 8, 32, 128]), "te_vs_batch")
    assert not wide.empty and list(wide["batch"]) == [2, 8, 32, 128]
    assert list(wide.columns) == ["model", "k", "batch", "measured", "uniform"]
    assert _named_sizes(note) == [2, 8, 32, 128]


def test_a_curve_of_many_batch_sizes_shows_every_other_one_and_names_them():
    """Thirteen sizes 1 .. 4096: every other one (1, 4, .., 4096), named as shown; batches 3 ..
    3 * 2^8 (no power of 4 among them): every other one of those, not none."""
    wide, note = page.pivoted(curve([2 ** i for i in range(13)]), "te_vs_batch")
    assert list(wide["batch"]) == [1, 4, 16, 64, 256, 1024, 4096]
    assert _named_sizes(note) == [1, 4, 16, 64, 256, 1024, 4096]
    odd = [3 * 2 ** i for i in range(9)]
    wide, note = page.pivoted(curve(odd), "te_vs_batch")
    assert list(wide["batch"]) == odd[::2] and _named_sizes(note) == odd[::2]


def test_the_fixture_curve_notes_name_only_the_sizes_they_show():
    for stem in page.PIVOTS:
        wide, note = page.pivoted(tables.read_csv(FIXTURE / f"{stem}.csv"), stem)
        assert not wide.empty
        assert _named_sizes(note) == sorted(set(wide["batch"])), (stem, note)


def test_a_long_table_shows_the_batch_sizes_it_has_and_names_them():
    """main_rows picks its batch sizes as pivoted does: a long curve of sizes 2, 8, 32, 128
    kept only powers of 4 and showed no row ("0 of 80 rows"), its note naming 1, 4, 16."""
    long = curve([2, 8, 32, 128], models=[f"m{i}" for i in range(10)])
    shown, note = page.main_rows(long, "draft_ratio_model")
    assert not shown.empty and set(shown["batch"]) <= {2, 8, 32, 128}
    # four sizes: none left out, so the note names none (it counts the rows it shows)
    assert "batch size" not in note and "(40 of 80 rows)" in note
    many = curve([2 ** i for i in range(13)], models=[f"m{i}" for i in range(4)])
    shown, note = page.main_rows(many, "draft_ratio_model")
    assert sorted(set(shown["batch"])) == [1, 4, 16, 64, 256, 1024, 4096]
    assert _named_sizes(note) == [1, 4, 16, 64, 256, 1024, 4096]
