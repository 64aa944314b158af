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
have one: not in multiprocessing workers and not in a ``torchrun`` launcher.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import platform
import selectors
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from hookscope import __version__
from hookscope.link import codec, handshake, protocol
from hookscope.link.protocol_vocabulary import ProtocolError

ENV_ADDR = "HOOKSCOPE_ADDR"
ENV_TOKEN = "HOOKSCOPE_TOKEN"
ENV_SESSION = "HOOKSCOPE_SESSION"
ENV_LOG_DIR = "HOOKSCOPE_LOG_DIR"

QUEUE_LIMIT = 4096
"""Droppable events waiting to be sent; more are dropped and counted."""
ESSENTIAL_LIMIT = 65536
"""Replies, hits and model events are kept beyond QUEUE_LIMIT, up to this many."""
QUEUE_BYTES_LIMIT = 16 * 1024 * 1024
"""Estimated bytes of droppable events waiting; more are dropped and counted."""
ESSENTIAL_BYTES_LIMIT = 64 * 1024 * 1024
"""Estimated bytes of all messages waiting; an essential one past this is dropped (a reply is
replaced by a small error reply)."""
REQUEST_SHARE = 0.05
"""Share of the time the editor's requests may take while the program runs (``RequestBudget``)."""
REQUEST_BURST_S = 0.25
"""Request work that may run back to back before the share applies (a few renders in a row)."""
REQUEST_RESUME_S = 0.003
"""Once the share is spent, request work resumes in turns of this much."""
SHED_AFTER_S = 5.0
"""A request read this long ago and still not started is answered ``busy`` unprocessed."""
RECV_BYTES = 16 * 1024
"""Bytes read from the editor at a time; the next read waits until they are all handled."""
RECONNECT_GIVE_UP_S = 60.0
"""Without an editor that proves the token for this long (since the start or since the last one
left), the agent stops trying: Hookscope is off in the process, the program runs on."""
OUT_BUFFER_LIMIT = 256 * 1024
"""Encoded bytes waiting for the socket; past this the queue is not drained (and so drops).
Small, so that a hit or a stats event waits behind little already-encoded data on a slow editor
(a single larger message, a rendered image, still goes out whole)."""
SEND_BUFFER_BYTES = 64 * 1024
"""SO_SNDBUF of the connection (the kernel doubles it)."""
PROBE_AFTER_S = 0.75
"""Silence after which the agent pings the editor."""
SILENCE_LIMIT_S = 2.0
"""Silence after which an editor that answers pings is taken for gone."""
POLL_INTERVAL_S = 0.25
STRUCTURE_CHECK_S = 2.0
STATS_INTERVAL_S = 2.0
RECONNECT_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

_DEFERRABLE = frozenset({"setBreakpoints", "setBreakOnNonFinite", "setBreakOnGradients", "setCompiledEager", "watch"})
"""Requests that replace a whole setting: kept until the engine exists, then applied."""

ESSENTIAL_TYPES = frozenset({"reply", "heartbeat", "hit", "resumed", "modelAdded", "modelRemoved", "notice", "stats"})

log = logging.getLogger("hookscope.link.agent")
log.propagate = False  # never into the user's logging setup
log.addHandler(logging.NullHandler())


class EngineLike(Protocol):
    def add_model(self, model_id: str, model: Any) -> None: ...
    def remove_model(self, model_id: str) -> None: ...
    def handle(self, request: dict) -> dict: ...
    def shutdown(self) -> int: ...


def _default_engine_factory(emit: Callable[[dict], None]) -> EngineLike:
    from hookscope.engine.core import Engine  # heavy (torch): only once connected

    engine = Engine(emit)
    engine.requests_off_thread = True  # requests run on the agent's thread, training on another
    return engine


def approx_size(message: dict) -> int:
    """A cheap estimate of a message's encoded size: the payload bytes and strings of the message
    and of its maps (a reply's body, a model tree), and ``_ENTRY_BYTES`` per other entry.
    Two levels only, so the training thread can afford it for every event it queues."""
    total = _ENTRY_BYTES
    for value in message.values():
        total += _shallow_size(value)
        if isinstance(value, dict):
            total += sum(_shallow_size(v) for v in value.values())
    return total


