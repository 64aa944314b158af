"""The debug sessions of one run: the launched program's, and one per Python child it starts.

debugpy follows subprocesses (DDP ranks under ``torchrun``, ``subprocess``
children): for each, its adapter sends a ``debugpyAttach`` event whose body is
a ready attach configuration (``connect`` to the adapter's port,
``subProcessId``). The client answers by opening a second DAP session on that
port, as VS Code's Python extension does; until it does, the child waits.
Every session's events reach ``on_event(client, event)``; ``pid_of`` tells
which process a session debugs, so a Hookscope hit (which carries its pid) is
paired with the stop of the right process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hookscope.terminal.dap_client import DapClient, DapError


class DebugSessions:
    """The root session (owned by the caller) and the child sessions this object opens and closes."""

    def __init__(
        self,
        root: DapClient,
        on_event: Callable[[DapClient, dict[str, Any]], None],
        on_error: Callable[[str], None],
        timeout: float = 60.0,
    ) -> None:
        self.root = root
        self._on_event, self._on_error, self._timeout = on_event, on_error, timeout
        self._lock = threading.Lock()
        self._children: list[DapClient] = []
        self._pids: dict[DapClient, int] = {}
        root.on_event = lambda event: self._route(root, event)

    @property
    def children(self) -> list[DapClient]:
        with self._lock:
            return list(self._children)

    def pid_of(self, client: DapClient) -> int | None:
        with self._lock:
            return self._pids.get(client)

    def _route(self, client: DapClient, event: dict[str, Any]) -> None:
        body = event.get("body") or {}
        name = event.get("event")
        if name == "process" and isinstance(body.get("systemProcessId"), int):
            with self._lock:
                self._pids.setdefault(client, body["systemProcessId"])
        elif name == "debugpyAttach":
            # Not on the reader thread: attaching waits for responses that thread must read.
            threading.Thread(target=self._attach, args=(body,), name="hookscope-dap-attach", daemon=True).start()
        self._on_event(client, event)

    def _attach(self, config: dict[str, Any]) -> None:
        connect = config.get("connect") or {}
        pid = config.get("subProcessId")
        try:
            child = DapClient.connect(str(connect.get("host") or "127.0.0.1"), int(connect["port"]), self._timeout)
        except (KeyError, TypeError, ValueError, OSError) as exc:
            self._on_error(f"could not debug subprocess {pid}: {exc}")
            return
        with self._lock:
            self._children.append(child)
            if isinstance(pid, int):
                self._pids[child] = pid
        child.on_event = lambda event: self._route(child, event)
        try:
            child.initialize("hookscope-cli")
            attach = child.send_request("attach", config)
            child.wait_event("initialized", timeout=self._timeout)
            child.request("setExceptionBreakpoints", {"filters": []})
            child.request("configurationDone")
            attach.result(self._timeout)
        except (DapError, TimeoutError) as exc:
            self._on_error(f"could not debug subprocess {pid}: {exc}")

    def disconnect_children(self, terminate: bool) -> None:
        for child in self.children:
            try:
                child.request("disconnect", {"terminateDebuggee": terminate}, timeout=10)
            except (DapError, TimeoutError):
                pass  # that process has already ended

    def close(self) -> None:
        """Close the child sessions (the root is the caller's)."""
        for child in self.children:
            child.close()
