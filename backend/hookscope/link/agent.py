"""The Hookscope agent: a thread inside the debugged process that talks to the editor.

It connects to the editor (``HOOKSCOPE_ADDR``), runs the handshake
(``hookscope.link.handshake``: the editor and the agent each prove they hold the
session token, which never crosses the socket), describes its process, sends
the model trees, answers requests through one ``Engine`` per connection, and
streams the engine's events through a bounded queue that drops and counts,
so a slow or dead editor never blocks a training step. Requests are read
only from an authenticated editor, at most ``REQUEST_SHARE`` of the time
(``RequestBudget``), on this thread, never on the training thread.

The thread is hidden from the debugger (``pydev_do_not_trace`` and
``is_pydev_daemon_thread`` set before it starts): debugpy neither traces it
nor suspends it, so it keeps serving while the program is paused at a layer
breakpoint.

When the connection drops or the editor goes silent, every hook is removed
within ``SILENCE_LIMIT_S`` and the agent tries to reconnect with backoff, to
an editor that proves the token only; a new connection gets a fresh
handshake, the models and a fresh engine. After ``RECONNECT_GIVE_UP_S``
without one, it gives up and says so on stderr.

Only one agent runs per process (``start``). It starts from the environment
(``start_from_env``, used by the bootstrap) only in processes that should
have one: not in multiprocessing workers and not in a ``torchrun`` launcher
(``link/process_policy.py``).

This module is the agent's public face (``start``, ``start_from_env``, ``connect``,
``current``) and its thread's reconnect loop. ``Agent`` is built in layers, each its own module:

- ``link/engine_dispatch.py``: each message from the editor, and this connection's engine;
- ``link/serve_loop.py``: one authenticated connection's socket loop (read, dispatch, send, ping);
- ``link/outgoing.py``: the outgoing queue, bounded by count and bytes, that drops and counts;
- ``link/request_pacing.py``: the requests' share of the time, and shedding a flood;
- ``link/agent_log.py``: the agent's logger (``HOOKSCOPE_LOG_DIR``).
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from hookscope.link import handshake
from hookscope.link.agent_log import log, setup_file_logging
from hookscope.link.engine_dispatch import (
    DiscoveryLike,
    EngineFactory,
    EngineLike,
    default_engine_factory,
    torch_ready,
)
from hookscope.link.outgoing import OutgoingQueue
from hookscope.link.process_policy import describe_process, skip_reason
from hookscope.link.protocol_vocabulary import HELLO_DEADLINE_S
from hookscope.link.request_pacing import REQUEST_BURST_S, REQUEST_SHARE, RequestBudget
from hookscope.link.serve_loop import POLL_INTERVAL_S, ServeLoop

ENV_ADDR = "HOOKSCOPE_ADDR"
ENV_TOKEN = "HOOKSCOPE_TOKEN"
ENV_SESSION = "HOOKSCOPE_SESSION"

RECONNECT_GIVE_UP_S = 60.0
"""Without an editor that proves the token for this long (since the start or since the last one
left), the agent stops trying: Hookscope is off in the process, the program runs on."""
RECONNECT_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits between attempts to reach the editor (the last one repeats)."""


