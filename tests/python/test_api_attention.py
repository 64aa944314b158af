"""Attention capture: the weights equal the module's own, also with need_weights=False."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope.hooks import inventory


def no_hooks(model: nn.Module) -> bool:
    return inventory.list_hooks({"m": model})["hooks"] == []


class Caller(nn.Module):
    """Calls its attention the way a model chooses to."""

    def __init__(self, **call: object) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.call = call

    def forward(self, x: torch.Tensor):
        return self.attn(x, x, x, **self.call)


X = torch.randn(2, 5, 16)


def test_default_call_gets_its_averaged_weights_back():
    model = Caller()
    out_ref, w_ref = model(X)
    with hookscope.capture_attention(model) as attn:
        out, w = model(X)
    per_head = attn["attn"]
    assert per_head.shape == (2, 4, 5, 5)
    assert torch.equal(w, per_head.mean(dim=1))  # what the model receives is its own average
    assert torch.allclose(w, w_ref, atol=1e-6) and torch.allclose(out, out_ref, atol=1e-6)
    assert no_hooks(model)


def test_per_head_call_is_left_as_is():
    model = Caller(average_attn_weights=False)
    with hookscope.capture_attention(model) as attn:
        _, w = model(X)
    assert torch.equal(attn["attn"], w.detach())


def test_need_weights_false_is_captured_and_restored():
    model = Caller(need_weights=False)
    out_ref, none_ref = model(X)
    assert none_ref is None
    with hookscope.capture_attention(model) as attn:
        out, w = model(X)
    assert w is None  # the model still gets what it asked for
    assert torch.allclose(out, out_ref, atol=1e-5)
    own = model.attn(X, X, X, need_weights=True, average_attn_weights=False)[1]
    assert torch.allclose(attn["attn"], own.detach(), atol=1e-7)


def test_positional_options_are_understood():
    class Positional(Caller):
        def forward(self, x):
            return self.attn(x, x, x, None, False)  # key_padding_mask, need_weights

    model = Positional()
    with hookscope.capture_attention(model) as attn:
        _, w = model(X)
    assert w is None and attn["attn"].shape == (2, 4, 5, 5)


def test_unbatched_input():
    model = Caller()
    x = X[0]
    _, w_ref = model(x)
    with hookscope.capture_attention(model) as attn:
        _, w = model(x)
    assert attn["attn"].shape == (4, 5, 5)
    assert torch.allclose(w, w_ref, atol=1e-6) and torch.equal(w, attn["attn"].mean(dim=0))


def test_transformer_encoder_fast_path_is_bypassed_and_restored():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    before = torch.backends.mha.get_fastpath_enabled()
    with torch.no_grad():
        ref = enc(X)
        with hookscope.capture_attention(enc) as attn:
            assert torch.backends.mha.get_fastpath_enabled() is False
            out = enc(X)
        first = enc.layers[0].self_attn(X, X, X, need_weights=True, average_attn_weights=False)[1]
    assert torch.backends.mha.get_fastpath_enabled() == before
    assert set(attn) == {"layers.0.self_attn", "layers.1.self_attn"}
    assert torch.allclose(attn["layers.0.self_attn"], first, atol=1e-6)
    assert torch.allclose(out, ref, atol=1e-5)
    assert no_hooks(enc)


def test_hand_written_attention_at_a_chosen_module():
    class HandMade(nn.Module):
        def __init__(self):
            super().__init__()
            self.softmax = nn.Softmax(dim=-1)

        def forward(self, q, k):
            return self.softmax(q @ k.transpose(-1, -2) / 4.0)

    model = HandMade()
    q, k = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    with hookscope.capture_attention(model, "softmax") as attn:
        probs = model(q, k)
    assert torch.equal(attn["softmax"], probs)


def test_no_attention_module_is_a_clear_error():
    with pytest.raises(ValueError, match="MultiheadAttention"):
        hookscope.capture_attention(nn.Linear(2, 2))


def test_a_scope_also_restores_the_fast_path():
    model = Caller()
    before = torch.backends.mha.get_fastpath_enabled()
    with hookscope.scope(model):
        hookscope.capture_attention(model)
        assert torch.backends.mha.get_fastpath_enabled() is False
    assert torch.backends.mha.get_fastpath_enabled() == before and no_hooks(model)
