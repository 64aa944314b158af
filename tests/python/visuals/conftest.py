"""Shared helpers for the image tests: decode PNGs back to pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image as PILImage  # Pillow comes with matplotlib


def decode(png: bytes) -> np.ndarray:
    """(h, w, 3) uint8 pixels of a PNG."""
    return np.array(PILImage.open(io.BytesIO(png)).convert("RGB"))


@pytest.fixture
def pixels():
    return decode
