"""Fast-path images: feature-map grids, single channels, heat maps, 2-D slices.

Everything here goes tensor -> palette indices (on the tensor's device) ->
indexed PNG; matplotlib is never imported except to read a colormap once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from . import colormap, png
from .image import Image
from .reduce import (
    as_float,
    as_tensor,
    block_reduce,
    counts_meta,
    finite_range,
    nonfinite_counts,
    number,
    to_indices,
)

Tensor = torch.Tensor

MAX_TILE = 256
"""Tiles larger than this (pixels per side) are block-reduced on the device."""
SINGLE_SIDE = 256
"""A single channel or 2-D slice is upscaled until its longer side reaches this."""
MAX_SIDE = 2048
"""Heat maps and slices longer than this are block-reduced on the device."""


def feature_map(
    t: Any,
    batch: int = 0,
    page: int = 0,
    per_page: int = 64,
    shared_scale: bool = False,
    sort_by_strength: bool = False,
    cmap: str = "viridis",
    channel: int | None = None,
    *,
    min_tile: int = 32,
    gap: int = 1,
) -> Image:
    """Render a layer's activations as an image.

    - (N, C, H, W): a grid of the channels of batch item ``batch``, each
      min-max normalised on its own (one scale for the page when
      ``shared_scale``), ``per_page`` channels per ``page``, optionally
      ordered by mean |activation| (``sort_by_strength``). ``channel=k``
      renders that one channel large. (N, C, D, H, W) shows the middle depth.
    - (N, C, L) and (N, T, D): a heat map of batch item ``batch`` (rows are
      channels or tokens), one shared scale. (N, D) and (L,) likewise.

    NaN, +Inf and -Inf keep their own marker colours (``meta['markers']``);
    a constant channel maps to the lowest colour without dividing by zero.
    ``meta`` holds the value ranges, the channel order, the page count, the
    non-finite counts and the tile geometry (so a click maps to a channel).
    """
    x = as_tensor(t)
    if x.dim() == 0:
        raise ValueError("feature_map needs at least a 1-D tensor, got a scalar")
    meta: dict[str, Any] = {
        "kind": "feature_map",
        "shape": list(x.shape),
        "dtype": str(x.dtype).replace("torch.", ""),
        "cmap": cmap,
        "markers": colormap.markers_meta(),
    }
    if x.dim() == 5:
        meta["depth_slice"] = x.shape[2] // 2
        x = x[:, :, x.shape[2] // 2]
    if x.dim() == 4:
        item = x[check_index(batch, x.shape[0], "batch")]
        meta["batch"] = batch
        if channel is not None:
            return _single_channel(item, check_index(channel, item.shape[0], "channel"), cmap, meta)
        return _channel_grid(item, page, per_page, shared_scale, sort_by_strength, cmap, min_tile, gap, meta)
    if x.dim() == 3:
        meta["batch"] = batch
        plane = x[check_index(batch, x.shape[0], "batch")]
    elif x.dim() == 2:
        plane = x
    else:
        plane = x.reshape(1, -1)
    if channel is not None:
        row = check_index(channel, plane.shape[0], "channel")
        plane = plane[row : row + 1]
        meta["channel"] = row
    return _heat_map(plane, cmap, meta)


def tensor_image(
    t: Any,
    axes: Sequence[int] = (-2, -1),
    index: int | Sequence[int] | Mapping[int, int] | None = None,
    cmap: str = "viridis",
) -> Image:
    """Render any 2-D slice of an N-D tensor as a heat map (one shared scale).

    ``axes`` are the (row, column) axes shown; ``index`` picks the position
    along every other axis: a sequence (in axis order), an int (when only
    one other axis), or a mapping ``{axis: position}``; missing ones are 0.
    """
    x = as_tensor(t)
    if x.dim() == 0:
        x = x.reshape(1, 1)
    elif x.dim() == 1:
        x = x.reshape(1, -1)
        axes = (0, 1)
    nd = x.dim()
    if len(axes) != 2:
        raise ValueError(f"axes must name two axes, got {tuple(axes)}")
    row_ax, col_ax = (_check_axis(a, nd) for a in axes)
    if row_ax == col_ax:
        raise ValueError(f"axes must differ, got {tuple(axes)}")
    others = [a for a in range(nd) if a not in (row_ax, col_ax)]
    positions = _resolve_index(index, others, nd)
    selector: list[Any] = [slice(None)] * nd
    for axis, pos in zip(others, positions):
        selector[axis] = check_index(pos, x.shape[axis], f"index for axis {axis}")
    plane = x[tuple(selector)]
    if row_ax > col_ax:
        plane = plane.t()
    meta: dict[str, Any] = {
        "kind": "tensor",
        "shape": list(x.shape),
        "dtype": str(x.dtype).replace("torch.", ""),
        "axes": [row_ax, col_ax],
        "index": {str(a): p for a, p in zip(others, positions)},
        "cmap": cmap,
        "markers": colormap.markers_meta(),
    }
    return _heat_map(plane, cmap, meta)


# ---------------------------------------------------------------- internals


def check_index(i: int, size: int, what: str) -> int:
    i = int(i)
    if not -size <= i < size:
        raise ValueError(f"{what} {i} out of range for size {size}")
    return i % size


def _check_axis(a: int, nd: int) -> int:
    a = int(a)
    if not -nd <= a < nd:
        raise ValueError(f"axis {a} out of range for a {nd}-D tensor")
    return a % nd


def _resolve_index(index: Any, others: list[int], nd: int) -> list[int]:
    if index is None:
        return [0] * len(others)
    if isinstance(index, Mapping):
        given = {_check_axis(a, nd): int(p) for a, p in index.items()}
        unknown = set(given) - set(others)
        if unknown:
            raise ValueError(f"index names shown axes {sorted(unknown)}; it picks positions on the others {others}")
        return [given.get(a, 0) for a in others]
    if isinstance(index, int):
        index = [index]
    index = [int(p) for p in index]
    if len(index) != len(others):
        raise ValueError(f"index needs {len(others)} positions (axes {others}), got {len(index)}")
    return index


def fetch(*tensors: Tensor) -> list[np.ndarray]:
    """One host transfer for several small results (float64 is exact for counts)."""
    flat = [t.reshape(-1).to(torch.float64) for t in tensors]
    host = torch.cat(flat).cpu().numpy()
    out, at = [], 0
    for t in flat:
        out.append(host[at : at + t.numel()])
        at += t.numel()
    return out


def upscale(idx: np.ndarray, factor: int) -> np.ndarray:
    if factor <= 1:
        return idx
    return np.repeat(np.repeat(idx, factor, axis=-2), factor, axis=-1)


def _channel_grid(
    item: Tensor,
    page: int,
    per_page: int,
    shared: bool,
    by_strength: bool,
    cmap: str,
    min_tile: int,
    gap: int,
    meta: dict[str, Any],
) -> Image:
    n_channels, h, w = item.shape
    per_page = max(1, int(per_page))
    pages = max(1, math.ceil(n_channels / per_page))
    page = check_index(page, pages, "page")
    if by_strength:
        f = as_float(item)
        strength = torch.where(torch.isfinite(f), f.abs(), torch.zeros_like(f)).mean(dim=(1, 2))
        order = torch.argsort(strength, descending=True, stable=True)
        chosen = order[page * per_page : (page + 1) * per_page]
        sel = item.index_select(0, chosen)
    else:
        chosen = torch.arange(page * per_page, min(n_channels, (page + 1) * per_page), device=item.device)
        sel = item[page * per_page : (page + 1) * per_page]
    sel = as_float(sel)
    shrink = math.ceil(max(h, w) / MAX_TILE)
    shown = block_reduce(sel, shrink) if shrink > 1 else sel
    lo, hi = finite_range(shown, None if shared else (1, 2))
    idx = to_indices(shown, lo, hi)
    page_counts = nonfinite_counts(sel)
    item_counts = nonfinite_counts(item) if pages > 1 else page_counts
    lo_h, hi_h, pc, ic, ch = fetch(lo, hi, page_counts, item_counts, chosen)
    idx_h = idx.cpu().numpy()

    k, th, tw = idx_h.shape
    factor = max(1, min(math.ceil(min_tile / max(th, tw)), MAX_TILE // max(th, tw)))
    tiles = upscale(idx_h, factor)
    cols = math.ceil(math.sqrt(k))
    rows = math.ceil(k / cols)
    image = tile(tiles, rows, cols, gap)
    channels = [int(c) for c in ch]
    if shared:
        ranges = [[number(lo_h[0]), number(hi_h[0])]] * k
    else:
        ranges = [[number(a), number(b)] for a, b in zip(lo_h, hi_h)]
    meta.update(
        {
            "layout": "grid",
            "page": page,
            "pages": pages,
            "per_page": per_page,
            "channels": channels,
            "ranges": ranges,
            "constant": [c for c, (a, b) in zip(channels, ranges) if a is not None and a == b],
            "shared_scale": shared,
            "sorted_by_strength": by_strength,
            "grid": {
                "rows": rows,
                "cols": cols,
                "tile_h": th * factor,
                "tile_w": tw * factor,
                "gap": gap,
                "upscale": factor,
                "downscale": shrink,
            },
            "nonfinite": counts_meta(ic),
            "page_nonfinite": counts_meta(pc),
        }
    )
    if shared:
        meta["scale"] = [number(lo_h[0]), number(hi_h[0])]
    return indexed_image(image, cmap, meta)


def tile(tiles: np.ndarray, rows: int, cols: int, gap: int) -> np.ndarray:
    """(k, h, w) index tiles -> one (rows*h + gaps, cols*w + gaps) image, row-major."""
    k, h, w = tiles.shape
    padded = np.pad(
        tiles,
        ((0, rows * cols - k), (0, gap), (0, gap)),
        constant_values=colormap.BACKGROUND,
    )
    full = padded.reshape(rows, cols, h + gap, w + gap).transpose(0, 2, 1, 3)
    full = full.reshape(rows * (h + gap), cols * (w + gap))
    if gap:
        full = full[:-gap, :-gap]
    return np.ascontiguousarray(full)


def _single_channel(item: Tensor, channel: int, cmap: str, meta: dict[str, Any]) -> Image:
    plane = as_float(item[channel])
    meta["layout"] = "single"
    meta["channel"] = channel
    meta["channels"] = [channel]
    return plane_image(plane, cmap, meta)


def _heat_map(plane: Tensor, cmap: str, meta: dict[str, Any]) -> Image:
    meta["layout"] = "heatmap"
    meta["shared_scale"] = True
    return plane_image(as_float(plane), cmap, meta)


def plane_image(plane: Tensor, cmap: str, meta: dict[str, Any]) -> Image:
    """A 2-D float tensor as one large heat map with its value range."""
    h, w = plane.shape
    shrink = math.ceil(max(h, w) / MAX_SIDE)
    shown = block_reduce(plane, shrink) if shrink > 1 else plane
    lo, hi = finite_range(shown, None)
    idx = to_indices(shown, lo, hi)
    counts = nonfinite_counts(plane)
    lo_h, hi_h, c = fetch(lo, hi, counts)
    idx_h = idx.cpu().numpy()
    sh, sw = idx_h.shape
    factor = max(1, min(math.ceil(SINGLE_SIDE / max(sh, sw)), MAX_SIDE // max(sh, sw)))
    image = upscale(idx_h, factor)
    meta.update(
        {
            "range": [number(lo_h[0]), number(hi_h[0])],
            "upscale": factor,
            "downscale": shrink,
            "nonfinite": counts_meta(c),
        }
    )
    return indexed_image(np.ascontiguousarray(image), cmap, meta)


def indexed_image(idx: np.ndarray, cmap: str, meta: dict[str, Any]) -> Image:
    h, w = idx.shape
    return Image(png=png.encode_indexed(idx, colormap.palette(cmap)), width=w, height=h, meta=meta)
