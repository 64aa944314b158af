"""Interventions change outputs exactly as specified and leave nothing behind."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hookscope.engine.interventions import KINDS, Interventions
from hookscope.hooks import inventory
from hookscope.link.protocol_vocabulary import INTERVENTIONS


def no_hooks(model: nn.Module) -> bool:
    return inventory.list_hooks({"m": model})["hooks"] == []


@pytest.fixture
def cnn() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(6, 4, 1))


def test_kinds_match_the_protocol():
    assert KINDS == INTERVENTIONS


def test_zero_channels_of_a_conv_output(cnn):
    x = torch.randn(2, 3, 5, 5)
    base = cnn[0](x)
    ivs = Interventions()
    ivs.add("m", cnn[0], "0", "zero_channels", channels=[1, 3])
    out = cnn[0](x)
    assert (out[:, [1, 3]] == 0).all()
    keep = [0, 2, 4, 5]
    assert torch.equal(out[:, keep], base[:, keep])
    assert ivs.remove() == 1
    assert torch.equal(cnn[0](x), base) and no_hooks(cnn)


def test_zero_channels_of_tokens_and_of_a_1d_conv():
    torch.manual_seed(0)
    lin, conv = nn.Linear(8, 5), nn.Conv1d(4, 6, 3)
    ivs = Interventions()
    ivs.add("m", lin, "lin", "zero_channels", channels=[0, 4])
    ivs.add("m", conv, "conv", "zero_channels", channels=[2])
    tokens = lin(torch.randn(2, 7, 8))  # (N, T, D): the last dim
    assert (tokens[..., [0, 4]] == 0).all() and (tokens[..., 1:4] != 0).all()
    seq = conv(torch.randn(2, 4, 10))  # (N, C, L): dim 1
    assert (seq[:, 2] == 0).all() and (seq[:, [0, 1, 3, 4, 5]] != 0).all()
    ivs.remove()
    assert no_hooks(lin) and no_hooks(conv)


def test_zeroed_channels_also_stop_gradients(cnn):
    ivs = Interventions()
    ivs.add("m", cnn[0], "0", "zero_channels", channels=[2])
    cnn(torch.randn(2, 3, 5, 5)).sum().backward()
    assert (cnn[0].weight.grad[2] == 0).all() and (cnn[0].weight.grad[0] != 0).any()
    ivs.remove()


def test_scale_multiplies_the_output(cnn):
    x = torch.randn(2, 3, 5, 5)
    base = cnn[2](cnn[1](cnn[0](x)))
    ivs = Interventions()
    ivs.add("m", cnn[2], "2", "scale", value=-2.5)
    assert torch.equal(cnn(x), base * -2.5)
    ivs.remove()
    assert torch.equal(cnn(x), base)


def test_mean_ablation_keeps_shape_and_per_channel_mean(cnn):
    x = torch.randn(4, 3, 5, 5)
    base = cnn[0](x)
    ivs = Interventions()
    ivs.add("m", cnn[0], "0", "mean_ablate")
    out = cnn[0](x)
    assert out.shape == base.shape
    expected = base.mean(dim=(0, 2, 3), keepdim=True).expand_as(base)
    assert torch.allclose(out, expected, atol=1e-6)
    cnn(x)  # a ReLU(inplace=True) right after must still work
    ivs.remove()
    lin = nn.Linear(3, 4)
    ivs.add("m", lin, "lin", "mean_ablate")
    tokens = lin(torch.randn(2, 6, 3))
    assert torch.allclose(tokens, tokens[0, 0].expand_as(tokens))
    ivs.remove()


def test_input_noise_has_the_asked_std():
    ident = nn.Identity()
    ivs = Interventions()
    ivs.add("m", ident, "ident", "input_noise", value=0.5)
    x = torch.zeros(200_000)
    torch.manual_seed(1)
    noise = ident(x) - x
    assert abs(float(noise.std()) - 0.5) < 0.01 and abs(float(noise.mean())) < 0.01
    ints = torch.arange(5)
    assert torch.equal(ident(ints), ints)  # integer inputs are left alone
    ivs.remove()
    assert torch.equal(ident(x), x) and no_hooks(ident)


def manual_mha(m: nn.MultiheadAttention, x: torch.Tensor, drop_heads: list[int]) -> torch.Tensor:
    """Multi-head self-attention written out, with chosen heads removed."""
    n, t, e = x.shape
    h, d = m.num_heads, e // m.num_heads
    q, k, v = (x @ w.T + b for w, b in zip(m.in_proj_weight.chunk(3), m.in_proj_bias.chunk(3)))
    q, k, v = (z.reshape(n, t, h, d).transpose(1, 2) for z in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v  # (n, h, t, d)
    heads[:, drop_heads] = 0
    return heads.transpose(1, 2).reshape(n, t, e) @ m.out_proj.weight.T + m.out_proj.bias


def test_zero_heads_of_multihead_attention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    _, base_weights = mha(x, x, x)
    ivs = Interventions()
    iv = ivs.add("m", mha, "attn", "zero_channels", channels=[1, 2])
    assert ivs.list()[0]["heads"] is True
    with torch.no_grad():
        out, weights = mha(x, x, x)
        assert torch.allclose(out, manual_mha(mha, x, [1, 2]), atol=1e-5)
        assert torch.allclose(weights, base_weights, atol=1e-6)  # the weights are not changed
        assert not torch.allclose(out, manual_mha(mha, x, []), atol=1e-3)
    ivs.remove(iv)
    ivs.add("m", mha, "attn", "zero_channels", channels=[0, 1, 2, 3])
    with torch.no_grad():
        out, _ = mha(x, x, x, need_weights=False)
    assert torch.allclose(out, mha.out_proj.bias.expand_as(out), atol=1e-6)
    ivs.remove()
    assert no_hooks(mha)


def test_zero_heads_when_keys_and_values_have_their_own_width():
    """kdim/vdim other than embed_dim: the module has separate q/k/v projections, and the recomputed
    attention must use them."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, kdim=6, vdim=10, batch_first=True).eval()
    query, key, value = torch.randn(2, 5, 16), torch.randn(2, 7, 6), torch.randn(2, 7, 10)
    h, d = mha.num_heads, 16 // mha.num_heads
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    q = (query @ mha.q_proj_weight.T + bq).reshape(2, 5, h, d).transpose(1, 2)
    k = (key @ mha.k_proj_weight.T + bk).reshape(2, 7, h, d).transpose(1, 2)
    v = (value @ mha.v_proj_weight.T + bv).reshape(2, 7, h, d).transpose(1, 2)
    heads = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
    heads[:, [2]] = 0
    expected = heads.transpose(1, 2).reshape(2, 5, 16) @ mha.out_proj.weight.T + mha.out_proj.bias
    ivs = Interventions()
    ivs.add("m", mha, "attn", "zero_channels", channels=[2])
    with torch.no_grad():
        out, _ = mha(query, key, value)
    assert torch.allclose(out, expected.detach(), atol=1e-5)
    ivs.remove()
    assert no_hooks(mha)