_ENTRY_BYTES = 128


def _shallow_size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, (list, tuple, dict)):
        return _ENTRY_BYTES * len(value)
    return 8


class OutgoingQueue:
    """Bounded, thread-safe queue of outgoing messages: ``put`` never blocks, it drops and counts.

    Essential messages (replies, hits, model events, stats) wait in their own lane, so that
    ``take_urgent`` can send them ahead of thousands of droppable summaries queued for a slow
    editor; ``take`` keeps the overall order. Both lanes are capped by count and by (estimated)
    bytes; a reply that does not fit is replaced by a small error reply, so its request still
    gets exactly one answer.
    """

    def __init__(
        self,
        limit: int = QUEUE_LIMIT,
        essential_limit: int = ESSENTIAL_LIMIT,
        byte_limit: int = QUEUE_BYTES_LIMIT,
        essential_byte_limit: int = ESSENTIAL_BYTES_LIMIT,
    ) -> None:
        self._items: collections.deque[dict] = collections.deque()
        """Droppable messages, oldest first."""
        self._essential: collections.deque[dict] = collections.deque()
        self._order: dict[int, tuple[int, int]] = {}
        """id(message) -> (sequence number, estimated bytes), for ``take``'s overall order."""
        self._seq = 0
        self._lock = threading.Lock()
        self._limit = limit
        self._essential_limit = essential_limit
        self._byte_limit = byte_limit
        self._essential_byte_limit = essential_byte_limit
        self.bytes = 0
        """Estimated bytes waiting (both lanes)."""
        self._droppable_bytes = 0
        self.dropped = 0

    def put(self, message: dict) -> bool:
        essential = message.get("type") in ESSENTIAL_TYPES
        size = approx_size(message)
        with self._lock:
            count = len(self._items) + len(self._essential)
            if count >= self._essential_limit or (count >= self._limit and not essential):
                self.dropped += 1
                return False
            if essential and self.bytes + size > self._essential_byte_limit:
                self.dropped += 1
                if message.get("type") != "reply" or "error" in message:
                    return False
                message = _too_large(message, size, self.bytes)
                size = approx_size(message)
            elif not essential and self._droppable_bytes + size > self._byte_limit:
                self.dropped += 1
                return False
            self._seq += 1
            self._order[id(message)] = (self._seq, size)
            self.bytes += size
            if essential:
                self._essential.append(message)
            else:
                self._items.append(message)
                self._droppable_bytes += size
            return True

    def take(self) -> dict | None:
        """The oldest message of either lane."""
        with self._lock:
            if self._essential and (
                not self._items or self._order[id(self._essential[0])][0] < self._order[id(self._items[0])][0]
            ):
                return self._pop(self._essential)
            return self._pop(self._items) if self._items else None

    def take_urgent(self) -> dict | None:
        """The oldest essential message, else the oldest droppable one."""
        with self._lock:
            if self._essential:
                return self._pop(self._essential)
            return self._pop(self._items) if self._items else None

    def _pop(self, lane: collections.deque[dict]) -> dict:
        message = lane.popleft()
        _, size = self._order.pop(id(message), (0, 0))
        self.bytes -= size
        if lane is self._items:
            self._droppable_bytes -= size
        return message

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._essential.clear()
            self._order.clear()
            self.bytes = self._droppable_bytes = 0

    def __len__(self) -> int:
        return len(self._items) + len(self._essential)


def _too_large(reply: dict, size: int, waiting: int) -> dict:
    return protocol.error_reply(
        reply.get("re", -1),
        protocol.ERR_NOT_AVAILABLE,
        f"the reply (about {size / 1e6:.1f} MB) does not fit beside the "
        f"{waiting / 1e6:.1f} MB waiting for a slow editor: try again",
    )


