"""The Tensors panel's requests: watches, a layer's summaries, parameter gradients, images, values at a stop.

Parameter gradients are read only where autograd is not writing them (``_read_grads``): at a stop,
on the training thread, or by the training thread at the model's next forward. Images come from
``visuals`` (loaded with the first one) on the tensor ``engine/renders.py`` picks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from hookscope.engine import image_packages
from hookscope.engine.renders import RENDERED_LAYERS_KEPT, RenderGlue
from hookscope.engine.step_hooks import StepHooks, summaries_first_tensor
from hookscope.engine.watches import DEFAULT_RATE_HZ, LayerWatch
from hookscope.hooks import summaries
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_NOT_AVAILABLE, ERR_UNKNOWN_LAYER, ProtocolError

GRADS_SAFE_POINT_S = 2.0
"""How long a request from the agent's thread waits for the model's next forward to read ``.grad``."""

T = TypeVar("T")

if TYPE_CHECKING:  # visuals (matplotlib and friends) load with the first image
    from hookscope.visuals import Image


class PanelRequests(RenderGlue, StepHooks):
    """Engine's panel half: the requests of the Tensors panel (and of "Show in Hookscope")."""

    def _req_watch(self, request: dict[str, Any]) -> dict[str, Any]:
        model_id = self._model_id(request.get("model"))
        layers = request.get("layers") or []
        rate = float(request.get("rateHz") or DEFAULT_RATE_HZ)
        if not rate > 0:
            raise ProtocolError(ERR_BAD_MESSAGE, "rateHz must be > 0")
        with self._lock:
            modules = self._indexes[model_id].modules()
            unknown = [name for name in layers if name not in modules]
            if unknown:
                raise ProtocolError(
                    ERR_UNKNOWN_LAYER, f"no layer named {', '.join(map(repr, unknown[:5]))} in model {model_id}"
                )
            for key in [k for k in self._watches if k[0] == model_id]:
                self._drop_watch(self._watches.pop(key))
            if len(layers) <= RENDERED_LAYERS_KEPT:  # the panel watching its layer: images at once
                for name in layers:
                    self._keep_rendered((model_id, name))
            for name in layers:
                watch = LayerWatch(
                    model_id, name, modules[name], 1.0 / rate, keep_output=(model_id, name) in self._rendered
                )
                self._arm(watch)
                self._watches[(model_id, name)] = watch
            self._sync_root_hooks()
            return {"layers": [name for (m, name) in self._watches if m == model_id]}

    def _req_getSummaries(self, request: dict[str, Any]) -> dict[str, Any]:
        model_id = self._model_id(request.get("model"))
        layer, module = self._layer(model_id, request.get("layer"))
        last = self._last.get((model_id, layer), {})
        tensors = list(last.get("tensors", []))
        params = list(module.named_parameters(recurse=False)) or list(module.named_parameters())[:64]
        # Idle (no step within the wait): the layer's summaries without its parameters' gradients.
        tensors += self._read_grads(
            model_id,
            lambda: summaries.summarize_many([(f"{name}.grad", p.grad) for name, p in params if p.grad is not None]),
            when_idle=[],
        )
        return {"layer": layer, "tensors": tensors, "step": last.get("step", self._step_of(model_id))}

    def _req_getParamGrads(self, request: dict[str, Any]) -> dict[str, Any]:
        model_id = self._model_id(request.get("model"))
        model = self._indexes[model_id].model
        if model is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, f"model {model_id} is gone")
        return {"params": self._read_grads(model_id, lambda: param_grad_stats(model))}

    def _read_grads(self, model_id: str, read: Callable[[], T], when_idle: T | None = None) -> T:
        """``read()`` (which reads parameters' ``.grad``) where autograd is not writing them.

        Reading ``.grad`` from another thread while a backward accumulates into it crashes
        torch (a segfault on 2.13 CPU; tests/python/reliability/test_grad_reads.py). While
        paused in a stop, or on the training thread itself (the Python API, tests), it is read
        at once; a request from the agent's thread is run by the training thread at the model's
        next forward, when the last backward is over, and waits at most GRADS_SAFE_POINT_S
        (then ``when_idle`` is the answer, or, without one, an error that says why).
        """
        if self._paused is not None or not self.requests_off_thread:
            return read()
        model = self._indexes[model_id].model
        if model is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, f"model {model_id} is gone")
        done = threading.Event()
        result: dict[str, Any] = {}  # "value": T or "error": the exception read() raised

        def at_next_forward(module: nn.Module, args: tuple[Any, ...]) -> None:
            handle.remove()
            if done.is_set():
                return
            try:
                result["value"] = read()
            except Exception as exc:  # handed to the request, never raised into training
                result["error"] = exc
            done.set()

        handle = model.register_forward_pre_hook(at_next_forward)
        if not done.wait(GRADS_SAFE_POINT_S):
            handle.remove()
            done.set()
            if "value" not in result and "error" not in result:
                if when_idle is not None:
                    return when_idle
                raise ProtocolError(
                    ERR_NOT_AVAILABLE,
                    "parameter gradients are read while paused or between "
                    f"steps; the model did not start a step within {GRADS_SAFE_POINT_S:g} s",
                )
        if "error" in result:
            raise result["error"]
        value: T = result["value"]
        return value

    def _req_render(self, request: dict[str, Any]) -> dict[str, Any]:
        view = request.get("view")
        if isinstance(view, str) and view in image_packages.NEEDS:
            image_packages.require(view)  # torch alone draws no picture: say which package is missing
        from hookscope import visuals  # matplotlib and friends load with the first image

        options = dict(request.get("options") or {})
        model_id = self._model_id(request.get("model"))
        index = self._indexes[model_id]
        paused = self._paused
        if view == "gradientFlow":
            model = index.model
            if model is None:
                raise ProtocolError(ERR_NOT_AVAILABLE, f"model {model_id} is gone")
            named = list(model.named_parameters())
            image = self._read_grads(model_id, lambda: visuals.gradient_flow(named, **options))
            about = {
                "layer": "",
                "tensor": "parameter gradients",
                "step": self._step_of(model_id),
                "phase": paused.get("phase", "") if paused else "",
            }
        elif view in ("featureMap", "histogram", "tensor", "attention"):
            layer = request.get("layer")
            if not isinstance(layer, str):
                raise ProtocolError(ERR_BAD_MESSAGE, f"render {view} needs a 'layer'")
            module = self._module(model_id, layer)
            if view == "attention":
                subject = self._attention_subject(visuals, model_id, layer, module)
                image = visuals.attention_map(subject.tensor, **options)
            else:
                subject = self._render_subject(model_id, layer, module, request.get("tensor"))
                draws: dict[str, Callable[..., Image]] = {
                    "featureMap": visuals.feature_map,
                    "histogram": visuals.histogram,
                    "tensor": visuals.tensor_image,
                }
                image = draws[view](subject.tensor, **options)
            about = subject.meta()
        elif view == "gradCam":
            image = self._grad_cam(visuals, model_id, request.get("layer"), options)
            about = {
                "layer": request.get("layer"),
                "tensor": "Grad-CAM",
                "step": self._step_of(model_id),
                "phase": paused.get("phase", "") if paused else "",
            }
        else:
            raise ProtocolError(ERR_BAD_MESSAGE, f"unknown view {str(view)[:32]!r}")
        meta = dict(image.meta)
        meta["of"] = about  # what the image is of: the panel's caption
        return {"png": image.png, "width": image.width, "height": image.height, "meta": meta}

    def _req_inspectValue(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("handle") is not None:
            # Published from any paused frame through the debugger ("Show in Hookscope"): nothing to evaluate.
            from hookscope.debugger import inspector

            return inspector.answer(request)
        paused = self._paused
        if paused is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, "no thread is paused at a Hookscope hit")
        expression = request.get("expression")
        if not isinstance(expression, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "inspectValue needs an 'expression'")
        try:
            value = eval(expression, {"torch": torch}, dict(paused))  # noqa: S307 - the user's own debug console
        except Exception as exc:
            raise ProtocolError(ERR_BAD_MESSAGE, f"{expression!r} raised {type(exc).__name__}: {exc}") from exc
        tensor = summaries_first_tensor(value)
        if tensor is None:
            raise ProtocolError(ERR_BAD_MESSAGE, f"{expression!r} is not a tensor ({type(value).__name__})")
        body: dict[str, Any] = {"summary": summaries.summarize(tensor, expression)}
        options = request.get("options")
        if options:
            image_packages.require("tensor")
            from hookscope import visuals

            body["png"] = visuals.tensor_image(tensor.detach(), **options).png
        return body

    def _req_releaseInspected(self, request: dict[str, Any]) -> dict[str, Any]:
        from hookscope.debugger import inspector

        handles = request.get("handles")
        return {
            "released": inspector.release(
                [h for h in handles if isinstance(h, str)] if isinstance(handles, (list, tuple)) else None
            )
        }