def test_list_active_for_and_remove_one_by_one(cnn):
    ivs = Interventions()
    a = ivs.add("m", cnn[0], "0", "zero_channels", channels=[3, 1, 1])
    b = ivs.add("m", cnn[2], "2", "scale", value=2)
    c = ivs.add("other", cnn[0], "0", "input_noise", value=0.1)
    assert ivs.list() == [
        {"id": a, "model": "m", "layer": "0", "kind": "zero_channels", "channels": [1, 3]},
        {"id": b, "model": "m", "layer": "2", "kind": "scale", "value": 2.0},
        {"id": c, "model": "other", "layer": "0", "kind": "input_noise", "value": 0.1},
    ]
    assert [iv["id"] for iv in ivs.active_for("0")] == [a, c]
    assert [iv["id"] for iv in ivs.active_for("0", model_id="m")] == [a]
    assert ivs.remove(b) == 1 and ivs.remove(b) == 0 and ivs.remove("nope") == 0
    assert ivs.remove_model("other") == 1
    assert len(ivs) == 1 and ivs.remove() == 1 and no_hooks(cnn)


def test_bad_requests_are_refused(cnn):
    ivs = Interventions()
    with pytest.raises(ValueError):
        ivs.add("m", cnn[0], "0", "melt")
    with pytest.raises(ValueError):
        ivs.add("m", cnn[0], "0", "zero_channels")
    with pytest.raises(ValueError):
        ivs.add("m", cnn[0], "0", "zero_channels", channels=[-1])
    with pytest.raises(ValueError):
        ivs.add("m", cnn[0], "0", "scale")
    with pytest.raises(ValueError):
        ivs.add("m", cnn[0], "0", "input_noise", value=-1)
    with pytest.raises(ValueError):
        ivs.add("m", nn.MultiheadAttention(8, 2), "attn", "zero_channels", channels=[2])
    assert len(ivs) == 0 and no_hooks(cnn)


def test_a_failing_intervention_never_breaks_the_step(cnn):
    x = torch.randn(1, 3, 5, 5)
    base = cnn[0](x)
    ivs = Interventions()
    ivs.add("m", cnn[0], "0", "zero_channels", channels=[99])
    assert torch.equal(cnn[0](x), base)  # unchanged, no exception
    assert "out of range" in ivs.list()[0]["error"]
    ivs.remove()
