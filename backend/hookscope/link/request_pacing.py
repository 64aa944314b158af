"""How much of the debuggee's time the editor's requests may take, and which requests are shed.

The agent answers requests on its own thread, but every request takes the interpreter from the
training thread for a while: ``RequestBudget`` caps that to a share of the time, and a request
that waited too long for its turn (a flood the agent fell behind on) is answered ``busy`` unread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hookscope.link.protocol_messages import MESSAGES_BY_TYPE

REQUEST_SHARE = 0.05
"""Share of the time the editor's requests may take while the program runs (``RequestBudget``)."""
REQUEST_BURST_S = 0.25
"""Request work that may run back to back before the share applies (a few renders in a row)."""
REQUEST_RESUME_S = 0.003
"""Once the share is spent, request work resumes in turns of this much."""
SHED_AFTER_S = 5.0
"""A request read this long ago and still not started is answered ``busy`` unprocessed."""


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


def should_shed(message: Any, read_at: float) -> bool:
    """Whether to answer ``message`` ``busy`` unprocessed: a request read over ``SHED_AFTER_S`` ago."""
    return time.monotonic() - read_at > SHED_AFTER_S and _is_request(message)


def _is_request(message: Any) -> bool:
    """A request the agent could answer under its id (sheddable)."""
    if not isinstance(message, dict):
        return False
    mtype = message.get("type")
    definition = MESSAGES_BY_TYPE.get(mtype) if isinstance(mtype, str) else None
    request_id = message.get("id")
    return (
        definition is not None
        and definition.kind == "request"
        and definition.direction == "toBackend"
        and isinstance(request_id, int)
        and not isinstance(request_id, bool)
    )
