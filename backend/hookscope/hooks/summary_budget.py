"""How often a watched layer is summarised: the panel's rate, slowed so summaries stay cheap.

Each summary of a layer's tensors costs time in the training step (reductions, a
histogram, one small host transfer); on big activations or a thousand layers, a round
over every watched layer at the panel's 4 Hz can cost more than the steps themselves.
The budget measures what each layer's sample costs (its summaries, sending them, taking
its hook off) and what putting the due hooks back costs, and stretches the interval
between two summaries of a layer so that one round over all of them costs at most
``share`` of the interval: every layer still refreshes, all at the same slower pace.
"""

from __future__ import annotations

from collections.abc import Hashable

DEFAULT_SHARE = 0.025
"""Time the samples take on the training thread, as a share of the program's time. The
performance target for watching is +5%; what the budget cannot see (sending the samples
from the agent's thread, which shares the GIL; the allocations and collections they cause)
made a 4% share cost 1.06x on 1,000 watched layers in three runs of four (bench)."""
_SMOOTHING = 0.3
"""Weight of the newest measurement in each layer's running cost."""


class SummaryBudget:
    """Running cost per watched layer and phase, and the interval it allows."""

    def __init__(self, share: float = DEFAULT_SHARE) -> None:
        if not 0 < share < 1:
            raise ValueError("share must be between 0 and 1")
        self.share = share
        self._cost: dict[Hashable, float] = {}

    def record(self, key: Hashable, seconds: float) -> None:
        """One summary of ``key`` (a layer and phase) took ``seconds``."""
        old = self._cost.get(key)
        self._cost[key] = seconds if old is None else old + _SMOOTHING * (seconds - old)

    def forget(self, layer_key: Hashable) -> None:
        """The layer is no longer watched (its keys are ``(layer_key, phase)``)."""
        # The agent's thread forgets while the training thread records: list() copies the keys in
        # one step under the GIL, where a comprehension over the dict could see it change size.
        for key in [k for k in list(self._cost) if isinstance(k, tuple) and k[:1] == (layer_key,)]:
            self._cost.pop(key, None)

    def round_cost(self) -> float:
        """Seconds one summary of every watched layer costs."""
        return sum(self._cost.values())

    def interval(self, wanted: float) -> float:
        """Seconds between two summaries of a layer: ``wanted``, or longer to keep within the share."""
        return max(wanted, self.round_cost() / self.share)
