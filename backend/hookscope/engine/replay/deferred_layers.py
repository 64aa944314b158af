"""The steady-state hooks of one deferred breakpoint on one layer: references kept, gradients hooked, no value computed.

A layer with no one else's forward hooks is recorded by wrapping its ``forward`` (``may_wrap``):
one traced call per watched layer per step under a debugger, where hooks take torch's slow call
path. A call made outside its root's forward (the program calling ``model.encoder`` directly)
has no snapshot to replay it from, so it runs the exact test (and ``GradTap``) inline.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from hookscope.engine import step_counter
from hookscope.engine.replay.deferred_values import FLUSH_BYTES, FLUSH_COUNT, StepValues, Track
from hookscope.hooks.conditions import REPLAY, HookEvent
from hookscope.hooks.copy_safety import is_hookscope_hook
from hookscope.hooks.leaf_hooks import hook_gradient
from hookscope.hooks.summaries import tensors_in

if TYPE_CHECKING:
    from hookscope.engine.replay.deferred import DeferredValues
    from hookscope.hooks.grad_tap import GradTap

_STRIDED = torch.strided
_F32 = torch.float32


def _take(values: StepValues, value: Any, owner: LayerHooks) -> None:
    """The tensors of a value that is not one floating tensor (a tuple, an integer or empty tensor)."""
    for tensor in tensors_in(value):
        numel = tensor.numel()
        if tensor.is_floating_point() and tensor.layout is _STRIDED and numel:
            if owner.at_once or (numel > values.prompt_min and tensor.is_cpu):
                values.now(tensor)
            else:
                values.refs.append(tensor)
                values.versions.append(tensor._version)
                values.owners.append(owner)
                values.bytes += tensor.nbytes
        else:
            values.odd(tensor)


class LayerHooks:
    """The steady-state hooks of one deferred breakpoint on one layer."""

    def __init__(self, track: Track, model_id: str, name: str, module: nn.Module, owner: DeferredValues) -> None:
        self.track = track
        self.model_id = model_id
        self.name = name
        self.module = module
        self.owner = owner
        kind = track.bp.spec.condition.kind
        self.pre_values = "forward_pre" in track.forward_phases
        self.post_values = "forward" in track.forward_phases
        self.hook_inputs = track.backward and kind in ("absmax_above", "nonfinite")  # grad_input
        self.hook_outputs = track.backward and kind != "absmax_above"  # grad_output
        self.scales_outputs = self.hook_outputs and kind == "grad_norm_above"
        """A call with several outputs that require grad hooks each with ``scaled_grad``: the exact norm is
        over all of them."""
        self.at_once = False
        """Something changed a tensor this layer recorded before its value was computed: compute now."""
        self.tap: GradTap | None = None
        """The exact backward path for calls made outside the root's forward (made at the first)."""
        self.wrapping = False
        self.fast = False
        """Wrapped, and the wrapper's written-out case applies (see ``_wrapped_forward``)."""
        self.previous: Any = None
        self.inner: Any = None
        self.forward: Any = None

    def install(self) -> list[Any]:
        if may_wrap(self.module):
            return [self._wrap()]
        handles = []
        if self.pre_values or self.hook_inputs:
            handles.append(self.module.register_forward_pre_hook(self._pre))
        if self.post_values or self.track.backward:
            handles.append(self.module.register_forward_hook(self._post))
        return handles

    # -- the layer's forward, wrapped (see ``may_wrap``) -----------------------

    def _wrap(self) -> _Unwrap:
        module = self.module
        self.previous = module.__dict__.get("forward")
        """An instance-level forward that was there (another tool's, or another breakpoint's wrapper)."""
        self.inner = module.forward
        self.wrapping = True
        self.fast = not (self.pre_values or self.track.nonfinite)
        self.forward = _wrapped_forward(self)
        module.__dict__["forward"] = self.forward
        return _Unwrap(self)

    def compute_at_once(self) -> None:
        """A tensor this layer recorded changed in place before its value was computed: compute now."""
        self.at_once = True
        self.fast = False

    def around(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The wrapped forward's general case: what ``_pre`` and ``_post`` do, around the layer's own."""
        if not self.wrapping or torch._C._get_tracing_state():
            return self.inner(*args, **kwargs)
        module = self.module
        if self.pre_values or self.hook_inputs:
            self._pre(module, args)
        output = self.inner(*args, **kwargs)
        self._post(module, args, output)
        return output

    # Both hooks run in every call of every watched layer: attribute reads and C calls, inline.

    def _pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        recorder = self.track.recorder
        if REPLAY.depth and not recorder.replaying:
            return
        if not recorder.open:
            self._outside_pre(module, args)
            return
        try:
            if self.pre_values:
                values = self.track.forward
                for arg in args:
                    if (
                        type(arg) is torch.Tensor
                        and arg.is_floating_point()
                        and arg.layout is _STRIDED
                        and 0 < arg.numel() <= values.prompt_min
                        and not self.at_once
                    ):
                        values.refs.append(arg)
                        values.versions.append(arg._version)
                        values.owners.append(self)
                        values.bytes += arg.nbytes
                    elif isinstance(arg, (torch.Tensor, tuple, list, dict)):
                        _take(values, arg, self)
                if values.bytes > FLUSH_BYTES or len(values.refs) >= FLUSH_COUNT:
                    values.flush()
            if self.hook_inputs and recorder.hook_grads and torch.is_grad_enabled():
                grad = self.track.backward_values.hook
                for arg in args:
                    if type(arg) is torch.Tensor and arg.requires_grad:
                        # leaf_hooks.hook_gradient's activation case written out (one traced call less
                        # per layer): the hook in the tensor's hook dict, the dict registered once
                        grad_fn = arg.grad_fn
                        if grad_fn is not None:
                            hooks: dict[Any, Any] | None = arg._backward_hooks
                            if hooks is None:
                                hooks = OrderedDict()
                                arg._backward_hooks = hooks
                                grad_fn._register_hook_dict(arg)
                            hooks[grad] = grad
                        else:  # a leaf: its hook is removed at the step's end
                            self.track.leaves.register(arg, grad)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            self.owner.failed(self.track.bp, self.name, exc)

    def _post(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        recorder = self.track.recorder
        if REPLAY.depth and not recorder.replaying:
            return
        if not recorder.open:
            self._outside_post(module, args, output)
            return
        try:
            if self.post_values:
                values = self.track.forward
                if (
                    type(output) is torch.Tensor
                    and output.is_floating_point()
                    and output.layout is _STRIDED
                    and 0 < output.numel() <= values.prompt_min
                    and not self.at_once
                ):
                    values.refs.append(output)
                    values.versions.append(output._version)
                    values.owners.append(self)
                    values.bytes += output.nbytes
                else:
                    _take(values, output, self)
                if self.track.nonfinite:  # the exact test looks at the inputs too
                    for arg in args:
                        if isinstance(arg, (torch.Tensor, tuple, list, dict)):
                            _take(values, arg, self)  # (a call more: NaN/Inf is break on NaN/Inf's job)
                if values.bytes > FLUSH_BYTES or len(values.refs) >= FLUSH_COUNT:
                    values.flush()
            if self.hook_outputs and recorder.hook_grads and torch.is_grad_enabled():
                values = self.track.backward_values
                if type(output) is torch.Tensor:
                    grad_fn = output.grad_fn
                    if grad_fn is not None:  # as in _pre
                        hooks: dict[Any, Any] | None = output._backward_hooks
                        if hooks is None:
                            hooks = OrderedDict()
                            output._backward_hooks = hooks
                            grad_fn._register_hook_dict(output)
                        hooks[values.hook] = values.hook
                    elif output.requires_grad:
                        self.track.leaves.register(output, values.hook)
                else:
                    self._hook_outputs(values, output)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            self.owner.failed(self.track.bp, self.name, exc)

    def _hook_outputs(self, values: StepValues, output: Any) -> None:
        outs = [t for t in tensors_in(output) if t.requires_grad]
        scaled = len(outs) > 1 and self.scales_outputs
        for tensor in outs:
            handle = hook_gradient(tensor, partial(values.scaled_grad, len(outs)) if scaled else values.hook)
            if handle is not None:
                self.track.leaves.keep(handle)

    # -- calls outside the root's forward: the exact path, inline --------------

    def _outside_pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self.hook_inputs:
            if self.tap is None:
                self.tap = self.owner.make_tap(self.track.bp, self.model_id, self.name, module)
            self.tap._pre(module, args)
        if self.pre_values:
            self.owner.exact(
                self.track.bp, HookEvent(self.model_id, self.name, module, "forward_pre", inputs=args), args, None
            )

    def _outside_post(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self.track.backward and not self.hook_inputs:
            # No pre-hook (a gradient-norm condition looks at grad_output only): the tap hooks the
            # inputs now, which differs from GradTap's grad_input only for a layer that changed its
            # input in place, and only in the stop's locals.
            if self.tap is None:
                self.tap = self.owner.make_tap(self.track.bp, self.model_id, self.name, module)
            self.tap._pre(module, args)
        if self.tap is not None:
            self.tap._post(module, args, output)
        if self.post_values:
            self.owner.exact(
                self.track.bp,
                HookEvent(self.model_id, self.name, module, "forward", inputs=args, output=output),
                output,
                args,
            )


def _wrapped_forward(hooks: LayerHooks) -> Callable[..., Any]:
    """The function set as the layer's ``forward``: the one traced call per watched layer per step.

    The usual case of ``_pre`` and ``_post`` (tensor inputs, floating outputs in a tensor or a flat
    tuple, the root's forward running) is written out in it over closure variables, the fewest bytecodes a debugger makes
    dearer (~5x); anything else goes through ``hooks.around``.
    """
    inner, track, module = hooks.inner, hooks.track, hooks.module
    recorder, forward_values = track.recorder, track.forward
    aminmax, set_grad_enabled = torch.aminmax, torch._C._set_grad_enabled
    backward_values = track.backward_values  # its ``hook``: one object a step, the same key in every hook dict
    post_values, hook_inputs, hook_outputs = hooks.post_values, hooks.hook_inputs, hooks.hook_outputs
    scales_outputs = hooks.scales_outputs
    around, tracing, grad_enabled, tensor = (
        hooks.around,
        torch._C._get_tracing_state,
        torch.is_grad_enabled,
        torch.Tensor,
    )

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not hooks.fast or not recorder.open or (REPLAY.depth and not recorder.replaying) or tracing():
            return around(args, kwargs)
        try:
            if hook_inputs and recorder.hook_grads and grad_enabled():
                grad = backward_values.hook
                for arg in args:
                    if type(arg) is tensor and arg.requires_grad:
                        grad_fn = arg.grad_fn  # leaf_hooks.hook_gradient's activation case, written out
                        if grad_fn is not None:
                            dict_: dict[Any, Any] | None = arg._backward_hooks
                            if dict_ is None:
                                dict_ = OrderedDict()
                                arg._backward_hooks = dict_
                                grad_fn._register_hook_dict(arg)
                            dict_[grad] = grad
                        else:  # a leaf: its hook is removed at the step's end
                            track.leaves.register(arg, grad)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            hooks.owner.failed(track.bp, hooks.name, exc)
        output = inner(*args, **kwargs)
        # One floating tensor, or a flat tuple of them and Nones (attention's ``(output, weights)``):
        # each tensor as below; anything else through ``_post`` (two or more traced calls more).
        outs = (output,) if type(output) is tensor else output if type(output) is tuple else ()
        count = 0
        for out in outs:
            if out is None:
                continue
            if type(out) is not tensor or not out.is_floating_point() or out.layout is not _STRIDED:
                count = 0
                break
            count += 1
        if not count or (count > 1 and scales_outputs):
            hooks._post(module, args, output)
            return output
        try:
            for out in outs:
                if out is None:
                    continue
                if post_values:
                    numel = out.numel()
                    if numel > forward_values.prompt_min and out.is_cpu:  # in cache now, cold at the flush
                        version = out._version  # ``StepValues.now`` and ``reduce``, written out for abs-max
                        if out is not forward_values.last or version != forward_values.last_version:
                            forward_values.last, forward_values.last_version = out, version
                            used = forward_values.used
                            if forward_values.width == 2 and used + 2 <= forward_values.capacity and out.dtype is _F32:
                                forward_values.used = used + 2  # taken before the kernel, which releases the GIL
                                views = forward_values.views
                                enabled = grad_enabled()
                                set_grad_enabled(False)  # ``out=`` refuses an input that requires grad
                                try:
                                    aminmax(out, out=(views[used], views[used + 1]))
                                except (RuntimeError, TypeError):
                                    forward_values.failed(out, used)
                                finally:
                                    set_grad_enabled(enabled)
                            else:
                                forward_values.reduce((out,))
                    elif numel:
                        forward_values.refs.append(out)
                        forward_values.versions.append(out._version)
                        forward_values.owners.append(hooks)
                        forward_values.bytes += out.nbytes
                        if forward_values.bytes > FLUSH_BYTES or len(forward_values.refs) >= FLUSH_COUNT:
                            forward_values.flush()
                    else:
                        forward_values.odd(out)
                if hook_outputs and recorder.hook_grads:
                    grad = backward_values.hook
                    grad_fn = out.grad_fn
                    if grad_fn is not None:
                        out_hooks: dict[Any, Any] | None = out._backward_hooks
                        if out_hooks is None:
                            out_hooks = OrderedDict()
                            out._backward_hooks = out_hooks
                            grad_fn._register_hook_dict(out)
                        out_hooks[grad] = grad
                    elif out.requires_grad:
                        track.leaves.register(out, grad)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            hooks.owner.failed(track.bp, hooks.name, exc)
        return output

    forward.__wrapped__ = inner  # type: ignore[attr-defined]  # inspect.signature shows the layer's own
    forward.previous = hooks.previous  # type: ignore[attr-defined]  # copy_safety restores it in copies
    forward.hooks = hooks  # type: ignore[attr-defined]
    return forward


class _Unwrap:
    """The handle of a wrapped forward: ``remove()`` puts back what was there."""

    def __init__(self, hooks: LayerHooks) -> None:
        self._hooks = hooks

    def remove(self) -> None:
        hooks = self._hooks
        hooks.wrapping = hooks.fast = False
        module = hooks.module
        if module.__dict__.get("forward") is not hooks.forward:
            return  # something wrapped it since: it stays there as a plain pass-through
        previous = hooks.previous
        while getattr(previous, "hooks", None) is not None and not previous.hooks.wrapping:
            previous = previous.previous  # a wrapper under this one was removed first: skip it too
        if previous is None:
            del module.__dict__["forward"]
        else:
            module.__dict__["forward"] = previous


def may_wrap(module: nn.Module) -> bool:
    """Whether the deferred path may record a layer by wrapping its ``forward`` instead of hooking it.

    A module with any hook takes torch's slow call path: three traced calls more per layer under a
    debugger (``inner``, ``is_compiling``, ``is_scripting``) on top of the hooks themselves, most of
    what watching a stack of small layers costs. An instance-level ``forward`` is called by the fast
    path; it is Hookscope's own (left out of copies and pickles by copy_safety, removed with the
    breakpoint, signature kept through ``__wrapped__``). Not when the layer already has someone
    else's forward or forward-pre hooks (they may replace its inputs or output: the values the
    exact test sees), or runs compiled (dynamo would trace the wrapper).
    """
    if step_counter.compiled_call(module) is not None or type(module).__name__ == "OptimizedModule":
        return False
    for hooks in (module._forward_hooks, module._forward_pre_hooks, _global_forward_hooks, _global_forward_pre_hooks):
        for hook in hooks.values():
            if not is_hookscope_hook(hook):
                return False
    return True