class Agent(ServeLoop):
    """One connection's worth of state at a time, reconnecting for the life of the process.

    Its layers (``ServeLoop`` → ``EngineDispatch``) keep no state of their own: it is all set up here.
    """

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        session: str | None = None,
        *,
        engine_factory: EngineFactory | None = None,
        engine_ready: Callable[[], bool] | None = None,
        discovery: DiscoveryLike | None = None,
        discover: bool = True,
    ) -> None:
        self.host, self.port, self.token, self.session = host, port, token, session
        self._engine_factory = engine_factory or default_engine_factory
        self._engine_ready = engine_ready or torch_ready
        self._engine: EngineLike | None = None
        self._engine_failed = False
        self._deferred: dict[str, dict[str, Any]] = {}
        """Latest setBreakpoints/setBreakOnNonFinite/watch received before the engine existed."""
        self._replaying = False
        self._stats_at = 0.0
        self._engine_lock = threading.RLock()
        self.queue = OutgoingQueue()
        self._out = bytearray()
        self._sock: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._refused: str | None = None
        self._gave_up: str | None = None
        self.budget = RequestBudget(REQUEST_SHARE, REQUEST_BURST_S)
        self.shed = 0
        """Requests answered ``busy`` unprocessed (a flood the agent fell behind on)."""
        self._last_stats_shed = 0
        self._rx_at = 0.0
        """When the bytes being handled were read (requests older than SHED_AFTER_S are shed)."""
        self._pauses = 0
        """Threads paused at a hit now: no training runs, so requests need no budget."""
        self._pauses_lock = threading.Lock()
        self._next_ping_id = 1
        self._editor_answers_pings = False
        self._last_rx = 0.0
        self._last_tx_progress = 0.0
        """When the socket last accepted bytes from us (a slow editor still reads)."""
        self._pinged_at: float | None = None
        self._last_stats_dropped = 0
        self._models: dict[str, Any] = {}
        """model_id -> tree, as last reported (re-sent on reconnect)."""
        self._modules: dict[str, weakref.ref[Any]] = {}
        """Weak: a model the program drops must be freed (discovery then reports it removed)."""
        if discovery is None and discover:
            from hookscope.engine.discovery import Discovery

            discovery = Discovery(self._on_model_added, self._on_model_removed)
        self.discovery: DiscoveryLike | None = discovery
        self.connections = 0
        """How many times an editor was connected and proved the token (tests, logs)."""
        self.attempts = 0
        """How many connections were opened (authenticated or not)."""

    # -- public ----------------------------------------------------------------
    def start(self) -> None:
        if self.discovery is not None:
            self.discovery.start()
        thread = threading.Thread(target=self._run, name="hookscope-agent", daemon=True)
        # Hidden from debugpy: not traced, not suspended when the program pauses.
        thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
        thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
        self._thread = thread
        thread.start()
        atexit.register(self.flush, 1.0)

    def emit(self, event: dict[str, Any]) -> None:
        """Queue an event for the editor; never blocks (drops and counts when full)."""
        mtype = event.get("type")
        if (mtype == "hit" and event.get("pausing")) or mtype == "resumed":
            with self._pauses_lock:
                self._pauses = self._pauses + 1 if mtype == "hit" else max(0, self._pauses - 1)
        if not self._connected.is_set():
            return  # nobody listens: events of a dead connection are not kept
        if event.get("code") == "breakpointUnresolved" and (self._replaying or not self._models):
            # Before any model exists nothing can resolve: the editor resends the breakpoints when
            # one appears, and only then is "matches no layer" true.
            return
        self.queue.put(event)
        self._wake()

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait (bounded) until everything queued was handed to the socket."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._connected.is_set() or (not len(self.queue) and not self._out):
                return True
            self._wake()
            time.sleep(0.01)
        return False

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, remove every hook and close the connection (tests, ``disconnect``)."""
        self._stop.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self.discovery is not None:
            self.discovery.stop()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def engine(self) -> EngineLike | None:
        """The engine once connected with torch loaded (None before); in-process tools such as
        the benchmark's side-by-side row drive it directly."""
        return self._engine

    @property
    def refused(self) -> str | None:
        """Why the editor refused this agent for good in the handshake (wrong token, protocol mismatch)."""
        return self._refused

    @property
    def gave_up(self) -> str | None:
        """Why the agent stopped trying to reach an editor (none proved the token for RECONNECT_GIVE_UP_S)."""
        return self._gave_up

    # -- the thread --------------------------------------------------------------
    def _run(self) -> None:
        attempt = 0
        editor_seen = time.monotonic()  # the start, or when the last authenticated editor left
        while not self._stop.is_set():
            if time.monotonic() - editor_seen > RECONNECT_GIVE_UP_S:
                self._give_up()
                return
            try:
                sock = socket.create_connection((self.host, self.port), timeout=2.0)
            except OSError as exc:
                if attempt == 0:
                    log.info("cannot reach the editor at %s:%s (%s); retrying", self.host, self.port, exc)
                attempt += 1
                self._idle(RECONNECT_BACKOFF_S[min(attempt - 1, len(RECONNECT_BACKOFF_S) - 1)])
                continue
            served = False
            self.attempts += 1
            try:
                served = self._authenticate(sock)
                if served:
                    self._serve(sock)
            except Exception:
                log.exception("agent connection failed")
            finally:
                self._disconnected(sock)
            if self._refused is not None:
                self._finish()
                return
            if served:
                attempt, editor_seen = 0, time.monotonic()
                self._idle(RECONNECT_BACKOFF_S[0])
            else:
                attempt += 1
                self._idle(RECONNECT_BACKOFF_S[min(attempt - 1, len(RECONNECT_BACKOFF_S) - 1)])

    def _authenticate(self, sock: socket.socket) -> bool:
        """Run the handshake; True once the editor proved the token (then, and only then,
        ``_serve`` reads requests from it)."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            handshake.as_backend(
                sock, self.token, lambda: describe_process(self.session), time.monotonic() + HELLO_DEADLINE_S
            )
            return True
        except handshake.HandshakeFailed as exc:
            if exc.final:
                self._refused = f"{exc.code}: {exc.message}"
                text = (
                    f"hookscope: the editor refused this process ({exc.code}): {exc.message}. "
                    "Hookscope stays off in this process."
                )
                log.error(text)
                print(text, file=sys.stderr, flush=True)
            else:
                # Never the token, nor anything the peer sent beyond the error's own text.
                log.warning(
                    "the peer at %s:%s is not an editor of this session (%s: %s): not connected",
                    self.host,
                    self.port,
                    exc.code,
                    exc.message,
                )
            return False
        except OSError as exc:
            log.info("handshake with %s:%s failed: %s", self.host, self.port, exc)
            return False

    def _give_up(self) -> None:
        self._gave_up = f"no editor at {self.host}:{self.port} proved the session token for {RECONNECT_GIVE_UP_S:g} s"
        text = (
            f"hookscope: {self._gave_up}: the editor is gone. Hookscope is off in this process "
            "(its hooks were removed); the program runs on."
        )
        log.warning(text)
        print(text, file=sys.stderr, flush=True)
        self._finish()

    def _finish(self) -> None:
        """The agent stops for good: nothing of discovery stays armed."""
        if self.discovery is not None:
            try:
                self.discovery.stop()
            except Exception:
                log.exception("stopping discovery failed")

    def _idle(self, seconds: float) -> None:
        """Wait while keeping discovery going (models created while no editor is connected)."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            self._poll_discovery()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, POLL_INTERVAL_S))


