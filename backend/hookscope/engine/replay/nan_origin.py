"""The op and the user's line where a non-finite value was born, found during break on NaN's replay.

The sentinel (``nonfinite.py``) finds a bad step for the price of two syncs; its exact
replay names the first layer. Inside that replay only, ``OpTracer`` (a
``TorchFunctionMode``) watches every torch call:

* forward: the first op whose floating output holds NaN/Inf while its inputs were finite
  is where the value was born (``torch.exp``, ``F.cross_entropy``, ``Tensor.__truediv__``);
  an op whose non-finite input is a parameter or buffer names that tensor instead (it was
  bad before this forward: written by the optimizer or outside autograd);
* backward: every op's output ``grad_fn`` is remembered with the op's site; a hook on each
  of those nodes sees the first node whose input gradients turn non-finite while the
  gradients it received were finite, which names the node, the forward op that created it
  and that op's line (what ``detect_anomaly`` prints, at no cost outside the replay).

The site is the user's stack at the call: frames outside torch and Hookscope, innermost
first, library frames (site-packages) flagged; the line shown is the innermost frame of
the user's own code, with a snapshot of that frame's locals so the stop can show them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from hookscope import PACKAGE_DIR
from hookscope.debugger.stop_location import Location, is_internal
from hookscope.hooks.conditions import describe_counts, nonfinite_counts
from hookscope.hooks.summaries import all_finite, tensors_in

_LIBRARY_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
_MAX_FRAMES = 12


@dataclass(frozen=True)
class SourceFrame:
    file: str
    line: int
    function: str
    library: bool

    def label(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


@dataclass
class OpSite:
    """Where a torch op ran: its name and the user's stack at the call."""

    op: str
    stack: list[SourceFrame]
    location: Location | None
    frame_locals: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        own = next((f for f in self.stack if not f.library), None)
        return own.label() if own is not None else "outside the user's code"


@dataclass(repr=False)
class OpOrigin:
    """The birth of the first non-finite value, at op level (``repr``: one line, for the Variables view)."""

    site: OpSite
    phase: str
    """"forward" or "backward"."""
    counts: tuple[int, int, int]
    dtype: str
    shape: list[int]
    node: str | None = None
    """backward: the autograd node whose input gradient went non-finite (``DivBackward0``)."""
    input_index: int | None = None
    """backward: which of the node's inputs got the non-finite gradient."""
    tensor_name: str | None = None
    """a parameter or buffer that was already non-finite (the op only passed it on)."""

    def describe(self) -> str:
        counts = describe_counts(self.counts)
        if self.tensor_name is not None:
            return (
                f"{self.tensor_name}: {counts} — non-finite before this forward (written by the "
                f"optimizer or outside autograd); first used by {self.site.op} at {self.site.where}"
            )
        if self.phase == "backward":
            which = f" (gradient of input {self.input_index})" if self.input_index is not None else ""
            return f"{self.node}{which} → {counts}; its forward op {self.site.op} ran at {self.site.where}"
        return f"{self.site.op} → {counts}, {self.dtype} {self.shape}, at {self.site.where}"

    def __repr__(self) -> str:
        return self.describe()

    def as_fields(self) -> dict[str, Any]:
        """Structured fields for the hit message and ``hookscope run --json``."""
        own = next((f for f in self.site.stack if not f.library), None)
        fields: dict[str, Any] = {
            "op": self.site.op,
            "phase": self.phase,
            "stack": [f"{f.file}:{f.line} {f.function}" for f in self.site.stack],
        }
        if own is not None:
            fields.update(file=own.file, line=own.line, function=own.function)
        if self.node is not None:
            fields["node"] = self.node
        if self.tensor_name is not None:
            fields["tensor"] = self.tensor_name
        return fields


