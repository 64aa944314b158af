"""The fast path's PNG writer: exact round trips through an independent decoder."""

from __future__ import annotations

import numpy as np
import pytest

from hookscope.visuals import png


def test_indexed_round_trip_is_exact(pixels):
    rng = np.random.default_rng(0)
    palette = rng.integers(0, 256, size=(256, 3), dtype=np.uint8)
    idx = rng.integers(0, 256, size=(37, 53), dtype=np.uint8)
    out = pixels(png.encode_indexed(idx, palette))
    assert out.shape == (37, 53, 3)
    assert np.array_equal(out, palette[idx])


def test_rgb_round_trip_is_exact(pixels):
    rgb = np.random.default_rng(1).integers(0, 256, size=(20, 31, 3), dtype=np.uint8)
    assert np.array_equal(pixels(png.encode_rgb(rgb)), rgb)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        png.encode_indexed(np.zeros((0, 3), np.uint8), np.zeros((256, 3), np.uint8))
    with pytest.raises(ValueError):
        png.encode_indexed(np.zeros((3, 3), np.int32), np.zeros((256, 3), np.uint8))
    with pytest.raises(ValueError):
        png.encode_rgb(np.zeros((3, 3), np.uint8))
