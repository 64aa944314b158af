"""The `Image` every renderer returns: PNG bytes plus what the picture shows."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Image:
    """A rendered PNG and the facts the panel needs to explain it."""

    png: bytes
    """The encoded PNG file (travels as msgpack ``bin``)."""
    width: int
    """Width in pixels."""
    height: int
    """Height in pixels."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What the image shows: value ranges, channel order, NaN/Inf counts...
    Only msgpack-friendly values (str, int, float, bool, None, lists, dicts)."""

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the PNG to ``path``."""
        with open(path, "wb") as f:
            f.write(self.png)

    def _repr_png_(self) -> bytes:
        # Jupyter shows the image inline.
        return self.png