class RequestBudget:
    """The share of time the agent may spend on the editor's requests (a token bucket).

    Reading, decoding and answering requests may take ``share`` of the time on average,
    in bursts of up to ``burst`` seconds; past that the agent stops reading the socket until
    the bucket refills, so a flood waits in the editor's buffers (TCP flow control), not in
    the debuggee, and costs the training thread at most that share of the interpreter.
    Costs are the agent thread's own CPU time.
    """

    def __init__(
        self, share: float, burst: float, resume: float = REQUEST_RESUME_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.share, self.burst, self._clock = share, burst, clock
        self.resume = min(resume, burst)
        self._tokens = burst
        self._resting = False
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.share)
        self._at = now

    def available(self) -> bool:
        # Once spent, work resumes only with ``resume`` seconds in hand: a few longer turns rather
        # than a turn per request, since every turn costs the training thread a hand-over of the
        # interpreter on top of the work itself.
        self._refill()
        if self._resting and self._tokens >= self.resume:
            self._resting = False
        elif self._tokens <= 0:
            self._resting = True
        return not self._resting

    def spend(self, seconds: float) -> None:
        self._tokens -= seconds

    def wait_s(self) -> float:
        """How long until work may go on again (0 when it may now)."""
        if self.available():
            return 0.0
        return (self.resume - self._tokens) / self.share + 1e-3


