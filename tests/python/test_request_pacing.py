"""The requests' time share and shedding (``link/request_pacing.py``)."""

from __future__ import annotations

import time

import pytest

from hookscope.link import request_pacing
from hookscope.link.request_pacing import RequestBudget, should_shed


def test_request_budget_gives_a_share_in_turns():
    now = [0.0]
    budget = RequestBudget(share=0.05, burst=0.25, resume=0.003, clock=lambda: now[0])
    assert budget.available() and budget.wait_s() == 0.0
    budget.spend(0.3)  # a long request: the budget goes into debt
    assert not budget.available()
    assert budget.wait_s() == pytest.approx((0.05 + 0.003) / 0.05 + 1e-3)
    now[0] += 1.0  # the debt is paid back, but a turn needs 3 ms in hand
    assert not budget.available()
    now[0] += 0.07
    assert budget.available()
    now[0] += 100.0
    budget.available()
    budget.spend(0.25)  # never more than the burst in hand
    assert not budget.available()


def test_only_a_request_that_waited_past_the_limit_is_shed():
    long_ago = time.monotonic() - request_pacing.SHED_AFTER_S - 1
    assert should_shed({"type": "ping", "id": 3}, long_ago)
    assert not should_shed({"type": "ping", "id": 3}, time.monotonic())  # just read: answered
    # Only what could be answered ``busy`` under its own id: not a reply, an event, a bad id or a non-map.
    assert not should_shed({"type": "reply", "re": 1, "body": {}}, long_ago)
    assert not should_shed({"type": "ping", "id": True}, long_ago)
    assert not should_shed({"type": "no such thing", "id": 3}, long_ago)
    assert not should_shed([1, 2], long_ago)
