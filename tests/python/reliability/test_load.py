"""Load: a 1,000-layer model streaming summaries of every layer to an editor that reads slowly.

The agent must keep its memory bounded (the queue drops and counts, and
tells the editor with a ``stats`` event), never slow the training step down
on the editor, and send the module tree first, so that it reaches the editor
at once however much else is queued. A slow editor that does answer
heartbeats (late, when it gets to them) must not be mistaken for a dead one.
"""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import torch
from reliability_support import hook_count, wait_until
from torch import nn

from hookscope.engine import discovery
from hookscope.engine.core import Engine
from hookscope.link import codec, handshake, protocol, serve_loop
from hookscope.link.agent import Agent
from hookscope.link.outgoing import OutgoingQueue

LAYERS = 1000
QUEUE_LIMIT = 512


def deep_model() -> nn.Sequential:
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(LAYERS)])


class SlowEditor:
    """Accepts one backend and reads ``rate`` bytes per second; answers heartbeats when it reaches them."""

    def __init__(self, token: str, rate: int, answer_heartbeats: bool) -> None:
        self.token, self.rate, self.answer = token, rate, answer_heartbeats
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.arrivals: list[tuple[float, dict]] = []
        self.connected_at: float | None = None
        self.connections = 0
        self.stop = threading.Event()
        self.sock: socket.socket | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def first(self, mtype: str) -> tuple[float, dict] | None:
        return next(((t, m) for t, m in self.arrivals if m.get("type") == mtype), None)

    def request(self, message: dict) -> None:
        assert self.sock is not None
        self.sock.sendall(codec.frame(message))

    def _run(self) -> None:
        self.server.settimeout(0.5)
        while not self.stop.is_set():
            try:
                sock, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            try:
                handshake.as_editor(sock, lambda: (self.token,), time.monotonic() + 10)
            except (OSError, handshake.HandshakeFailed):
                sock.close()
                continue
            self.connections += 1
            self.connected_at = time.monotonic()
            sock.settimeout(0.2)
            self.sock = sock
            reader = codec.FrameReader()
            chunk = max(1, self.rate // 20)
            while not self.stop.is_set():
                try:
                    data = sock.recv(chunk)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                now = time.monotonic()
                for message in reader.feed(data):
                    self.arrivals.append((now, message))
                    if self.answer and message.get("type") == "heartbeat":
                        sock.sendall(codec.frame(protocol.reply(message["id"], {})))
                time.sleep(0.05)  # rate/20 bytes every 50 ms
            sock.close()

    def close(self) -> None:
        self.stop.set()
        self.server.close()
        self.thread.join(5)


def _run_load(answer_heartbeats: bool, extra_steps: int = 4) -> dict:
    """Watch every layer at every step until events are being dropped, then ``extra_steps`` more."""
    model = deep_model()
    tracemalloc.start()
    editor = SlowEditor("tok", rate=128 * 1024, answer_heartbeats=answer_heartbeats)
    # The summary budget would keep this far below what overflows the queue (a round of 1,000
    # summaries every ~25 rounds' time); let summaries take nearly all the time, as a huge watch would.
    a = Agent(
        "127.0.0.1", editor.port, "tok", discover=False, engine_factory=lambda emit: Engine(emit, summary_share=0.99)
    )
    a.queue = OutgoingQueue(limit=QUEUE_LIMIT)  # drops start after a step or two (the bound is what counts)
    tree = discovery.describe("m1", model, "deep")
    a._on_model_added("m1", model, tree)
    try:
        a.start()
        wait_until(lambda: editor.first("modelAdded"), timeout=30, what="the model tree")
        editor.request({"type": "watch", "id": 1, "layers": [str(i) for i in range(LAYERS)], "rateHz": 1000})
        wait_until(lambda: hook_count(model) >= LAYERS, timeout=30, what="the watches")
        x = torch.randn(4, 8)
        peak_queue = peak_out = 0
        base_mem, _ = tracemalloc.get_traced_memory()
        deadline = time.monotonic() + 120
        steps = extra = 0
        while extra < extra_steps and time.monotonic() < deadline:
            with torch.no_grad():
                model(x)
            steps += 1
            extra += a.queue.dropped > 0
            peak_queue = max(peak_queue, len(a.queue))
            peak_out = max(peak_out, len(a._out))
        _, peak_mem = tracemalloc.get_traced_memory()
        wait_until(lambda: editor.first("stats"), timeout=60, what="a stats event")
        return {
            "steps": steps,
            "peak_queue": peak_queue,
            "peak_out": peak_out,
            "dropped": a.queue.dropped,
            "stats": editor.first("stats")[1],
            "connections": editor.connections,
            "mem_growth": peak_mem - base_mem,
            "tree_modules": len(tree["modules"]),
        }
    finally:
        a.stop()
        editor.close()
        tracemalloc.stop()


def test_slow_reader_memory_bounded_drops_counted_tree_first():
    result = _run_load(answer_heartbeats=False)
    assert result["tree_modules"] == LAYERS + 1
    # Bounded: the queue never exceeds its limit, the encoded buffer never exceeds its cap.
    assert result["peak_queue"] <= QUEUE_LIMIT + 64
    assert result["peak_out"] <= serve_loop.OUT_BUFFER_LIMIT + 1024 * 1024
    assert result["mem_growth"] < serve_loop.OUT_BUFFER_LIMIT + 64 * 1024 * 1024
    assert result["dropped"] > 0 and result["stats"]["dropped"] > 0
    print(
        f"{result['steps']} steps; "
        f"dropped {result['dropped']}; peak queue {result['peak_queue']}; peak buffer {result['peak_out']} B; "
        f"traced memory growth {result['mem_growth'] / 1e6:.1f} MB"
    )


def test_slow_editor_that_answers_heartbeats_is_not_taken_for_dead():
    result = _run_load(answer_heartbeats=True, extra_steps=4)
    assert result["connections"] == 1, "a slow but live editor was disconnected (its hooks removed)"
    assert result["dropped"] > 0


def test_tree_of_a_1000_layer_model_reaches_the_editor_first(link):
    """The tree is sent right after hello, ahead of any queued event (docs/reliability.md: about 0.2-0.3 s here)."""
    model = deep_model()
    a = Agent(link.host, link.port, link.token, discover=False)
    a._on_model_added("m1", model, discovery.describe("m1", model, "deep"))
    start = time.monotonic()
    a.start()
    try:
        conn = link.wait_connection(30)
        event = conn.wait_event("modelAdded", timeout=30)
        took = time.monotonic() - start
        assert len(event["model"]["modules"]) == LAYERS + 1
        assert [m["type"] for m in conn.received][0] == "modelAdded"
        assert took < 10  # generous: well under a second here
    finally:
        a.stop()
