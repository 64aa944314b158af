"""Figures with axes (matplotlib, Agg, imported lazily): gradient flow, histograms, stats over steps.

Figures are drawn on a ``matplotlib.figure.Figure`` with its own Agg
canvas, never through ``pyplot``: no global state, safe on the agent thread.
Numbers are reduced on the tensors' devices and moved once.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from . import colormap
from .image import Image
from .reduce import as_float, as_tensor, counts_meta, finite_range, nonfinite_counts, number

Tensor = torch.Tensor

VANISHING = 1e-7
"""Default: a layer whose mean |grad| is below this is flagged as vanishing."""
EXPLODING = 1e2
"""Default: a layer whose max |grad| is above this is flagged as exploding."""


def new_figure(width_in: float, height_in: float, dpi: int = 100) -> Any:
    """A matplotlib Figure attached to an Agg canvas (no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def set_margins(
    fig: Any,
    left_in: float,
    bottom_in: float,
    right_in: float = 0.15,
    top_in: float = 0.35,
    wspace: float | None = None,
    hspace: float | None = None,
) -> None:
    """Fixed margins in inches: ``tight_layout`` measured ~40% of a figure's render time."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=min(left_in / w, 0.5),
        bottom=min(bottom_in / h, 0.6),
        right=1 - right_in / w,
        top=1 - top_in / h,
        wspace=wspace,
        hspace=hspace,
    )


def figure_image(fig: Any, meta: dict[str, Any]) -> Image:
    """Render a figure to PNG bytes."""
    buf = io.BytesIO()
    fig.canvas.print_png(buf)
    width, height = (int(v) for v in fig.canvas.get_width_height())
    return Image(png=buf.getvalue(), width=width, height=height, meta=meta)


# ------------------------------------------------------------ gradient flow


def layer_gradient_stats(
    named_parameters: Iterable[tuple[str, Tensor]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-layer and per-parameter gradient statistics, one transfer per device.

    Returns ``(layers, params)``: ``layers`` in first-seen order, each
    ``{name, mean, max, norm, nan, inf, params, status}`` where ``mean`` and
    ``max`` are of |grad| over all the layer's parameters; ``params`` each
    ``{name, layer, norm, mean, max, nan, inf, numel}`` (``norm`` None when
    the parameter has no ``.grad``)."""
    named = [(n, p) for n, p in named_parameters]
    rows: dict[int, Tensor] = {}
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, p) in enumerate(named):
        g = p.grad
        if g is None:
            continue
        f = as_float(g.detach())
        finite = torch.isfinite(f)
        absf = torch.where(finite, f.abs(), torch.zeros_like(f))
        rows[i] = torch.stack(
            (
                absf.sum(),
                absf.amax() if absf.numel() else absf.sum(),
                absf.pow(2).sum(),
                torch.isnan(f).sum().to(f.dtype),
                torch.isinf(f).sum().to(f.dtype),
                torch.tensor(float(f.numel()), device=f.device, dtype=f.dtype),
            )
        ).to(torch.float64)
        by_device.setdefault(f.device, []).append(i)
    host: dict[int, np.ndarray] = {}
    for _, idxs in by_device.items():
        block = torch.stack([rows[i] for i in idxs]).cpu().numpy()
        for i, row in zip(idxs, block):
            host[i] = row

    params: list[dict[str, Any]] = []
    layers: dict[str, dict[str, Any]] = {}
    for i, (name, _) in enumerate(named):
        layer = name.rsplit(".", 1)[0] if "." in name else ""
        entry = layers.setdefault(layer, {"name": layer, "params": [], "_rows": []})
        entry["params"].append(name)
        if i not in host:
            params.append(
                {"name": name, "layer": layer, "norm": None, "mean": None, "max": None, "nan": 0, "inf": 0, "numel": 0}
            )
            continue
        s, mx, sq, nan, inf, numel = host[i]
        entry["_rows"].append(host[i])
        params.append(
            {
                "name": name,
                "layer": layer,
                "norm": math.sqrt(sq),
                "mean": s / max(numel, 1),
                "max": float(mx),
                "nan": int(nan),
                "inf": int(inf),
                "numel": int(numel),
            }
        )
    out = []
    for entry in layers.values():
        rs = entry.pop("_rows")
        if not rs:
            entry.update({"mean": None, "max": None, "norm": None, "nan": 0, "inf": 0})
        else:
            a = np.stack(rs)
            entry.update(
                {
                    "mean": float(a[:, 0].sum() / max(a[:, 5].sum(), 1)),
                    "max": float(a[:, 1].max()),
                    "norm": float(math.sqrt(a[:, 2].sum())),
                    "nan": int(a[:, 3].sum()),
                    "inf": int(a[:, 4].sum()),
                }
            )
        out.append(entry)
    return out, params


