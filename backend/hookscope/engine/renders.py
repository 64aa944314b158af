"""Render glue: the tensor a render names, the outputs kept for the panel, attention and Grad-CAM."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from hookscope.engine import render_subject
from hookscope.engine.render_subject import Subject
from hookscope.engine.watches import DEFAULT_RATE_HZ, LayerWatch, WatchSampler
from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.kept_outputs import Kept
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_NOT_AVAILABLE, ProtocolError

log = logging.getLogger("hookscope")

RENDERED_LAYERS_KEPT = 4
"""Layers whose last output is kept for the panel's images: the most recently rendered (or
watched, when a watch names this few layers) ones. Watching many layers keeps nothing until
one is rendered: holding every watched layer's output would keep a whole forward pass of
activations alive into the next step (an OOM risk on a GPU)."""


class RenderGlue(WatchSampler):
    """Engine's render half (a mixin on the watch sampler, whose watches keep outputs for images)."""

    def _render_subject(self, model_id: str, layer: str, module: nn.Module, selector: Any) -> Subject:
        """The tensor a render names: from the stop's locals when paused in this layer, else (the
        output) from the layer's last kept call. At a stop it is of that stop's step or not shown."""
        base, selector = render_subject.parse(selector)
        paused = self._paused
        here = render_subject.paused_at(paused, layer, module)
        if here:
            assert paused is not None
            found = render_subject.at_stop(paused, layer, base, selector)
            if found is not None:
                return found
        if base != "output":
            where = "at this stop" if here else f"(it is known only while paused in {layer})"
            raise ProtocolError(ERR_NOT_AVAILABLE, f"{layer} has no {selector} {where}")
        stop_step = paused["step"] if here and paused is not None else None
        kept = self._kept_call(model_id, layer, module)
        if kept is None or (stop_step is not None and kept.step != stop_step):
            raise self._not_kept(model_id, layer, stop_step)
        subject = render_subject.from_kept(kept, layer, selector)
        if subject is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, f"the output of {layer} has no tensor {selector}")
        return subject

    def _attention_subject(self, visuals: Any, model_id: str, layer: str, module: nn.Module) -> Subject:
        """Attention weights of ``layer``: those it returned, or for an ``nn.MultiheadAttention``
        called with ``need_weights=False`` recomputed from its kept call; another module's output
        is taken as the weights when it looks like them (a hand-written softmax: rows of
        non-negative values that sum to 1)."""
        paused = self._paused
        here = render_subject.paused_at(paused, layer, module)
        stop_step = paused["step"] if here and paused is not None else None
        kept = self._kept_call(model_id, layer, module)
        if kept is not None and stop_step is not None and kept.step != stop_step:
            kept = None  # another step's call: not this stop's
        output = paused.get("output") if here and paused is not None else None
        step, phase = int(stop_step or 0), str(paused.get("phase", "")) if paused else ""
        if output is None and kept is not None:
            output, step, phase = kept.output, kept.step, "forward"
        weights = render_subject.returned_weights(output)
        if weights is not None:
            return Subject(weights, layer, "output[1]", step, phase)
        if isinstance(module, nn.MultiheadAttention):
            if kept is not None and kept.call is not None:
                args, kwargs = kept.call
                weights = visuals.mha_weights(module, args, kwargs)
                return Subject(
                    weights,
                    layer,
                    "attention weights",
                    kept.step,
                    "forward",
                    "recomputed from the call's inputs (the model asked for need_weights=False)",
                )
        elif isinstance(output, torch.Tensor) and render_subject.looks_like_attention(output):  # a hand-written softmax
            return Subject(output.detach(), layer, "output", step, phase)
        if kept is None and output is None:
            raise self._not_kept(model_id, layer, stop_step)
        raise ProtocolError(
            ERR_NOT_AVAILABLE,
            f"{layer} returned no attention weights and is not an "
            "nn.MultiheadAttention (pick the module that outputs the softmax)",
        )

    def _kept_call(self, model_id: str, layer: str, module: nn.Module) -> Kept | None:
        """The layer's last kept call: its breakpoint's, else its watch's or a render capture's (a
        layer without either is captured from its next forward pass on)."""
        kept = self._bp_outputs.get(model_id, layer)
        if kept is not None or (model_id, layer) in self._bp_outputs.layers():
            return kept
        key = (model_id, layer)
        with self._lock:
            self._keep_rendered(key)
            if key in self._last_output:
                return self._last_output[key]
            if key in self._watches:
                watch = self._watches[key]
                watch.keep_output, watch.next_due = True, 0.0  # keep it from the very next forward pass
                self._arm(watch)
            elif key not in self._captures:
                capture = LayerWatch(model_id, layer, module, 1.0 / DEFAULT_RATE_HZ, keep_output=True)
                self._arm(capture)
                self._captures[key] = capture
        return None

    def _not_kept(self, model_id: str, layer: str, stop_step: int | None) -> ProtocolError:
        """Why there is no output of ``layer`` to show (at a stop: none of the stop's step)."""
        has_breakpoint = (model_id, layer) in self._bp_outputs.layers()
        size = self._bp_outputs.too_large(model_id, layer)
        if size is not None:
            message = (
                f"the output of {layer} ({size / 2**20:.0f} MiB) is larger than Hookscope keeps for "
                f"images ({self._bp_outputs.max_bytes / 2**20:.0f} MiB)"
            )
        elif stop_step is not None:
            message = f"no forward of {layer} was seen in step {stop_step}"
            if not has_breakpoint:
                message += (
                    ": Hookscope keeps the outputs of layers with a breakpoint (and of the layer the "
                    "panel shows, from its next forward pass on)"
                )
        elif has_breakpoint:
            message = f"{layer} has not run yet"
        else:
            message = f"no output of {layer} kept yet: it will be kept from the next forward pass on"
        return ProtocolError(ERR_NOT_AVAILABLE, message)

    def _keep_rendered(self, key: tuple[str, str]) -> None:
        """Note a render of ``key``; the layer rendered longest ago beyond the kept few stops keeping outputs."""
        self._rendered[key] = None
        self._rendered.move_to_end(key)
        while len(self._rendered) > RENDERED_LAYERS_KEPT:
            old, _ = self._rendered.popitem(last=False)
            self._last_output.pop(old, None)
            if old in self._watches:
                self._watches[old].keep_output = False
            if old in self._captures:
                self._drop_watch(self._captures.pop(old))

    def _grad_cam(self, visuals: Any, model_id: str, layer: Any, options: dict[str, Any]) -> Any:
        if self._paused is None:
            raise ProtocolError(
                ERR_NOT_AVAILABLE, "Grad-CAM runs its own forward and backward pass: pause at a layer breakpoint first"
            )
        if not isinstance(layer, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "render gradCam needs a 'layer'")
        module = self._module(model_id, layer)
        model = self._indexes[model_id].model
        args = self._last_args.get(model_id)
        if model is None or args is None or args[1]:
            raise ProtocolError(
                ERR_NOT_AVAILABLE,
                "the model's last inputs are not known (or it takes "
                "keyword arguments): run a forward pass with a breakpoint set first",
            )
        REPLAY.depth += 1  # our own pass: Hookscope's hooks stay quiet
        try:
            return visuals.grad_cam(model, module, args[0], options.pop("target", None), **options)
        finally:
            REPLAY.depth -= 1
