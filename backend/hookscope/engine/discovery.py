"""Finds the ``nn.Module`` roots of a process and describes them as ``ModelTree`` maps.

No user code changes are needed:

* Modules that already exist when discovery starts are found by one ``gc`` scan.
* Modules created later are seen by a thin wrapper around ``nn.Module.__init__``
  (installed as soon as ``torch.nn`` is imported, through an import hook, so
  the bootstrap never imports torch itself). The wrapper records where the
  module was created: the first frame outside torch, Hookscope and the
  module's own constructor chain. That frame/line is what the editor maps a
  ``self.conv1 = nn.Conv2d(...)`` line to. Nothing runs per forward call.
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

For modules created before discovery started (attach), the creation line
falls back to the parent class's source, read with ``ast``
(``self.<name> = ...``, ``self.add_module("<name>", ...)``, and entries of
an ``nn.Sequential(...)`` / ``nn.ModuleList([...])`` literal).
"""

from __future__ import annotations

import ast
import functools
import gc
import importlib.abc
import importlib.machinery
import inspect
import itertools
import linecache
import os
import re
import sys
import textwrap
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hookscope import PACKAGE_DIR

_TORCH_MODULE_FILE = "torch.nn.modules.module"


@dataclass(frozen=True)
class Origin:
    """Where a module was created."""

    file: str | None
    """Absolute source file of the creating line; None for a library-internal submodule."""
    line: int | None
    """1-based line of the creating call."""
    builder: weakref.ref | None = None
    """The module whose constructor created this one (None at top level)."""
    call: tuple[int, int] | None = None
    """(id of the creating user frame, its f_lasti): the exact call that created it."""


# ---------------------------------------------------------------------------
# Recording creation sites (runs on the creating thread, must stay cheap).

_origins: weakref.WeakKeyDictionary[Any, Origin] = weakref.WeakKeyDictionary()
_created: list[weakref.ref] = []
"""Modules created since the last poll (weak)."""
_created_lock = threading.Lock()
_abs_cache: dict[str, str] = {}
_library_dirs: tuple[str, ...] = (PACKAGE_DIR,)
_listeners: list[Callable[[], None]] = []
"""Called (on the creating thread) after a module was recorded: arms the first-forward flush."""
_last_creation: dict[int, float] = {}
"""id of a user frame that created modules -> when it last did (a model being put together)."""
_clock = time.monotonic


def _abspath(filename: str) -> str:
    path = _abs_cache.get(filename)
    if path is None:
        path = filename if filename.startswith("<") else os.path.abspath(filename)
        _abs_cache[filename] = path
    return path


def _is_library_file(filename: str) -> bool:
    return filename.startswith(_library_dirs) or filename.startswith("<frozen")


def _record_creation(module: Any, frame: types.FrameType | None) -> None:
    """Remember where ``module`` was created and which constructor built it."""
    builder: Any = None
    site: types.FrameType | None = None
    while frame is not None:
        code = frame.f_code
        is_init = code.co_name == "__init__" and code.co_argcount > 0
        self_obj = frame.f_locals.get(code.co_varnames[0]) if is_init else None
        if self_obj is module:
            frame = frame.f_back  # the module's own constructor chain
            continue
        if builder is None and is_init and _is_module(self_obj):
            builder = self_obj
        if site is None and not _is_library_file(_abspath(code.co_filename)):
            site = frame
        if site is not None and builder is not None:
            break
        frame = frame.f_back
    file = line = call = None
    if site is not None:
        call = (id(site), site.f_lasti)
        _last_creation[id(site)] = _clock()
        builder_origin = _origins.get(builder) if builder is not None else None
        # A submodule a library module builds for itself (MultiheadAttention inside
        # TransformerEncoderLayer) resolves to the same user call as its builder:
        # that line belongs to the builder only.
        if builder_origin is None or builder_origin.call != call:
            file, line = _abspath(site.f_code.co_filename), site.f_lineno
    _origins[module] = Origin(file, line, weakref.ref(builder) if builder is not None else None, call)
    with _created_lock:
        _created.append(weakref.ref(module))
    for listener in _listeners:
        listener()


_module_cls: type | None = None


def _is_module(obj: Any) -> bool:
    return _module_cls is not None and isinstance(obj, _module_cls)