def classify(layer: dict[str, Any], vanishing: float, exploding: float) -> str:
    """'no_grad' | 'nonfinite' | 'exploding' | 'vanishing' | 'ok' for one layer's stats."""
    if layer["mean"] is None:
        return "no_grad"
    if layer["nan"] or layer["inf"]:
        return "nonfinite"
    if layer["max"] > exploding:
        return "exploding"
    if layer["mean"] < vanishing:
        return "vanishing"
    return "ok"


def classify_norms(layer: dict[str, Any], params: list[dict[str, Any]], vanishing: float, exploding: float) -> str:
    """As ``classify``, on norms (break on exploding/vanishing gradients' terms): exploding when one of the
    layer's parameters has a gradient norm above ``exploding``, vanishing when the layer's is below ``vanishing``."""
    if layer["norm"] is None:
        return "no_grad"
    if layer["nan"] or layer["inf"]:
        return "nonfinite"
    if any(p["norm"] is not None and p["norm"] > exploding for p in params):
        return "exploding"
    if layer["norm"] < vanishing:
        return "vanishing"
    return "ok"


def gradient_flow(
    named_parameters: Iterable[tuple[str, Tensor]],
    vanishing: float | None = None,
    exploding: float | None = None,
    title: str | None = None,
    metric: str = "mean",
    highlight: str | None = None,
) -> Image:
    """Per-layer gradients on a log scale, with vanishing/exploding bands.

    Call after ``loss.backward()``. Layers are parameter-name prefixes
    (``layer1.0.conv1``), in model order. ``metric`` 'mean': mean and max |grad|
    per layer; 'norm': the layer's gradient norm and its largest parameter's (the
    quantities break on exploding/vanishing gradients compares). ``highlight``
    marks one layer (the one a stop names). A threshold not given is drawn at its
    default (``VANISHING``, ``EXPLODING``) and labelled so: at a stop of one switch,
    the other's band is no setting of the user's. ``meta['layers']`` lists each
    layer's stats and status, ``meta['params']`` every parameter's gradient norm."""
    if metric not in ("mean", "norm"):
        raise ValueError("metric must be 'mean' or 'norm'")
    low = "" if vanishing is not None else ", default"  # the legend's word for a threshold not given
    high = "" if exploding is not None else ", default"
    vanishing = VANISHING if vanishing is None else vanishing
    exploding = EXPLODING if exploding is None else exploding
    layers, params = layer_gradient_stats(named_parameters)
    by_layer: dict[str, list[dict[str, Any]]] = {}
    for p in params:
        by_layer.setdefault(p["layer"], []).append(p)
    for layer in layers:
        owned = by_layer.get(layer["name"], [])
        layer["maxNorm"] = max((p["norm"] for p in owned if p["norm"] is not None), default=None)
        layer["status"] = (
            classify_norms(layer, owned, vanishing, exploding)
            if metric == "norm"
            else classify(layer, vanishing, exploding)
        )
    meta: dict[str, Any] = {
        "kind": "gradient_flow",
        "metric": metric,
        "layers": layers,
        "params": params,
        "vanishing": vanishing,
        "exploding": exploding,
        "flagged": [layer["name"] for layer in layers if layer["status"] not in ("ok", "no_grad")],
    }
    if highlight is not None:
        meta["highlight"] = highlight
    n = max(len(layers), 1)
    longest = max([len(layer["name"] or "(root)") for layer in layers] + [4])
    label_in = min(0.05 * longest, 2.5)  # rotated tick labels at 7 pt
    legend_in = 0.42  # two rows of the legend, above the plot: inside it, it hid the tallest bars
    height_in = 3.4 + label_in + legend_in
    fig = new_figure(min(max(6.0, 0.35 * n + 2.0), 24.0), height_in)
    set_margins(fig, 0.75, 0.35 + label_in, top_in=0.35 + legend_in)
    ax = fig.add_subplot(1, 1, 1)
    xs = np.arange(len(layers))
    low_key, high_key = ("norm", "maxNorm") if metric == "norm" else ("mean", "max")
    # Down to a tenth of the smallest value drawn: a vanishing stop's layers (1e-19 at an embedding) sat
    # on a fixed 1e-12 floor, every bar flat at the axis, the profile the stop is about invisible.
    shown = [v for layer in layers for v in (layer[low_key], layer[high_key]) if v and math.isfinite(v) and v > 0]
    floor = min(vanishing / 100.0, 1e-12, min(shown, default=1.0) / 10.0)
    means = np.array([layer[low_key] if layer[low_key] else floor for layer in layers], dtype=float)
    maxes = np.array([layer[high_key] if layer[high_key] else floor for layer in layers], dtype=float)
    if len(layers):
        ax.bar(
            xs,
            np.maximum(maxes, floor),
            color="#4c9be8",
            alpha=0.35,
            width=0.8,
            label="largest parameter's gradient norm" if metric == "norm" else "max |grad|",
        )
        ax.bar(
            xs,
            np.maximum(means, floor),
            color="#1f5fa8",
            width=0.5,
            label="layer gradient norm" if metric == "norm" else "mean |grad|",
        )
    top = max(exploding * 100.0, float(maxes.max()) * 10 if len(maxes) else 1.0)
    ax.set_yscale("log")
    ax.set_ylim(floor, top)
    ax.axhspan(floor, vanishing, color="#6fa8dc", alpha=0.15, label=f"vanishing (< {vanishing:g}{low})")
    ax.axhspan(exploding, top, color="#e06666", alpha=0.15, label=f"exploding (> {exploding:g}{high})")
    for x, layer in zip(xs, layers):
        if layer["status"] == "nonfinite":
            ax.plot([x], [top / 3], marker="X", color="magenta", markersize=10)
        elif layer["status"] == "no_grad":
            ax.text(x, floor * 3, "none", ha="center", va="bottom", fontsize=7, rotation=90, color="gray")
        if highlight is not None and layer["name"] == highlight:
            ax.axvspan(x - 0.5, x + 0.5, color="#f1c232", alpha=0.35, label="this stop")
    ax.set_xticks(xs)
    ax.set_xticklabels([layer["name"] or "(root)" for layer in layers], rotation=60, ha="right", fontsize=7)
    for label, layer in zip(ax.get_xticklabels(), layers):
        if highlight is not None and layer["name"] == highlight:
            label.set_fontweight("bold")
    ax.set_ylabel("gradient norm" if metric == "norm" else "|grad|")
    ax.set_title(title or "Gradient flow", fontsize=10, pad=8 + legend_in * 72)
    # Centred on the figure, not the axes: at the narrowest figure (6 in, a model of few layers) three
    # columns are wider than the axes, and from the axes' left edge the last one ran off the image.
    ax.legend(
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0 - (0.35 + legend_in) / height_in),
        bbox_transform=fig.transFigure,
        ncols=3,
        frameon=False,
        borderaxespad=0.2,
    )
    return figure_image(fig, meta)


