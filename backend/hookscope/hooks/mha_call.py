"""The order of ``nn.MultiheadAttention.forward``'s parameters, for the hooks that rebuild its call."""

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
