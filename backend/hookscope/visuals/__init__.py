"""Rendering: tensors in, ``Image(png, width, height, meta)`` out.

Pure functions. Grids, single channels, heat maps and attention grids take
the fast path (palette indices computed on the tensor's device, then an
indexed PNG); figures with axes (gradient flow, histograms, labelled
attention, stats over steps) use matplotlib's Agg canvas, imported lazily.
``mha_weights`` recomputes an ``nn.MultiheadAttention`` call's weights for
the attention map when the model asked for none.
"""

from __future__ import annotations

from .attention import attention_map
from .figures import gradient_flow, histogram, layer_gradient_stats, stats_chart
from .gradcam import GradCam, compute_grad_cam, grad_cam
from .grid import feature_map, tensor_image
from .image import Image
from .mha_weights import mha_weights

__all__ = [
    "GradCam",
    "Image",
    "attention_map",
    "compute_grad_cam",
    "feature_map",
    "grad_cam",
    "gradient_flow",
    "histogram",
    "layer_gradient_stats",
    "mha_weights",
    "stats_chart",
    "tensor_image",
]