# ---------------------------------------------------------------- histogram


def histogram_counts(t: Any, bins: int = 50) -> dict[str, Any]:
    """Histogram of the finite values (computed on the device) and non-finite counts."""
    x = as_float(as_tensor(t)).reshape(-1)
    counts_nf = nonfinite_counts(x)
    if x.numel() == 0:
        return {
            "edges": [],
            "counts": [],
            "nonfinite": counts_meta([0, 0, 0]),
            "numel": 0,
            "mean": None,
            "std": None,
            "min": None,
            "max": None,
        }
    lo, hi = finite_range(x, None)
    finite = torch.isfinite(x)
    n_finite = finite.sum()
    fill = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
    vals = torch.where(finite, x, fill)
    lo_s, hi_s = fill.reshape(()), torch.where(torch.isfinite(hi), hi, fill).reshape(())
    same = hi_s <= lo_s
    lo_r = torch.where(same, lo_s - 0.5, lo_s)
    hi_r = torch.where(same, hi_s + 0.5, hi_s)
    lo_v, hi_v = (float(v) for v in torch.stack((lo_r, hi_r)).cpu())
    counts = torch.histc(vals, bins=bins, min=lo_v, max=hi_v)
    mean = (vals.sum() - fill.reshape(()) * (x.numel() - n_finite)) / n_finite.clamp(min=1)
    var = (torch.where(finite, (x - mean) ** 2, torch.zeros_like(x))).sum() / (n_finite - 1).clamp(min=1)
    host = (
        torch.cat(
            (
                counts.to(torch.float64),
                torch.stack((n_finite.to(torch.float64), mean.double(), var.double())),
                counts_nf.double(),
                lo.reshape(1).double(),
                hi.reshape(1).double(),
            )
        )
        .cpu()
        .numpy()
    )
    c = host[:bins]
    n_fin = int(host[bins])
    parked = x.numel() - n_fin
    if parked:
        # The non-finite values were parked at ``fill`` (the finite minimum, or 0): take them out of its bin.
        park = host[bins + 6] if math.isfinite(host[bins + 6]) else 0.0
        at = min(bins - 1, max(0, int((park - lo_v) / (hi_v - lo_v) * bins)))
        c[at] -= parked
    return {
        "edges": np.linspace(lo_v, hi_v, bins + 1).tolist(),
        "counts": [int(v) for v in c],
        "nonfinite": counts_meta(host[bins + 3 : bins + 6]),
        "numel": int(x.numel()),
        "mean": number(host[bins + 1]) if n_fin else None,
        "std": number(math.sqrt(max(host[bins + 2], 0.0))) if n_fin > 1 else None,
        "min": number(host[bins + 6]),
        "max": number(host[bins + 7]),
    }


