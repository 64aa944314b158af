"""The agent's outgoing queue: never blocks the thread that emits, bounded by count and by bytes.

The training thread queues events (``put``) and the agent thread sends them; a slow or dead
editor makes the queue drop and count (``dropped``, reported in ``stats``), never wait.
Essential messages (replies, hits, model events) overtake droppable summaries.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from hookscope.link import protocol
from hookscope.link.protocol_vocabulary import ERR_NOT_AVAILABLE

QUEUE_LIMIT = 4096
"""Droppable events waiting to be sent; more are dropped and counted."""
ESSENTIAL_LIMIT = 65536
"""Replies, hits and model events are kept beyond QUEUE_LIMIT, up to this many."""
QUEUE_BYTES_LIMIT = 16 * 1024 * 1024
"""Estimated bytes of droppable events waiting; more are dropped and counted."""
ESSENTIAL_BYTES_LIMIT = 64 * 1024 * 1024
"""Estimated bytes of all messages waiting; an essential one past this is dropped (a reply is
replaced by a small error reply)."""

ESSENTIAL_TYPES = frozenset({"reply", "heartbeat", "hit", "resumed", "modelAdded", "modelRemoved", "notice", "stats"})
"""Messages kept in their own lane, beyond ``QUEUE_LIMIT``: replies, hits, model events, stats."""


def approx_size(message: dict[str, Any]) -> int:
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
        self._items: collections.deque[dict[str, Any]] = collections.deque()
        """Droppable messages, oldest first."""
        self._essential: collections.deque[dict[str, Any]] = collections.deque()
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

    def put(self, message: dict[str, Any]) -> bool:
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

    def take(self) -> dict[str, Any] | None:
        """The oldest message of either lane."""
        with self._lock:
            if self._essential and (
                not self._items or self._order[id(self._essential[0])][0] < self._order[id(self._items[0])][0]
            ):
                return self._pop(self._essential)
            return self._pop(self._items) if self._items else None

    def take_urgent(self) -> dict[str, Any] | None:
        """The oldest essential message, else the oldest droppable one."""
        with self._lock:
            if self._essential:
                return self._pop(self._essential)
            return self._pop(self._items) if self._items else None

    def _pop(self, lane: collections.deque[dict[str, Any]]) -> dict[str, Any]:
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


def _too_large(reply: dict[str, Any], size: int, waiting: int) -> dict[str, Any]:
    return protocol.error_reply(
        reply.get("re", -1),
        ERR_NOT_AVAILABLE,
        f"the reply (about {size / 1e6:.1f} MB) does not fit beside the "
        f"{waiting / 1e6:.1f} MB waiting for a slow editor: try again",
    )
