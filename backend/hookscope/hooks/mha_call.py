"""``nn.MultiheadAttention``'s call, rebuilt from its recorded arguments for the hooks that recompute it."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

MHA_ARGS = (
    "query",
    "key",
    "value",
    "key_padding_mask",
    "need_weights",
    "attn_mask",
    "average_attn_weights",
    "is_causal",
)
"""Positional arguments of a MultiheadAttention call, by name (torch 2.1+)."""


def recorded_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call ``module(*args, **kwargs)`` as a map of MHA_ARGS names."""
    call = dict(zip(MHA_ARGS, args))
    call.update(kwargs)
    return call


def recompute(
    m: nn.MultiheadAttention,
    call: dict[str, Any],
    *,
    out_weight: torch.Tensor | None = None,
    need_weights: bool,
    average_attn_weights: bool,
    is_causal: bool,
    dropout: float,
    training: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The module's general forward path for ``call``, through the same ``F.multi_head_attention_forward``
    with the module's own projections (``out_weight``: another output-projection weight). Returns the
    output in the call's layout and the weights (None unless asked for)."""
    query = call.get("query")
    if not isinstance(query, torch.Tensor):
        raise ValueError("the attention call's query is not a tensor")
    key = call.get("key", query)
    value = call.get("value", key)
    key_padding_mask = F._canonical_mask(
        mask=call.get("key_padding_mask"),
        mask_name="key_padding_mask",
        other_type=F._none_or_dtype(call.get("attn_mask")),
        other_name="attn_mask",
        target_type=query.dtype,
    )
    attn_mask = F._canonical_mask(
        mask=call.get("attn_mask"),
        mask_name="attn_mask",
        other_type=None,
        other_name="",
        target_type=query.dtype,
        check_other=False,
    )
    transposed = m.batch_first and query.dim() == 3
    if transposed:
        query, key, value = (x.transpose(1, 0) for x in (query, key, value))
    # Query, key and value of other widths have projections of their own (q/k/v_proj_weight, None
    # otherwise: torch's defaults, as the module's own forward passes them only in that case).
    separate = not m._qkv_same_embed_dim
    out, weights = F.multi_head_attention_forward(
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
        dropout,
        m.out_proj.weight if out_weight is None else out_weight,
        m.out_proj.bias,
        training=training,
        key_padding_mask=key_padding_mask,
        need_weights=need_weights,
        attn_mask=attn_mask,
        average_attn_weights=average_attn_weights,
        is_causal=is_causal,
        use_separate_proj_weight=separate,
        q_proj_weight=m.q_proj_weight if separate else None,
        k_proj_weight=m.k_proj_weight if separate else None,
        v_proj_weight=m.v_proj_weight if separate else None,
    )
    return (out.transpose(1, 0) if transposed else out), weights
