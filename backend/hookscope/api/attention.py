"""Capturing attention weights, also when the model asked for none.

``nn.MultiheadAttention`` only returns weights when called with
``need_weights=True``, and ``nn.TransformerEncoderLayer`` calls it with
``need_weights=False``. A forward pre-hook (with kwargs) asks for per-head
weights (``need_weights=True, average_attn_weights=False``); the forward
hook keeps them and hands the model back exactly what it asked for: ``None``
in place of the weights, or the head average (``mean`` over the head dim,
the module's own computation). While a capture is active, PyTorch's MHA
fast path is turned off (it would bypass the module's hooks inside
``TransformerEncoderLayer``) and restored afterwards.

Note: asking for weights takes the module's general code path rather than
scaled-dot-product attention, so the attention *output* can differ from
an uncaptured run by float rounding.

For attention written by hand, name the module that outputs the softmax
(e.g. an ``nn.Softmax``): its output is captured as is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from hookscope.hooks.mha_call import MHA_ARGS
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS

from .capture import detach_tree, first_tensor
from .hookset import HookSet
from .select import LayerSpec, select_modules

Tensor = torch.Tensor


class AttentionCapture(Mapping[str, Tensor]):
    """``{layer_name: weights}``: (N, H, L, S) per head for ``nn.MultiheadAttention``
    ((H, L, S) for unbatched input); for other modules, their output."""

    def __init__(
        self, model: nn.Module, layers: LayerSpec = None, *, cpu: bool = False, keep_history: bool = False
    ) -> None:
        if layers is None:
            chosen = select_modules(model, types=nn.MultiheadAttention)
        else:
            chosen = select_modules(model, layers)
        self.layers = [name for name, _ in chosen]
        self.cpu = cpu
        self.keep_history = keep_history
        self._data: dict[str, Tensor] = {}
        self.history: dict[str, list[Tensor]] = {}
        """Every call's weights per layer when ``keep_history``."""
        self.hooks = HookSet("capture_attention")
        self._fastpath: bool | None = None
        for name, module in chosen:
            if isinstance(module, nn.MultiheadAttention):
                asked: list[tuple[bool, bool]] = []  # what each (possibly nested) call asked for
                self.hooks.forward_pre(module, self._ask_for_weights(asked), with_kwargs=True)
                self.hooks.forward(module, self._keep_weights(name, asked))
            else:
                self.hooks.forward(module, self._keep_output(name))
        if any(isinstance(m, nn.MultiheadAttention) for _, m in chosen):
            self._disable_fastpath()

    # -- hooks ---------------------------------------------------------------

    @staticmethod
    def _ask_for_weights(asked: list[tuple[bool, bool]]) -> Any:
        def request_weights(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS
        ) -> Any:
            if kwargs is CALLED_WITHOUT_KWARGS:
                return None
            call = dict(kwargs)
            if len(args) > 3:  # move positional options into kwargs so they can be overridden
                call.update(zip(MHA_ARGS[3:], args[3:]))
                args = args[:3]
            asked.append((bool(call.get("need_weights", True)), bool(call.get("average_attn_weights", True))))
            call["need_weights"] = True
            call["average_attn_weights"] = False
            return args, call

        return request_weights

    def _keep_weights(self, name: str, asked: list[tuple[bool, bool]]) -> Any:
        def keep_and_restore(module: nn.Module, args: Any, output: Any) -> Any:
            need, average = asked.pop() if asked else (True, False)
            if not isinstance(output, tuple) or len(output) != 2 or output[1] is None:
                return None
            attn, weights = output
            self._store(name, weights)
            if not need:
                return (attn, None)
            if average:
                return (attn, weights.mean(dim=-3))  # what the module computes when averaging
            return None

        return keep_and_restore

    def _keep_output(self, name: str) -> Any:
        def keep_softmax(module: nn.Module, args: Any, output: Any) -> None:
            t = first_tensor(output)
            if t is not None:
                self._store(name, t)

        return keep_softmax

    def _store(self, name: str, weights: Tensor) -> None:
        kept = detach_tree(weights, self.cpu)
        self._data[name] = kept
        if self.keep_history:
            self.history.setdefault(name, []).append(kept)

    def _disable_fastpath(self) -> None:
        mha = getattr(torch.backends, "mha", None)
        if mha is not None and hasattr(mha, "set_fastpath_enabled"):
            self._fastpath = bool(mha.get_fastpath_enabled())
            mha.set_fastpath_enabled(False)
            self.hooks.on_remove(self._restore_fastpath)  # also when a scope removes the hooks

    def _restore_fastpath(self) -> int:
        if self._fastpath is not None:
            torch.backends.mha.set_fastpath_enabled(self._fastpath)
            self._fastpath = None
        return 0

    # -- mapping and lifetime ----------------------------------------------

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._data[name]
        except KeyError:
            if name in self.layers:
                raise KeyError(f"{name!r} has not run yet (run a forward pass)") from None
            raise KeyError(f"{name!r} is not captured; captured layers: {', '.join(self.layers)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)

    def remove(self) -> int:
        """Remove the hooks and restore the MHA fast-path setting (captured weights stay)."""
        return self.hooks.remove_all()

    def __enter__(self) -> AttentionCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def capture_attention(
    model: nn.Module, layers: LayerSpec = None, *, cpu: bool = False, keep_history: bool = False
) -> AttentionCapture:
    """Capture attention weights of every ``nn.MultiheadAttention`` (or of the ``layers`` named).

    >>> with hookscope.capture_attention(model) as attn:
    ...     model(tokens)
    >>> attn["encoder.layers.0.self_attn"].shape   # (N, heads, L, S)
    """
    return AttentionCapture(model, layers, cpu=cpu, keep_history=keep_history)
