"""Capturing activations: layer outputs into a dict, and per-layer mean/std statistics.

The seed articles' first pattern, as one call::

    activation = {}
    def get_activation(name):
        def hook(model, input, output):
            activation[name] = output.detach()
        return hook
    model.conv1.register_forward_hook(get_activation("conv1"))

becomes ``acts = hookscope.capture(model, "conv1")`` (or ``types=nn.Conv2d``
for every layer of a type), usable with or without ``with``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from .hookset import HookSet
from .select import LayerSpec, select_modules

Tensor = torch.Tensor


def detach_tree(value: Any, cpu: bool = False, clone: bool = False) -> Any:
    """``value`` with every tensor detached (optionally cloned / moved to the CPU), structure kept."""
    if isinstance(value, Tensor):
        t = value.detach()
        if cpu:
            t = t.cpu()
        if clone and (not cpu or t.data_ptr() == value.data_ptr()):
            t = t.clone()
        return t
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(detach_tree(v, cpu, clone) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(detach_tree(v, cpu, clone) for v in value)
    if isinstance(value, dict):
        return {k: detach_tree(v, cpu, clone) for k, v in value.items()}
    return value


def first_tensor(value: Any) -> Tensor | None:
    """The first tensor in a (nested) output, or None."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for v in value:
            t = first_tensor(v)
            if t is not None:
                return t
    return None


