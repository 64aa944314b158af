"""The Hookscope agent: a thread inside the debugged process that talks to the editor.

It connects to the editor (``HOOKSCOPE_ADDR``), sends ``hello`` and the model
trees, answers requests through one ``Engine`` per connection, and streams
the engine's events through a bounded queue that drops and counts, so a slow
or dead editor never blocks a training step.

The thread is hidden from the debugger (``pydev_do_not_trace`` and
``is_pydev_daemon_thread`` set before it starts): debugpy neither traces it
nor suspends it, so it keeps serving while the program is paused at a layer
breakpoint.

When the connection drops or the editor goes silent, every hook is removed
within ``SILENCE_LIMIT_S`` and the agent keeps trying to reconnect with
backoff; a new connection gets a fresh ``hello``, the models and a fresh engine.

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
from typing import Any, Callable, Protocol

from . import __version__, codec, protocol
from .protocol import ProtocolError

ENV_ADDR = "HOOKSCOPE_ADDR"
ENV_TOKEN = "HOOKSCOPE_TOKEN"
ENV_SESSION = "HOOKSCOPE_SESSION"
ENV_LOG_DIR = "HOOKSCOPE_LOG_DIR"

QUEUE_LIMIT = 4096
"""Droppable events waiting to be sent; more are dropped and counted."""
ESSENTIAL_LIMIT = 65536
"""Replies, hits and model events are kept beyond QUEUE_LIMIT, up to this many."""
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

_DEFERRABLE = frozenset({"setBreakpoints", "setBreakOnNonFinite", "setCompiledEager", "watch"})
"""Requests that replace a whole setting: kept until the engine exists, then applied."""

ESSENTIAL_TYPES = frozenset({"reply", "heartbeat", "hit", "resumed", "modelAdded", "modelRemoved", "notice", "stats"})

log = logging.getLogger("hookscope.agent")
log.propagate = False  # never into the user's logging setup
log.addHandler(logging.NullHandler())


class EngineLike(Protocol):
    def add_model(self, model_id: str, model: Any) -> None: ...
    def remove_model(self, model_id: str) -> None: ...
    def handle(self, request: dict) -> dict: ...
    def shutdown(self) -> int: ...


def _default_engine_factory(emit: Callable[[dict], None]) -> EngineLike:
    from .engine import Engine  # heavy (torch): only once connected

    return Engine(emit)


class OutgoingQueue:
    """Bounded, thread-safe queue of outgoing messages: ``put`` never blocks, it drops and counts.

    Essential messages (replies, hits, model events, stats) wait in their own lane, so that
    ``take_urgent`` can send them ahead of thousands of droppable summaries queued for a slow
    editor; ``take`` keeps the overall order.
    """

    def __init__(self, limit: int = QUEUE_LIMIT, essential_limit: int = ESSENTIAL_LIMIT) -> None:
        self._items: collections.deque[dict] = collections.deque()
        """Droppable messages, oldest first."""
        self._essential: collections.deque[dict] = collections.deque()
        self._order: dict[int, int] = {}
        """id(message) -> sequence number, for ``take``'s overall order."""
        self._seq = 0
        self._lock = threading.Lock()
        self._limit = limit
        self._essential_limit = essential_limit
        self.dropped = 0

    def put(self, message: dict) -> bool:
        essential = message.get("type") in ESSENTIAL_TYPES
        with self._lock:
            size = len(self._items) + len(self._essential)
            if size >= self._essential_limit or (size >= self._limit and not essential):
                self.dropped += 1
                return False
            self._seq += 1
            self._order[id(message)] = self._seq
            (self._essential if essential else self._items).append(message)
            return True

    def take(self) -> dict | None:
        """The oldest message of either lane."""
        with self._lock:
            if self._essential and (not self._items or self._order[id(self._essential[0])]
                                    < self._order[id(self._items[0])]):
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
        self._order.pop(id(message), None)
        return message

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._essential.clear()
            self._order.clear()

    def __len__(self) -> int:
        return len(self._items) + len(self._essential)


