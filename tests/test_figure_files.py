"""A figure's files are a function of its data and provenance: saving the same figure twice,
a second apart, writes the same bytes (a PDF carried the time it was written)."""

from __future__ import annotations

import time

import numpy as np

from specmoe.report import figures


def _figure():
    fig, ax = figures.plt.subplots()
    ax.plot(np.arange(5), np.arange(5) ** 2)
    return fig


def test_saving_the_same_figure_twice_writes_the_same_bytes(tmp_path):
    prov = {"config_hash": "x"}
    first = figures.save(_figure(), tmp_path / "a" / "fig", prov)
    time.sleep(1.1)  # a PDF's /CreationDate is to the second
    second = figures.save(_figure(), tmp_path / "b" / "fig", prov)
    assert [p.suffix for p in first] == [".png", ".pdf"]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert b"CreationDate" not in first[1].read_bytes()
