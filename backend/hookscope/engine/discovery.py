"""Finds the ``nn.Module`` roots of a process and describes them as ``ModelTree`` maps.

No user code changes are needed:

* Modules that already exist when discovery starts are found by one ``gc`` scan.
* Modules created later are recorded by ``creation_sites`` (a thin wrapper around
  ``nn.Module.__init__``), with the line that created each: what the editor maps a
  ``self.conv1 = nn.Conv2d(...)`` line to. For modules created before discovery started
  (attach), the line is read from the parent class's source (``source_locations``).
* A module created inside another module's constructor remembers that
  constructor parent, so a half-built model is never reported piecewise.
  Nor is one whose layers are made first and put together after
  (``nn.Sequential(*[nn.Linear(...) for _ in range(2000)])``): while the code
  that creates modules keeps creating them, what it made so far waits, and
  layers already inside a container under construction wait with it.
* Roots are reported from the agent thread (``poll``, a few times a second)
  and, so that breakpoints are in place before the first step, once more at
  the first forward call after new modules appeared: a global forward
  pre-hook that removes itself as soon as it ran.

A root is a module with parameters or children that is no descendant of
another tracked module. When a root is wrapped (``DDP(model)``,
``torch.compile(model)``, ``nn.Sequential(model, head)``) it is reported
removed and the wrapper added. Only weak references are kept: discovery never
keeps a model alive.
"""

from __future__ import annotations

import gc
import itertools
import linecache
import re
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hookscope.engine import creation_sites, step_counter
from hookscope.engine.creation_sites import TORCH_MODULE_FILE, install_creation_hook, is_module, origin_of
from hookscope.engine.source_locations import location_in_source

# ---------------------------------------------------------------------------
# Describing a model.


def _numel(param: Any) -> int:
    try:
        return int(param.numel())
    except Exception:  # UninitializedParameter of a lazy module
        return 0


def describe(model_id: str, root: Any, name: str | None = None) -> dict[str, Any]:
    """The ``ModelTree`` map of ``root``: every named module with class, params and source line."""
    named = list(root.named_modules())
    by_name = dict(named)
    # torch.compile(m) wraps m in an OptimizedModule; m.compile() compiles m's own call in place.
    compiled_prefixes = [
        n for n, m in named if type(m).__name__ == "OptimizedModule" or step_counter.compiled_call(m) is not None
    ]
    modules: list[dict[str, Any]] = []
    for qname, module in named:
        direct = sum(_numel(p) for p in module.parameters(recurse=False))
        total = sum(_numel(p) for p in module.parameters())
        info: dict[str, Any] = {
            "name": qname,
            "cls": type(module).__name__,
            "params": direct,
            "totalParams": total,
            "leaf": not module._modules,
        }
        file, line = location_of(module, qname, by_name)
        if file is not None and line is not None:
            info["file"], info["line"] = file, line
        if any(qname == p or qname.startswith(p + ".") if p else True for p in compiled_prefixes):
            info["compiled"] = True
        modules.append(info)
    return {
        "id": model_id,
        "name": name or type(root).__name__,
        "cls": type(root).__name__,
        "params": sum(_numel(p) for p in root.parameters()),
        "modules": modules,
    }


def location_of(module: Any, qname: str, by_name: dict[str, Any]) -> tuple[str | None, int | None]:
    """Source file and line where ``module`` (named ``qname`` in its root) was created."""
    origin = origin_of(module)
    if origin is not None:
        return origin.file, origin.line
    if not qname:
        return None, None
    parent_name, _, attr = qname.rpartition(".")
    parent = by_name.get(parent_name)
    if parent is None:
        return None, None
    grandparent_name, _, parent_attr = parent_name.rpartition(".")
    grandparent = by_name.get(grandparent_name) if parent_name else None
    try:
        return location_in_source(parent, grandparent, parent_attr if parent_name else None, attr)
    except Exception:
        return None, None


# ---------------------------------------------------------------------------
# Tracking roots.


@dataclass
class _Root:
    model_id: str
    ref: weakref.ref[Any]
    signature: tuple[tuple[str, int], ...]
    """(name, id) of every module in it: a changed layer is a changed model."""
    name: str


