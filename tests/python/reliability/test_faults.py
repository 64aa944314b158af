"""Faults, each compared with the same training run without Hookscope (bit-identical losses and weights).

* The editor goes away mid-run (socket closed; or silent: it stops reading
  and answering): the backend removes every hook within about 2 s, training
  goes on unharmed, and the agent reconnects when an editor listens again at
  the same address.
* A breakpoint callback (the Python API's user hook) or a breakpoint
  condition expression raises: reported as a notice, never raised into training.
* Outputs that are not tensors, empty, sparse, quantized and complex tensors,
  lazy modules, layers called twice per step, modules created inside forward:
  handled or skipped with a note, never a crash, with breakpoints on every
  phase, watches, summaries and break on NaN all on.
"""

from __future__ import annotations

import socket
import threading
import time

import torch
from reliability_support import (
    STEPS,
    SmallNet,
    arm_everything,
    assert_same_training,
    baseline,
    batches,
    global_hook_count,
    hook_count,
    params_of,
    train,
    wait_until,
)
from torch import nn

from hookscope.engine.core import Engine
from hookscope.link import handshake
from hookscope.link.protocol_vocabulary import ERROR_CODES, PHASES, ProtocolError
from hookscope.link.serve_loop import SILENCE_LIMIT_S


def test_editor_closes_mid_run_hooks_removed_training_unchanged_and_reconnect(link, live_agent):
    expected = baseline(SmallNet)
    globals_before = global_hook_count()
    torch.manual_seed(0)
    model = SmallNet()
    a = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    arm_everything(conn)
    data = batches(STEPS)
    timings: dict[str, float] = {}

    def on_step(i: int) -> None:
        if i == 3:
            assert hook_count(model) > 0
            timings["closed"] = time.monotonic()
            # The editor (listener and connection) goes away.
            link.close()
        if i == 4:
            # training goes on while the agent notices; measure when the hooks are gone
            wait_until(lambda: hook_count(model) == 0, timeout=15, what="the hooks to be removed")
            timings["removed"] = time.monotonic()

    losses = train(model, data, on_step)
    assert_same_training((losses, params_of(model)), expected)
    assert timings["removed"] - timings["closed"] < SILENCE_LIMIT_S + 3  # generous on a loaded machine
    assert global_hook_count() == globals_before
    assert not a.connected

    # An editor listens again at the same address: the agent reconnects with a fresh handshake.
    server = socket.create_server((link.host, link.port))
    try:
        server.settimeout(30)
        peer, _ = server.accept()
        _, process = handshake.as_editor(peer, lambda: (link.token,), time.monotonic() + 30)
        assert process["pid"] == conn.hello["pid"]
        peer.close()
    finally:
        server.close()


def test_silent_editor_hooks_removed_within_the_silence_limit(link, live_agent):
    expected = baseline(SmallNet)
    torch.manual_seed(0)
    model = SmallNet()
    a = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    arm_everything(conn)
    wait_until(lambda: a._editor_answers_pings, what="a heartbeat to be answered")
    data = batches(STEPS)
    gate = threading.Event()
    timings: dict[str, float] = {}

    def on_step(i: int) -> None:
        if i == 3:
            assert hook_count(model) > 0
            timings["silent"] = time.monotonic()
            # The editor hangs: its reader blocks on the next message and never reads again.
            conn._dispatch = lambda message: gate.wait()  # type: ignore[method-assign]
        if i == 4:
            wait_until(lambda: hook_count(model) == 0, timeout=15, what="the hooks to be removed")
            timings["removed"] = time.monotonic()

    try:
        losses = train(model, data, on_step)
    finally:
        gate.set()
    assert_same_training((losses, params_of(model)), expected)
    assert timings["removed"] - timings["silent"] < SILENCE_LIMIT_S + 3
    # ... and it reconnects to the (unchanged) listener.
    assert link.wait_connection(30, index=1).hello["pid"] == conn.hello["pid"]


def test_raising_callback_and_condition_are_reported_not_raised():
    expected = baseline(SmallNet)
    events: list[dict] = []
    engine = Engine(events.append)
    torch.manual_seed(0)
    model = SmallNet()
    engine.add_model("m1", model)

    def user_hook(hit) -> None:
        raise RuntimeError("user callback bug")

    resolved = engine.set_breakpoints(
        [
            {
                "id": "cb",
                "layer": "shared",
                "phases": ["forward", "backward"],
                "action": "callback",
                "callback": user_hook,
            },
            {
                "id": "expr",
                "layer": "head",
                "phases": ["forward"],
                "condition": {"kind": "expression", "expression": "output.no_such_attribute > 1"},
            },
            {
                "id": "zero",
                "layer": "conv",
                "phases": ["forward"],
                "condition": {"kind": "expression", "expression": "1 / 0"},
            },
        ]
    )
    assert all(r["layers"] for r in resolved), resolved
    losses = train(model, batches(STEPS))
    assert_same_training((losses, params_of(model)), expected)
    notices = [e for e in events if e["type"] == "notice"]
    texts = " | ".join(n["message"] for n in notices)
    assert "user callback bug" in texts
    assert "no_such_attribute" in texts and "ZeroDivisionError" in texts
    # Reported, but not once per call: the user is told, not flooded.
    assert len(notices) < 4 * STEPS
    assert engine.shutdown() > 0 and hook_count(model) == 0