class Agent:
    """One connection's worth of state at a time, reconnecting for the life of the process."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        session: str | None = None,
        *,
        engine_factory: Callable[[Callable[[dict], None]], EngineLike] | None = None,
        engine_ready: Callable[[], bool] | None = None,
        discovery: Any = None,
        discover: bool = True,
    ) -> None:
        self.host, self.port, self.token, self.session = host, port, token, session
        self._engine_factory = engine_factory or _default_engine_factory
        self._engine_ready = engine_ready or _torch_ready
        self._engine: EngineLike | None = None
        self._engine_failed = False
        self._deferred: dict[str, dict] = {}
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
        self._modules: dict[str, weakref.ref] = {}
        """Weak: a model the program drops must be freed (discovery then reports it removed)."""
        if discovery is None and discover:
            from hookscope.engine.discovery import Discovery

            discovery = Discovery(self._on_model_added, self._on_model_removed)
        self.discovery = discovery
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

    def emit(self, event: dict) -> None:
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

    # -- discovery callbacks (any thread) ------------------------------------------
    def _on_model_added(self, model_id: str, module: Any, tree: dict) -> None:
        with self._engine_lock:
            self._models[model_id] = tree
            self._modules[model_id] = weakref.ref(module)
            if self._engine is None and self._connected.is_set():
                self._create_engine()  # a model exists, so torch is loaded: the engine may load too
            if self._engine is not None:
                self._call_engine("add_model", model_id, module, locations=_locations(tree))
                self.emit({"type": "modelAdded", "model": tree})
        log.info("model %s: %s (%s, %d modules)", model_id, tree["name"], tree["cls"], len(tree["modules"]))

    def _on_model_removed(self, model_id: str) -> None:
        with self._engine_lock:
            self._models.pop(model_id, None)
            self._modules.pop(model_id, None)
            if self._engine is not None:
                self._call_engine("remove_model", model_id)
                self.emit({"type": "modelRemoved", "id": model_id})
        log.info("model %s removed", model_id)

    def _call_engine(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._engine, method)(*args, **kwargs)
        except Exception as exc:  # the engine must never take the agent (or training) down
            log.exception("engine.%s failed", method)
            self.emit(
                {
                    "type": "notice",
                    "level": "error",
                    "code": "engineError",
                    "message": f"Hookscope engine.{method} failed: {exc}",
                }
            )
            return None

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
            handshake.as_backend(sock, self.token, self._describe_process, time.monotonic() + protocol.HELLO_DEADLINE_S)
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

    def _serve(self, sock: socket.socket) -> None:
        """Serve an editor that has proved the token (``_authenticate``), until it goes away."""
        # A modest kernel buffer: what is queued for a slow editor waits in our queue, where
        # essential messages overtake summaries, not in the kernel, where nothing can.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        sock.setblocking(False)
        self._sock = sock
        self.connections += 1
        self._editor_answers_pings = False
        self._pinged_at = None
        self._last_rx = time.monotonic()
        self._last_tx_progress = 0.0
        log.info("connected to the editor at %s:%s", self.host, self.port)
        self._open_engine()
        # Requests are small: a frame over 1 MiB, or one holding more maps and arrays than a
        # request needs, is refused before it becomes objects.
        reader = codec.FrameReader(protocol.MAX_REQUEST_FRAME_BYTES, protocol.MAX_REQUEST_CONTAINERS)
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        registered = 0
        next_poll = next_structure = time.monotonic()
        try:
            while not self._stop.is_set():
                if not self._handle_requests(reader):
                    return
                started = time.thread_time()
                self._fill_out_buffer()
                self._spend(started)
                # Read only when what was read is handled and the budget allows: a flood waits in
                # the editor's buffers, not in this process.
                reading = not _frame_waiting(reader) and self._may_work()
                want = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if self._out else 0)
                if want != registered:
                    if not want:
                        selector.unregister(sock)
                    elif not registered:
                        selector.register(sock, want)
                    else:
                        selector.modify(sock, want)
                    registered = want
                timeout = POLL_INTERVAL_S if reading else min(POLL_INTERVAL_S, self.budget.wait_s())
                for key, mask in selector.select(timeout):
                    if key.fileobj is self._wake_r:
                        self._drain_wakeups()
                        continue
                    if mask & selectors.EVENT_READ:
                        if not self._receive(sock, reader):
                            return
                    if mask & selectors.EVENT_WRITE and self._out:
                        started = time.thread_time()
                        self._send_some(sock)
                        self._spend(started)
                now = time.monotonic()
                if now >= next_poll:
                    next_poll = now + POLL_INTERVAL_S
                    self._ensure_engine()
                    self._poll_discovery()
                    self._maybe_send_stats()
                    if self._engine is not None and hasattr(self._engine, "tick"):
                        self._call_engine("tick")  # summaries due on layers the root's forward does not reach
                if now >= next_structure:
                    next_structure = now + STRUCTURE_CHECK_S
                    if self.discovery is not None:
                        try:
                            self.discovery.check_structure(blocking=False)
                        except Exception:
                            log.exception("model structure check failed")
                if not reading:
                    self._last_rx = now  # not listening now: the silence counts from when we listen again
                elif not self._check_liveness(now):
                    log.warning("the editor went silent for %.1f s: removing hooks", SILENCE_LIMIT_S)
                    return
            # stop(): hand over what is queued before closing.
            deadline = time.monotonic() + 1.0
            while (self._out or len(self.queue)) and time.monotonic() < deadline:
                self._fill_out_buffer()
                try:
                    self._send_some(sock)
                except OSError:
                    break
        finally:
            selector.close()

    def _describe_process(self) -> dict:
        """The ``process`` message's fields: sent only once the editor has proved the token."""
        info = {
            "pid": os.getpid(),
            "rank": _env_int("RANK", 0),
            "worldSize": _env_int("WORLD_SIZE", 1),
            "python": platform.python_version(),
            "torch": _torch_version(),
            "hookscope": __version__,
            "argv": _user_argv(),
            "debugger": _debugger_active(),
        }
        if self.session:
            info["session"] = self.session
        return info

    def _open_engine(self) -> None:
        with self._engine_lock:
            self.queue.clear()
            self._out.clear()
            self._deferred.clear()
            self._engine_failed = False
            self._connected.set()
            if self._engine_ready():
                self._create_engine()
            for model_id, tree in list(self._models.items()):
                ref = self._modules.get(model_id)
                module = ref() if ref is not None else None
                if self._engine is not None and module is not None:
                    self._call_engine("add_model", model_id, module, locations=_locations(tree))
                self.emit({"type": "modelAdded", "model": tree})

    def _create_engine(self) -> None:
        """Create this connection's engine (imports torch) and hand it what was asked before.

        Deferred until the program has imported torch itself: a script that never uses
        torch must not pay for it. Call with ``_engine_lock`` held.
        """
        if self._engine is not None or self._engine_failed:
            return
        try:
            self._engine = self._engine_factory(self.emit)
        except Exception as exc:
            log.exception("cannot create the engine")
            self._engine_failed = True
            self.emit(
                {
                    "type": "notice",
                    "level": "error",
                    "code": "engineError",
                    "message": f"Hookscope could not start its engine: {exc}",
                }
            )
            return
        deferred, self._deferred = self._deferred, {}
        self._replaying = True
        try:
            for request in deferred.values():
                try:
                    self._engine.handle(request)
                except Exception as exc:
                    self.emit(
                        {
                            "type": "notice",
                            "level": "warning",
                            "code": "badRequest",
                            "message": f"{request['type']} could not be applied: {exc}",
                        }
                    )
        finally:
            self._replaying = False

    def _ensure_engine(self) -> EngineLike | None:
        if self._engine is None and self._connected.is_set() and self._engine_ready():
            with self._engine_lock:
                self._create_engine()
        return self._engine

    def _disconnected(self, sock: socket.socket) -> None:
        with self._engine_lock:
            self._connected.clear()
            engine, self._engine = self._engine, None
            self._sock = None
            self.queue.clear()
            self._out.clear()
        if engine is not None:
            try:
                removed = engine.shutdown()
                log.info("disconnected: removed %s hooks", removed)
            except Exception:
                log.exception("engine.shutdown failed")
        try:
            sock.close()
        except OSError:
            pass

    # -- receiving -----------------------------------------------------------------
    def _receive(self, sock: socket.socket, reader: codec.FrameReader) -> bool:
        started = time.thread_time()
        try:
            data = sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError as exc:
            log.info("connection lost: %s", exc)
            return False
        if not data:
            log.info("the editor closed the connection")
            return False
        self._last_rx = self._rx_at = time.monotonic()
        self._pinged_at = None
        reader.push(data)
        self._spend(started)
        return True

    def _handle_requests(self, reader: codec.FrameReader) -> bool:
        """Decode and handle what was read, one frame at a time, while the budget allows.
        False when the stream is broken (the connection must close)."""
        while self._may_work():
            started = time.thread_time()
            try:
                complete, message = reader.next()
            except codec.UndecodableFrame as exc:  # the frame was skipped whole: say why and go on
                self._reply_error(-1, exc.code, str(exc))
                self._spend(started)
                continue
            except ProtocolError as exc:
                # The stream cannot be re-synchronised after a bad frame header: say why and drop it.
                self._send_now(protocol.error_reply(-1, exc.code, str(exc)))
                log.warning("bad frame from the editor: %s", exc)
                return False
            if not complete:
                return True
            if time.monotonic() - self._rx_at > SHED_AFTER_S and _is_request(message):
                self.shed += 1
                self._reply_error(
                    message["id"],
                    protocol.ERR_BUSY,
                    "the backend is behind on requests: this one was dropped unprocessed (the program runs on)",
                )
            else:
                self._on_message(message)
            self._spend(started)
        return True

    def _may_work(self) -> bool:
        """Whether request work may run now: within the budget, or while the program is paused."""
        return self._pauses > 0 or self.budget.available()

    def _spend(self, started_cpu: float) -> None:
        if self._pauses == 0:
            self.budget.spend(time.thread_time() - started_cpu)

    def _on_message(self, message: Any) -> None:
        request_id = message.get("id") if isinstance(message, dict) else None
        re = request_id if isinstance(request_id, int) and not isinstance(request_id, bool) else -1
        try:
            definition = protocol.validate(message)
        except ProtocolError as exc:
            self._reply_error(re, exc.code, str(exc))
            return
        mtype = definition.type
        if mtype == "reply":
            self._on_reply(message)
            return
        if definition.direction == "toExtension":
            self._reply_error(re, protocol.ERR_BAD_MESSAGE, f"{mtype!r} is sent by the backend, not to it")
            return
        engine = self._engine  # read without the lock: a paused training thread may hold it
        if mtype == "bye":
            log.info("bye from the editor: removing hooks")
            if engine is not None:
                self._call_engine("shutdown")
            return
        if mtype == "ping":
            self.emit(protocol.reply(re, {"pid": os.getpid()}))
            return
        if definition.kind != "request":
            return
        if engine is None:
            engine = self._ensure_engine()
        if engine is None:
            self._answer_without_engine(re, message)
            return
        try:
            body = engine.handle(message)
        except ProtocolError as exc:
            self._reply_error(re, exc.code, str(exc))
            return
        except Exception as exc:
            log.exception("request %s failed", mtype)
            self._reply_error(re, protocol.ERR_INTERNAL, f"{type(exc).__name__}: {exc}")
            return
        self.emit(protocol.reply(re, body if isinstance(body, dict) else {}))

    def _answer_without_engine(self, re: int, message: dict) -> None:
        """Before the program imports torch: keep the latest settings, apply them later."""
        mtype = message["type"]
        if self._engine_failed:
            self._reply_error(re, protocol.ERR_NOT_AVAILABLE, "the Hookscope engine could not start")
        elif mtype in _DEFERRABLE:
            self._deferred[mtype] = message
            if mtype == "setBreakpoints":
                specs = message["breakpoints"]
                body = {
                    "resolved": [
                        {"id": str(s.get("id", "")) if isinstance(s, dict) else "", "layers": []} for s in specs
                    ]
                }
            elif mtype in ("setBreakOnNonFinite", "setCompiledEager"):
                body = {"enabled": message["enabled"]}
            elif mtype == "setBreakOnGradients":
                body = {k: message[k] for k in ("exploding", "vanishing") if message.get(k) is not None}
            else:
                body = {"layers": list(message["layers"])}
            self.emit(protocol.reply(re, body))
        else:
            self._reply_error(
                re, protocol.ERR_NOT_AVAILABLE, "no PyTorch model yet: the program has not imported torch"
            )

    def _on_reply(self, message: dict) -> None:
        # A reply answers one of our heartbeats and nothing else: whatever its error code, it
        # changes nothing else (refusals belong to the handshake).
        if message.get("re", 0) > 0 and message.get("re") < self._next_ping_id:
            self._editor_answers_pings = True

    def _reply_error(self, re: int, code: str, text: str) -> None:
        log.info("error reply to %s: %s %s", re, code, text)
        self.emit(protocol.error_reply(re, code, text))

    # -- sending -------------------------------------------------------------------
    def _fill_out_buffer(self) -> None:
        while len(self._out) < OUT_BUFFER_LIMIT:
            message = self.queue.take_urgent()
            if message is None:
                return
            try:
                self._out += codec.frame(message)
            except Exception as exc:  # an unencodable event must not stop the stream
                log.error("cannot encode %s: %s", message.get("type"), exc)
                re = message.get("re")
                if message.get("type") == "reply" and isinstance(re, int):
                    self._out += codec.frame(
                        protocol.error_reply(re, protocol.ERR_INTERNAL, f"the reply could not be encoded: {exc}")
                    )

    def _send_some(self, sock: socket.socket) -> None:
        try:
            sent = sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        if sent:
            self._last_tx_progress = time.monotonic()
        del self._out[:sent]

    def _send_now(self, message: dict) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            sock.setblocking(True)
            sock.settimeout(1.0)
            sock.sendall(bytes(self._out) + codec.frame(message))
            self._out.clear()
        except OSError:
            pass
        finally:
            try:
                sock.setblocking(False)
            except OSError:
                pass

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending (or we are shutting down)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # -- periodic ------------------------------------------------------------------
    def _poll_discovery(self) -> None:
        if self.discovery is None:
            return
        try:
            self.discovery.poll(blocking=False)
        except Exception:
            log.exception("model discovery failed")

    def _maybe_send_stats(self) -> None:
        dropped, shed = self.queue.dropped, self.shed
        if dropped != self._last_stats_dropped or shed != self._last_stats_shed:
            now = time.monotonic()
            if now - self._stats_at >= STATS_INTERVAL_S:
                self._stats_at = now
                self._last_stats_dropped, self._last_stats_shed = dropped, shed
                self.queue.put({"type": "stats", "dropped": dropped, "queued": len(self.queue), "shed": shed})

    def _check_liveness(self, now: float) -> bool:
        silent = now - self._last_rx
        if silent >= PROBE_AFTER_S and self._pinged_at is None:
            self._pinged_at = now
            ping_id, self._next_ping_id = self._next_ping_id, self._next_ping_id + 1
            self.queue.put({"type": "heartbeat", "id": ping_id})
        # Only an editor that has answered our pings is expected to answer them; an older
        # one is taken for gone only when its socket closes. An editor that still takes our
        # bytes is alive though slow: its answer may sit behind what it has yet to read.
        reading = now - self._last_tx_progress < SILENCE_LIMIT_S
        return not (self._editor_answers_pings and silent >= SILENCE_LIMIT_S and not reading)


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
        _setup_file_logging()
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