class Discovery:
    """Keeps the set of model roots and reports changes through ``on_added``/``on_removed``.

    ``on_added(model_id, module, tree)`` and ``on_removed(model_id)`` are called
    from whichever thread runs ``poll`` (the agent thread, or the training thread
    at the first forward after new modules appeared), never under a user lock.
    """

    MIN_AGE_S = 0.4
    """The agent thread waits this long after a module's creation before calling it a root,
    so ``enc = Encoder(); model = Seq2Seq(enc)`` is reported once, not twice."""

    def __init__(self, on_added: Callable[[str, Any, dict[str, Any]], None], on_removed: Callable[[str], None]) -> None:
        self._on_added = on_added
        self._on_removed = on_removed
        self._lock = threading.RLock()
        self._roots: dict[int, _Root] = {}
        self._candidates: list[tuple[weakref.ref[Any], float]] = []
        self._ids = itertools.count(1)
        self._flush_handle: Any = None
        self._arm_lock = threading.Lock()
        self._started = False
        self._scanned = False

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Install the creation hook; scan existing modules once torch.nn is loaded."""
        if self._started:
            return
        self._started = True
        creation_sites.add_listener(self._arm_first_forward_flush)
        # When the hook is in place before torch loads, every module is recorded
        # as it is created and no gc scan is needed.
        self._scanned = not install_creation_hook()

    def stop(self) -> None:
        """Stop reporting (the creation wrapper stays: it is process-wide and cheap)."""
        creation_sites.remove_listener(self._arm_first_forward_flush)
        self._disarm()

    def forget_listener(self) -> None:
        """Stop arming the first-forward flush, without locks (safe right after fork)."""
        creation_sites.remove_listener(self._arm_first_forward_flush)

    def roots(self) -> list[tuple[str, Any, dict[str, Any]]]:
        """Live roots as (model_id, module, tree)."""
        with self._lock:
            out = []
            for root in self._roots.values():
                module = root.ref()
                if module is not None:
                    out.append((root.model_id, module, self._describe(root, module)))
            return out

    # -- the periodic pass -------------------------------------------------
    def poll(self, *, min_age: float | None = None, current_stack: bool = False, blocking: bool = True) -> bool:
        """Update the roots; return False when a model was still being built (try again later).

        ``blocking=False`` (the agent thread) skips the pass when another thread holds
        the lock: that thread may be paused by the debugger, the agent must not wait.
        """
        if sys.modules.get(TORCH_MODULE_FILE) is None:
            return True
        age = self.MIN_AGE_S if min_age is None else min_age
        if not self._lock.acquire(blocking):
            return False
        try:
            if not self._scanned:
                self._scanned = True
                install_creation_hook()
                self._scan_existing()
            fresh = creation_sites.take_created()
            now = creation_sites.clock()
            self._candidates.extend((ref, now) for ref in fresh)
            building = _modules_under_construction(current_stack)
            inside_building = _descendants(building)
            ready: list[Any] = []
            waiting: list[tuple[weakref.ref[Any], float]] = []
            complete = True
            for ref, born in self._candidates:
                module = ref()
                if module is None:
                    continue
                if module in building or _built_inside(module, building) or id(module) in inside_building:
                    complete = False
                    waiting.append((ref, born))
                elif now - born < age or (age > 0 and creation_sites.creator_still_at_work(module, now, age)):
                    waiting.append((ref, born))
                elif _worth_reporting(module):
                    ready.append(module)
            # A layer that is already inside a module still waiting goes with it, later.
            held = _descendants(m for m in (ref() for ref, _ in waiting) if m is not None)
            if held:
                waiting += [(weakref.ref(m), now) for m in ready if id(m) in held]
                ready = [m for m in ready if id(m) not in held]
            self._candidates = waiting
            creation_sites.forget_old_creations(now)
            self._update_roots(ready)
            return complete
        finally:
            self._lock.release()

    def _scan_existing(self) -> None:
        cls = creation_sites.module_class() or getattr(sys.modules[TORCH_MODULE_FILE], "Module", None)
        if cls is None:
            return
        now = creation_sites.clock() - self.MIN_AGE_S
        # type() rather than isinstance(): no __class__ lookups on lazy proxies.
        found = [o for o in gc.get_objects() if issubclass(type(o), cls)]
        self._candidates.extend((weakref.ref(m), now) for m in found)

    def _update_roots(self, ready: list[Any], check_structure: bool = False) -> None:
        referents = {key: root.ref() for key, root in self._roots.items()}
        for key, module in referents.items():
            if module is None:
                self._on_removed(self._roots.pop(key).model_id)
        known = {key: m for key, m in referents.items() if m is not None}
        ready = [m for m in ready if id(m) not in known]
        if not ready and not check_structure:
            return  # nothing new: no need to walk the models
        candidates = list(known.values()) + ready
        descendants: set[int] = set()
        for module in candidates:
            try:
                descendants.update(id(m) for m in module.modules() if m is not module)
            except RuntimeError:  # a dict[str, Any] changed while the training thread edits the model
                return
        roots = [m for m in candidates if id(m) not in descendants]
        root_ids = {id(m) for m in roots}
        for key in list(known):
            if key not in root_ids:  # wrapped by a new root (DDP, compile, a container)
                self._on_removed(self._roots.pop(key).model_id)
        for module in roots:
            existing = self._roots.get(id(module))
            signature = _signature(module)
            if existing is not None and existing.signature == signature:
                continue
            if existing is not None:  # its structure changed (a layer replaced): report again
                self._on_removed(existing.model_id)
                model_id, name = existing.model_id, existing.name
            else:
                model_id, name = f"m{next(self._ids)}", _variable_name(module) or type(module).__name__
            root = _Root(model_id, weakref.ref(module), signature, name)
            self._roots[id(module)] = root
            self._on_added(model_id, module, self._describe(root, module))

    def _describe(self, root: _Root, module: Any) -> dict[str, Any]:
        return describe(root.model_id, module, root.name)

    def check_structure(self, blocking: bool = True) -> None:
        """Re-report roots whose module tree changed (called now and then by the agent)."""
        if not self._lock.acquire(blocking):
            return
        try:
            self._update_roots([], check_structure=True)
        finally:
            self._lock.release()

    # -- the first-forward flush ------------------------------------------
    def _arm_first_forward_flush(self) -> None:
        if self._flush_handle is not None:
            return
        with self._arm_lock:
            if self._flush_handle is not None:
                return
            try:
                from torch.nn.modules.module import register_module_forward_pre_hook
            except Exception:
                return
            self._flush_handle = register_module_forward_pre_hook(self._first_forward)

    def _disarm(self) -> None:
        with self._arm_lock:
            handle, self._flush_handle = self._flush_handle, None
        if handle is not None:
            handle.remove()

    def _first_forward(self, module: Any, args: Any) -> None:
        # Runs once on the training thread, before the first forward of new modules,
        # so breakpoints the editor already sent are on the model before step 0.
        try:
            if self.poll(min_age=0.0, current_stack=True):
                self._disarm()
        except Exception:
            self._disarm()
        return None


def _worth_reporting(module: Any) -> bool:
    return bool(module._modules) or bool(module._parameters)


def _signature(module: Any) -> tuple[tuple[str, int], ...]:
    try:
        return tuple((name, id(m)) for name, m in module.named_modules())
    except RuntimeError:
        return ()


def _descendants(modules: Iterable[Any]) -> set[int]:
    """ids of the modules inside these (a container being filled, a model not reported yet)."""
    out: set[int] = set()
    for module in modules:
        try:
            out.update(id(m) for m in module.modules() if m is not module)
        except (RuntimeError, AttributeError):  # half-initialised, or its dict[str, Any] changes meanwhile
            continue
    return out


def _built_inside(module: Any, building: _IdentitySet) -> bool:
    """Whether a module's builder, or its builder's builder..., is still being constructed."""
    seen = 0
    origin = origin_of(module)
    while origin is not None and origin.builder is not None and seen < 64:
        builder = origin.builder()
        if builder is None:
            return False
        if builder in building:
            return True
        origin, seen = origin_of(builder), seen + 1
    return False


def _modules_under_construction(current_stack: bool) -> _IdentitySet:
    """Modules whose ``__init__`` is running on some thread right now (identity set)."""
    stacks: Iterable[types.FrameType | None]
    if current_stack:
        stacks = [sys._getframe(1)]
    else:
        stacks = list(sys._current_frames().values())
    building = _IdentitySet()
    for frame in stacks:
        while frame is not None:
            code = frame.f_code
            if code.co_name == "__init__" and code.co_argcount > 0:
                obj = frame.f_locals.get(code.co_varnames[0])
                if is_module(obj):
                    building.add(obj)
            frame = frame.f_back
    return building


class _IdentitySet:
    """A set keyed by object identity (modules may define __eq__/__hash__)."""

    def __init__(self) -> None:
        self._items: dict[int, Any] = {}

    def add(self, obj: Any) -> None:
        self._items[id(obj)] = obj

    def __contains__(self, obj: Any) -> bool:
        return id(obj) in self._items

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items.values()))


_ASSIGNED_NAME = re.compile(r"^\s*(?:self\.)?([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")


def _variable_name(module: Any) -> str | None:
    """The variable ``module`` was assigned to where it was created (``model = Net()``), else a global.

    Read from the creating line's source, never from ``frame.f_locals``: that snapshot
    would stay on a long-lived frame and keep a deleted model (and its memory) alive.
    """
    origin = origin_of(module)
    if origin is not None and origin.file and origin.line:
        match = _ASSIGNED_NAME.match(linecache.getline(origin.file, origin.line))
        if match:
            return match.group(1)
    main = sys.modules.get("__main__")
    for key, value in list(getattr(main, "__dict__", {}).items()):
        if value is module and isinstance(key, str) and not key.startswith("_"):
            return key
    return None
