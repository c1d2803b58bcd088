"""tests/budget.py: a budgeted fixture's set-up is timed on its own budget, not on the timer of the
test that first requests it, and that test keeps its own limit (pytest-timeout in a subprocess)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CASE = """
import time
import pytest
from budget import budget

@pytest.fixture(scope="session")
@budget({budget})
def slow_setup():
    time.sleep({setup})
    return 1

def test_reads_it(slow_setup):
    time.sleep({body})
    assert slow_setup == 1

def test_reads_it_too(slow_setup):
    assert slow_setup == 1
"""


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester whose subprocess imports tests/budget.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    return pytester


def run(pytester, *, budget: float, setup: float, body: float = 0.0, decorated: bool = True):
    case = CASE.format(budget=budget, setup=setup, body=body)
    if not decorated:
        case = case.replace("@budget(", "# @budget(")
    pytester.makepyfile(test_case=case)
    return pytester.runpytest_subprocess("-p", "budget", "--timeout=1", "-p", "no:cacheprovider")


def test_a_set_up_longer_than_the_tests_timeout_passes_within_its_budget(pytester):
    run(pytester, budget=20, setup=1.5).assert_outcomes(passed=2)


def test_without_the_budget_the_same_set_up_times_out_in_the_first_test(pytester):
    r = run(pytester, budget=20, setup=1.5, decorated=False)
    r.assert_outcomes(errors=2)
    r.stdout.fnmatch_lines(["*Timeout (>1.0s) from pytest-timeout*"])


def test_a_set_up_past_its_budget_fails_on_the_budget(pytester):
    r = run(pytester, budget=0.5, setup=2)
    r.assert_outcomes(errors=2)
    r.stdout.fnmatch_lines(["*Timeout (>0.5s) from pytest-timeout*"])


def test_the_test_keeps_its_own_limit_after_the_set_up(pytester):
    r = run(pytester, budget=20, setup=1.5, body=1.5)
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["*Timeout (>*s) from pytest-timeout*"])
