"""Which optional packages each kind of image needs, and the message when the interpreter lacks them.

The user's interpreter needs only torch: summaries, breakpoints and break on NaN/Inf work with
torch alone. Pictures are drawn with NumPy (colormaps, PNG encoding) and matplotlib (its
colormaps, and figures with axes); when one is missing the panel shows this module's message
instead of the picture, naming the picture, the packages and the interpreter. Checked with
``find_spec`` (nothing imported) before any drawing starts.
"""

from __future__ import annotations

import importlib.util
import sys

from hookscope.link.protocol_vocabulary import ERR_NOT_AVAILABLE, ProtocolError

# Every picture is colour-mapped through matplotlib's colormaps and encoded with NumPy.
_BOTH = ("numpy", "matplotlib")
NEEDS: dict[str, tuple[str, ...]] = {
    "featureMap": _BOTH,
    "histogram": _BOTH,
    "tensor": _BOTH,
    "attention": _BOTH,
    "gradCam": _BOTH,
    "gradientFlow": _BOTH,
    "slice": _BOTH,
}
NAMES = {
    "featureMap": "Feature maps",
    "histogram": "Histograms",
    "tensor": "Tensor images",
    "attention": "Attention maps",
    "gradCam": "Grad-CAM images",
    "gradientFlow": "Gradient-flow charts",
    "slice": "Slice images",
}


def missing(view: str) -> list[str]:
    """The packages ``view`` needs that this interpreter cannot import."""
    return [name for name in NEEDS.get(view, _BOTH) if importlib.util.find_spec(name) is None]


def message(view: str, absent: list[str]) -> str:
    """What the panel says instead of the picture: which picture, which packages, which interpreter."""
    python = sys.executable or "this interpreter"
    return (
        f"{NAMES.get(view, 'Images')} need {' and '.join(absent)}, which {python} does not have "
        f"(install with: {python} -m pip install {' '.join(absent)}); "
        "summaries and breakpoints work without them."
    )


def require(view: str) -> None:
    """Raise ``notAvailable`` with ``message`` when ``view`` cannot be drawn here."""
    absent = missing(view)
    if absent:
        raise ProtocolError(ERR_NOT_AVAILABLE, message(view, absent))
