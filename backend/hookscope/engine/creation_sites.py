"""Where each ``nn.Module`` was created: a thin wrapper around ``nn.Module.__init__``.

Installed as soon as ``torch.nn`` is imported, through an import hook, so the bootstrap never
imports torch itself; when torch is already there it is wrapped at once. The wrapper records the
first frame outside torch, Hookscope and the module's own constructor chain (the line the editor
maps a ``self.conv1 = nn.Conv2d(...)`` to) and the module whose constructor built this one, keeps
a weak list of the modules made since discovery last looked, and tells its listeners. It runs on
the creating thread, so it stays cheap and never raises into the user's model construction.
Nothing runs per forward call. Only weak references are kept.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hookscope import PACKAGE_DIR

TORCH_MODULE_FILE = "torch.nn.modules.module"
"""The torch module that defines ``nn.Module``: once it is in ``sys.modules``, models can exist."""


@dataclass(frozen=True)
class Origin:
    """Where a module was created."""

    file: str | None
    """Absolute source file of the creating line; None for a library-internal submodule."""
    line: int | None
    """1-based line of the creating call."""
    builder: weakref.ref[Any] | None = None
    """The module whose constructor created this one (None at top level)."""
    call: tuple[int, int] | None = None
    """(id of the creating user frame, its f_lasti): the exact call that created it."""


_origins: weakref.WeakKeyDictionary[Any, Origin] = weakref.WeakKeyDictionary()
_created: list[weakref.ref[Any]] = []
"""Modules created since the last poll (weak)."""
_created_lock = threading.Lock()
_abs_cache: dict[str, str] = {}
_library_dirs: tuple[str, ...] = (PACKAGE_DIR,)
_listeners: list[Callable[[], None]] = []
"""Called (on the creating thread) after a module was recorded: arms the first-forward flush."""
_last_creation: dict[int, float] = {}
"""id of a user frame that created modules -> when it last did (a model being put together)."""
clock = time.monotonic
"""The one clock of creation times and discovery's ages (tests replace it)."""


def _abspath(filename: str) -> str:
    path = _abs_cache.get(filename)
    if path is None:
        path = filename if filename.startswith("<") else os.path.abspath(filename)
        _abs_cache[filename] = path
    return path


def is_library_file(filename: str) -> bool:
    """Whether an absolute path is torch's or Hookscope's own code (any room), not the user's."""
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
        if builder is None and is_init and is_module(self_obj):
            builder = self_obj
        if site is None and not is_library_file(_abspath(code.co_filename)):
            site = frame
        if site is not None and builder is not None:
            break
        frame = frame.f_back
    file = line = call = None
    if site is not None:
        call = (id(site), site.f_lasti)
        _last_creation[id(site)] = clock()
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
"""``nn.Module``, once the wrapper is installed."""


def is_module(obj: Any) -> bool:
    """Whether ``obj`` is an ``nn.Module`` (False before torch.nn was imported)."""
    return _module_cls is not None and isinstance(obj, _module_cls)


def _patch_module_init(module_mod: types.ModuleType) -> None:
    """Wrap ``nn.Module.__init__`` once (idempotent)."""
    global _module_cls, _library_dirs
    cls = module_mod.Module
    _module_cls = cls
    if module_mod.__file__ is not None:  # torch's own folder: modules it builds for itself are not the user's
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

    # The mark that this wrapper is Hookscope's (``__wrapped__`` could be anyone's): never wrapped twice.
    __init__.__dict__["__hookscope_original__"] = original
    cls.__init__ = __init__


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Patches ``nn.Module.__init__`` right after ``torch.nn.modules.module`` is executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TORCH_MODULE_FILE:
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
    loaded = sys.modules.get(TORCH_MODULE_FILE)
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


def add_listener(listener: Callable[[], None]) -> None:
    """Call ``listener()`` (on the creating thread) after each module is recorded."""
    _listeners.append(listener)


def remove_listener(listener: Callable[[], None]) -> None:
    """Stop calling ``listener`` (no lock taken: safe right after fork)."""
    if listener in _listeners:
        _listeners.remove(listener)


def take_created() -> list[weakref.ref[Any]]:
    """The modules created since the last call (weak), forgetting them here."""
    with _created_lock:
        fresh = list(_created)
        _created.clear()
    return fresh


def module_class() -> type | None:
    """``nn.Module`` once the wrapper is installed (None before torch.nn was imported)."""
    return _module_cls


def creator_still_at_work(module: Any, now: float, age: float) -> bool:
    """Whether the code that created ``module`` created another module less than ``age`` ago:
    layers made one after another (a list of 2,000 ``Linear``) are parts of a model being put
    together, not models of their own, until that code has been quiet for ``age``."""
    origin = origin_of(module)
    if origin is None or origin.call is None:
        return False
    last = _last_creation.get(origin.call[0])
    return last is not None and now - last < age


def forget_old_creations(now: float, keep_s: float = 60.0) -> None:
    """Drop the creation times of frames quiet for ``keep_s`` (their ids may be reused)."""
    for frame_id, at in list(_last_creation.items()):
        if now - at > keep_s:
            _last_creation.pop(frame_id, None)
