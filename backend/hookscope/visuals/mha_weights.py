"""Per-head attention weights of an ``nn.MultiheadAttention`` call, recomputed from its inputs.

A model that calls its attention with ``need_weights=False`` (as
``nn.TransformerEncoderLayer`` does) gets no weights back, and asking for them
in the user's own call would change the code path the model runs. Instead the
weights are recomputed from the call's kept inputs and the module's own
projections, through the same ``F.multi_head_attention_forward`` the module's
general path uses: with ``need_weights=True``, per head, and no dropout (a
picture of the attention, not of one random mask; no random numbers drawn, so
the user's random stream is untouched). Nothing of the user's run changes:
no module state is touched, no hook fires, the result is computed without grad.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hookscope.hooks.mha_call import recompute, recorded_call

Tensor = torch.Tensor


def mha_weights(module: nn.MultiheadAttention, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """(N, H, L, S) weights of the call ``module(*args, **kwargs)`` ((H, L, S) for unbatched input)."""
    with torch.no_grad():
        # is_causal=False: the hint only lets torch skip the mask, and with weights asked for it
        # uses the mask (the call's attn_mask) anyway.
        _, weights = recompute(
            module,
            recorded_call(args, kwargs),
            need_weights=True,
            average_attn_weights=False,
            is_causal=False,
            dropout=0.0,
            training=False,
        )
    assert weights is not None
    return weights
