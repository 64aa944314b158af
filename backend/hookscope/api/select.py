"""Choosing layers: by qualified name, glob, module object or class."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable
from typing import Any, Literal

from torch import nn

LayerSpec = Any
"""A name (``"layer1.0.conv1"``), a glob (``"layer*.conv1"``), a module, or a list of them."""


def _is_glob(s: str) -> bool:
    return any(c in s for c in "*?[")


def _type_matches(module: nn.Module, types: tuple[Any, ...]) -> bool:
    for t in types:
        if isinstance(t, str):
            if type(module).__name__ == t or type(module).__qualname__ == t:
                return True
        elif isinstance(module, t):
            return True
    return False


def select_modules(
    model: nn.Module, layers: LayerSpec = None, types: Any = None, default: Literal["leaves", "all", "error"] = "error"
) -> list[tuple[str, nn.Module]]:
    """``[(qualified_name, module)]`` in model order for the layers asked.

    ``layers`` and ``types`` combine (a module matching either is chosen).
    With neither: every leaf module (``default='leaves'``), every module
    (``'all'``), or a ValueError (``'error'``). A name or type matching
    nothing raises a ValueError that suggests close names."""
    named = list(model.named_modules())
    if layers is None and types is None:
        if default == "error":
            raise ValueError("say which layers: a name, a glob like 'layer*.conv1', a module, or types=nn.Conv2d")
        if default == "leaves":
            return [(n, m) for n, m in named if not any(True for _ in m.children())]
        return named

    chosen: set[int] = set()
    if layers is not None:
        specs = [layers] if isinstance(layers, (str, nn.Module)) else list(layers)
        for spec in specs:
            hits = _match(named, spec)
            if not hits:
                raise ValueError(_no_match(named, spec))
            chosen.update(hits)
    if types is not None:
        type_tuple = tuple(types) if isinstance(types, (tuple, list)) else (types,)
        hits = {i for i, (_, m) in enumerate(named) if _type_matches(m, type_tuple)}
        if not hits:
            names = ", ".join(t if isinstance(t, str) else t.__name__ for t in type_tuple)
            raise ValueError(f"no layer of type {names} in {type(model).__name__}")
        chosen.update(hits)
    return [named[i] for i in sorted(chosen)]


def _match(named: list[tuple[str, nn.Module]], spec: Any) -> set[int]:
    if isinstance(spec, nn.Module):
        return {i for i, (_, m) in enumerate(named) if m is spec}
    if not isinstance(spec, str):
        raise TypeError(f"a layer is a name, a glob or a module, not {type(spec).__name__}")
    if _is_glob(spec):
        return {i for i, (n, _) in enumerate(named) if fnmatch.fnmatchcase(n, spec)}
    return {i for i, (n, _) in enumerate(named) if n == spec}


def _no_match(named: Iterable[tuple[str, nn.Module]], spec: Any) -> str:
    if isinstance(spec, nn.Module):
        return f"{type(spec).__name__} module is not part of this model"
    names = [n for n, _ in named if n]
    close = difflib.get_close_matches(str(spec), names, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"no layer named {spec!r}{hint}"


def layer_name(model: nn.Module, layer: Any) -> tuple[str, nn.Module]:
    """The one layer named (or given as a module) -> ``(name, module)``."""
    hits = select_modules(model, layers=layer)
    if len(hits) != 1:
        raise ValueError(f"{layer!r} matches {len(hits)} layers; name exactly one")
    return hits[0]