def is_distributed_launcher(argv: list[str]) -> bool:
    """Whether this command line is ``torchrun`` / ``python -m torch.distributed.run`` (or ``.launch``)."""
    joined = " ".join(argv)
    # Any position: under debugpy the command line is debugpy's launcher's, the program further on.
    return (
        "torch.distributed.run" in joined
        or "torch.distributed.launch" in joined
        or any(os.path.basename(arg) == "torchrun" for arg in argv)
    )


def skip_reason() -> str | None:
    """Why this process should not run an agent (None: it should)."""
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    if "multiprocessing" in argv and (
        "spawn_main" in argv or "--multiprocessing-fork" in argv or "forkserver" in argv or "resource_tracker" in argv
    ):
        return "multiprocessing worker"
    if is_distributed_launcher(getattr(sys, "orig_argv", sys.argv)) or is_distributed_launcher(sys.argv):
        return "distributed launcher (each rank gets its own agent)"
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            if mp.parent_process() is not None:
                return "multiprocessing worker"
        except Exception:
            pass
    return None


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


def _setup_file_logging() -> None:
    log_dir = os.environ.get(ENV_LOG_DIR)
    if not log_dir:
        return
    try:
        os.makedirs(log_dir, exist_ok=True)
        handler = logging.FileHandler(os.path.join(log_dir, f"hookscope-agent-{os.getpid()}.log"), encoding="utf-8")
    except OSError as exc:
        print(f"hookscope: cannot log to {log_dir}: {exc}", file=sys.stderr)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


