"""The agent without a debugger: handshake, requests, error replies, the bounded queue, reconnects."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import pytest

from hookscope.link import codec, handshake, outgoing, protocol, serve_loop
from hookscope.link.agent import Agent
from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    ERR_INTERNAL,
    ERR_NOT_AVAILABLE,
    ERR_TOKEN,
    ERR_UNKNOWN_TYPE,
    ProtocolError,
)
from hookscope.terminal.editor_link import EditorLink, RequestError


class FakeEngine:
    """Stands in for hookscope.engine.core.Engine: records calls, answers two requests."""

    instances: list[FakeEngine] = []

    def __init__(self, emit):
        self.emit = emit
        self.models: dict[str, object] = {}
        self.hooks = 0
        self.shutdowns = 0
        FakeEngine.instances.append(self)

    def add_model(self, model_id, model, locations=None):
        self.models[model_id] = model

    def remove_model(self, model_id):
        self.models.pop(model_id, None)

    def handle(self, request):
        if request["type"] == "setBreakOnNonFinite":
            self.hooks = 3 if request["enabled"] else 0
            return {"enabled": request["enabled"]}
        if request["type"] == "removeHooks":
            raise RuntimeError("boom")
        raise ProtocolError(ERR_NOT_AVAILABLE, f"{request['type']} not in the fake")

    def shutdown(self):
        removed, self.hooks = self.hooks, 0
        self.shutdowns += 1
        return removed


@pytest.fixture
def link():
    server = EditorLink()
    yield server
    server.close()


@pytest.fixture
def make_agent():
    agents = []
    FakeEngine.instances.clear()

    def make(link, **kwargs):
        kwargs.setdefault("engine_ready", lambda: True)
        a = Agent(link.host, link.port, link.token, link.session, engine_factory=FakeEngine, discover=False, **kwargs)
        a.start()
        agents.append(a)
        return a

    yield make
    for a in agents:
        a.stop()


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_hello_first_then_requests_reach_the_engine(link, make_agent):
    make_agent(link)
    conn = link.wait_connection(10)
    hello = conn.hello  # the process's description, sent once both sides proved the token
    protocol.validate(hello)
    assert hello["type"] == "process" and hello["pid"] == os.getpid()
    assert link.token not in repr(conn.received) and "token" not in hello
    assert hello["session"] == link.session and hello["rank"] == 0 and hello["worldSize"] == 1
    assert conn.request("ping")["pid"] == os.getpid()
    assert conn.request("setBreakOnNonFinite", enabled=True) == {"enabled": True}
    assert FakeEngine.instances[-1].hooks == 3


def test_bad_messages_get_error_replies_and_the_agent_keeps_serving(link, make_agent):
    make_agent(link)
    conn = link.wait_connection(10)
    # unknown type, wrong field type, missing id, not a map, a handler that raises
    conn.send({"type": "frobnicate", "id": 7})
    assert conn.wait_reply(7, 10)["error"]["code"] == ERR_UNKNOWN_TYPE
    conn.send({"type": "setBreakOnNonFinite", "id": 8, "enabled": "yes"})
    assert conn.wait_reply(8, 10)["error"]["code"] == ERR_BAD_MESSAGE
    conn.send({"type": "setBreakOnNonFinite", "enabled": True})
    assert conn.wait_event("reply", timeout=10)["error"]["code"] == ERR_BAD_MESSAGE
    conn.send_raw(codec.frame([1, 2, 3]))  # type: ignore[arg-type]
    assert conn.wait_event("reply", timeout=10)["re"] == -1
    conn.send({"type": "hit", "id": 9, "breakpoint": "x"})  # a backend->editor message
    assert conn.wait_reply(9, 10)["error"]["code"] == ERR_BAD_MESSAGE
    with pytest.raises(RequestError) as err:
        conn.request("removeHooks")
    assert err.value.code == ERR_INTERNAL and "boom" in err.value.message
    with pytest.raises(RequestError) as err:
        conn.request("listHooks")
    assert err.value.code == ERR_NOT_AVAILABLE
    assert conn.request("ping")["pid"] == os.getpid()


class _StandInModel:
    """Any weakly referable object stands for a model: the fake engine never looks inside."""


def test_disconnect_removes_hooks_and_reconnect_sends_hello_and_models(link, make_agent):
    a = make_agent(link)
    model = _StandInModel()  # the agent holds models weakly: the test keeps this one alive
    a._on_model_added("m1", model, {"id": "m1", "name": "net", "cls": "Net", "params": 1, "modules": []})
    first = link.wait_connection(10)
    first.wait_event("modelAdded", timeout=10)
    first.request("setBreakOnNonFinite", enabled=True)
    engine = FakeEngine.instances[-1]
    first.close()
    assert wait_until(lambda: engine.shutdowns == 1 and engine.hooks == 0)
    second = link.wait_connection(15, index=1)
    assert second.hello["type"] == "process"
    assert second.wait_event("modelAdded", timeout=10)["model"]["id"] == "m1"
    assert FakeEngine.instances[-1] is not engine and "m1" in FakeEngine.instances[-1].models


def test_silent_editor_is_detected_once_it_has_answered_pings(link, make_agent, monkeypatch):
    monkeypatch.setattr(serve_loop, "PROBE_AFTER_S", 0.2)
    monkeypatch.setattr(serve_loop, "SILENCE_LIMIT_S", 1.0)
    a = make_agent(link)
    conn = link.wait_connection(10)
    conn.request("setBreakOnNonFinite", enabled=True)
    engine = FakeEngine.instances[-1]
    assert wait_until(lambda: a._editor_answers_pings)  # the link answers pings by itself
    # Go silent: stop reading and answering without closing the socket.
    silenced = threading.Event()
    original = conn._dispatch
    conn._dispatch = lambda message: silenced.set()  # type: ignore[method-assign]
    assert wait_until(lambda: engine.shutdowns == 1, timeout=10)
    conn._dispatch = original  # type: ignore[method-assign]
    assert link.wait_connection(15, index=1).hello["pid"] == os.getpid()


def test_wrong_token_is_refused_for_good(link, make_agent, capfd):
    a = Agent(
        link.host, link.port, "not-the-token", engine_factory=FakeEngine, discover=False, engine_ready=lambda: True
    )
    a.start()
    try:
        assert wait_until(lambda: a.refused is not None)
        assert a.refused.startswith(ERR_TOKEN)
        assert "refused this process" in capfd.readouterr().err
        assert link.refused and not link.connections
        assert wait_until(lambda: not a._thread.is_alive())
    finally:
        a.stop()


def test_emit_never_blocks_when_the_editor_does_not_read(monkeypatch):
    monkeypatch.setattr(serve_loop, "OUT_BUFFER_LIMIT", 1 << 20)
    server = socket.create_server(("127.0.0.1", 0))
    host, port = server.getsockname()[:2]
    a = Agent(host, port, "t", engine_factory=FakeEngine, discover=False, engine_ready=lambda: True)
    a.start()
    try:
        peer, _ = server.accept()
        handshake.as_editor(peer, lambda: ("t",), time.monotonic() + 10)  # then never read: buffers fill up
        assert a.wait_connected(10)
        payload = {
            "type": "summaries",
            "model": "m1",
            "layer": "x",
            "phase": "forward",
            "step": 0,
            "tensors": [{"blob": "x" * 4096}],
        }
        for _ in range(20000):  # would block on a full socket if emit wrote to it
            a.emit(payload)
        assert a.queue.dropped > 0
        waiting = sum(1 for m in list(a.queue._items) if m["type"] == "summaries")
        assert waiting <= outgoing.QUEUE_LIMIT  # (heartbeats and stats may wait beside them)
        peer.close()
    finally:
        a.stop()
        server.close()


def test_drops_are_reported_in_a_stats_event(link, make_agent):
    a = make_agent(link)
    conn = link.wait_connection(10)
    a.queue.dropped += 5  # as if a slow editor had cost five events
    stats = conn.wait_event("stats", timeout=10)
    assert stats["dropped"] == 5 and stats["queued"] >= 0


def test_settings_wait_for_torch_and_are_applied_when_the_engine_starts(link, make_agent):
    torch_loaded = threading.Event()
    make_agent(link, engine_ready=torch_loaded.is_set)
    conn = link.wait_connection(10)
    # Before the program imports torch there is no engine; settings are kept, not refused.
    assert conn.request("setBreakOnNonFinite", enabled=True) == {"enabled": True}
    assert conn.request("setBreakpoints", breakpoints=[{"id": "b1", "layer": "fc"}]) == {
        "resolved": [{"id": "b1", "layers": []}]
    }
    with pytest.raises(RequestError) as err:
        conn.request("listHooks")
    assert err.value.code == ERR_NOT_AVAILABLE and "torch" in err.value.message
    assert not FakeEngine.instances
    torch_loaded.set()
    assert wait_until(lambda: FakeEngine.instances and FakeEngine.instances[-1].hooks == 3)


def test_a_bug_in_a_handler_is_answered_internal_and_logged_with_its_traceback(link, make_agent, caplog):
    """Hookscope's own bug is not the editor's fault: 'internal', never 'badMessage', and the
    traceback goes to the agent's log (its logger does not propagate into the user's logging)."""
    agent_log = logging.getLogger("hookscope.link.agent")
    agent_log.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="hookscope.link.agent")
    try:
        make_agent(link)
        conn = link.wait_connection(10)
        with pytest.raises(RequestError) as err:
            conn.request("removeHooks")
        assert err.value.code == ERR_INTERNAL
        assert wait_until(lambda: "Traceback" in caplog.text and "RuntimeError: boom" in caplog.text)
        assert conn.request("ping")["pid"] == os.getpid()
    finally:
        agent_log.removeHandler(caplog.handler)
