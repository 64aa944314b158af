"""Hook inventory and hygiene: every hook on the watched models, whose it is, and leaks.

Reads PyTorch's own hook dictionaries (module forward / forward-pre /
backward / backward-pre / state-dict hooks, the global module hooks, and
each parameter's gradient and post-accumulate-grad hooks), so it sees hooks
however they were added. A hook belongs to Hookscope when its function's
``__module__`` starts with ``hookscope``; everything else is the user's.

A *leak* is a hook whose count keeps growing across inventories (a hook
registered once per step and never removed): counts are kept per
``(model, module, kind, function, file, line)`` between calls.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.nn.modules import module as _module_mod

GLOBAL = "*"
"""``model`` and ``module`` of the global (every-module) hooks."""

MODULE_HOOKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (attribute, kind, companion dicts keyed by the same handle id)
    ("_forward_pre_hooks", "forward_pre", ("_forward_pre_hooks_with_kwargs",)),
    ("_forward_hooks", "forward", ("_forward_hooks_with_kwargs", "_forward_hooks_always_called")),
    ("_backward_pre_hooks", "backward_pre", ()),
    ("_backward_hooks", "backward", ()),
    ("_state_dict_pre_hooks", "state_dict_pre", ()),
    ("_state_dict_hooks", "state_dict", ()),
    ("_load_state_dict_pre_hooks", "load_state_dict_pre", ()),
    ("_load_state_dict_post_hooks", "load_state_dict_post", ()),
)
"""Hook dictionaries of every ``nn.Module``."""

GLOBAL_HOOKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("_global_forward_pre_hooks", "global_forward_pre", ()),
    (
        "_global_forward_hooks",
        "global_forward",
        ("_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called"),
    ),
    ("_global_backward_pre_hooks", "global_backward_pre", ()),
    ("_global_backward_hooks", "global_backward", ()),
    ("_global_module_registration_hooks", "global_module_registration", ()),
    ("_global_parameter_registration_hooks", "global_parameter_registration", ()),
    ("_global_buffer_registration_hooks", "global_buffer_registration", ()),
)
"""Module-level dictionaries in ``torch.nn.modules.module`` (hooks on every module)."""

TENSOR_HOOKS: tuple[tuple[str, str], ...] = (
    ("_backward_hooks", "param_grad"),
    ("_post_accumulate_grad_hooks", "post_accumulate_grad"),
)
"""Hook dictionaries of a parameter (a leaf tensor)."""


@dataclass(frozen=True)
class HookSlot:
    """Where one hook lives: enough to describe it and to remove it."""

    model: str
    module: str
    kind: str
    key: int
    fn: Any
    store: dict[int, Any]
    companions: tuple[dict[int, Any], ...]

    def remove(self) -> bool:
        """Remove the hook from PyTorch's dictionaries; False if it was already gone."""
        found = self.store.pop(self.key, None) is not None
        for d in self.companions:
            d.pop(self.key, None)
        return found


def describe_function(fn: Any) -> dict[str, Any]:
    """``{function, file, line, owner}`` of a hook callable (partials, wrappers, methods, objects)."""
    obj = fn
    for _ in range(8):  # unwrap partials, torch's _WrappedHook and decorators
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif type(obj).__name__ == "_WrappedHook" and hasattr(obj, "hook"):
            obj = obj.hook
        elif getattr(obj, "__wrapped__", None) is not None and not inspect.isclass(obj):
            obj = obj.__wrapped__
        else:
            break
    func = obj.__func__ if inspect.ismethod(obj) else obj
    if inspect.isfunction(func) or inspect.isbuiltin(func):
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        module = getattr(func, "__module__", None) or ""
    else:  # a callable object: describe its __call__
        cls = type(obj)
        name = cls.__qualname__
        module = cls.__module__ or ""
        func = cls.__call__ if callable(obj) else None
    code = getattr(func, "__code__", None)
    file = code.co_filename if code is not None else None
    line = code.co_firstlineno if code is not None else None
    owner = "hookscope" if module == "hookscope" or module.startswith("hookscope.") else "user"
    return {"function": f"{module}.{name}" if module else name, "file": file, "line": line, "owner": owner}


def _items(store: dict[int, Any]) -> list[tuple[int, Any]]:
    # Another thread may add a hook meanwhile; copying is retried rather than locked.
    for _ in range(5):
        try:
            return list(store.items())
        except RuntimeError:
            continue
    return []


def iter_slots(models: Mapping[str, nn.Module], include_global: bool = True) -> Iterator[HookSlot]:
    """Every hook on ``models`` (each module once per model) and, optionally, the global ones."""
    for model_id, model in models.items():
        for name, mod in model.named_modules():
            for attr, kind, companions in MODULE_HOOKS:
                store = getattr(mod, attr, None)
                if not store:
                    continue
                if attr == "_backward_hooks" and getattr(mod, "_is_full_backward_hook", None) is False:
                    kind = "backward_legacy"
                comp = tuple(d for d in (getattr(mod, c, None) for c in companions) if isinstance(d, dict))
                for key, fn in _items(store):
                    yield HookSlot(model_id, name, kind, key, fn, store, comp)
        for pname, param in model.named_parameters():
            for attr, kind in TENSOR_HOOKS:
                store = getattr(param, attr, None)
                if not store:
                    continue
                for key, fn in _items(store):
                    yield HookSlot(model_id, pname, kind, key, fn, store, ())
    if include_global:
        for attr, kind, companions in GLOBAL_HOOKS:
            store = getattr(_module_mod, attr, None)
            if not store:
                continue
            comp = tuple(d for d in (getattr(_module_mod, c, None) for c in companions) if isinstance(d, dict))
            for key, fn in _items(store):
                yield HookSlot(GLOBAL, GLOBAL, kind, key, fn, store, comp)