def _frame_waiting(reader: codec.FrameReader) -> bool:
    try:
        return reader.has_frame()
    except ProtocolError:
        return True  # a bad header: the next _handle_requests says so and closes


def _is_request(message: Any) -> bool:
    """A request the agent could answer under its id (sheddable)."""
    if not isinstance(message, dict):
        return False
    mtype = message.get("type")
    definition = protocol.MESSAGES_BY_TYPE.get(mtype) if isinstance(mtype, str) else None
    request_id = message.get("id")
    return (
        definition is not None
        and definition.kind == "request"
        and definition.direction == "toBackend"
        and isinstance(request_id, int)
        and not isinstance(request_id, bool)
    )


def _locations(tree: dict) -> dict[str, tuple[str, int]]:
    """name -> (file, line) of each module, as discovery found them (the engine resolves file:line specs)."""
    return {m["name"]: (m["file"], m["line"]) for m in tree.get("modules", ()) if "file" in m and "line" in m}


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        return str(torch.__version__)
    try:  # without importing torch: the bootstrap must stay cheap
        from importlib.metadata import version

        return version("torch")
    except Exception:
        return ""


def _torch_ready() -> bool:
    """Whether the program has finished importing torch (the engine may then import it too)."""
    torch = sys.modules.get("torch")
    spec = getattr(torch, "__spec__", None)
    return torch is not None and not getattr(spec, "_initializing", False)


