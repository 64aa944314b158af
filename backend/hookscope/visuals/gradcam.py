"""Grad-CAM: which part of the input a layer's evidence for a class comes from.

Activations come from a forward hook on the chosen layer, gradients from a
FULL backward hook on it (the seed article's pattern); both are removed in
``finally``. When the model modifies the layer's output in place (e.g. a
``ReLU(inplace=True)`` right after it), autograd refuses full backward hooks;
the gradient is then taken by a tensor hook on the output instead
(``GradCam.gradient_source`` says which). Gradients are computed with
``torch.autograd.grad``: the parameters' ``.grad`` are never touched, and the
model runs in eval mode (restored afterwards) so BatchNorm statistics do not move.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from . import colormap, png
from .grid import check_index, plane_image
from .image import Image

Tensor = torch.Tensor


@dataclass
class GradCam:
    """Result of ``compute_grad_cam``."""

    cam: Tensor
    """(N, H, W) heat map in [0, 1] at the input's spatial size (the layer's size if the input has none)."""
    low_res: Tensor
    """(N, h, w) ReLU(sum_c w_c A_c) at the layer's own resolution, before upsampling and normalisation."""
    target: Tensor
    """(N,) class explained for each sample."""
    predicted: Tensor
    """(N,) argmax class of each sample."""
    scores: Tensor
    """(N,) the target logit of each sample."""
    layer_shape: tuple[int, ...]
    """Shape of the layer's output."""
    gradient_source: str
    """'full_backward_hook' or 'tensor_hook' (fallback when the output is modified in place)."""
    dropped_tokens: int = 0
    """Tokens dropped before the square reshape (a CLS token) for token layers."""


def compute_grad_cam(
    model: torch.nn.Module,
    layer_module: torch.nn.Module,
    inputs: Any,
    target: int | Sequence[int] | Tensor | None = None,
    *,
    eval_mode: bool = True,
    token_grid: tuple[int, int] | None = None,
) -> GradCam:
    """Grad-CAM of ``layer_module`` (inside ``model``) for ``inputs``.

    ``inputs``: a tensor or a tuple of positional arguments. ``target``: a
    class index (for every sample), one per sample, or None for the
    predicted class. Conv-like layers (N, C, H, W) and token layers
    (N, T, D) work; tokens are reshaped to a square grid (dropping a CLS
    token when T - 1 is square) or to ``token_grid`` (rows, cols), taking
    the last rows*cols tokens.
    """
    try:
        return _run(model, layer_module, inputs, target, eval_mode, token_grid, full_hook=True)
    except RuntimeError as e:
        if "BackwardHookFunction" not in str(e):
            raise
    return _run(model, layer_module, inputs, target, eval_mode, token_grid, full_hook=False)


def grad_cam(
    model: torch.nn.Module,
    layer_module: torch.nn.Module,
    inputs: Any,
    target: int | Sequence[int] | Tensor | None = None,
    *,
    batch: int = 0,
    alpha: float = 0.5,
    cmap: str = "jet",
    eval_mode: bool = True,
    token_grid: tuple[int, int] | None = None,
) -> Image:
    """Grad-CAM as a heat map over the input image (batch item ``batch``).

    The input image (RGB, or grey for other channel counts) is blended with
    the colour-mapped CAM (``alpha`` is the heat map's weight). Without an
    image-like input the CAM alone is shown. ``meta`` holds the target and
    predicted class, the score, the low-resolution CAM and the layer shape.
    """
    result = compute_grad_cam(model, layer_module, inputs, target, eval_mode=eval_mode, token_grid=token_grid)
    b = check_index(batch, result.cam.shape[0], "batch")
    low = result.low_res[b]
    peak = float(low.max()) if low.numel() else 0.0
    meta: dict[str, Any] = {
        "kind": "grad_cam",
        "batch": b,
        "target": int(result.target[b]),
        "predicted": int(result.predicted[b]),
        "score": float(result.scores[b]),
        "layer_shape": list(result.layer_shape),
        "gradient_source": result.gradient_source,
        "dropped_tokens": result.dropped_tokens,
        "cam": (low / peak if peak > 0 else low).round(decimals=4).tolist(),
        "cmap": cmap,
    }
    image = _first_tensor(inputs)
    if image is None or image.dim() != 4 or tuple(image.shape[-2:]) != tuple(result.cam.shape[-2:]):
        meta["layout"] = "cam"
        return plane_image(result.cam[b], cmap, meta)
    base = _image_rgb(image[b].detach())
    heat = colormap.colormap_rgb(cmap)[(result.cam[b].cpu().numpy() * (colormap.LEVELS - 1)).round().astype(np.intp)]
    blend = ((1.0 - alpha) * base + alpha * heat.astype(np.float32)).clip(0, 255).astype(np.uint8)
    h, w, _ = blend.shape
    meta["layout"] = "overlay"
    meta["alpha"] = alpha
    return Image(png=png.encode_rgb(np.ascontiguousarray(blend)), width=w, height=h, meta=meta)