def param_grad_stats(model: nn.Module) -> list[dict[str, Any]]:
    """``[{name, shape, norm, mean, absmax, nan, inf}]`` of every ``.grad``, one sync per device."""
    named = [
        (name, p.grad)
        for name, p in model.named_parameters()
        if p.grad is not None and p.grad.layout == torch.strided and not p.grad.is_complex()
    ]
    by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
    for name, grad in named:
        by_device.setdefault(grad.device, []).append((name, grad))
    rows: dict[str, list[float]] = {}
    with torch.no_grad():
        for group in by_device.values():
            grads = [g.float() if g.dtype in (torch.float16, torch.bfloat16) else g for _, g in group]
            norms = torch._foreach_norm(grads)
            stacked = torch.stack(
                [
                    torch.stack(
                        [
                            n.double(),
                            g.double().mean() if g.numel() else n.double() * 0,
                            g.abs().amax().double() if g.numel() else n.double() * 0,
                            torch.isnan(g).sum().double(),
                            torch.isinf(g).sum().double(),
                        ]
                    )
                    for n, g in zip(norms, grads)
                ]
            )
            for (name, _), values in zip(group, stacked.tolist()):
                rows[name] = values
    out = []
    for name, grad in named:
        norm, mean, absmax, nan, inf = rows[name]
        out.append(
            {
                "name": name,
                "shape": list(grad.shape),
                "norm": norm,
                "mean": mean if math.isfinite(mean) else None,
                "absmax": absmax,
                "nan": int(nan),
                "inf": int(inf),
            }
        )
    return out
