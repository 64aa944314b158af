"""Colormap palettes for the fast path, with marker colours for NaN/Inf.

A palette has 256 entries: 0..251 are the colormap (252 levels), then the
markers. Non-finite values are never dropped: each kind gets its own colour
(listed in every image's ``meta['markers']`` so the panel can show a key).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

LEVELS = 252
"""Colour levels of the colormap part of a palette (indices 0..251)."""
NAN, POSINF, NEGINF, BACKGROUND = 252, 253, 254, 255
"""Palette indices of the markers and of the gap between tiles."""

MARKER_COLOURS: dict[str, tuple[int, int, int]] = {
    "nan": (255, 0, 255),  # magenta: absent from the usual colormaps
    "posinf": (255, 0, 0),  # pure red
    "neginf": (0, 255, 255),  # cyan
}
"""RGB of each non-finite marker."""
BACKGROUND_COLOUR = (48, 48, 48)


@lru_cache(maxsize=16)
def colormap_rgb(name: str, levels: int = LEVELS) -> np.ndarray:
    """(levels, 3) uint8 RGB of a matplotlib colormap (matplotlib loads lazily)."""
    import matplotlib

    try:
        cmap = matplotlib.colormaps[name]
    except KeyError as e:
        raise ValueError(f"unknown colormap {name!r}") from e
    rgba = cmap(np.linspace(0.0, 1.0, levels))
    return (rgba[:, :3] * 255.0 + 0.5).astype(np.uint8)


@lru_cache(maxsize=16)
def palette(name: str) -> np.ndarray:
    """The 256-entry palette of an indexed image for colormap ``name``."""
    pal = np.empty((256, 3), dtype=np.uint8)
    pal[:LEVELS] = colormap_rgb(name)
    pal[NAN] = MARKER_COLOURS["nan"]
    pal[POSINF] = MARKER_COLOURS["posinf"]
    pal[NEGINF] = MARKER_COLOURS["neginf"]
    pal[BACKGROUND] = BACKGROUND_COLOUR
    pal.setflags(write=False)
    return pal


def markers_meta() -> dict[str, list[int]]:
    """Marker colours as msgpack-friendly lists, for ``Image.meta``."""
    return {k: list(v) for k, v in MARKER_COLOURS.items()}