# ---------------------------------------------------------------- internals


def _first_tensor(value: Any) -> Tensor | None:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, dict):
        for v in value.values():
            if isinstance(v, Tensor):
                return v
        return None
    if hasattr(value, "logits") and isinstance(value.logits, Tensor):
        return value.logits
    if isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def _run(
    model: torch.nn.Module,
    layer: torch.nn.Module,
    inputs: Any,
    target: Any,
    eval_mode: bool,
    token_grid: tuple[int, int] | None,
    full_hook: bool,
) -> GradCam:
    saved: dict[str, Tensor] = {}

    def keep_activation(module: torch.nn.Module, args: Any, output: Any) -> None:
        out = _first_tensor(output)
        if out is None:
            return
        saved["live"] = out
        saved["act"] = out.detach()
        if not full_hook and out.requires_grad:
            out.register_hook(lambda g: saved.__setitem__("grad", g.detach()))

    def keep_gradient(module: torch.nn.Module, grad_input: Any, grad_output: Any) -> None:
        g = _first_tensor(grad_output)
        if g is not None:
            saved["grad"] = g.detach()

    args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    args = tuple(
        a.detach().clone().requires_grad_(True) if isinstance(a, Tensor) and a.is_floating_point() else a for a in args
    )
    modes = {m: m.training for m in model.modules()}
    handles = [layer.register_forward_hook(keep_activation)]
    try:
        if full_hook:
            handles.append(layer.register_full_backward_hook(keep_gradient))
        if eval_mode:
            model.eval()
        with torch.enable_grad():
            logits = _first_tensor(model(*args))
            if logits is None:
                raise ValueError("grad_cam: the model returned no tensor")
            if logits.dim() == 1:
                logits = logits.unsqueeze(0)
            if logits.dim() != 2:
                raise ValueError(f"grad_cam: expected (N, classes) logits, got shape {tuple(logits.shape)}")
            if "act" not in saved:
                raise ValueError("grad_cam: the chosen layer did not run during the forward pass")
            predicted = logits.argmax(dim=1)
            tgt = _targets(target, predicted, logits.shape[1])
            scores = logits.gather(1, tgt[:, None]).squeeze(1)
            wrt = [a for a in args if isinstance(a, Tensor) and a.requires_grad] or [saved["live"]]
            grads = torch.autograd.grad(scores.sum(), wrt, allow_unused=True)
        if "grad" not in saved and wrt[0] is saved.get("live") and grads[0] is not None:
            saved["grad"] = grads[0].detach()  # hooks cannot fire when the gradient stops at the layer itself
        if "grad" not in saved:
            raise ValueError("grad_cam: no gradient reached the chosen layer (does the output depend on it?)")
    finally:
        for h in handles:
            h.remove()
        for m, was_training in modes.items():
            m.train(was_training)
    low, dropped = _cam(saved["act"], saved["grad"], token_grid)
    cam = _upsample_and_normalise(low, _first_tensor(args))
    return GradCam(
        cam=cam,
        low_res=low,
        target=tgt.detach(),
        predicted=predicted.detach(),
        scores=scores.detach(),
        layer_shape=tuple(saved["act"].shape),
        gradient_source="full_backward_hook" if full_hook else "tensor_hook",
        dropped_tokens=dropped,
    )


