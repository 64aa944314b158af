"""A small Debug Adapter Protocol client over a debug adapter's stdio (``python -m debugpy.adapter``) or TCP.

Messages are JSON with a ``Content-Length`` header. ``request`` sends a
request and waits (with a deadline) for its response; ``send_request``
returns a ``Pending`` to wait on later (debugpy answers ``launch`` only after
``configurationDone``). Events are kept in order and taken with
``wait_event`` (oldest matching first) or handed to ``on_event``. Reverse
requests from the adapter get an error response unless a handler is set.
Used by ``hookscope run`` and by the integration tests.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any


class DapError(Exception):
    """A failed response from the adapter, or a lost adapter."""


class Pending:
    """A request waiting for its response."""

    def __init__(self, client: DapClient, seq: int, command: str) -> None:
        self._client, self.seq, self.command = client, seq, command

    def result(self, timeout: float = 30.0) -> dict[str, Any]:
        """The response body; raises DapError on failure, TimeoutError at the deadline."""
        response = self._client._wait_response(self.seq, self.command, timeout)
        if not response.get("success"):
            raise DapError(
                f"{self.command} failed: {response.get('message')} {json.dumps(response.get('body') or {})[:500]}"
            )
        return response.get("body") or {}


class DapClient:
    """One DAP session with an adapter process (owned: ``close`` ends it)."""

    def __init__(
        self,
        reader: IO[bytes],
        writer: IO[bytes],
        process: subprocess.Popen[bytes] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self._reader, self._writer, self.process, self._sock = reader, writer, process, sock
        self._seq = 0
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._responses: dict[int, dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []
        self.closed = False
        self.on_event: Callable[[dict[str, Any]], None] | None = None
        self.reverse_handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self.log: list[dict[str, Any]] = []
        """Every message both ways (for test failure messages)."""
        self._thread = threading.Thread(target=self._read_loop, name="dap-client", daemon=True)
        self._thread.start()

    @classmethod
    def start_adapter(
        cls,
        python: str | None = None,
        env: dict[str, str] | None = None,
        log_dir: str | None = None,
        stderr: Any = subprocess.DEVNULL,
    ) -> DapClient:
        """Start ``python -m debugpy.adapter`` and talk to it over its stdio.

        The adapter's own stderr is dropped unless ``stderr`` says otherwise: it logs
        harmless tracebacks at shutdown; ``log_dir`` keeps its full logs.
        """
        args = [python or sys.executable, "-m", "debugpy.adapter"]
        if log_dir:
            args += ["--log-dir", log_dir]
        process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        assert process.stdin is not None and process.stdout is not None
        return cls(process.stdout, process.stdin, process)

    @classmethod
    def connect(cls, host: str, port: int, timeout: float = 30.0) -> DapClient:
        """A session over TCP: the adapter's port for a subprocess (``debugpyAttach``) or a ``--listen``."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.settimeout(None)
        return cls(sock.makefile("rb"), sock.makefile("wb"), sock=sock)

    # -- sending -----------------------------------------------------------
    def send_request(self, command: str, arguments: dict[str, Any] | None = None) -> Pending:
        with self._write_lock:
            self._seq += 1
            seq = self._seq
            message = {"seq": seq, "type": "request", "command": command}
            if arguments is not None:
                message["arguments"] = arguments
            self._write(message)
        return Pending(self, seq, command)

    def request(self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        return self.send_request(command, arguments).result(timeout)

    def _respond(self, request: dict[str, Any], body: dict[str, Any] | None = None, error: str | None = None) -> None:
        with self._write_lock:
            self._seq += 1
            message = {
                "seq": self._seq,
                "type": "response",
                "request_seq": request["seq"],
                "command": request["command"],
                "success": error is None,
            }
            if error is not None:
                message["message"] = error
            else:
                message["body"] = body or {}
            self._write(message)

    def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode("utf-8")
        self.log.append(message)
        try:
            self._writer.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            self._writer.flush()
        except (OSError, ValueError) as exc:
            raise DapError(f"the debug adapter is gone ({exc})") from None

    # -- receiving ---------------------------------------------------------
    def wait_event(
        self, name: str, predicate: Callable[[dict[str, Any]], bool] | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Take the oldest event ``name`` (matching ``predicate``) that arrived or arrives in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, event in enumerate(self._events):
                    if event.get("event") == name and (predicate is None or predicate(event)):
                        return self._events.pop(i)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no DAP {name!r} event within {timeout:.0f} s")
                if self.closed:
                    raise DapError(f"the debug adapter closed before a {name!r} event")
                self._cond.wait(min(left, 0.5))

    def events(self, name: str) -> list[dict[str, Any]]:
        """Events of this kind received so far and not taken (not consumed)."""
        with self._cond:
            return [e for e in self._events if e.get("event") == name]

    def _wait_response(self, seq: int, command: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while seq not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no response to DAP {command!r} within {timeout:.0f} s")
                if self.closed:
                    raise DapError(f"the debug adapter closed before answering {command!r}")
                self._cond.wait(min(left, 0.5))
            return self._responses.pop(seq)

    def _read_message(self) -> dict[str, Any] | None:
        length = None
        while True:
            line = self._reader.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                break
            name, _, value = line.decode("ascii", "replace").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length is None:
            raise DapError("a DAP message without Content-Length")
        body = self._reader.read(length)
        if len(body) < length:
            return None
        return json.loads(body.decode("utf-8"))

    def _read_loop(self) -> None:
        try:
            while True:
                message = self._read_message()
                if message is None:
                    break
                self.log.append(message)
                kind = message.get("type")
                if kind == "response":
                    with self._cond:
                        self._responses[message["request_seq"]] = message
                        self._cond.notify_all()
                elif kind == "event":
                    with self._cond:
                        self._events.append(message)
                        self._cond.notify_all()
                    if self.on_event is not None:
                        self.on_event(message)
                elif kind == "request":
                    self._reverse_request(message)
        except (OSError, ValueError, DapError):
            pass
        finally:
            with self._cond:
                self.closed = True
                self._cond.notify_all()

    def _reverse_request(self, request: dict[str, Any]) -> None:
        handler = self.reverse_handlers.get(request.get("command", ""))
        try:
            if handler is None:
                self._respond(request, error=f"{request.get('command')} is not supported")
            else:
                self._respond(request, handler(request.get("arguments") or {}))
        except Exception as exc:
            self._respond(request, error=str(exc))

    # -- conveniences --------------------------------------------------------
    def initialize(self, client_id: str = "hookscope") -> dict[str, Any]:
        return self.request(
            "initialize",
            {
                "clientID": client_id,
                "clientName": "Hookscope",
                "adapterID": "debugpy",
                "pathFormat": "path",
                "linesStartAt1": True,
                "columnsStartAt1": True,
                "supportsVariableType": True,
                "supportsRunInTerminalRequest": False,
                "locale": "en",
            },
        )

    def top_frame(self, thread_id: int, timeout: float = 30.0) -> dict[str, Any]:
        frames = self.request("stackTrace", {"threadId": thread_id, "startFrame": 0, "levels": 20}, timeout)[
            "stackFrames"
        ]
        if not frames:
            raise DapError(f"thread {thread_id} has no frames")
        return frames[0]

    def frame_variables(self, frame_id: int, timeout: float = 30.0) -> dict[str, dict[str, Any]]:
        """name -> variable of the frame's Locals scope."""
        scopes = self.request("scopes", {"frameId": frame_id}, timeout)["scopes"]
        local_scope = next((s for s in scopes if s["name"].lower().startswith("local")), scopes[0])
        variables = self.request("variables", {"variablesReference": local_scope["variablesReference"]}, timeout)[
            "variables"
        ]
        return {v["name"]: v for v in variables}

    def evaluate(
        self, expression: str, frame_id: int | None = None, context: str = "repl", timeout: float = 30.0
    ) -> str:
        arguments: dict[str, Any] = {"expression": expression, "context": context}
        if frame_id is not None:
            arguments["frameId"] = frame_id
        return str(self.request("evaluate", arguments, timeout)["result"])

    def close(self, timeout: float = 10.0) -> None:
        """Close the adapter's stdin (or the socket) and wait for it to end (killing it at the deadline)."""
        try:
            self._writer.close()
        except OSError:
            pass
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
