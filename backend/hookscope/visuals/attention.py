"""Attention maps: every head and their average as a grid, or a labelled figure.

Weights come from ``nn.MultiheadAttention`` (see ``hookscope.api.capture_attention``)
or from a hand-written softmax captured at a chosen module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import colormap
from .figures import figure_image, new_figure, set_margins
from .grid import check_index, fetch, indexed_image, plane_image, tile, upscale
from .image import Image
from .reduce import as_float, as_tensor, counts_meta, finite_range, nonfinite_counts, number, to_indices

Tensor = torch.Tensor

MAX_LABELLED_HEADS = 16
"""With token labels, at most this many heads get their own subplot (the average always does)."""


def attention_map(
    weights: Any,
    head: int | str | None = None,
    labels: Sequence[str] | tuple[Sequence[str], Sequence[str]] | None = None,
    batch: int = 0,
    cmap: str = "viridis",
    *,
    min_tile: int = 48,
    gap: int = 2,
) -> Image:
    """Render attention weights: each head and the head average.

    ``weights``: (N, H, L, S) (batch item ``batch`` is shown), (H, L, S),
    or (L, S) (a single map, e.g. already averaged). Rows are queries,
    columns keys. ``head``: an index renders that head large; ``'avg'`` the
    average; None the grid of every head followed by the average (one
    shared scale, so heads compare). ``labels``: token labels for both axes
    (or ``(query_labels, key_labels)``) -> a matplotlib figure with ticks.
    """
    w = as_tensor(weights)
    if w.dim() == 4:
        w = w[check_index(batch, w.shape[0], "batch")]
    elif w.dim() == 2:
        w = w.unsqueeze(0)
    elif w.dim() != 3:
        raise ValueError(f"attention weights must be (N, H, L, S), (H, L, S) or (L, S); got {tuple(w.shape)}")
    w = as_float(w)
    n_heads, n_q, n_k = w.shape
    meta: dict[str, Any] = {
        "kind": "attention",
        "shape": list(as_tensor(weights).shape),
        "heads": n_heads,
        "queries": n_q,
        "keys": n_k,
        "cmap": cmap,
        "markers": colormap.markers_meta(),
    }
    avg = w.mean(dim=0, keepdim=True)
    if head is not None:
        if head in ("avg", "mean", "average"):
            plane, name = avg[0], "avg"
        else:
            h = check_index(int(head), n_heads, "head")
            plane, name = w[h], str(h)
        meta["head"] = name
        if labels is not None:
            return _labelled([plane], [name], labels, cmap, meta)
        meta["layout"] = "single"
        return plane_image(plane, cmap, meta)
    stack = torch.cat((w, avg), dim=0) if n_heads > 1 else w
    names = [str(i) for i in range(n_heads)] + (["avg"] if n_heads > 1 else [])
    if labels is not None:
        if n_heads > MAX_LABELLED_HEADS:
            meta["omitted_heads"] = n_heads - MAX_LABELLED_HEADS
            keep = list(range(MAX_LABELLED_HEADS)) + [n_heads]
            stack, names = stack[keep], [names[i] for i in keep]
        return _labelled(list(stack), names, labels, cmap, meta)
    return _grid(stack, names, cmap, min_tile, gap, meta)


def _grid(stack: Tensor, names: list[str], cmap: str, min_tile: int, gap: int, meta: dict[str, Any]) -> Image:
    lo, hi = finite_range(stack, None)
    lo = torch.minimum(lo, torch.zeros_like(lo))  # weights are probabilities: anchor the scale at 0
    idx = to_indices(stack, lo, hi)
    counts = nonfinite_counts(stack)
    lo_h, hi_h, c = fetch(lo, hi, counts)
    tiles = idx.cpu().numpy()
    k, th, tw = tiles.shape
    factor = max(1, min(math.ceil(min_tile / max(th, tw)), 512 // max(th, tw, 1)))
    tiles = upscale(tiles, factor)
    cols = math.ceil(math.sqrt(k))
    rows = math.ceil(k / cols)
    meta.update(
        {
            "layout": "grid",
            "tiles": names,
            "range": [number(lo_h[0]), number(hi_h[0])],
            "grid": {
                "rows": rows,
                "cols": cols,
                "tile_h": th * factor,
                "tile_w": tw * factor,
                "gap": gap,
                "upscale": factor,
            },
            "nonfinite": counts_meta(c),
        }
    )
    return indexed_image(tile(tiles, rows, cols, gap), cmap, meta)


def _labelled(planes: list[Tensor], names: list[str], labels: Any, cmap: str, meta: dict[str, Any]) -> Image:
    """A matplotlib figure: one subplot per map, token labels on both axes."""
    q_labels, k_labels = _split_labels(labels, planes[0].shape)
    data = torch.stack(planes).cpu().numpy().astype(np.float64)
    finite = np.isfinite(data)
    vmax = float(data[finite].max()) if finite.any() else 1.0
    n = len(planes)
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    side = 1.0 + 0.22 * max(len(q_labels), len(k_labels))
    side = min(max(side, 2.6), 8.0)
    label_in = 0.3 + 0.045 * max([len(s) for s in q_labels + k_labels] + [1])  # 6 pt tick labels
    fig = new_figure(min(cols * (side + label_in), 24.0), min(rows * (side + label_in + 0.3), 24.0))
    set_margins(fig, label_in, label_in, top_in=0.3, wspace=label_in / side, hspace=(label_in + 0.3) / side)
    import matplotlib

    red, green, blue = colormap.MARKER_COLOURS["nan"]
    cm = matplotlib.colormaps[cmap].with_extremes(bad=(red / 255.0, green / 255.0, blue / 255.0))
    for i, (plane, name) in enumerate(zip(data, names)):
        ax = fig.add_subplot(rows, cols, i + 1)
        shown = np.where(np.isposinf(plane), vmax, np.where(np.isneginf(plane), 0.0, plane))
        ax.imshow(np.ma.masked_invalid(shown), cmap=cm, vmin=0.0, vmax=vmax, interpolation="nearest")
        # +Inf / -Inf get their marker colours on top (NaN is the colormap's "bad" colour).
        for kind, colour in ((np.isposinf, "posinf"), (np.isneginf, "neginf")):
            ys, xs = np.nonzero(kind(plane))
            if len(ys):
                ax.scatter(xs, ys, marker="s", s=30, color=np.array(colormap.MARKER_COLOURS[colour]) / 255.0)
        ax.set_title("average" if name == "avg" else f"head {name}", fontsize=8)
        ax.set_xticks(range(len(k_labels)))
        ax.set_xticklabels(k_labels, rotation=90, fontsize=6)
        ax.set_yticks(range(len(q_labels)))
        ax.set_yticklabels(q_labels, fontsize=6)
    meta.update(
        {
            "layout": "figure",
            "tiles": names,
            "range": [0.0, vmax],
            "nonfinite": {
                "nan": int(np.isnan(data).sum()),
                "posinf": int(np.isposinf(data).sum()),
                "neginf": int(np.isneginf(data).sum()),
            },
            "labels": [list(q_labels), list(k_labels)],
        }
    )
    return figure_image(fig, meta)


def _split_labels(labels: Any, shape: torch.Size) -> tuple[list[str], list[str]]:
    n_q, n_k = shape
    if isinstance(labels, tuple) and len(labels) == 2 and not isinstance(labels[0], str):
        q, k = [str(s) for s in labels[0]], [str(s) for s in labels[1]]
    else:
        q = k = [str(s) for s in labels]
        if n_q != n_k and len(q) == n_k:
            q = [str(i) for i in range(n_q)]
    if len(q) != n_q or len(k) != n_k:
        raise ValueError(f"labels: need {n_q} query and {n_k} key labels, got {len(q)} and {len(k)}")
    return q, k
