"""Hookscope's hooks stay out of copies and pickles of the user's model.

PyTorch keeps a module's hooks in its ``__dict__`` (``_forward_hooks`` and friends), so
``copy.deepcopy(model)``, ``pickle``/``torch.save(model)`` and ``AveragedModel`` copy them:
Hookscope's closures cannot be pickled, its bound methods drag the engine (locks, weakrefs)
into the copy, and a deep copy would go on running Hookscope's hooks, which nobody removes.

``install()`` wraps ``nn.Module.__getstate__`` (the state both ``deepcopy`` and ``pickle``
take) so the state leaves out every hook defined in the ``hookscope`` package, with the
flags PyTorch keeps beside them, and a ``forward`` Hookscope set on the module (deferred_layers.py
wraps a watched layer's forward). The user's own hooks are copied exactly as PyTorch copies
them, and the original module is never modified. Hooks are recognised by where their code
lives, so no registration path can forget to mark one.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

from torch import nn

_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
_FLAG_DICTS = {
    "_forward_hooks": ("_forward_hooks_with_kwargs", "_forward_hooks_always_called"),
    "_forward_pre_hooks": ("_forward_pre_hooks_with_kwargs",),
}

_MARK = "_hookscope_copy_safe"


def is_hookscope_hook(hook: Any) -> bool:
    """Whether ``hook``'s code is Hookscope's (a function, closure, bound method, partial or callable)."""
    for _ in range(4):  # unwrap partials of partials, boundedly
        if isinstance(hook, functools.partial):
            hook = hook.func
        else:
            break
    module = getattr(hook, "__module__", None)
    if not isinstance(module, str):
        module = type(hook).__module__
    return module == "hookscope" or module.startswith("hookscope.")


def without_hookscope_hooks(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (a module's ``__dict__`` copy) with Hookscope's hooks left out; new dicts, no mutation."""
    for name in _HOOK_DICTS:
        hooks = state.get(name)
        if not hooks:
            continue
        ours = [key for key, hook in hooks.items() if is_hookscope_hook(hook)]
        if not ours:
            continue
        state[name] = OrderedDict((k, h) for k, h in hooks.items() if k not in ours)
        for flags_name in _FLAG_DICTS.get(name, ()):
            flags = state.get(flags_name)
            if flags:
                state[flags_name] = type(flags)((k, v) for k, v in flags.items() if k not in ours)
    forward = state.get("forward")
    if forward is not None and is_hookscope_hook(forward):  # a deferred breakpoint's wrapped forward
        while forward is not None and is_hookscope_hook(forward):
            forward = getattr(forward, "previous", None)  # what it wrapped, when that was set on the module
        if forward is None:
            del state["forward"]
        else:
            state["forward"] = forward
    if (
        state.get("_is_full_backward_hook")
        and not state.get("_backward_hooks")
        and not state.get("_backward_pre_hooks")
    ):
        state["_is_full_backward_hook"] = None  # only Hookscope's full backward hooks were there
    return state


def install() -> None:
    """Wrap ``nn.Module.__getstate__`` once per process (idempotent, thread-safe enough: one assignment)."""
    original = nn.Module.__getstate__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def __getstate__(self: nn.Module) -> dict[str, Any]:
        return without_hookscope_hooks(original(self))

    setattr(__getstate__, _MARK, True)
    nn.Module.__getstate__ = __getstate__  # type: ignore[method-assign]