def _debugger_active() -> bool:
    # A subprocess debugpy follows (a DDP rank) starts the agent from sitecustomize before
    # debugpy's own entry point has imported pydevd; its command line already says so.
    return "pydevd" in sys.modules or any("debugpy" in arg for arg in getattr(sys, "orig_argv", ()))


_DEBUGPY_OPTIONS_WITH_VALUE = {
    "--listen",
    "--connect",
    "--pid",
    "--log-to",
    "--configure-qt",
    "--adapter-access-token",
    "--parent-session-pid",
}


def _user_argv() -> list[str]:
    """``sys.argv`` as the user's script will see it (not debugpy's own command line)."""
    argv = list(sys.argv)
    if argv and "debugpy" in argv[0]:
        args = list(getattr(sys, "orig_argv", argv))
        # skip the interpreter and its options up to the debugpy entry
        for i, arg in enumerate(args):
            if "debugpy" in arg and not arg.startswith("-"):
                args = args[i + 1 :]
                break
        i = 0
        while i < len(args) and args[i].startswith("--"):
            name = args[i].split("=", 1)[0]
            has_value = (name in _DEBUGPY_OPTIONS_WITH_VALUE or name.startswith("--configure-")) and "=" not in args[i]
            i += 2 if has_value else 1
        return args[i:]
    return argv


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
