"""One authenticated connection to the editor: the socket loop that reads, dispatches and sends.

``_serve`` runs on the agent thread for as long as the editor stays: it reads requests only
while the time share allows (``link/request_pacing.py``) and what was read is handled, hands
each decoded message to ``EngineDispatch._on_message``, drains the outgoing queue
(``link/outgoing.py``) into a small send buffer, pings a silent editor, and polls discovery.
It returns when the editor closes, goes silent, or sends a frame that breaks the stream; the
reconnect loop (``Agent._run``) then removes every hook (``_disconnected``) and tries again.

``ServeLoop`` is the middle layer of ``Agent`` (a mixin whose state ``Agent.__init__`` sets up).
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from typing import Any

from hookscope.link import codec, protocol, request_pacing
from hookscope.link.agent_log import log
from hookscope.link.engine_dispatch import DiscoveryLike, EngineDispatch
from hookscope.link.outgoing import OutgoingQueue
from hookscope.link.protocol_vocabulary import (
    ERR_BUSY,
    ERR_INTERNAL,
    MAX_REQUEST_CONTAINERS,
    MAX_REQUEST_FRAME_BYTES,
    ProtocolError,
)

RECV_BYTES = 16 * 1024
"""Bytes read from the editor at a time; the next read waits until they are all handled."""
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
"""How often the loop polls discovery, the engine's tick and the stats, and looks at the socket."""
STRUCTURE_CHECK_S = 2.0
"""How often discovery re-reads the models' module trees (a layer added at run time)."""
STATS_INTERVAL_S = 2.0
"""At most one ``stats`` event (drops, sheds) this often."""


class ServeLoop(EngineDispatch):
    """The agent's socket layer (a mixin: the state lives on ``Agent``, set up in its ``__init__``)."""

    host: str
    port: int
    discovery: DiscoveryLike | None
    queue: OutgoingQueue
    budget: request_pacing.RequestBudget
    connections: int
    shed: int
    _out: bytearray
    _sock: socket.socket | None
    _wake_r: socket.socket
    _wake_w: socket.socket
    _stop: threading.Event
    _pauses: int
    _rx_at: float
    _last_rx: float
    _last_tx_progress: float
    _pinged_at: float | None
    _next_ping_id: int
    _editor_answers_pings: bool
    _stats_at: float
    _last_stats_dropped: int
    _last_stats_shed: int

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
        with self._engine_lock:
            self.queue.clear()  # nothing queued for the last editor goes to this one
            self._out.clear()
            self._open_engine()
        # Requests are small: a frame over 1 MiB, or one holding more maps and arrays than a
        # request needs, is refused before it becomes objects.
        reader = codec.FrameReader(MAX_REQUEST_FRAME_BYTES, MAX_REQUEST_CONTAINERS)
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
            if request_pacing.should_shed(message, self._rx_at):
                self.shed += 1
                self._reply_error(
                    message["id"],
                    ERR_BUSY,
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
                        protocol.error_reply(re, ERR_INTERNAL, f"the reply could not be encoded: {exc}")
                    )

    def _send_some(self, sock: socket.socket) -> None:
        try:
            sent = sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        if sent:
            self._last_tx_progress = time.monotonic()
        del self._out[:sent]

    def _send_now(self, message: dict[str, Any]) -> None:
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

    # -- periodic (discovery, stats, heartbeats) ------------------------------------
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

    def _on_reply(self, message: dict[str, Any]) -> None:
        # A reply answers one of our heartbeats and nothing else: whatever its error code, it
        # changes nothing else (refusals belong to the handshake).
        re = message.get("re", 0)
        if 0 < re < self._next_ping_id:
            self._editor_answers_pings = True


def _frame_waiting(reader: codec.FrameReader) -> bool:
    try:
        return reader.has_frame()
    except ProtocolError:
        return True  # a bad header: the next _handle_requests says so and closes
