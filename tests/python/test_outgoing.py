"""The agent's outgoing queue (``link/outgoing.py``): bounded by count and bytes, drops and counts."""

from __future__ import annotations

from hookscope.link import protocol
from hookscope.link.outgoing import OutgoingQueue
from hookscope.link.protocol_vocabulary import ERR_NOT_AVAILABLE


def test_queue_drops_and_counts_but_keeps_essential_messages():
    queue = OutgoingQueue(limit=3, essential_limit=5)
    for i in range(5):
        queue.put({"type": "summaries", "n": i})
    assert len(queue) == 3 and queue.dropped == 2
    assert queue.put({"type": "hit"}) and queue.put({"type": "reply", "re": 1})
    assert not queue.put({"type": "hit"})  # even essential ones have a ceiling
    assert queue.dropped == 3
    assert [queue.take()["n"] for _ in range(3)] == [0, 1, 2]


def test_queue_is_capped_by_bytes_and_a_reply_that_does_not_fit_becomes_an_error_reply():
    queue = OutgoingQueue(limit=100, essential_limit=100, byte_limit=10_000, essential_byte_limit=50_000)
    summaries = {"type": "summaries", "tensors": [], "blob": "x" * 4000}
    assert queue.put(summaries) and queue.put(summaries)
    assert not queue.put(summaries)  # a third would pass 10 kB of droppable events: dropped, counted
    assert queue.dropped == 1 and 8000 < queue.bytes < 10_000
    assert queue.put(protocol.reply(5, {"png": b"\0" * 60_000}))  # over 50 kB: its request still gets an answer
    assert queue.dropped == 2
    answer = queue.take_urgent()  # essential first
    assert answer["re"] == 5 and answer["error"]["code"] == ERR_NOT_AVAILABLE
    assert "does not fit" in answer["error"]["message"]
    queue.clear()
    assert queue.bytes == 0 and len(queue) == 0
