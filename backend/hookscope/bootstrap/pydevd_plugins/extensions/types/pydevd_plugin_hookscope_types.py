"""pydevd type plugin: tensors and modules as one cheap line in Variables, Watch, hover and the console.

pydevd (debugpy) builds a value's text from ``repr``, which for a tensor
formats its data (debugpy #1660, #1494, #1191: seconds to minutes on big or
CUDA tensors). pydevd imports every ``pydevd_plugins.extensions.**.pydevd_plugin*``
module on ``sys.path`` and asks each ``StrPresentationProvider`` /
``TypeResolveProvider`` whether it handles a type; these ones handle
``torch.Tensor`` (line + children from ``hookscope.debugger.tensor_repr``),
``torch.nn.Module`` (class and parameter count) and tuples, lists and dicts
that hold tensors (``grad_output`` is a tuple): one line of their tensors'
summaries. A container without a tensor gets debugpy's usual text (``get_str``
returns None), so this plugin answers for every tuple, list and dict but only
changes the ones with tensors.

They never import torch themselves (a program that never did pays nothing),
never raise into the debugger, and step aside when ``HOOKSCOPE_TENSOR_VIEW=0``
(the extension's ``hookscope.tensorPresentation`` setting).
"""

import os
import sys

from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider, TypeResolveProvider

__all__ = ["HookscopeTensorStr", "HookscopeTensorResolver"]

_tensor_repr = None
_import_failed = False


def _enabled():
    return os.environ.get("HOOKSCOPE_TENSOR_VIEW", "1").strip().lower() not in ("0", "false", "off", "no")


def _repr_module():
    """``hookscope.debugger.tensor_repr``, imported once torch is there; None when it cannot be."""
    global _tensor_repr, _import_failed
    if _tensor_repr is None and not _import_failed:
        try:
            try:
                import hookscope_boot
            except ImportError:  # the bootstrap folder is not on sys.path (attach by path): find it
                here = os.path.dirname(os.path.abspath(__file__))
                sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
                import hookscope_boot
            hookscope_boot.use_own_hookscope()
            from hookscope.debugger import tensor_repr

            _tensor_repr = tensor_repr
        except Exception:
            _import_failed = True  # debugpy's default presentation stays
    return _tensor_repr


_CONTAINERS = (tuple, list, dict)


def _kind(type_object):
    """'tensor', 'module' or None, without importing torch."""
    torch = sys.modules.get("torch")
    if torch is None or not _enabled():
        return None
    try:
        if issubclass(type_object, torch.Tensor):
            return "tensor"
        nn = getattr(torch, "nn", None)
        if nn is not None and issubclass(type_object, nn.Module):
            return "module"
    except Exception:
        return None
    return None


class HookscopeTensorStr(StrPresentationProvider):
    """The one-line text of tensors and modules."""

    def can_provide(self, type_object, type_name):
        if type_object in _CONTAINERS:
            # pydevd caches this answer per type, maybe before the program imports torch:
            # say yes now and decide per value in get_str.
            return _enabled()
        return _kind(type_object) is not None and _repr_module() is not None

    def get_str(self, val):
        if type(val) in _CONTAINERS:
            return self._container_str(val)
        try:
            tr = _repr_module()
            if _kind(type(val)) == "module":
                return tr.module_line(val)
            return tr.tensor_line(val)
        except Exception:
            return f"<{type(val).__name__}>"

    def _container_str(self, val):
        """The container's line when it holds tensors; None (debugpy's own text) otherwise."""
        if "torch" not in sys.modules:
            return None
        tr = _repr_module()
        return tr.container_line(val) if tr is not None else None


class HookscopeTensorResolver(TypeResolveProvider):
    """What expanding a tensor shows: metadata, grad, grad_fn, a few slices; never the whole data."""

    def can_provide(self, type_object, type_name):
        return _kind(type_object) == "tensor" and _repr_module() is not None

    def _children(self, obj):
        try:
            return _repr_module().tensor_children(obj)
        except Exception as exc:
            return [("error", f"<{type(exc).__name__}>", None)]

    def get_contents_debug_adapter_protocol(self, obj, fmt=None):
        return self._children(obj)

    def get_dictionary(self, obj):
        return {name: value for name, value, _ in self._children(obj)}

    def resolve(self, var, attribute):
        for name, value, _ in self._children(var):
            if name == attribute:
                return value
        return None
