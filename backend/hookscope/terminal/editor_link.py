"""The editor's side of the Hookscope socket, in Python: used by ``hookscope run`` and by tests.

It does what the VS Code extension does: listen on 127.0.0.1 (ephemeral
port), hand out a fresh token, accept one connection per debuggee process,
run the handshake first (``hookscope.link.handshake``: both sides prove the token
without sending it; small frames, one deadline; a wrong proof or protocol
version gets an error reply and the connection is closed), answer the
backend's pings, match replies to requests, and queue events for whoever
waits on them.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from hookscope.link import codec, handshake, protocol
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, HELLO_DEADLINE_S, MAX_PENDING_HANDSHAKES, ProtocolError

ACCEPT_POLL_S = 0.5
"""How often the accepting thread checks that the link was closed (where closing the listening
socket does not wake ``accept``)."""


class RequestError(Exception):
    """An error reply from the backend."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BackendConnection:
    """One connected debuggee process."""

    def __init__(self, link: EditorLink, sock: socket.socket, hello: dict[str, Any]) -> None:
        self.link = link
        self.sock = sock
        self.hello = hello
        """What the process said about itself (its ``process`` message) once both sides proved the token."""
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._events: list[dict[str, Any]] = []
        self._replies: dict[int, dict[str, Any]] = {}
        self._ids = iter(range(1, 1 << 62))
        self.closed = False
        self.received: list[dict[str, Any]] = []
        """Every message received after hello, in order (tests inspect it)."""
        self.refused: list[tuple[dict[str, Any], str]] = []
        """Events that failed ``protocol.validate`` and why (never delivered, as the extension refuses them)."""

    @property
    def pid(self) -> int:
        return int(self.hello["pid"])

    def send(self, message: dict[str, Any]) -> None:
        data = codec.frame(message)
        with self._send_lock:
            self.sock.sendall(data)

    def send_raw(self, data: bytes) -> None:
        """Bytes as they are (tests send malformed frames)."""
        with self._send_lock:
            self.sock.sendall(data)

    def request(self, mtype: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """Send a request and wait for its reply body; raises RequestError on an error reply."""
        request_id = next(self._ids)
        self.send({"type": mtype, "id": request_id, **fields})
        reply = self.wait_reply(request_id, timeout)
        protocol.validate(reply)  # a malformed reply is a ProtocolError naming the field, not a KeyError later
        if "error" in reply:
            error = reply["error"] or {}
            raise RequestError(str(error.get("code")), str(error.get("message")))
        return protocol.validate_reply(mtype, reply.get("body") or {})

    def wait_reply(self, request_id: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while request_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(
                        f"no reply to request {request_id} within {timeout:.0f} s"
                        + (" (connection closed)" if self.closed else "")
                    )
                self._cond.wait(min(left, 0.5))
            return self._replies.pop(request_id)

    def wait_event(
        self, mtype: str, predicate: Callable[[dict[str, Any]], bool] | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """The oldest not yet taken event of this type (matching ``predicate``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, event in enumerate(self._events):
                    if event.get("type") == mtype and (predicate is None or predicate(event)):
                        return self._events.pop(i)
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(
                        f"no {mtype!r} event within {timeout:.0f} s" + (" (connection closed)" if self.closed else "")
                    )
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

    def _read_loop(self, reader: codec.FrameReader) -> None:
        try:
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
        if mtype != "reply":
            try:
                protocol.validate(message)
            except ProtocolError as err:  # kept out of the events: what the extension refuses too
                self.refused.append((message, str(err)))
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

    def __init__(
        self,
        token: str | None = None,
        host: str = "127.0.0.1",
        on_event: Callable[[BackendConnection, dict[str, Any]], None] | None = None,
    ) -> None:
        self.token = token or secrets.token_hex(16)
        self.session = uuid.uuid4().hex
        self.on_event = on_event
        self.on_connect: Callable[[BackendConnection], None] | None = None
        self.on_refused: Callable[[str], None] | None = None
        """Told why a connection was refused (never with the token in it)."""
        self._server = socket.create_server((host, 0))
        self._server.settimeout(ACCEPT_POLL_S)
        self.host, self.port = self._server.getsockname()[:2]
        self._cond = threading.Condition()
        self.connections: list[BackendConnection] = []
        self.refused: list[str] = []
        self._handshakes = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="hookscope-editor-link", daemon=True)
        self._thread.start()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """What the debuggee's environment needs to find this editor."""
        return {"HOOKSCOPE_ADDR": self.addr, "HOOKSCOPE_TOKEN": self.token, "HOOKSCOPE_SESSION": self.session}

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

    def close(self, timeout: float = 2 * ACCEPT_POLL_S + 1.0) -> None:
        """Stop listening (the accepting thread ends, even while blocked in ``accept``) and close
        every connection."""
        self._closed = True
        try:
            # Wakes a thread blocked in accept() on Linux; elsewhere it sees _closed within ACCEPT_POLL_S.
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._server.close()
        except OSError:
            pass
        for conn in list(self.connections):
            conn.close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def accepting(self) -> bool:
        """Whether the accepting thread still runs."""
        return self._thread.is_alive()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._closed:
                sock.close()
                return
            if not self._handshakes.acquire(blocking=False):
                # Too many connections still in the handshake: an unknown peer gets nothing more.
                self._refused("busy: too many connections in the handshake")
                sock.close()
                continue
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        try:
            accepted = self._authenticate(sock)
        finally:
            self._handshakes.release()
        if accepted is None:
            return
        sock.settimeout(None)
        conn = BackendConnection(self, sock, accepted)
        with self._cond:
            self.connections.append(conn)
            self._cond.notify_all()
        if self.on_connect is not None:
            self.on_connect(conn)
        # The backend proved the token: from now on its frames may be as large as the protocol allows.
        conn._read_loop(codec.FrameReader())

    def _authenticate(self, sock: socket.socket) -> dict[str, Any] | None:
        """The backend's ``process`` message once both sides proved the token; None when refused."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.monotonic() + HELLO_DEADLINE_S
        try:
            _, process = handshake.as_editor(sock, lambda: (self.token,), deadline)
            return process
        except (OSError, handshake.HandshakeFailed) as exc:
            code = getattr(exc, "code", ERR_BAD_MESSAGE)
            self._refused(f"{code}: {exc}")
            if isinstance(exc, handshake.HandshakeFailed):
                _refuse(sock, code, exc.message)
            sock.close()
            return None

    def _refused(self, why: str) -> None:
        self.refused.append(why)
        if self.on_refused is not None:
            try:
                self.on_refused(why)
            except Exception:  # a listener must not break the accepting thread
                pass

    def _on_closed(self, conn: BackendConnection) -> None:
        with self._cond:
            self._cond.notify_all()


def _refuse(sock: socket.socket, code: str, text: str) -> None:
    """Send the error reply, then let the backend close first: closing with unread input would
    send a reset that can destroy the reply before it is read."""
    try:
        sock.settimeout(2.0)
        sock.sendall(codec.frame(protocol.error_reply(-1, code, text)))
        sock.shutdown(socket.SHUT_WR)
        # Bounded: a peer that keeps sending is not read for ever (nor into memory).
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and sock.recv(4096):
            pass
    except OSError:
        pass
