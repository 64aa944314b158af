"""Security of the socket, both ends in Python: the editor stand-in (EditorLink) and the agent.

* EditorLink binds 127.0.0.1 only; a connection that does not complete the
  handshake (silent, a wrong or replayed proof, a missing proof, another
  message first, garbage, a frame over the handshake limit, an old protocol)
  is closed within the deadline, and the refusal never echoes the token.
* The agent bounds what it decodes (frame size from the header, depth,
  collection sizes), answers unknown types and wrong field types with error
  replies, keeps serving afterwards, and stops for good when the editor
  refuses its proof.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time

import msgpack
import pytest
from reliability_support import SmallNet, wait_until

from hookscope.link import codec, handshake
from hookscope.link.agent import Agent
from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    ERR_NOT_AVAILABLE,
    ERR_TOKEN,
    ERR_UNKNOWN_LAYER,
    ERR_UNKNOWN_TYPE,
    ERR_VERSION,
    HANDSHAKE_FRAME_BYTES,
    HELLO_DEADLINE_S,
    MAX_COLLECTION,
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
)
from hookscope.terminal.editor_link import EditorLink


def _connect(link: EditorLink) -> socket.socket:
    sock = socket.create_connection((link.host, link.port), timeout=HELLO_DEADLINE_S + 10)
    return sock


def _read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes; and how long that took."""
    start = time.monotonic()
    data = b""
    sock.settimeout(limit_s)
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open for more than {limit_s} s") from None
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - start


def _replies(data: bytes) -> list[dict]:
    return codec.FrameReader().feed(data)


def _hello(nonce: bytes | None = None, **extra: object) -> dict:
    hello = {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "hookscope": "0",
        "nonce": nonce if nonce is not None else handshake.new_nonce(),
    }
    hello.update(extra)
    return hello


def _challenge(sock: socket.socket, nonce: bytes) -> bytes:
    """Say hello as a backend and return the editor's nonce."""
    sock.sendall(codec.frame(_hello(nonce)))
    challenge = handshake.read_frame(sock, time.monotonic() + 10)
    assert challenge["type"] == "challenge", challenge
    return challenge["nonce"]


def test_editor_link_listens_on_loopback_only(link):
    assert link.host == "127.0.0.1"
    assert link._server.getsockname()[0] == "127.0.0.1"