# ---------------------------------------------------------------------------
# One agent per process.

_agent: Agent | None = None
_agent_lock = threading.Lock()


def current() -> Agent | None:
    """The agent of this process, if one was started."""
    return _agent


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"HOOKSCOPE_ADDR must be host:port, got {addr!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def start(addr: str | None = None, token: str | None = None, session: str | None = None, **kwargs: Any) -> Agent:
    """Start the agent of this process (idempotent: a second call returns the first agent)."""
    global _agent
    with _agent_lock:
        if _agent is not None:
            return _agent
        addr = addr or os.environ.get(ENV_ADDR)
        token = token if token is not None else os.environ.get(ENV_TOKEN)
        if not addr or token is None:
            raise ValueError(f"{ENV_ADDR} and {ENV_TOKEN} (or addr and token) are needed")
        host, port = parse_addr(addr)
        setup_file_logging()
        agent = Agent(host, port, token, session or os.environ.get(ENV_SESSION), **kwargs)
        agent.start()
        _agent = agent
        log.info("agent started in pid %d for %s:%d", os.getpid(), host, port)
        return agent


def start_from_env(origin: str) -> Agent | None:
    """Start when the environment asks for it and this process should have an agent."""
    if not os.environ.get(ENV_ADDR) or os.environ.get(ENV_TOKEN) is None:
        return None
    skip = skip_reason()
    if skip:
        return None
    try:
        agent = start()
    except Exception as exc:  # a bootstrap must never break the user's program
        print(f"hookscope: not started ({exc})", file=sys.stderr)
        return None
    log.info("started by %s", origin)
    return agent


def _after_fork_in_child() -> None:
    # Threads do not survive fork: the child (a DataLoader worker...) has no agent.
    # Its copy of the socket must not be written to; the parent keeps the connection.
    global _agent
    agent, _agent = _agent, None
    if agent is not None:
        agent._connected.clear()
        agent._stop.set()
        agent._engine = None  # the parent's engine: never driven from here
        if agent.discovery is not None:
            agent.discovery.forget_listener()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def connect(addr: str | None = None, token: str | None = None, timeout: float | None = None) -> Agent:
    """Start this process's agent and connect to the editor (for attach: no bootstrap needed).

    ``addr`` is ``host:port`` (default ``$HOOKSCOPE_ADDR``), ``token`` the session
    token (default ``$HOOKSCOPE_TOKEN``). Models that already exist are found by one
    scan; later ones as they are created. With ``timeout``, wait that long for the
    connection. Calling it again returns the running agent.
    """
    running = start(addr, token if token is not None else os.environ.get(ENV_TOKEN, ""))
    if timeout:
        running.wait_connected(timeout)
    return running