def _patch_module_init(module_mod: types.ModuleType) -> None:
    """Wrap ``nn.Module.__init__`` once (idempotent)."""
    global _module_cls, _library_dirs
    cls = module_mod.Module
    _module_cls = cls
    torch_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(module_mod.__file__)))) + os.sep
    _library_dirs = (PACKAGE_DIR, torch_dir)
    original = cls.__init__
    if getattr(original, "__hookscope_original__", None) is not None:
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            _record_creation(self, sys._getframe(1))
        except Exception:  # never break the user's model construction
            pass

    __init__.__hookscope_original__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Patches ``nn.Module.__init__`` right after ``torch.nn.modules.module`` is executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TORCH_MODULE_FILE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        try:
            _patch_module_init(module)
        except Exception:
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def install_creation_hook() -> bool:
    """Start recording module creation; returns True when torch.nn is already imported."""
    loaded = sys.modules.get(_TORCH_MODULE_FILE)
    if loaded is not None and hasattr(loaded, "Module"):
        _patch_module_init(loaded)
        return True
    if not any(isinstance(f, _TorchImportWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchImportWatcher())
    return False


def origin_of(module: Any) -> Origin | None:
    """The recorded creation site of a module (None when created before discovery started)."""
    try:
        return _origins.get(module)
    except TypeError:
        return None


# ---------------------------------------------------------------------------
# Source fallback: the parent class's code, read with ast.


@functools.lru_cache(maxsize=512)
def _class_assignments(cls: type) -> tuple[str | None, dict[str, ast.expr]]:
    """``{attribute: value node}`` for ``self.<attr> = value`` and ``add_module`` calls in a class."""
    try:
        file = inspect.getsourcefile(cls)
        lines, start = inspect.getsourcelines(cls)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None, {}
    ast.increment_lineno(tree, start - 1)
    found: dict[str, ast.expr] = {}
    methods = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    methods.sort(key=lambda n: n.name != "__init__")  # __init__ wins over helpers
    for method in methods:
        for node in ast.walk(method):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        found.setdefault(target.attr, node.value)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_module", "register_module")
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.setdefault(node.args[0].value, node.args[1])
    return (os.path.abspath(file) if file else None), found


def _user_class(cls: type) -> bool:
    try:
        file = inspect.getsourcefile(cls)
    except TypeError:
        return False
    return bool(file) and not _is_library_file(os.path.abspath(file))


def _source_assignment(parent: Any, attr: str) -> tuple[str, ast.expr] | None:
    for cls in type(parent).__mro__:
        if cls is object or not _user_class(cls):
            continue
        file, found = _class_assignments(cls)
        if file and attr in found:
            return file, found[attr]
    return None


def _container_entries(node: ast.expr) -> list[ast.expr] | None:
    """The entries of ``nn.Sequential(a, b)`` or ``nn.ModuleList([a, b])`` literals, in order."""
    if not isinstance(node, ast.Call):
        return None
    if node.args and all(not isinstance(a, ast.Starred) for a in node.args) and len(node.args) > 1:
        return list(node.args)
    if len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, (ast.List, ast.Tuple)):
            return list(arg.elts)
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
            return [arg.elt]  # every element comes from the same line
        if isinstance(arg, ast.Call) or isinstance(arg, ast.Name):
            return [arg]
    return None