def op_name(func: Callable[..., Any]) -> str:
    """A short, recognisable name: ``torch.exp``, ``F.cross_entropy``, ``Tensor.__truediv__``."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    module = getattr(func, "__module__", None) or ""
    owner, _, short = name.rpartition(".")
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{short or name}"
    if owner in ("TensorBase", "_TensorBase", "Tensor"):
        return f"Tensor.{short}"
    if owner == "_VariableFunctionsClass" or module in ("torch", "torch.functional") or module.startswith("torch._C"):
        return f"torch.{short or name}"
    return f"{module}.{name}" if module else name


def user_site(op: str, skip: int = 1) -> OpSite:
    """The user's stack at this call (innermost first), and the line of the user's own code."""
    stack: list[SourceFrame] = []
    location: Location | None = None
    frame_locals: dict[str, Any] = {}
    frame: FrameType | None = sys._getframe(skip)
    while frame is not None and len(stack) < _MAX_FRAMES:
        file = frame.f_code.co_filename
        if not is_internal(file):
            library = any(part in file for part in _LIBRARY_DIRS)
            stack.append(
                SourceFrame(
                    file,
                    frame.f_lineno or frame.f_code.co_firstlineno,
                    getattr(frame.f_code, "co_qualname", frame.f_code.co_name),  # co_qualname: Python 3.11+
                    library,
                )
            )
            if location is None and not library:
                location = Location(file, stack[-1].line, frame.f_globals)
                frame_locals = dict(frame.f_locals)  # references, not copies: the replay's values
        frame = frame.f_back
    return OpSite(op, stack, location, frame_locals)


_OVERRIDES_PY = torch.overrides.handle_torch_function.__code__.co_filename


def _called_by_hookscope() -> bool:
    """Whether the torch call being traced was made by Hookscope's own checks (the replay's probes).

    The caller is the frame below torch's dispatch (``overrides.py``, present for the torch
    functions written in Python): a probe calls ``Tensor.sum`` itself, while the model's ops
    are called by the user's code or by torch's own modules.
    """
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == _OVERRIDES_PY:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR)


class OpTracer(TorchFunctionMode):
    """Active only during a replay: the first op that produced NaN/Inf, and each op's grad_fn site.

    ``named_tensors`` maps ``id`` of the model's parameters and buffers to their names, so a
    non-finite value that was already in a parameter is named, not blamed on the op.
    """

    def __init__(self, named_tensors: dict[int, str], record_nodes: bool = False) -> None:
        super().__init__()
        self._named = named_tensors
        self._record_nodes = record_nodes
        self.found: OpOrigin | None = None
        self.nodes: dict[Any, OpSite] = {}
        self._looking = True
        """Until the first non-finite output is seen (found, or came in from untraced code)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if (not self._looking and not self._record_nodes) or _called_by_hookscope():
            return out
        outs = [t for t in tensors_in(out) if t.is_floating_point()] if out is not None else []
        if not outs:
            return out
        site: OpSite | None = None
        if self._looking and not all_finite(outs):
            self._looking = False
            site = user_site(op_name(func))
            self.found = self._origin(site, outs, tensors_in((args, kwargs)))
        if self._record_nodes:
            for tensor in outs:
                node = tensor.grad_fn
                if node is not None and node not in self.nodes:
                    self.nodes[node] = site = site or user_site(op_name(func))
        return out

    def _origin(self, site: OpSite, outs: list[torch.Tensor], inputs: list[torch.Tensor]) -> OpOrigin | None:
        bad_inputs = [t for t in inputs if t.is_floating_point() and not all_finite([t])]
        counts = nonfinite_counts(outs)
        first = outs[0]
        origin = OpOrigin(site, "forward", counts, str(first.dtype).replace("torch.", ""), list(first.shape))
        if not bad_inputs:
            return origin
        named = next((self._named[id(t)] for t in bad_inputs if id(t) in self._named), None)
        if named is None:
            return None  # came in from outside the traced code: the layer-level probe says so
        origin.tensor_name = named
        origin.counts = nonfinite_counts([t for t in bad_inputs if self._named.get(id(t)) == named])
        return origin


class NodeWatch:
    """Hooks on the replay's autograd nodes: the first whose input gradients turn non-finite."""

    def __init__(self, sites: dict[Any, OpSite]) -> None:
        self._sites = sites
        self._handles: list[Any] = []
        self.found: OpOrigin | None = None

    def install(self) -> None:
        for node in self._sites:
            self._handles.append(node.register_hook(self._hook(node)))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _hook(self, node: Any) -> Callable[..., None]:
        def hook(grad_inputs: tuple[torch.Tensor | None, ...], grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
            if self.found is not None:
                return
            received = [g for g in grad_outputs if g is not None]
            if not all_finite(received):
                return  # it came in bad: born further down the graph
            for index, grad in enumerate(grad_inputs):
                if grad is not None and grad.is_floating_point() and not all_finite([grad]):
                    self.found = OpOrigin(
                        self._sites[node],
                        "backward",
                        nonfinite_counts([grad]),
                        str(grad.dtype).replace("torch.", ""),
                        list(grad.shape),
                        node=type(node).__name__ if not hasattr(node, "name") else node.name(),
                        input_index=index,
                    )
                    return

        return hook


def named_tensors(root: torch.nn.Module) -> dict[int, str]:
    """``id`` → qualified name of every parameter and buffer of ``root``."""
    names = {id(p): n for n, p in root.named_parameters()}
    names.update({id(b): n for n, b in root.named_buffers()})
    return names