def histogram(t: Any, bins: int = 50, log: bool = False, title: str | None = None) -> Image:
    """Histogram of a tensor's finite values, with NaN/+Inf/-Inf counts in the title.

    Values are binned on the tensor's device (``torch.histc``); only the
    counts move. ``meta`` holds edges, counts, non-finite counts and the
    mean/std/min/max of the finite values."""
    x = as_tensor(t)
    data = histogram_counts(x, bins)
    meta: dict[str, Any] = {
        "kind": "histogram",
        "shape": list(x.shape),
        "dtype": str(x.dtype).replace("torch.", ""),
        "log": log,
        **data,
        "markers": colormap.markers_meta(),
    }
    fig = new_figure(5.0, 3.0)
    set_margins(fig, 0.6, 0.4)
    ax = fig.add_subplot(1, 1, 1)
    if data["counts"]:
        ax.stairs(data["counts"], data["edges"], fill=True, color="#3b7dd8")
    if log:
        ax.set_yscale("symlog")
    nf = data["nonfinite"]
    bits = [f"n={data['numel']}"]
    if data["mean"] is not None:
        bits.append(f"mean={data['mean']:.3g}")
    if data["std"] is not None:
        bits.append(f"std={data['std']:.3g}")
    bad = [f"{k}={v}" for k, v in (("NaN", nf["nan"]), ("+Inf", nf["posinf"]), ("-Inf", nf["neginf"])) if v]
    ax.set_title((title + "  " if title else "") + "  ".join(bits), fontsize=8)
    if bad:
        ax.text(
            0.99,
            0.97,
            "  ".join(bad),
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=8,
            color="white",
            bbox={"facecolor": "#c000c0", "edgecolor": "none"},
        )
    ax.tick_params(labelsize=7)
    return figure_image(fig, meta)


# ------------------------------------------------------------ stats over steps


def stats_chart(
    steps: Sequence[float], means: Sequence[float], stds: Sequence[float] | None = None, title: str | None = None
) -> Image:
    """A small line chart of a layer's activation mean (± std) over steps."""
    s = np.asarray(steps, dtype=float)
    m = np.asarray(means, dtype=float)
    fig = new_figure(4.0, 2.2)
    set_margins(fig, 0.55, 0.45, top_in=0.3)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(s, m, color="#1f5fa8", linewidth=1.2, label="mean")
    if stds is not None:
        sd = np.asarray(stds, dtype=float)
        ax.fill_between(s, m - sd, m + sd, color="#4c9be8", alpha=0.3, label="± std")
    ax.set_xlabel("step", fontsize=7)
    ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=8)
    meta = {
        "kind": "stats_chart",
        "steps": s.tolist(),
        "means": [number(v) for v in m],
        "stds": None if stds is None else [number(v) for v in np.asarray(stds, dtype=float)],
    }
    return figure_image(fig, meta)