def _targets(target: Any, predicted: Tensor, n_classes: int) -> Tensor:
    if target is None:
        return predicted
    t = torch.as_tensor(target, device=predicted.device).long().reshape(-1)
    if t.numel() == 1:
        t = t.expand_as(predicted)
    if t.shape != predicted.shape:
        raise ValueError(f"grad_cam: {t.numel()} targets for {predicted.numel()} samples")
    if bool(((t < 0) | (t >= n_classes)).any()):
        raise ValueError(f"grad_cam: target out of range for {n_classes} classes")
    return t


def _cam(act: Tensor, grad: Tensor, token_grid: tuple[int, int] | None) -> tuple[Tensor, int]:
    a, g = act.float(), grad.float()
    if a.dim() == 4:  # (N, C, h, w): channel weights = spatially averaged gradients
        weights = g.mean(dim=(2, 3), keepdim=True)
        return F.relu((weights * a).sum(dim=1)), 0
    if a.dim() == 3:  # (N, T, D) tokens: D plays the channels, tokens the positions
        n_tokens = a.shape[1]
        if token_grid is not None:
            rows, cols = token_grid
        else:
            side = math.isqrt(n_tokens)
            if side * side != n_tokens:
                side = math.isqrt(n_tokens - 1)
                if side * side != n_tokens - 1:
                    raise ValueError(
                        f"grad_cam: {n_tokens} tokens do not form a square grid (with or "
                        "without a CLS token); pass token_grid=(rows, cols)"
                    )
            rows = cols = side
        dropped = n_tokens - rows * cols
        if dropped < 0:
            raise ValueError(f"grad_cam: token_grid {rows}x{cols} needs more than {n_tokens} tokens")
        a, g = a[:, dropped:], g[:, dropped:]
        weights = g.mean(dim=1, keepdim=True)
        cam = F.relu((weights * a).sum(dim=2))
        return cam.reshape(a.shape[0], rows, cols), dropped
    if a.dim() == 2:  # (N, features): no positions; one cell
        return F.relu((g * a).sum(dim=1)).reshape(-1, 1, 1), 0
    raise ValueError(f"grad_cam: unsupported layer output shape {tuple(act.shape)}")


def _upsample_and_normalise(low: Tensor, image: Tensor | None) -> Tensor:
    cam = low
    if image is not None and image.dim() == 4 and tuple(image.shape[-2:]) != tuple(low.shape[-2:]):
        cam = F.interpolate(low[:, None], size=tuple(image.shape[-2:]), mode="bilinear", align_corners=False)[:, 0]
    flat = cam.reshape(cam.shape[0], -1)
    lo = flat.amin(dim=1, keepdim=True)
    hi = flat.amax(dim=1, keepdim=True)
    span = hi - lo
    norm = torch.where(
        span > 0, (flat - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(flat)
    )
    return norm.reshape(cam.shape).detach()


def _image_rgb(x: Tensor) -> np.ndarray:
    """(C, H, W) input image -> (H, W, 3) float32 0..255, each image min-max normalised."""
    f = x.float()
    img = f if f.shape[0] == 3 else f.mean(dim=0, keepdim=True).expand(3, -1, -1)
    finite = torch.isfinite(img)
    clean = torch.where(finite, img, torch.zeros_like(img))
    lo, hi = clean.amin(), clean.amax()
    span = hi - lo
    norm = (clean - lo) / span if float(span) > 0 else torch.zeros_like(clean)
    return (norm.permute(1, 2, 0).cpu().numpy() * 255.0).astype(np.float32)
