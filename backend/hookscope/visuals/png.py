"""A minimal, fast PNG writer (indexed and RGB), the fast path's encoder.

Measured here (2 cores, loaded): zlib's ``Z_RLE`` strategy at level 1
compresses a 456x455 indexed grid about twice as fast as the default
strategy at the same size, so it is used for every image. An indexed
(palette) image is one byte per pixel: three times less to compress than
RGB, and the colormap lookup becomes the PNG's own palette.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def _idat(rows: np.ndarray) -> bytes:
    """Rows (h, bytes_per_row) uint8 -> compressed scanlines with filter 0."""
    h, row_bytes = rows.shape
    raw = np.empty((h, row_bytes + 1), dtype=np.uint8)
    raw[:, 0] = 0  # filter type "None" for every scanline
    raw[:, 1:] = rows
    z = zlib.compressobj(1, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
    return z.compress(raw.tobytes()) + z.flush()


def encode_indexed(indices: np.ndarray, palette: np.ndarray) -> bytes:
    """PNG of a (h, w) uint8 index image with a (n<=256, 3) uint8 palette."""
    if indices.ndim != 2 or indices.dtype != np.uint8:
        raise ValueError("indices must be a 2-D uint8 array")
    if palette.ndim != 2 or palette.shape[1] != 3 or not 0 < palette.shape[0] <= 256:
        raise ValueError("palette must be (n<=256, 3)")
    h, w = indices.shape
    if h == 0 or w == 0:
        raise ValueError("empty image")
    header = struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0)
    return b"".join(
        (
            _SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"PLTE", np.ascontiguousarray(palette, dtype=np.uint8).tobytes()),
            _chunk(b"IDAT", _idat(indices)),
            _chunk(b"IEND", b""),
        )
    )


def encode_rgb(rgb: np.ndarray) -> bytes:
    """PNG of a (h, w, 3) uint8 RGB image."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError("rgb must be a (h, w, 3) uint8 array")
    h, w, _ = rgb.shape
    if h == 0 or w == 0:
        raise ValueError("empty image")
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"".join(
        (
            _SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", _idat(rgb.reshape(h, w * 3))),
            _chunk(b"IEND", b""),
        )
    )
