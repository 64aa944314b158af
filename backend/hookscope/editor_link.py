"""The editor's side of the Hookscope socket, in Python: used by ``hookscope run`` and by tests.

It does what the VS Code extension does: listen on 127.0.0.1 (ephemeral
port), hand out a fresh token, accept one connection per debuggee process,
require a valid ``hello`` first (a wrong token or protocol version gets an
error reply and the connection is closed), answer the backend's pings, match
replies to requests, and queue events for whoever waits on them.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
import uuid
from typing import Any, Callable

from . import codec, protocol
from .protocol import ProtocolError


class RequestError(Exception):
    """An error reply from the backend."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BackendConnection:
    """One connected debuggee process."""

    def __init__(self, link: "EditorLink", sock: socket.socket, hello: dict) -> None:
        self.link = link
        self.sock = sock
        self.hello = hello
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._events: list[dict] = []
        self._replies: dict[int, dict] = {}
        self._ids = iter(range(1, 1 << 62))
        self.closed = False
        self.received: list[dict] = []
        """Every message received after hello, in order (tests inspect it)."""

    @property
    def pid(self) -> int:
        return int(self.hello["pid"])

    def send(self, message: dict) -> None:
        data = codec.frame(message)
        with self._send_lock:
            self.sock.sendall(data)

    def send_raw(self, data: bytes) -> None:
        """Bytes as they are (tests send malformed frames)."""
        with self._send_lock:
            self.sock.sendall(data)

    def request(self, mtype: str, timeout: float = 30.0, **fields: Any) -> dict:
        """Send a request and wait for its reply body; raises RequestError on an error reply."""
        request_id = next(self._ids)
        self.send({"type": mtype, "id": request_id, **fields})
        reply = self.wait_reply(request_id, timeout)
        if "error" in reply:
            error = reply["error"] or {}
            raise RequestError(str(error.get("code")), str(error.get("message")))
        return reply.get("body") or {}

    def wait_reply(self, request_id: int, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self._cond:
            while request_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(f"no reply to request {request_id} within {timeout:.0f} s"
                                       + (" (connection closed)" if self.closed else ""))
                self._cond.wait(min(left, 0.5))
            return self._replies.pop(request_id)

    def wait_event(self, mtype: str, predicate: Callable[[dict], bool] | None = None,
                   timeout: float = 30.0) -> dict:
        """The oldest not yet taken event of this type (matching ``predicate``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, event in enumerate(self._events):
                    if event.get("type") == mtype and (predicate is None or predicate(event)):
                        return self._events.pop(i)
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(f"no {mtype!r} event within {timeout:.0f} s"
                                       + (" (connection closed)" if self.closed else ""))
                self._cond.wait(min(left, 0.5))

    def wait_closed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.closed and time.monotonic() < deadline:
                self._cond.wait(0.2)
            return self.closed

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _read_loop(self, reader: codec.FrameReader, first: list) -> None:
        try:
            for message in first:  # frames that arrived in the same read as hello
                self._dispatch(message)
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                for message in reader.feed(data):
                    self._dispatch(message)
        except (OSError, ProtocolError):
            pass
        finally:
            with self._cond:
                self.closed = True
                self._cond.notify_all()
            self.link._on_closed(self)

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        self.received.append(message)
        mtype = message.get("type")
        if mtype == "heartbeat" and isinstance(message.get("id"), int):  # the backend checks we are alive
            try:
                self.send(protocol.reply(message["id"], {}))
            except OSError:
                pass
            return
        with self._cond:
            if mtype == "reply" and isinstance(message.get("re"), int) and message["re"] >= 0:
                self._replies[message["re"]] = message
            else:
                self._events.append(message)
            self._cond.notify_all()
        if mtype != "reply" and self.link.on_event is not None:
            self.link.on_event(self, message)


class EditorLink:
    """A listening socket that accepts Hookscope backends, like the extension does."""

    def __init__(self, token: str | None = None, host: str = "127.0.0.1",
                 on_event: Callable[[BackendConnection, dict], None] | None = None) -> None:
        self.token = token or secrets.token_hex(16)
        self.session = uuid.uuid4().hex
        self.on_event = on_event
        self.on_connect: Callable[[BackendConnection], None] | None = None
        self._server = socket.create_server((host, 0))
        self.host, self.port = self._server.getsockname()[:2]
        self._cond = threading.Condition()
        self.connections: list[BackendConnection] = []
        self.refused: list[str] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="hookscope-editor-link", daemon=True)
        self._thread.start()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """What the debuggee's environment needs to find this editor."""
        return {"HOOKSCOPE_ADDR": self.addr, "HOOKSCOPE_TOKEN": self.token,
                "HOOKSCOPE_SESSION": self.session}

    def wait_connection(self, timeout: float = 30.0, index: int = 0) -> BackendConnection:
        """The ``index``-th accepted connection (0: the first), waiting for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.connections) <= index:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no Hookscope backend connected within {timeout:.0f} s")
                self._cond.wait(min(left, 0.5))
            return self.connections[index]

    def close(self) -> None:
        self._closed = True
        try:
            self._server.close()
        except OSError:
            pass
        for conn in list(self.connections):
            conn.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.monotonic() + protocol.HELLO_DEADLINE_S
        reader = codec.FrameReader()
        hello = None
        rest: list = []
        try:
            while hello is None:
                # The deadline is for the whole hello: a client sending a byte now and then
                # must not hold the connection open by resetting a per-read timeout.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout(f"no hello within {protocol.HELLO_DEADLINE_S:g} s")
                sock.settimeout(left)
                data = sock.recv(1 << 16)
                if not data:
                    sock.close()
                    return
                messages = reader.feed(data)
                if messages:
                    hello, rest = messages[0], messages[1:]
            protocol.validate(hello)
            if hello.get("type") != "hello":
                raise ProtocolError(protocol.ERR_BAD_MESSAGE, "the first message must be hello")
            if not secrets.compare_digest(str(hello.get("token")), self.token):
                raise ProtocolError(protocol.ERR_TOKEN, "wrong session token")
            if hello.get("protocol") != protocol.PROTOCOL_VERSION:
                raise ProtocolError(protocol.ERR_VERSION,
                                    f"backend speaks protocol {hello.get('protocol')}, "
                                    f"this editor {protocol.PROTOCOL_VERSION}")
        except (OSError, ProtocolError) as exc:
            code = getattr(exc, "code", protocol.ERR_BAD_MESSAGE)
            self.refused.append(f"{code}: {exc}")
            try:
                sock.sendall(codec.frame(protocol.error_reply(-1, code, str(exc))))
                # Half-close and let the backend close first: closing with unread input
                # would send a reset that can destroy the error reply before it is read.
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(2.0)
                while sock.recv(1 << 16):
                    pass
            except OSError:
                pass
            sock.close()
            return
        sock.settimeout(None)
        conn = BackendConnection(self, sock, hello)
        with self._cond:
            self.connections.append(conn)
            self._cond.notify_all()
        if self.on_connect is not None:
            self.on_connect(conn)
        conn._read_loop(reader, rest)

    def _on_closed(self, conn: BackendConnection) -> None:
        with self._cond:
            self._cond.notify_all()
