"""The default run's numbers that docs/method.md quotes are read from the checked-in report
tables (tests/fixtures/report_tables/, regenerated from a full default run), so a regeneration
that moves them fails here instead of leaving the docs stale: method.md quoted overlaps of
0.267 / 0.236 / 0.213 / 0.194, a longest held-out prose prompt of 32 tokens and 2 of 112 looping
requests, where the tables give 0.319 / 0.255 / 0.244 / 0.231, 33 and 9."""

from __future__ import annotations

import pandas as pd

from wf import REPO

TABLES = REPO / "tests" / "fixtures" / "report_tables"
METHOD = " ".join((REPO / "docs" / "method.md").read_text().split())
MAIN = "tinybench+heldout-code+heldout-prose"


def table(name: str) -> pd.DataFrame:
    return pd.read_csv(TABLES / f"{name}.csv", comment="#")


def main_row(t: pd.DataFrame, model: str, k: int = 3) -> pd.Series:
    return t[(t.model == model) & (t.k == k) & (t.dataset == MAIN)].iloc[0]


def test_the_penalised_overlap_along_the_sequence_is_the_tables():
    r = main_row(table("overlap_by_distance"), "tiny-fine")
    quoted = " / ".join(f"{r[f'seq{d}']:.3f}" for d in range(1, 5))
    assert f"({quoted} at d = 1..4" in METHOD
    assert f"penalty, {r['repetitive_windows_pct']:.0f}% of windows repeat a token" in METHOD


def test_the_longest_embedded_prompts_are_the_prompt_fit_tables():
    t = table("prompt_fit")
    longest = t[t.model == "tiny-fine"].groupby("slice_dataset").longest_tokens.max()
    assert (f"are {longest['tinybench']} (tinybench), {longest['heldout-code']} (heldout-code) "
            f"and {longest['heldout-prose']} (heldout-prose) tokens") in METHOD


def test_the_looping_requests_quoted_are_the_tables():
    t = table("overlap_by_distance")
    fine = main_row(t, "tiny-fine")["seq_loop_free_dropped_requests"]
    coarse = main_row(t, "tiny-coarse")["seq_loop_free_dropped_requests"]
    n = main_row(t, "tiny-fine")["seq_requests"]
    assert f"the current default's loop in {fine} of {n}" in METHOD
    assert f"{coarse} of {n} now)" in METHOD