@pytest.mark.parametrize(
    "case",
    [
        "silent",
        "wrong token",
        "replayed proof",
        "missing proof",
        "proof of wrong type",
        "not hello first",
        "garbage bytes",
        "oversize header",
        "old protocol",
    ],
)
def test_editor_link_refuses_within_the_hello_deadline(link, case):
    secret = link.token
    sock = _connect(link)
    try:
        mine = handshake.new_nonce()
        if case == "wrong token":
            theirs = _challenge(sock, mine)
            wrong = handshake.proof("0" * len(secret), handshake.BACKEND, mine, theirs)
            sock.sendall(codec.frame({"type": "proof", "proof": wrong}))
        elif case == "replayed proof":  # right token, but for other nonces: a recorded proof is worthless
            _challenge(sock, mine)
            stale = handshake.proof(secret, handshake.BACKEND, mine, handshake.new_nonce())
            sock.sendall(codec.frame({"type": "proof", "proof": stale}))
        elif case == "missing proof":
            _challenge(sock, mine)
            sock.sendall(codec.frame({"type": "proof"}))
        elif case == "proof of wrong type":
            _challenge(sock, mine)
            sock.sendall(codec.frame({"type": "proof", "proof": 12345}))
        elif case == "not hello first":
            sock.sendall(codec.frame({"type": "ping", "id": 1}))
        elif case == "garbage bytes":
            sock.sendall(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
        elif case == "oversize header":
            sock.sendall(struct.pack(">I", HANDSHAKE_FRAME_BYTES + 1))
        elif case == "old protocol":  # a hookscope package of protocol 1 sent its token in hello
            sock.sendall(
                codec.frame(
                    {
                        "type": "hello",
                        "token": secret,
                        "protocol": 1,
                        "pid": 1,
                        "rank": 0,
                        "worldSize": 1,
                        "python": "3",
                        "torch": "2",
                        "hookscope": "0.0.9",
                        "argv": [],
                        "debugger": False,
                    }
                )
            )
        data, took = _read_until_closed(sock, HELLO_DEADLINE_S + 10)
    finally:
        sock.close()
    assert took <= HELLO_DEADLINE_S + 5  # generous: a loaded machine
    assert not link.connections, "a refused connection must never be accepted"
    wait_until(lambda: link.refused, what="the refusal to be recorded")
    if case != "silent":
        replies = [m for m in _replies(data) if m["type"] == "reply"]
        assert replies and "error" in replies[0], _replies(data)
        expected = {
            "wrong token": ERR_TOKEN,
            "replayed proof": ERR_TOKEN,
            "old protocol": ERR_VERSION,
        }.get(case, ERR_BAD_MESSAGE)
        assert replies[0]["error"]["code"] == expected
        if case == "old protocol":
            assert (
                "protocol 1" in replies[0]["error"]["message"]
                and f"speaks {PROTOCOL_VERSION}" in replies[0]["error"]["message"]
            )
        # The editor's own proof is never sent to a peer that did not prove the token.
        assert all(m["type"] != "proof" for m in _replies(data))
    # Neither the reply nor the log echoes the session token.
    assert secret.encode() not in data
    assert all(secret not in entry for entry in link.refused)


def test_editor_link_hello_deadline_is_total_not_per_read(link):
    # A client dribbling a byte every half deadline would be kept for ever by a per-read timeout.
    sock = _connect(link)
    try:
        frame = codec.frame(_hello())
        deadline = time.monotonic() + HELLO_DEADLINE_S * 2.5
        sent = 0
        closed = False
        while time.monotonic() < deadline and sent < len(frame) - 1:
            try:
                sock.sendall(frame[sent : sent + 1])
            except OSError:
                closed = True
                break
            sent += 1
            time.sleep(HELLO_DEADLINE_S / 2)
        if not closed:
            sock.settimeout(0.5)
            try:
                closed = sock.recv(1) == b""
            except TimeoutError:
                closed = False
            except OSError:
                closed = True
        assert closed, "a dribbling client outlived the hello deadline"
    finally:
        sock.close()


def test_agent_stops_for_good_on_a_wrong_token_and_does_not_log_it(link, caplog, capfd):
    secret = "agent-secret-token-value"
    a = Agent(link.host, link.port, secret, discover=False)
    agent_log = logging.getLogger("hookscope.link.agent")
    agent_log.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="hookscope.link.agent")
    a.start()
    try:
        wait_until(lambda: a.refused is not None, what="the agent to be refused")
        assert a.refused.startswith(ERR_TOKEN)
        wait_until(lambda: not a._thread.is_alive(), what="the agent thread to end")
        assert a.attempts == 1 and a.connections == 0  # it does not hammer the editor with retries
        assert not link.connections
    finally:
        a.stop()
        agent_log.removeHandler(caplog.handler)
    assert secret not in caplog.text
    assert secret not in capfd.readouterr().err
    assert link.token not in caplog.text


# ---------------------------------------------------------------- agent: bounds and error replies


def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_agent_refuses_oversize_frames_from_the_header_alone(link, live_agent):
    model = SmallNet()
    a = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    # Only the header of a frame above the limit: the agent must refuse it without waiting for the body.
    conn.send_raw(struct.pack(">I", MAX_FRAME_BYTES + 1))
    error = conn.wait_event("reply", lambda m: "error" in m, timeout=20)
    assert error["re"] == -1 and error["error"]["code"] == ERR_BAD_MESSAGE
    assert "exceeds" in error["error"]["message"]
    assert conn.wait_closed(20), "the stream cannot be re-synchronised: the agent must drop it"
    # and it reconnects with a fresh hello (the editor decides whether to keep it)
    assert link.wait_connection(20, index=1).hello["pid"]
    assert a.refused is None


@pytest.mark.parametrize(
    "body,why",
    [
        (lambda: msgpack.packb(_deep(MAX_DEPTH + 5)), "nested deeper"),
        (lambda: b"\xdd" + struct.pack(">I", MAX_COLLECTION + 1), "collection"),
        (lambda: b"\xdf" + struct.pack(">I", 0xFFFFFFFF), "collection"),
        (lambda: b"\xdb" + struct.pack(">I", 0xFFFFFFF0) + b"abc", "truncated string"),
        (lambda: msgpack.packb({1: 2}), "int map key"),
        (lambda: msgpack.packb(msgpack.ExtType(1, b"x")), "ext type"),
        (lambda: b"\x81\xa4type", "truncated map"),
        (lambda: msgpack.packb({"type": "ping", "id": 1}) + b"\x00", "extra bytes"),
        (lambda: b"\xa2\xff\xfe", "bad utf-8"),
    ],
)
def test_codec_refuses_unbounded_or_broken_bodies_with_protocol_error(body, why):
    data = body()
    start = time.monotonic()
    with pytest.raises(ProtocolError) as err:
        codec.decode(data)
    assert err.value.code == ERR_BAD_MESSAGE, why
    assert time.monotonic() - start < 5, f"{why}: decoding must not allocate or loop on a claimed size"


