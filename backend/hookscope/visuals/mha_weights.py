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
import torch.nn.functional as F
from torch import nn

from hookscope.hooks.mha_call import MHA_ARGS

Tensor = torch.Tensor

"""``nn.MultiheadAttention.forward``'s parameters in order (positional calls map onto these)."""


def mha_weights(module: nn.MultiheadAttention, args: tuple, kwargs: dict[str, Any]) -> Tensor:
    """(N, H, L, S) weights of the call ``module(*args, **kwargs)`` ((H, L, S) for unbatched input)."""
    call = dict(zip(MHA_ARGS, args))
    call.update(kwargs)
    query = call.get("query")
    if not isinstance(query, Tensor):
        raise ValueError("the attention call's query is not a tensor")
    key = call.get("key", query)
    value = call.get("value", key)
    attn_mask = call.get("attn_mask")
    key_padding_mask = F._canonical_mask(
        mask=call.get("key_padding_mask"),
        mask_name="key_padding_mask",
        other_type=F._none_or_dtype(attn_mask),
        other_name="attn_mask",
        target_type=query.dtype,
    )
    attn_mask = F._canonical_mask(
        mask=attn_mask,
        mask_name="attn_mask",
        other_type=None,
        other_name="",
        target_type=query.dtype,
        check_other=False,
    )
    is_batched = query.dim() == 3
    if module.batch_first and is_batched:
        query, key, value = (x.transpose(1, 0) for x in (query, key, value))
    m = module
    separate: dict[str, Any] = (
        {}
        if m._qkv_same_embed_dim
        else {
            "use_separate_proj_weight": True,
            "q_proj_weight": m.q_proj_weight,
            "k_proj_weight": m.k_proj_weight,
            "v_proj_weight": m.v_proj_weight,
        }
    )
    with torch.no_grad():
        # is_causal=False: the hint only lets torch skip the mask, and with weights asked for it
        # uses the mask (the call's attn_mask) anyway.
        _, weights = F.multi_head_attention_forward(
            query,
            key,
            value,
            m.embed_dim,
            m.num_heads,
            m.in_proj_weight,
            m.in_proj_bias,
            m.bias_k,
            m.bias_v,
            m.add_zero_attn,
            0.0,
            m.out_proj.weight,
            m.out_proj.bias,
            training=False,
            key_padding_mask=key_padding_mask,
            need_weights=True,
            attn_mask=attn_mask,
            average_attn_weights=False,
            is_causal=False,
            **separate,
        )
    assert weights is not None
    return weights