def _dict_entry(node: ast.expr, key: str) -> ast.expr | None:
    """The value for ``key`` in an ``nn.ModuleDict({"key": layer, ...})`` literal."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
        for k, v in zip(node.args[0].keys, node.args[0].values):
            if isinstance(k, ast.Constant) and k.value == key:
                return v
    return None


def _fallback_location(
    parent: Any, grandparent: Any, parent_attr: str | None, attr: str
) -> tuple[str | None, int | None]:
    found = _source_assignment(parent, attr)
    if found is not None:
        return found[0], found[1].lineno
    # An entry of a container literal: look up the container in its own parent.
    if grandparent is not None and parent_attr is not None and not attr.isdigit():
        container = _source_assignment(grandparent, parent_attr)
        entry = _dict_entry(container[1], attr) if container is not None else None
        if entry is not None:
            return container[0], entry.lineno
    if grandparent is not None and parent_attr is not None and attr.isdigit():
        container = _source_assignment(grandparent, parent_attr)
        if container is not None:
            entries = _container_entries(container[1])
            if entries:
                index = int(attr)
                entry = entries[index] if index < len(entries) else (entries[0] if len(entries) == 1 else None)
                if entry is not None:
                    return container[0], entry.lineno
    return None, None


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
        n
        for n, m in named
        if type(m).__name__ == "OptimizedModule" or getattr(m, "_compiled_call_impl", None) is not None
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
        return _fallback_location(parent, grandparent, parent_attr if parent_name else None, attr)
    except Exception:
        return None, None


# ---------------------------------------------------------------------------
# Tracking roots.


@dataclass
class _Root:
    model_id: str
    ref: weakref.ref
    signature: tuple
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

    def __init__(self, on_added: Callable[[str, Any, dict], None], on_removed: Callable[[str], None]) -> None:
        self._on_added = on_added
        self._on_removed = on_removed
        self._lock = threading.RLock()
        self._roots: dict[int, _Root] = {}
        self._candidates: list[tuple[weakref.ref, float]] = []
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
        _listeners.append(self._arm_first_forward_flush)
        # When the hook is in place before torch loads, every module is recorded
        # as it is created and no gc scan is needed.
        self._scanned = not install_creation_hook()

    def stop(self) -> None:
        """Stop reporting (the creation wrapper stays: it is process-wide and cheap)."""
        if self._arm_first_forward_flush in _listeners:
            _listeners.remove(self._arm_first_forward_flush)
        self._disarm()

    def forget_listener(self) -> None:
        """Stop arming the first-forward flush, without locks (safe right after fork)."""
        if self._arm_first_forward_flush in _listeners:
            _listeners.remove(self._arm_first_forward_flush)

    def roots(self) -> list[tuple[str, Any, dict]]:
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
        if sys.modules.get(_TORCH_MODULE_FILE) is None:
            return True
        age = self.MIN_AGE_S if min_age is None else min_age
        if not self._lock.acquire(blocking):
            return False
        try:
            if not self._scanned:
                self._scanned = True
                install_creation_hook()
                self._scan_existing()
            with _created_lock:
                fresh = list(_created)
                _created.clear()
            now = _clock()
            self._candidates.extend((ref, now) for ref in fresh)
            building = _modules_under_construction(current_stack)
            inside_building = _descendants(building)
            ready: list[Any] = []
            waiting: list[tuple[weakref.ref, float]] = []
            complete = True
            for ref, born in self._candidates:
                module = ref()
                if module is None:
                    continue
                if module in building or _built_inside(module, building) or id(module) in inside_building:
                    complete = False
                    waiting.append((ref, born))
                elif now - born < age or (age > 0 and _creator_still_at_work(module, now, age)):
                    waiting.append((ref, born))
                elif _worth_reporting(module):
                    ready.append(module)
            # A layer that is already inside a module still waiting goes with it, later.
            held = _descendants(m for m in (ref() for ref, _ in waiting) if m is not None)
            if held:
                waiting += [(weakref.ref(m), now) for m in ready if id(m) in held]
                ready = [m for m in ready if id(m) not in held]
            self._candidates = waiting
            _forget_old_creations(now)
            self._update_roots(ready)
            return complete
        finally:
            self._lock.release()

    def _scan_existing(self) -> None:
        cls = _module_cls or getattr(sys.modules[_TORCH_MODULE_FILE], "Module", None)
        if cls is None:
            return
        now = _clock() - self.MIN_AGE_S
        # type() rather than isinstance(): no __class__ lookups on lazy proxies.
        found = [o for o in gc.get_objects() if issubclass(type(o), cls)]
        self._candidates.extend((weakref.ref(m), now) for m in found)

    def _update_roots(self, ready: list[Any], check_structure: bool = False) -> None:
        known = {key: root.ref() for key, root in self._roots.items()}
        for key, module in known.items():
            if module is None:
                self._on_removed(self._roots.pop(key).model_id)
        known = {key: m for key, m in known.items() if m is not None}
        ready = [m for m in ready if id(m) not in known]
        if not ready and not check_structure:
            return  # nothing new: no need to walk the models
        candidates = list(known.values()) + ready
        descendants: set[int] = set()
        for module in candidates:
            try:
                descendants.update(id(m) for m in module.modules() if m is not module)
            except RuntimeError:  # a dict changed while the training thread edits the model
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

    def _describe(self, root: _Root, module: Any) -> dict:
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


def _signature(module: Any) -> tuple:
    try:
        return tuple((name, id(m)) for name, m in module.named_modules())
    except RuntimeError:
        return ()


def _creator_still_at_work(module: Any, now: float, age: float) -> bool:
    """Whether the code that created ``module`` created another module less than ``age`` ago:
    layers made one after another (a list of 2,000 ``Linear``) are parts of a model being put
    together, not models of their own, until that code has been quiet for ``age``."""
    origin = origin_of(module)
    if origin is None or origin.call is None:
        return False
    last = _last_creation.get(origin.call[0])
    return last is not None and now - last < age


def _forget_old_creations(now: float, keep_s: float = 60.0) -> None:
    for frame_id, at in list(_last_creation.items()):
        if now - at > keep_s:
            _last_creation.pop(frame_id, None)


def _descendants(modules: Iterable[Any]) -> set[int]:
    """ids of the modules inside these (a container being filled, a model not reported yet)."""
    out: set[int] = set()
    for module in modules:
        try:
            out.update(id(m) for m in module.modules() if m is not module)
        except (RuntimeError, AttributeError):  # half-initialised, or its dict changes meanwhile
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


def _modules_under_construction(current_stack: bool) -> set:
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
                if _is_module(obj):
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

    def __iter__(self) -> Any:
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
        if value is module and not key.startswith("_"):
            return key
    return None