class Inventory:
    """Lists hooks and remembers counts between calls to flag leaks."""

    def __init__(self, history: int = 8) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[Any, ...], deque[int]] = {}
        self._history = history

    def list_hooks(self, models: Mapping[str, nn.Module]) -> dict[str, list[dict[str, Any]]]:
        """``{'hooks': [{model, module, kind, owner, function, file, line}], 'leaks': [...]}``.

        A leak entry is ``{model, module, kind, function, counts}`` with the
        recent counts of that hook; it is flagged once its count has grown
        at least twice (and never shrunk) over the remembered inventories."""
        hooks: list[dict[str, Any]] = []
        now: dict[tuple[Any, ...], int] = {}
        for slot in iter_slots(models):
            info = describe_function(slot.fn)
            hooks.append(
                {
                    "model": slot.model,
                    "module": slot.module,
                    "kind": slot.kind,
                    "owner": info["owner"],
                    "function": info["function"],
                    "file": info["file"],
                    "line": info["line"],
                }
            )
            key = (slot.model, slot.module, slot.kind, info["function"], info["file"], info["line"])
            now[key] = now.get(key, 0) + 1
        seen_models = set(models) | {GLOBAL}
        leaks: list[dict[str, Any]] = []
        with self._lock:
            for key in set(self._counts) | set(now):
                if key[0] not in seen_models:
                    continue
                hist = self._counts.setdefault(key, deque(maxlen=self._history))
                hist.append(now.get(key, 0))
                if not any(hist):
                    del self._counts[key]
                    continue
                pairs = list(zip(hist, list(hist)[1:]))
                grew = sum(b > a for a, b in pairs)
                shrank = sum(b < a for a, b in pairs)
                if grew >= 2 and shrank == 0:
                    leaks.append(
                        {
                            "model": key[0],
                            "module": key[1],
                            "kind": key[2],
                            "function": key[3],
                            "file": key[4],
                            "line": key[5],
                            "counts": list(hist),
                        }
                    )
        leaks.sort(key=lambda leak: (leak["model"], leak["module"], leak["kind"]))
        return {"hooks": hooks, "leaks": leaks}

    def reset(self) -> None:
        """Forget the counts (leak detection starts over)."""
        with self._lock:
            self._counts.clear()


_default = Inventory()


def list_hooks(models: Mapping[str, nn.Module]) -> dict[str, list[dict[str, Any]]]:
    """Every hook on ``models`` (``{model_id: module}``) plus global hooks, and leaks.

    Uses one process-wide ``Inventory``, so leak history is kept between calls."""
    return _default.list_hooks(models)


def reset_history() -> None:
    """Forget the process-wide leak history."""
    _default.reset()


def hookscope_hooks(models: Mapping[str, nn.Module], include_global: bool = True) -> list[HookSlot]:
    """Hookscope's own hooks still present on ``models`` (a test asserts this is empty after shutdown)."""
    return [s for s in iter_slots(models, include_global) if describe_function(s.fn)["owner"] == "hookscope"]


def remove_matching(
    models: Mapping[str, nn.Module], keep: Callable[[HookSlot], bool], include_global: bool = True
) -> int:
    """Remove every hook on ``models`` for which ``keep(slot)`` is False; returns how many."""
    removed = 0
    for slot in list(iter_slots(models, include_global)):
        if not keep(slot) and slot.remove():
            removed += 1
    return removed


def remove_hookscope_hooks(models: Mapping[str, nn.Module], include_global: bool = True) -> int:
    """Remove every Hookscope hook found on ``models``, owned handle or not (a safety net)."""
    return remove_matching(models, lambda s: describe_function(s.fn)["owner"] != "hookscope", include_global)


def next_handle_id() -> int:
    """The id the next hook of any kind will get (``RemovableHandle`` ids only grow)."""
    from torch.utils.hooks import RemovableHandle

    return int(RemovableHandle.next_id)


def remove_added_since(
    models: Mapping[str, nn.Module], first_id: int, owner: str | None = None, include_global: bool = True
) -> int:
    """Remove hooks on ``models`` registered since ``first_id`` (optionally only of ``owner``)."""

    def keep(slot: HookSlot) -> bool:
        if not isinstance(slot.key, int) or slot.key < first_id:
            return True
        return owner is not None and describe_function(slot.fn)["owner"] != owner

    return remove_matching(models, keep, include_global)


__all__ = [
    "GLOBAL",
    "HookSlot",
    "Inventory",
    "describe_function",
    "hookscope_hooks",
    "iter_slots",
    "list_hooks",
    "next_handle_id",
    "remove_added_since",
    "remove_hookscope_hooks",
    "remove_matching",
    "reset_history",
]