class Agent:
    """One connection's worth of state at a time, reconnecting for the life of the process."""

    def __init__(self, host: str, port: int, token: str, session: str | None = None, *,
                 engine_factory: Callable[[Callable[[dict], None]], EngineLike] | None = None,
                 engine_ready: Callable[[], bool] | None = None,
                 discovery: Any = None, discover: bool = True) -> None:
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
            from .discovery import Discovery

            discovery = Discovery(self._on_model_added, self._on_model_removed)
        self.discovery = discovery
        self.connections = 0
        """How many times a connection was made (tests, logs)."""

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
        if not self._connected.is_set():
            return  # nobody listens: events of a dead connection are not kept
        if self._replaying and event.get("code") == "breakpointUnresolved":
            return  # replayed before any model exists: the editor was told when it asked
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
        """Why the editor refused this agent for good (wrong token, protocol mismatch)."""
        return self._refused

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
            self.emit({"type": "notice", "level": "error", "code": "engineError",
                       "message": f"Hookscope engine.{method} failed: {exc}"})
            return None

    # -- the thread --------------------------------------------------------------
    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                sock = socket.create_connection((self.host, self.port), timeout=2.0)
            except OSError as exc:
                delay = RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)]
                if attempt == 0:
                    log.info("cannot reach the editor at %s:%s (%s); retrying", self.host, self.port, exc)
                attempt += 1
                self._idle(delay)
                continue
            attempt = 0
            try:
                self._serve(sock)
            except Exception:
                log.exception("agent connection failed")
            finally:
                self._disconnected(sock)
            if self._refused is not None:
                return
            self._idle(RECONNECT_BACKOFF_S[0])

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
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A modest kernel buffer: what is queued for a slow editor waits in our queue, where
        # essential messages overtake summaries, not in the kernel, where nothing can.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        sock.settimeout(2.0)
        sock.sendall(codec.frame(self._hello()))
        sock.setblocking(False)
        self._sock = sock
        self.connections += 1
        self._editor_answers_pings = False
        self._pinged_at = None
        self._last_rx = time.monotonic()
        self._last_tx_progress = 0.0
        log.info("connected to the editor at %s:%s", self.host, self.port)
        self._open_engine()
        reader = codec.FrameReader()
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        next_poll = next_structure = time.monotonic()
        try:
            while not self._stop.is_set():
                self._fill_out_buffer()
                want = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._out else 0)
                selector.modify(sock, want)
                for key, mask in selector.select(POLL_INTERVAL_S):
                    if key.fileobj is self._wake_r:
                        self._drain_wakeups()
                        continue
                    if mask & selectors.EVENT_READ:
                        if not self._receive(sock, reader):
                            return
                    if mask & selectors.EVENT_WRITE and self._out:
                        self._send_some(sock)
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
                if not self._check_liveness(now):
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

    def _hello(self) -> dict:
        hello = {
            "type": "hello",
            "token": self.token,
            "protocol": protocol.PROTOCOL_VERSION,
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
            hello["session"] = self.session
        return hello

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
            self.emit({"type": "notice", "level": "error", "code": "engineError",
                       "message": f"Hookscope could not start its engine: {exc}"})
            return
        deferred, self._deferred = self._deferred, {}
        self._replaying = True
        try:
            for request in deferred.values():
                try:
                    self._engine.handle(request)
                except Exception as exc:
                    self.emit({"type": "notice", "level": "warning", "code": "badRequest",
                               "message": f"{request['type']} could not be applied: {exc}"})
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
        try:
            data = sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError as exc:
            log.info("connection lost: %s", exc)
            return False
        if not data:
            log.info("the editor closed the connection")
            return False
        self._last_rx = time.monotonic()
        self._pinged_at = None
        try:
            messages = reader.feed(data)
        except ProtocolError as exc:
            # The stream cannot be re-synchronised after a bad frame header: say why and drop it.
            self._send_now(protocol.error_reply(-1, exc.code, str(exc)))
            log.warning("bad frame from the editor: %s", exc)
            return False
        for message in messages:
            self._on_message(message)
            if self._refused is not None:
                return False
        return True

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
                body = {"resolved": [{"id": str(s.get("id", "")) if isinstance(s, dict) else "", "layers": []}
                                     for s in specs]}
            elif mtype in ("setBreakOnNonFinite", "setCompiledEager"):
                body = {"enabled": message["enabled"]}
            else:
                body = {"layers": list(message["layers"])}
            self.emit(protocol.reply(re, body))
        else:
            self._reply_error(re, protocol.ERR_NOT_AVAILABLE, "no PyTorch model yet: the program has not "
                              "imported torch")

    def _on_reply(self, message: dict) -> None:
        error = message.get("error")
        if isinstance(error, dict) and error.get("code") in (protocol.ERR_TOKEN, protocol.ERR_VERSION):
            self._refused = f"{error.get('code')}: {error.get('message')}"
            text = (f"hookscope: the editor refused this process ({error.get('code')}): "
                    f"{error.get('message')}. Hookscope stays off in this process.")
            log.error(text)
            print(text, file=sys.stderr, flush=True)
            return
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
                    self._out += codec.frame(protocol.error_reply(
                        re, protocol.ERR_INTERNAL, f"the reply could not be encoded: {exc}"))

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
        dropped = self.queue.dropped
        if dropped != self._last_stats_dropped:
            now = time.monotonic()
            if now - self._stats_at >= STATS_INTERVAL_S:
                self._stats_at = now
                self._last_stats_dropped = dropped
                self.queue.put({"type": "stats", "dropped": dropped, "queued": len(self.queue)})

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


def start(addr: str | None = None, token: str | None = None, session: str | None = None,
          **kwargs: Any) -> Agent:
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
    return ("torch.distributed.run" in joined or "torch.distributed.launch" in joined
            or any(os.path.basename(arg) == "torchrun" for arg in argv))


def skip_reason() -> str | None:
    """Why this process should not run an agent (None: it should)."""
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    if "multiprocessing" in argv and ("spawn_main" in argv or "--multiprocessing-fork" in argv
                                      or "forkserver" in argv or "resource_tracker" in argv):
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
        handler = logging.FileHandler(os.path.join(log_dir, f"hookscope-agent-{os.getpid()}.log"),
                                      encoding="utf-8")
    except OSError as exc:
        print(f"hookscope: cannot log to {log_dir}: {exc}", file=sys.stderr)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


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


_DEBUGPY_OPTIONS_WITH_VALUE = {"--listen", "--connect", "--pid", "--log-to", "--configure-qt",
                               "--adapter-access-token", "--parent-session-pid"}


def _user_argv() -> list[str]:
    """``sys.argv`` as the user's script will see it (not debugpy's own command line)."""
    argv = list(sys.argv)
    if argv and "debugpy" in argv[0]:
        args = list(getattr(sys, "orig_argv", argv))
        # skip the interpreter and its options up to the debugpy entry
        for i, arg in enumerate(args):
            if "debugpy" in arg and not arg.startswith("-"):
                args = args[i + 1:]
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