def test_depth_limit_is_exact():
    codec.decode(msgpack.packb({"type": "x", "v": _deep(MAX_DEPTH - 2)}))
    with pytest.raises(ProtocolError):
        codec.decode(msgpack.packb({"type": "x", "v": _deep(MAX_DEPTH - 1)}))


def test_agent_answers_every_bad_message_with_an_error_reply_and_keeps_serving(link, live_agent):
    model = SmallNet()
    a = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    bad = [
        ({"type": "frobnicate", "id": 1}, ERR_UNKNOWN_TYPE),
        ({"type": "x" * 100000, "id": 2}, ERR_UNKNOWN_TYPE),
        ({"type": "watch", "id": 3, "layers": "conv"}, ERR_BAD_MESSAGE),
        ({"type": "watch", "id": 4, "layers": [1, 2]}, ERR_UNKNOWN_LAYER),
        ({"type": "watch", "id": 5, "layers": ["conv"], "rateHz": -1}, ERR_BAD_MESSAGE),
        ({"type": "setBreakOnNonFinite", "id": 6, "enabled": 1}, ERR_BAD_MESSAGE),
        ({"type": "setBreakpoints", "id": 7, "breakpoints": [{"id": 3}]}, None),
        ({"type": "setBreakpoints", "id": 8, "breakpoints": [5, None, "x"]}, None),
        ({"type": "render", "id": 9, "view": "featureMap", "layer": {"a": 1}}, ERR_BAD_MESSAGE),
        ({"type": "render", "id": 10, "view": "nope"}, ERR_BAD_MESSAGE),
        ({"type": "getSummaries", "id": 11, "layer": "no.such.layer"}, ERR_UNKNOWN_LAYER),
        ({"type": "addIntervention", "id": 12, "layer": "conv", "kind": "explode"}, ERR_BAD_MESSAGE),
        ({"type": "inspectValue", "id": 13, "expression": "__import__('os').getpid()"}, ERR_NOT_AVAILABLE),
        ({"type": "hit", "id": 14}, ERR_BAD_MESSAGE),
        ({"type": "ping", "id": True}, ERR_BAD_MESSAGE),
    ]
    for message, code in bad:
        conn.send(message)
        reply = (
            conn.wait_reply(message["id"], 20)
            if not isinstance(message["id"], bool)
            else conn.wait_event("reply", lambda m: m.get("re") == -1, timeout=20)
        )
        if code is None:  # accepted at the protocol level, refused per entry
            assert "error" in reply or all(e.get("error") for e in reply["body"]["resolved"]), reply
        else:
            assert reply.get("error", {}).get("code") == code, (message["type"][:20], reply)
    assert conn.request("ping")["pid"] == os.getpid()
    assert a.connections == 1, "bad messages must not cost the connection"
    # Error texts quote at most a bounded prefix of what was sent.
    assert all(len(str(m.get("error", {}).get("message", ""))) < 2000 for m in conn.received if m["type"] == "reply")


def test_no_code_runs_from_a_message_except_paused_expressions(link, live_agent, tmp_path):
    """inspectValue evaluates only while a thread is paused at a hit (the user's own debug console);
    no other request evaluates or imports anything named in a message."""
    marker = tmp_path / "pwned"
    payload = f"open({str(marker)!r}, 'w').write('x')"
    model = SmallNet()
    live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    for i, message in enumerate(
        [
            {"type": "inspectValue", "expression": payload},
            {"type": "watch", "layers": [payload]},
            {"type": "render", "view": payload, "layer": payload},
            {"type": "setBreakpoints", "breakpoints": [{"id": "a", "layer": payload, "phases": ["forward"]}]},
            {"type": "addIntervention", "layer": "conv", "kind": payload},
            {"type": "listHooks", "model": payload},
        ],
        start=100,
    ):
        conn.send({**message, "id": i})
        conn.wait_reply(i, 20)
    assert not marker.exists()
