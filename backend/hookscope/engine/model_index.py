"""Which layers a breakpoint spec names: the backend's one answer to "which layers does this line mean".

``ModelIndex`` knows one model's module names and where each was created (``engine/discovery.py``
saw the ``self.conv1 = nn.Conv2d(...)`` line); ``resolve`` intersects a spec's selectors: name or
glob, class, and file + line, where a line selects the modules defined on it and those called on it
in some module's ``forward`` (``x = self.conv1(x)``, the call forms of
``lsp/analysis/call_targets.py``, shared with the language server's lenses). Breakpoints, the
``resolveLayers`` request (the editor's cursor commands, ``hookscope run``) and the stop's source
line (``call_site``) all ask it.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
import logging
import os
import textwrap
import weakref

from torch import nn

from hookscope.engine.breakpoint_spec import BreakpointSpec
from hookscope.lsp.analysis.call_targets import EVERY_ENTRY, Target, called_target, local_layer_names

log = logging.getLogger("hookscope")


def same_file(a: str, b: str) -> bool:
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


_GLOB_CHARS = set("*?[")


class ModelIndex:
    """Names and source locations of one model's modules, for resolving specs."""

    def __init__(self, model_id: str, model: nn.Module, locations: dict[str, tuple[str, int]] | None = None) -> None:
        self.model_id = model_id
        self._model = weakref.ref(model)
        self.names: list[str] = [name for name, _ in model.named_modules()]
        self._locations = locations

    @property
    def model(self) -> nn.Module | None:
        return self._model()

    def modules(self) -> dict[str, nn.Module]:
        model = self.model
        return dict(model.named_modules()) if model is not None else {}

    def locations(self) -> dict[str, tuple[str, int]]:
        """name → (file, line) where each module was created (discovery computes these)."""
        if self._locations is None:
            self._locations = {}
            try:
                from hookscope.engine import discovery

                by_name = self.modules()
                for name, module in by_name.items():
                    file, line = discovery.location_of(module, name, by_name)
                    if file is not None and line is not None:
                        self._locations[name] = (file, line)
            except Exception as exc:  # discovery absent or failing: name/class specs still work
                log.debug("hookscope: no module locations: %s", exc)
        return self._locations

    def resolve(self, spec: BreakpointSpec) -> list[str]:
        """Qualified names of the modules ``spec`` selects, in named_modules() order."""
        by_name = self.modules()
        selected = list(by_name)
        if spec.layer:
            if _GLOB_CHARS & set(spec.layer):
                selected = [n for n in selected if fnmatch.fnmatchcase(n, spec.layer)]
            else:
                selected = [n for n in selected if n == spec.layer]
        if spec.cls:
            selected = [
                n
                for n in selected
                if type(by_name[n]).__name__ == spec.cls
                or type(by_name[n]).__qualname__ == spec.cls
                or f"{type(by_name[n]).__module__}.{type(by_name[n]).__qualname__}" == spec.cls
            ]
        if spec.file and spec.line:
            at_line = set(self.defined_at(spec.file, spec.line)) | set(self.called_at(spec.file, spec.line))
            selected = [n for n in selected if n in at_line]
        return selected

    def defined_at(self, file: str, line: int) -> list[str]:
        """Modules whose creating line (``self.conv1 = nn.Conv2d(...)``) is file:line."""
        return [n for n, (f, at) in self.locations().items() if at == line and same_file(f, file)]

    def called_at(self, file: str, line: int) -> list[str]:
        """Modules called at file:line inside some module's ``forward`` (``x = self.conv1(x)``)."""
        found: list[str] = []
        for name, module in self.modules().items():
            if not module._modules:
                continue
            source, sites = _call_sites(type(module))
            targets = sites.get(line)
            if not targets or not same_file(source, file):
                continue
            for attr, key in targets:
                child = module._modules.get(attr)
                if child is None:
                    continue
                prefix = f"{name}.{attr}" if name else attr
                if key is None:
                    found.append(prefix)
                elif key == EVERY_ENTRY:
                    found.extend(f"{prefix}.{sub}" for sub in child._modules)
                elif key in child._modules:
                    found.append(f"{prefix}.{key}")
        return found

    def call_site(self, layer: str) -> tuple[str, int] | None:
        """The first line of the nearest ancestor's ``forward`` that calls ``layer`` or its container."""
        by_name = self.modules()
        parts = layer.split(".") if layer else []
        for depth in range(len(parts) - 1, -1, -1):
            ancestor = by_name.get(".".join(parts[:depth]))
            if ancestor is None:
                continue
            source, sites = _call_sites(type(ancestor))
            entry = parts[depth + 1] if depth + 1 < len(parts) else None
            lines = [
                line
                for line, targets in sites.items()
                if any(attr == parts[depth] and key in (None, EVERY_ENTRY, entry) for attr, key in targets)
            ]
            if source and lines:
                return source, min(lines)
        return None


_call_site_cache: dict[type, tuple[str, dict[int, list[Target]]]] = {}


def _call_sites(cls: type) -> tuple[str, dict[int, list[Target]]]:
    """Source file of cls.forward and line → [(child attribute, entry key)] called there.

    The same call forms as the language server's call-site lenses
    (``hookscope.lsp.analysis.call_targets``): ``self.conv1(x)`` (key None),
    ``self.heads["cls"](x)`` / ``self.blocks[2](x)`` (that entry),
    ``self.blocks[i](x)`` and ``for blk in self.blocks: blk(x)`` (every entry:
    ``EVERY_ENTRY``), and each of these through a local name (``b = self.branches;
    b["mix"](h)``).
    """
    cached = _call_site_cache.get(cls)
    if cached is not None:
        return cached
    sites: dict[int, list[Target]] = {}
    try:
        forward = cls.forward  # type: ignore[attr-defined]
        file = inspect.getsourcefile(forward) or ""
        lines, start = inspect.getsourcelines(forward)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (TypeError, OSError, SyntaxError, IndentationError):
        _call_site_cache[cls] = ("", sites)
        return _call_site_cache[cls]
    offset = start - 1
    function = tree.body[0] if tree.body else None
    params = (
        function.args.posonlyargs + function.args.args
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        else []
    )
    if not params:  # not a def with a self parameter (a lambda, an assignment): no call sites
        _call_site_cache[cls] = (file, sites)
        return _call_site_cache[cls]
    assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
    self_name = params[0].arg
    names = local_layer_names(function, self_name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = called_target(node.func, self_name, names)
        if target is None:
            continue
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            sites.setdefault(line + offset, []).append(target)
    _call_site_cache[cls] = (file, sites)
    return _call_site_cache[cls]