class Capture(Mapping[str, Any]):
    """Outputs (or inputs) of chosen layers, kept by forward hooks, detached.

    A read-only mapping ``{layer_name: tensor}`` holding the last call of
    each layer (``keep='all'``: ``history[name]`` lists every call). Hooks
    stay until ``remove()`` or the end of a ``with`` block.

    Note: ``.detach()`` shares memory with the live tensor; a later in-place
    op (``ReLU(inplace=True)``) changes what was captured. Pass
    ``clone=True`` to keep a copy.
    """

    def __init__(
        self,
        model: nn.Module,
        layers: LayerSpec = None,
        *,
        types: Any = None,
        cpu: bool = False,
        clone: bool = False,
        inputs: bool = False,
        keep: Literal["last", "all"] = "last",
    ) -> None:
        chosen = select_modules(model, layers, types)
        self.layers = [name for name, _ in chosen]
        self.cpu, self.clone, self.inputs, self.keep = cpu, clone, inputs, keep
        self._data: dict[str, Any] = {}
        self.history: dict[str, list[Any]] = {}
        """Every captured call per layer when ``keep='all'``."""
        self.hooks = HookSet("capture")
        for name, module in chosen:
            if inputs:
                self.hooks.forward_pre(module, self._pre_hook(name))
            else:
                self.hooks.forward(module, self._hook(name))

    def _store(self, name: str, value: Any) -> None:
        kept = detach_tree(value, self.cpu, self.clone)
        self._data[name] = kept
        if self.keep == "all":
            self.history.setdefault(name, []).append(kept)

    def _hook(self, name: str) -> Any:
        def capture_output(module: nn.Module, args: Any, output: Any) -> None:
            self._store(name, output)

        return capture_output

    def _pre_hook(self, name: str) -> Any:
        def capture_inputs(module: nn.Module, args: Any) -> None:
            self._store(name, args)

        return capture_inputs

    # -- mapping -----------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
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

    def clear(self) -> None:
        """Forget what was captured (hooks stay)."""
        self._data.clear()
        self.history.clear()

    # -- lifetime ----------------------------------------------------------

    def remove(self) -> int:
        """Remove the hooks (what was captured stays readable)."""
        return self.hooks.remove_all()

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        rows = []
        for name in self.layers:
            t = first_tensor(self._data.get(name))
            rows.append(
                f"  {name or '(root)'}: "
                + (f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" if t is not None else "not run yet")
            )
        return "Capture(\n" + "\n".join(rows) + "\n)"


def capture(
    model: nn.Module,
    layers: LayerSpec = None,
    *,
    types: Any = None,
    cpu: bool = False,
    clone: bool = False,
    inputs: bool = False,
    keep: Literal["last", "all"] = "last",
) -> Capture:
    """Capture layer outputs (``inputs=True``: inputs) into a dict-like object.

    >>> acts = hookscope.capture(model, "conv1")            # one layer
    >>> convs = hookscope.capture(model, types=nn.Conv2d)   # every Conv2d
    >>> with hookscope.capture(model, "layer*.conv1", cpu=True) as acts:
    ...     model(x)
    >>> acts["layer1.conv1"].shape
    """
    return Capture(model, layers, types=types, cpu=cpu, clone=clone, inputs=inputs, keep=keep)


@dataclass
class LayerStats:
    """Mean and std of one layer's output at each call."""

    name: str
    means: list[float]
    stds: list[float]

    @property
    def mean(self) -> float:
        """Mean at the last call."""
        return self.means[-1]

    @property
    def std(self) -> float:
        """Std at the last call."""
        return self.stds[-1]

    @property
    def calls(self) -> int:
        return len(self.means)


class ActivationStats:
    """Per-layer activation mean/std at every forward call (kept on the device until read).

    The hook stacks ``(mean, std)`` on the tensor's device without a host
    sync; reading (``stats[name]``, ``summary()``, ``table()``) transfers
    once. ``max_history`` bounds memory per layer (oldest dropped).
    """

    def __init__(
        self, model: nn.Module, layers: LayerSpec = None, *, types: Any = None, max_history: int = 10_000
    ) -> None:
        chosen = select_modules(model, layers, types, default="leaves")
        self.layers = [name for name, _ in chosen]
        self.max_history = max_history
        self._records: dict[str, list[Tensor]] = {name: [] for name in self.layers}
        self.hooks = HookSet("activation_stats")
        for name, module in chosen:
            self.hooks.forward(module, self._hook(name))

    def _hook(self, name: str) -> Any:
        records = self._records[name]

        def record_mean_std(module: nn.Module, args: Any, output: Any) -> None:
            t = first_tensor(output)
            if t is None or not (t.is_floating_point() or t.is_complex()):
                return
            with torch.no_grad():
                f = t.detach().float()
                std = f.std() if f.numel() > 1 else torch.zeros((), device=f.device)
                records.append(torch.stack((f.mean(), std)))
            if len(records) > self.max_history:
                del records[0]

        return record_mean_std

    def __getitem__(self, name: str) -> LayerStats:
        if name not in self._records:
            raise KeyError(f"{name!r} is not watched; layers: {', '.join(self.layers)}")
        recs = self._records[name]
        if not recs:
            return LayerStats(name, [], [])
        host = torch.stack(recs).cpu().double().numpy()
        return LayerStats(name, host[:, 0].tolist(), host[:, 1].tolist())

    def summary(self) -> dict[str, LayerStats]:
        """Every watched layer that ran: ``{name: LayerStats}`` in model order."""
        return {name: self[name] for name in self.layers if self._records[name]}

    def table(self) -> str:
        """A small text table (last call) in the torchinfo manner."""
        rows = [(n or "(root)", s.calls, s.mean, s.std) for n, s in self.summary().items()]
        width = max([len(r[0]) for r in rows] + [5])
        lines = [f"{'layer':<{width}}  {'calls':>5}  {'mean':>11}  {'std':>11}", "-" * (width + 34)]
        lines += [f"{n:<{width}}  {c:>5}  {m:>11.4g}  {s:>11.4g}" for n, c, m, s in rows]
        return "\n".join(lines)

    def clear(self) -> None:
        for recs in self._records.values():
            recs.clear()

    def remove(self) -> int:
        """Remove the hooks (recorded statistics stay readable)."""
        return self.hooks.remove_all()

    def __enter__(self) -> ActivationStats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return "ActivationStats(\n" + self.table() + "\n)"


def activation_stats(
    model: nn.Module, layers: LayerSpec = None, *, types: Any = None, max_history: int = 10_000
) -> ActivationStats:
    """Record each layer's activation mean/std per forward call (default: every leaf layer).

    >>> with hookscope.activation_stats(model, types=nn.Conv2d) as stats:
    ...     for x in batches: model(x)
    >>> stats["conv1"].means, print(stats.table())
    """
    return ActivationStats(model, layers, types=types, max_history=max_history)
