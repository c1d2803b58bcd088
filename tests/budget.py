"""A shared fixture's set-up on a time budget of its own (hooks that tests/conftest.py imports).

pytest-timeout's timer covers a test's set-up, call and tear-down, so a session or module fixture
that trains models or runs a real chain spends the time of whichever test happens to need it first:
under load that test times out although its own work took seconds. A fixture decorated with
`budget(seconds)` is set up on a timer of that many seconds instead (its timeout reads
"Timeout (>Ns) from pytest-timeout"), and the test then gets back the time it had left, so its own
limit counts everything but the budgeted set-up. Only pytest-timeout's public hooks are used; with
`timeout_func_only` (no timer during set-up) or without pytest-timeout nothing changes.
"""

from __future__ import annotations

import time

import pytest

_timed: dict = {}  # the running test's timer: item, settings, start (monotonic seconds)


def budget(seconds: float):
    """Decorate a fixture's function (below @pytest.fixture): its set-up runs on a timer of
    `seconds` of its own, not on the timer of the test that first requests it."""
    def mark(func):
        func.setup_budget_s = float(seconds)
        return func
    return mark


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item, settings):
    if not _timed.get("within"):
        _timed.update(item=item, settings=settings, start=time.monotonic())
    # None: pytest-timeout's own implementation sets the timer


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_cancel_timer(item):
    if not _timed.get("within"):
        _timed.clear()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    seconds = getattr(fixturedef.func, "setup_budget_s", None)
    if seconds is None or "item" not in _timed or _timed.get("within"):
        return (yield)
    item, settings = _timed["item"], _timed["settings"]
    hook = request.config.hook
    begun = time.monotonic()
    _timed["within"] = True
    try:
        hook.pytest_timeout_cancel_timer(item=item)
        hook.pytest_timeout_set_timer(item=item, settings=settings._replace(timeout=seconds))
        return (yield)
    finally:
        hook.pytest_timeout_cancel_timer(item=item)
        _timed["start"] += time.monotonic() - begun  # the set-up is not the test's time
        left = settings.timeout - (time.monotonic() - _timed["start"])
        hook.pytest_timeout_set_timer(item=item, settings=settings._replace(
            timeout=max(round(left, 1), 0.1)))
        _timed["within"] = False