# ---------------------------------------------------------------- odd outputs and modules


class OddOutputs(nn.Module):
    """Returns a tuple with every awkward kind of value next to the one tensor that matters."""

    def forward(self, x: torch.Tensor):
        q = torch.quantize_per_tensor(x.detach().float(), 0.1, 0, torch.qint8)
        return (
            x,
            None,
            "text",
            3,
            x[:0],
            x.detach().to_sparse(),
            q,
            torch.complex(x.detach(), x.detach()),
            {"k": [x.detach()]},
        )


class Weird(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lazy = nn.LazyLinear(16)
        self.odd = OddOutputs()
        self.shared = nn.Linear(16, 16)
        self.head = nn.Linear(16, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.lazy(x.flatten(1)))
        x = self.odd(x)[0]
        x = torch.tanh(self.shared(x))
        x = torch.tanh(self.shared(x))
        # A module created inside forward (not part of the tree), with fixed weights.
        scratch = nn.Linear(16, 16, bias=False)
        with torch.no_grad():
            scratch.weight.copy_(torch.eye(16) * 0.5)
        x = x + scratch(x)
        # Complex math inside, real result out.
        x = x + torch.fft.ifft(torch.fft.fft(x)).real * 0.0
        return self.head(x)


def _weird() -> Weird:
    model = Weird()
    model(torch.zeros(1, 1, 4, 4))  # materialise the lazy layer (as a user's warm-up would)
    return model


def test_odd_outputs_and_modules_never_crash_with_everything_on():
    expected = baseline(_weird)
    events: list[dict] = []
    engine = Engine(events.append)
    torch.manual_seed(0)
    model = _weird()
    engine.add_model("m1", model)
    engine.handle(
        {
            "type": "setBreakpoints",
            "id": 1,
            "breakpoints": [
                {"id": "all", "layer": "*", "phases": list(PHASES)},  # fires every time: logged
            ],
        }
    )
    engine.handle({"type": "setBreakOnNonFinite", "id": 2, "enabled": True})
    engine.handle({"type": "watch", "id": 3, "layers": ["lazy", "odd", "shared", "head"], "rateHz": 1000})
    losses = train(model, batches(STEPS))
    assert_same_training((losses, params_of(model)), expected)

    kinds = {e["type"] for e in events}
    assert "hit" in kinds and "summaries" in kinds
    errors = [
        e
        for e in events
        if e["type"] == "notice"
        and e["level"] in ("warning", "error")
        and e.get("code") not in ("breakpointUnresolved",)
    ]
    assert not errors, errors[:3]
    odd = [s for e in events if e["type"] == "summaries" and e["layer"] == "odd" for s in e["tensors"]]
    notes = {s["path"]: s.get("note") for s in odd}
    assert any(n and "sparse" in n for n in notes.values()), notes
    assert any(n and "quantized" in n for n in notes.values()), notes
    assert any(n and "complex" in n for n in notes.values()), notes
    assert any(n == "empty tensor" for n in notes.values()), notes
    dense = [s for s in odd if s["path"] == "output[0]"]
    assert dense and dense[0].get("mean") is not None
    shared_hits = [e for e in events if e["type"] == "hit" and e["layer"] == "shared" and e["phase"] == "forward"]
    assert len(shared_hits) >= 2 * STEPS, "a layer called twice per step fires twice"
    for request in (
        {"type": "getSummaries", "id": 4, "layer": "odd"},
        {"type": "render", "id": 5, "view": "histogram", "layer": "odd"},
        {"type": "getParamGrads", "id": 6},
    ):
        try:
            engine.handle(request)
        except ProtocolError as exc:  # a clear error reply is fine; a crash is not
            assert exc.code in ERROR_CODES
    assert engine.shutdown() > 0
    assert hook_count(model) == 0


def test_nan_in_an_odd_model_is_found_without_crashing():
    """Break on NaN with sparse/quantized/complex side outputs around: the culprit layer is named."""
    events: list[dict] = []
    engine = Engine(events.append)
    torch.manual_seed(0)
    model = _weird()
    engine.add_model("m1", model)
    engine.handle({"type": "setBreakOnNonFinite", "id": 1, "enabled": True})
    data = batches(6)
    with torch.no_grad():
        model.shared.weight[0, 0] = float("nan")
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    for x, y in data[:2]:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    hits = [e for e in events if e["type"] == "hit"]
    assert hits and hits[0]["layer"] == "shared", hits[:1]
    engine.shutdown()
    assert hook_count(model) == 0
