"""Gradient flow, histograms and stats charts: the numbers behind the figures."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hookscope.visuals import gradient_flow, histogram, stats_chart


def model_with_grads() -> nn.Sequential:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2))
    m(torch.randn(3, 4)).sum().backward()
    for p in m[1].parameters():
        p.grad.mul_(1e-12)  # vanishing
    m[2].weight.grad.mul_(1e6)  # exploding
    m[3].bias.grad[0] = float("nan")
    m[4].weight.grad = None
    m[4].bias.grad = None
    return m


def test_gradient_flow_flags_layers(pixels):
    m = model_with_grads()
    im = gradient_flow(m.named_parameters())
    status = {layer["name"]: layer["status"] for layer in im.meta["layers"]}
    assert status == {"0": "ok", "1": "vanishing", "2": "exploding", "3": "nonfinite", "4": "no_grad"}
    assert im.meta["flagged"] == ["1", "2", "3"]
    assert pixels(im.png).shape == (im.height, im.width, 3)


def test_gradient_flow_legend_leaves_the_bars_in_view(pixels):
    """The legend sits above the plot: the exploding band runs unbroken across the plot's top, where a
    legend inside the axes hid the tallest bars."""
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Linear(4, 4) for _ in range(8)])
    m(torch.randn(3, 4)).sum().backward()
    img = pixels(gradient_flow(m.named_parameters(), exploding=1e3).png).astype(int)
    band = (abs(img[..., 0] - 251) <= 3) & (abs(img[..., 1] - 232) <= 4) & (abs(img[..., 2] - 232) <= 4)
    rows = [r for r in range(img.shape[0]) if band[r].sum() > img.shape[1] // 3]
    assert rows, "the exploding band (#e06666 at 15% over white) is drawn"
    for r in rows[:3]:  # just under the plot's top edge
        cols = band[r].nonzero()[0]
        assert band[r, cols[0] : cols[-1] + 1].all(), f"row {r}: something covers the band"


def test_gradient_flow_legend_fits_the_narrowest_figure(monkeypatch):
    """A stop's profile of a two-layer model (the narrowest figure, its legend at its widest: five entries
    with 'this stop') shows every legend entry whole: anchored at the axes' left, the last column ran off."""
    from hookscope.visuals import figures

    drawn = []
    figure_image = figures.figure_image
    monkeypatch.setattr(figures, "figure_image", lambda fig, meta: drawn.append(fig) or figure_image(fig, meta))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    (m(torch.randn(4, 8)).pow(2).mean() * 1e4).backward()
    gradient_flow(m.named_parameters(), metric="norm", exploding=100.0, highlight="2")
    [fig] = drawn
    renderer = fig.canvas.get_renderer()
    legend = fig.axes[0].get_legend()
    assert len(legend.get_texts()) == 5
    box, page = legend.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)


def test_gradient_flow_axis_reaches_the_smallest_gradient(monkeypatch):
    """At a vanishing stop the layers' norms (1e-19 here) are drawn above the axis' floor, not flat on it."""
    from hookscope.visuals import figures

    drawn = []
    figure_image = figures.figure_image
    monkeypatch.setattr(figures, "figure_image", lambda fig, meta: drawn.append(fig) or figure_image(fig, meta))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    (m(torch.randn(3, 4)) * 1e-18).sum().backward()
    image = gradient_flow(m.named_parameters(), metric="norm", vanishing=1e-7, highlight="0")
    smallest = min(layer["norm"] for layer in image.meta["layers"])
    assert smallest < 1e-15
    low, _ = drawn[0].axes[0].get_ylim()
    assert low <= smallest / 5, (low, smallest)


def test_gradient_flow_says_which_band_is_only_the_default(monkeypatch):
    """At a stop of one gradient-health switch the other's band is drawn at its default, labelled so."""
    from matplotlib.axes import Axes

    labels: list[str] = []
    axhspan = Axes.axhspan
    monkeypatch.setattr(Axes, "axhspan", lambda self, *a, **k: labels.append(k["label"]) or axhspan(self, *a, **k))
    m = model_with_grads()
    gradient_flow(m.named_parameters(), vanishing=0.01, metric="norm")
    assert labels == ["vanishing (< 0.01)", "exploding (> 100, default)"]
    labels.clear()
    image = gradient_flow(m.named_parameters())
    assert labels == ["vanishing (< 1e-07, default)", "exploding (> 100, default)"]
    assert (image.meta["vanishing"], image.meta["exploding"]) == (1e-7, 100.0)


def test_gradient_flow_numbers_match_torch():
    m = model_with_grads()
    im = gradient_flow(m.named_parameters())
    norms = {p["name"]: p["norm"] for p in im.meta["params"]}
    for name, p in m.named_parameters():
        if p.grad is None:
            assert norms[name] is None
        elif torch.isfinite(p.grad).all():
            assert norms[name] == pytest.approx(float(p.grad.norm()), rel=1e-5)
    layer0 = im.meta["layers"][0]
    g = torch.cat([m[0].weight.grad.flatten(), m[0].bias.grad.flatten()]).abs()
    assert layer0["mean"] == pytest.approx(float(g.mean()), rel=1e-5)
    assert layer0["max"] == pytest.approx(float(g.max()), rel=1e-6)


def test_histogram_counts_finite_values_and_reports_the_rest():
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, 4.0, float("nan"), float("inf"), float("-inf"), float("inf")])
    im = histogram(x, bins=4)
    assert im.meta["counts"] == [2, 1, 1, 1]
    assert im.meta["edges"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert im.meta["nonfinite"] == {"nan": 1, "posinf": 2, "neginf": 1}
    assert im.meta["mean"] == pytest.approx(7 / 5) and im.meta["min"] == 0.0 and im.meta["max"] == 4.0


def test_histogram_of_a_constant_and_of_nothing_finite():
    const = histogram(torch.full((10,), 3.0), bins=5)
    assert sum(const.meta["counts"]) == 10 and const.meta["std"] == 0.0
    bad = histogram(torch.full((4,), float("nan")), bins=5)
    assert sum(bad.meta["counts"]) == 0 and bad.meta["nonfinite"]["nan"] == 4 and bad.meta["mean"] is None


def test_histogram_of_half_precision():
    x = torch.randn(1000).to(torch.bfloat16)
    im = histogram(x)
    assert sum(im.meta["counts"]) == 1000
    assert im.meta["std"] == pytest.approx(float(x.float().std()), rel=1e-3)


def test_stats_chart(pixels):
    im = stats_chart([0, 1, 2], [0.0, 0.5, math.nan], [1.0, 1.0, 1.0], title="conv1")
    assert im.meta["means"] == [0.0, 0.5, None]
    assert pixels(im.png).shape == (im.height, im.width, 3)
