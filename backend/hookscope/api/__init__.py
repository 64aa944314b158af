"""The Python API: every hook pattern of the seed articles as a short call (no editor needed).

=========================  ====================================================
``HookSet`` / ``scope``    own handles; ``remove_all()``; a block that removes
                           every hook on exit, even when the body raises
``capture``                layer outputs into a dict (``.detach()``, ``cpu=``),
                           by name, glob, module or type (``types=nn.Conv2d``)
``activation_stats``       per-layer activation mean/std per forward call
``grad_check``             gradient norms by tensor hooks; vanishing/exploding
``grad_norms``/``grad_flow``  per-parameter gradient norms, per-layer flow
``stop_on_nonfinite``      raise (or call back) naming the first NaN/Inf layer
``grad_cam``               activations by forward hook, gradients by full
                           backward hook
``capture_attention``      ``nn.MultiheadAttention`` weights, even with
                           ``need_weights=False``
``zero_channels`` ...      ablation, scaling, mean-ablation, input noise
``remove_all``             every hook the API added, in one call
=========================  ====================================================

Every object returned is a context manager with ``remove()``.
"""

from __future__ import annotations

from .ablation import (
    Intervention,
    grad_cam,
    input_noise,
    intervene,
    list_interventions,
    mean_ablate,
    scale_output,
    zero_channels,
)
from .attention import AttentionCapture, capture_attention
from .capture import ActivationStats, Capture, LayerStats, activation_stats, capture
from .gradients import GradCheck, GradEvent, GradientError, GradientWarning, grad_check, grad_flow, grad_norms
from .hookset import HookSet, live_hook_count, remove_all, scope
from .nan_guard import NonFiniteError, NonFiniteEvent, NonFiniteGuard, stop_on_nonfinite
from .select import select_modules

__all__ = [
    "ActivationStats",
    "AttentionCapture",
    "Capture",
    "GradCheck",
    "GradEvent",
    "GradientError",
    "GradientWarning",
    "HookSet",
    "Intervention",
    "LayerStats",
    "NonFiniteError",
    "NonFiniteEvent",
    "NonFiniteGuard",
    "activation_stats",
    "capture",
    "capture_attention",
    "grad_cam",
    "grad_check",
    "grad_flow",
    "grad_norms",
    "input_noise",
    "intervene",
    "list_interventions",
    "live_hook_count",
    "mean_ablate",
    "remove_all",
    "scale_output",
    "scope",
    "select_modules",
    "stop_on_nonfinite",
    "zero_channels",
]
