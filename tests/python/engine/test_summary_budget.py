"""The summary budget: the panel's interval, stretched when a round of summaries costs too much."""

from __future__ import annotations

import pytest

from hookscope.hooks.summary_budget import SummaryBudget


def test_cheap_summaries_keep_the_panel_interval():
    budget = SummaryBudget(share=0.05)
    for layer in range(10):
        budget.record((layer, "forward"), 0.0001)  # 1 ms a round: 2% of 50 ms
    assert budget.interval(0.25) == 0.25


def test_costly_round_stretches_the_interval_to_the_share():
    budget = SummaryBudget(share=0.05)
    for layer in range(100):
        budget.record((("m", str(layer)), "forward"), 0.002)
        budget.record((("m", str(layer)), "backward"), 0.001)
    assert budget.round_cost() == pytest.approx(0.3)
    assert budget.interval(0.25) == pytest.approx(6.0)  # 0.3 s of summaries every 6 s: 5%


def test_running_cost_follows_new_measurements_and_forgets_unwatched_layers():
    budget = SummaryBudget(share=0.1)
    key = (("m", "fc"), "forward")
    budget.record(key, 0.010)
    budget.record(key, 0.020)
    assert 0.010 < budget.round_cost() < 0.020
    budget.record((("m", "fc"), "backward"), 0.005)
    budget.record((("m", "other"), "forward"), 0.001)
    budget.forget(("m", "fc"))
    assert budget.round_cost() == pytest.approx(0.001)
    with pytest.raises(ValueError):
        SummaryBudget(share=0)


def test_forgetting_a_layer_while_the_training_thread_records_others():
    """The agent's thread forgets a layer (a new watch request) while the training thread records
    summaries of other layers: neither raises (a dict that changed size during iteration did)."""
    import sys
    import threading

    budget = SummaryBudget(share=0.05)
    for i in range(20_000):
        budget.record((f"old{i}", "forward"), 1e-4)
    stop, errors = threading.Event(), []

    def training() -> None:  # adds a key and drops one: the size changes, the dict does not grow
        i = 0
        while not stop.is_set():
            budget.record((f"new{i % 2}", "forward"), 1e-4)
            budget.forget(f"new{(i + 1) % 2}")
            i += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    worker = threading.Thread(target=training)
    worker.start()
    try:
        for i in range(50):
            budget.forget(f"old{i}")
    except RuntimeError as exc:
        errors.append(exc)
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(interval)
    assert errors == []
    assert not any(key[0] == "old0" for key in budget._cost)
