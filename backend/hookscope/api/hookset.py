"""Hook bookkeeping: ``HookSet`` owns handles, ``scope()`` removes them all on exit.

Every object of the Python API keeps its hooks in a ``HookSet``. A live
hook set is remembered process-wide until it is emptied, so
``hookscope.remove_all()`` always finds every hook the API added, even
those of objects the user dropped. A ``HookSet`` created inside a
``scope()`` joins it: leaving the scope removes it too (TransformerLens'
``hooks()`` habit), and ``scope(model)`` also removes hooks the body
registered directly on the model with ``register_*_hook``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.hooks import copy_safety, inventory

_LIVE: set[HookSet] = set()
_LIVE_LOCK = threading.Lock()
_SCOPES: contextvars.ContextVar[tuple[HookSet, ...]] = contextvars.ContextVar("hookscope_scopes", default=())


class HookSet:
    """A set of owned hook handles; ``remove_all()`` removes every one in one call.

    Register through it (``hooks.forward(module, fn)``...) or hand it any
    ``RemovableHandle`` with ``hooks.add(handle)``. Used as a context
    manager it removes everything on exit, even when the body raises.

    >>> with HookSet() as hooks:
    ...     hooks.forward(model.conv1, lambda m, i, o: print(o.shape))
    ...     model(x)
    """

    def __init__(self, name: str = "hooks") -> None:
        copy_safety.install()  # copies and pickles of the model leave Hookscope's own hooks out
        self.name = name
        self._lock = threading.Lock()
        self._handles: list[tuple[RemovableHandle, str]] = []
        self._children: list[HookSet] = []
        self._finalizers: list[Callable[[], Any]] = []
        scopes = _SCOPES.get()
        if scopes:
            scopes[-1]._adopt(self)

    # -- registering -------------------------------------------------------

    def add(self, handle: RemovableHandle, label: str = "") -> RemovableHandle:
        """Own an existing handle (from any ``register_*_hook``)."""
        with self._lock:
            self._handles.append((handle, label))
        self._mark_live()
        return handle

    def forward(
        self,
        module: nn.Module,
        fn: Callable[..., Any],
        *,
        with_kwargs: bool = False,
        always_call: bool = False,
        prepend: bool = False,
    ) -> RemovableHandle:
        """``module.register_forward_hook(fn)``: ``fn(module, args, output)`` (may return a new output)."""
        h = module.register_forward_hook(fn, with_kwargs=with_kwargs, always_call=always_call, prepend=prepend)
        return self.add(h, f"forward {type(module).__name__}")

    def forward_pre(
        self, module: nn.Module, fn: Callable[..., Any], *, with_kwargs: bool = False, prepend: bool = False
    ) -> RemovableHandle:
        """``module.register_forward_pre_hook(fn)``: ``fn(module, args)`` (may return new args)."""
        h = module.register_forward_pre_hook(fn, with_kwargs=with_kwargs, prepend=prepend)
        return self.add(h, f"forward_pre {type(module).__name__}")

    def backward(self, module: nn.Module, fn: Callable[..., Any], *, prepend: bool = False) -> RemovableHandle:
        """``module.register_full_backward_hook(fn)``: ``fn(module, grad_input, grad_output)``."""
        h = module.register_full_backward_hook(fn, prepend=prepend)
        return self.add(h, f"backward {type(module).__name__}")

    def backward_pre(self, module: nn.Module, fn: Callable[..., Any], *, prepend: bool = False) -> RemovableHandle:
        """``module.register_full_backward_pre_hook(fn)``: ``fn(module, grad_output)``."""
        h = module.register_full_backward_pre_hook(fn, prepend=prepend)
        return self.add(h, f"backward_pre {type(module).__name__}")

    def tensor(self, tensor: torch.Tensor, fn: Callable[[torch.Tensor], Any]) -> RemovableHandle:
        """``tensor.register_hook(fn)``: ``fn(grad)`` when the tensor's gradient is computed."""
        return self.add(tensor.register_hook(fn), "tensor grad")

    def post_accumulate_grad(self, param: torch.Tensor, fn: Callable[[torch.Tensor], Any]) -> RemovableHandle:
        """``param.register_post_accumulate_grad_hook(fn)``: ``fn(param)`` after ``.grad`` is updated."""
        return self.add(param.register_post_accumulate_grad_hook(fn), "post_accumulate_grad")

    def on_remove(self, fn: Callable[[], Any]) -> None:
        """Call ``fn`` when this set is emptied (for hooks owned elsewhere, e.g. interventions)."""
        with self._lock:
            self._finalizers.append(fn)
        self._mark_live()

    # -- removing ----------------------------------------------------------

    def remove_all(self) -> int:
        """Remove every hook of this set (and of the sets created in its scope); returns how many."""
        with self._lock:
            handles, self._handles = self._handles, []
            children, self._children = self._children, []
            finalizers, self._finalizers = self._finalizers, []
        removed = 0
        for h, _ in handles:
            h.remove()
            removed += 1
        for fn in finalizers:
            removed += int(fn() or 0)
        for child in children:
            removed += child.remove_all()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return removed

    remove = remove_all

    def discard(self, handle: RemovableHandle) -> None:
        """Remove one hook now and stop owning it."""
        handle.remove()
        with self._lock:
            self._handles = [(h, label) for h, label in self._handles if h is not handle]

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles) + len(self._finalizers) + sum(len(c) for c in self._children)

    def labels(self) -> list[str]:
        """What each owned hook is, for display."""
        with self._lock:
            own = [label for _, label in self._handles]
            children = list(self._children)
        return own + [label for c in children for label in c.labels()]

    def __enter__(self) -> HookSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove_all()

    def __repr__(self) -> str:
        return f"<HookSet {self.name!r}: {len(self)} hooks>"

    # -- internals ---------------------------------------------------------

    def _adopt(self, child: HookSet) -> None:
        with self._lock:
            self._children.append(child)
        self._mark_live()

    def _mark_live(self) -> None:
        with _LIVE_LOCK:
            _LIVE.add(self)


def remove_all() -> int:
    """Remove every hook the Python API added in this process; returns how many."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    return sum(h.remove_all() for h in live)


def live_hook_count() -> int:
    """How many hooks the Python API holds right now."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    return sum(len(h) for h in live)


@contextlib.contextmanager
def scope(*models: nn.Module, sweep: bool = True) -> Iterator[HookSet]:
    """A block whose exit removes every hook added in it, even when the body raises.

    Yields a ``HookSet`` for registering; API objects created inside
    (``capture``, ``activation_stats``...) join it. With ``models`` given,
    hooks the body registered directly on them (``module.register_forward_hook``,
    parameter hooks, global module hooks) are swept as well.

    >>> with hookscope.scope(model) as hooks:
    ...     acts = hookscope.capture(model, "conv1")
    ...     model(x)
    >>> # no hook is left on model
    """
    hooks = HookSet("scope")
    first_id = inventory.next_handle_id()
    token = _SCOPES.set(_SCOPES.get() + (hooks,))
    try:
        yield hooks
    finally:
        _SCOPES.reset(token)
        hooks.remove_all()
        if models and sweep:
            # Only the user's own: Hookscope hooks added meanwhile belong to an editor session.
            inventory.remove_added_since({str(i): m for i, m in enumerate(models)}, first_id, owner="user")
