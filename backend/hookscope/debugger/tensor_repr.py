"""Cheap one-line presentations of tensors and modules for the debugger's own views.

The Variables view, Watch, hover and the Debug Console build each value's
text from ``repr`` by default, which for a tensor formats (and so copies to
the host) the data: seconds or minutes on a big or CUDA tensor. Here a
tensor becomes one line such as
``tensor[16, 64, 56, 56] f32 cpu μ=0.12 σ=0.98 [-3.1, 4.2] nan!3``, computed
by ``hookscope.hooks.summaries`` on the tensor's device with one small transfer;
tensors above ``EXACT_LIMIT`` elements are summarised from an on-device
sample of ``SAMPLE_SIZE`` elements, gathered by index so that no copy of a
non-contiguous tensor is made. ``tensor_children`` lists what expanding a
tensor shows (metadata, grad, a few slices), never the whole data.
``container_line`` does the same for a tuple, list or dict holding tensors
(``grad_input``, ``grad_output``, ``inputs`` are tuples): its tensors as
lines, a bounded number of items and levels, the rest elided.

Nothing here raises: every function falls back to a plain short line. The
pydevd plugin (``bootstrap/pydevd_plugins/extensions/types``) imports this
module only once the program itself has imported torch.
"""

from __future__ import annotations

import itertools
import math
import os
import warnings
from typing import Any

import torch

from hookscope.hooks import summaries

ENV_SWITCH = "HOOKSCOPE_TENSOR_VIEW"
"""``HOOKSCOPE_TENSOR_VIEW=0`` turns the presentation off (debugpy's default returns)."""

EXACT_LIMIT = 1 << 18
"""Tensors with at most this many elements get exact statistics."""

SAMPLE_SIZE = 1 << 16
"""Elements sampled (on the tensor's device) from a larger tensor."""

MAX_SLICES = 3
"""Sub-tensors ``[0]``, ``[1]``... listed when a tensor is expanded (plus ``[-1]``)."""

HEAD_VALUES = 10
"""Values listed for a 1-D tensor (or the first row of a bigger one) when expanded."""

INLINE_VALUES = 8
"""Tensors with at most this many elements show their values in the line itself."""

CONTAINER_ITEMS = 8
"""Items of a tuple, list or dict shown in its line; the rest are counted (``…+12``)."""

CONTAINER_DEPTH = 2
"""Containers nested deeper than this inside a container's line show as ``[…3]``."""

CONTAINER_SUMMARIES = 8
"""Tensors of one container line summarised (a device sync each); later ones show shape, dtype, device."""

CONTAINER_SCALAR_CHARS = 40
"""Numbers, strings, dtypes... are shown by a repr cut to this length; other objects by class."""

CONTAINERS = (tuple, list, dict)
"""The exact types ``container_line`` presents (subclasses such as namedtuples keep debugpy's text)."""

_SEED = 0x5EED
_FALSE = ("0", "false", "off", "no")

_SHORT_DTYPES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


def enabled() -> bool:
    """Whether the presentation is on (the extension's ``hookscope.tensorPresentation`` setting)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in _FALSE


def short_dtype(dtype: torch.dtype) -> str:
    return _SHORT_DTYPES.get(dtype) or str(dtype).removeprefix("torch.")


def fmt(x: float) -> str:
    """Four significant digits, no trailing noise: 0.1234, 1.235e+05, -3."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    return f"{x:.4g}"


def _header(t: torch.Tensor) -> str:
    shape = ", ".join(str(s) for s in t.shape)
    head = f"tensor[{shape}]" if t.dim() else "tensor"
    return f"{head} {short_dtype(t.dtype)} {t.device}"


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain tensor, so a subclass's ``__torch_function__`` (or slow ``__repr__``) is not involved."""
    if type(t) in (torch.Tensor, torch.nn.Parameter):
        return t
    return t.as_subclass(torch.Tensor)


def _is_wrapper_subclass(t: torch.Tensor) -> bool:
    # FakeTensor, DTensor, FunctionalTensor...: their data is elsewhere or not there at all.
    dispatch = getattr(type(t), "__torch_dispatch__", None)
    base = getattr(torch.Tensor, "__torch_dispatch__", None)
    return dispatch is not None and getattr(dispatch, "__func__", dispatch) is not getattr(base, "__func__", base)


def sample(t: torch.Tensor, size: int = SAMPLE_SIZE) -> torch.Tensor:
    """A seeded random sample of ``size`` elements, gathered on ``t``'s device without copying ``t``.

    One random index per dimension (advanced indexing reads only the chosen
    elements, whatever the strides), so a 1 GB non-contiguous tensor costs
    ``size`` reads, not a 1 GB ``reshape`` copy.
    """
    gen = torch.Generator(device=t.device)
    gen.manual_seed(_SEED)
    index = tuple(torch.randint(n, (size,), generator=gen, device=t.device) for n in t.shape)
    return t[index]


def tensor_summary(t: torch.Tensor, path: str = "") -> dict[str, Any]:
    """A ``TensorSummary`` of ``t``: exact up to ``EXACT_LIMIT`` elements, sampled above.

    The summary of a sample keeps the tensor's own shape and numel and gets
    ``sampled`` and ``sampleSize``; its NaN/Inf counts are those of the sample.
    """
    x = _plain(t).detach()
    numel = x.numel()
    if numel <= EXACT_LIMIT or summaries._unsupported(x) is not None or x.dim() == 0:
        return summaries.summarize(x, path)
    with torch.no_grad():
        picked = sample(x)
    summary = summaries.summarize(picked, path)
    summary.update(shape=list(x.shape), numel=int(numel), sampled=True, sampleSize=int(picked.numel()))
    return summary


def _stats_text(summary: dict[str, Any]) -> str:
    if summary.get("note"):
        return f"({summary['note'].split(':')[0]})"
    parts: list[str] = []
    if "mean" in summary:
        parts.append(f"μ={fmt(summary['mean'])}")
        if "std" in summary:
            parts.append(f"σ={fmt(summary['std'])}")
        parts.append(f"[{fmt(summary['min'])}, {fmt(summary['max'])}]")
    sampled = bool(summary.get("sampled"))
    n = summary.get("sampleSize") or summary.get("numel") or 1
    for key, label in (("nan", "nan"), ("posinf", "+inf"), ("neginf", "-inf")):
        count = int(summary.get(key) or 0)
        if count:
            parts.append(f"{label}!~{fmt(100.0 * count / n)}%" if sampled else f"{label}!{count}")
    if "mean" not in summary and not any(summary.get(k) for k in ("nan", "posinf", "neginf")):
        parts.append("no finite values")
    if sampled:
        parts.append(f"(sampled {summary.get('sampleSize')})")
    return " ".join(parts)


def _inline_values(t: torch.Tensor) -> str:
    values = t.detach().reshape(-1).tolist()
    return "x=[" + ", ".join(fmt(v) if isinstance(v, float) else str(v) for v in values) + "]"


def tensor_line(t: Any) -> str:
    """The one-line presentation of a tensor; never raises, never formats the data."""
    try:
        header = _header(t)
    except Exception:
        return f"<{type(t).__name__}>"
    try:
        extras: list[str] = []
        if t.requires_grad:
            extras.append("grad")
        if _is_wrapper_subclass(t) or t.is_meta or t.device.type == "meta":
            return " ".join([header, *extras, f"({type(t).__name__})" if not t.is_meta else "(meta)"])
        x = _plain(t)
        if x.numel() == 0:
            return " ".join([header, *extras, "empty"])
        if x.numel() <= INLINE_VALUES and x.layout == torch.strided and not x.is_quantized:
            return " ".join([header, *extras, _inline_values(x)])
        return " ".join([header, *extras, _stats_text(tensor_summary(x))])
    except Exception as exc:  # the debugger must always get a line
        return f"{header} (no stats: {type(exc).__name__})"


def holds_tensor(value: Any, depth: int = 0) -> bool:
    """Whether a tensor is among the items ``container_line`` would show (bounded: never a whole big list)."""
    for item in _shown_items(value):
        if isinstance(item, torch.Tensor):
            return True
        if type(item) in CONTAINERS and depth < CONTAINER_DEPTH and holds_tensor(item, depth + 1):
            return True
    return False


def container_line(value: Any) -> str | None:
    """``(tensor[16, 16, 32, 32] f32 cpu μ=… σ=… [-1, 1], None)``: a tuple, list or dict as one line.

    None when ``value`` is not one of ``CONTAINERS`` or holds no tensor among the
    items it would show (debugpy's own text stays). Never raises.
    """
    try:
        if type(value) not in CONTAINERS or not holds_tensor(value):
            return None
        return _ContainerLine().text(value, 0)
    except Exception:
        return None


def _shown_items(value: Any) -> list[Any]:
    """The first ``CONTAINER_ITEMS`` items (dict: values) of a container; [] for anything else."""
    kind = type(value)
    if kind is dict:
        return list(itertools.islice(value.values(), CONTAINER_ITEMS))
    if kind is tuple or kind is list:
        return list(value[:CONTAINER_ITEMS])
    return []


class _ContainerLine:
    """One container's line; counts the tensors summarised so far, so the line stays cheap."""

    def __init__(self) -> None:
        self.summaries_left = CONTAINER_SUMMARIES

    def text(self, value: Any, depth: int) -> str:
        kind = type(value)
        brackets: dict[type, tuple[str, str]] = {tuple: ("(", ")"), list: ("[", "]"), dict: ("{", "}")}
        opening, closing = brackets[kind]
        if depth > CONTAINER_DEPTH:
            return f"{opening}…{len(value)}{closing}"
        if kind is dict:
            pairs = itertools.islice(value.items(), CONTAINER_ITEMS)
            parts = [f"{_short_repr(k)}: {self.item(v, depth)}" for k, v in pairs]
        else:
            parts = [self.item(v, depth) for v in value[:CONTAINER_ITEMS]]
        if len(value) > CONTAINER_ITEMS:
            parts.append(f"…+{len(value) - CONTAINER_ITEMS}")
        trailing = "," if kind is tuple and len(value) == 1 else ""
        return f"{opening}{', '.join(parts)}{trailing}{closing}"

    def item(self, value: Any, depth: int) -> str:
        if isinstance(value, torch.Tensor):
            if self.summaries_left <= 0:
                try:
                    return _header(value)
                except Exception:
                    return f"<{type(value).__name__}>"
            self.summaries_left -= 1
            return tensor_line(value)
        if type(value) in CONTAINERS:
            return self.text(value, depth + 1)
        if isinstance(value, torch.nn.Module):
            return f"<{type(value).__name__}>"  # a module's repr prints its whole tree
        return _short_repr(value)


_PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def _short_repr(value: Any) -> str:
    """A cut repr of plain values; other objects by class only (their repr may format tensors)."""
    if not isinstance(value, _PLAIN_TYPES):
        return f"<{type(value).__name__}>"
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= CONTAINER_SCALAR_CHARS else text[: CONTAINER_SCALAR_CHARS - 1] + "…"


def module_line(m: Any) -> str:
    """``Conv2d · 448 params · cpu f32 · train``: class, parameter count, where, mode; never raises."""
    try:
        name = type(m).__name__
        total = trainable = 0
        first = None
        for p in m.parameters():
            n = p.numel()
            total += n
            if p.requires_grad:
                trainable += n
            if first is None:
                first = p
        parts = [name, f"{_count(total)} params" + (f" ({_count(trainable)} trainable)" if trainable != total else "")]
        if first is not None:
            parts.append(f"{first.device} {short_dtype(first.dtype)}")
        parts.append("train" if m.training else "eval")
        return " · ".join(parts)
    except Exception:
        return f"<{type(m).__name__}>"


def _count(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def tensor_children(t: Any) -> list[tuple[str, Any, str | None]]:
    """``(name, value, evaluateName suffix)`` shown when a tensor is expanded; never raises.

    Metadata, ``grad`` (a tensor, shown by ``tensor_line`` in turn), ``grad_fn``,
    a few sub-tensors along the first axis (views: nothing is copied) or, for
    a 1-D tensor, its first values as a list.
    """
    children: list[tuple[str, Any, str | None]] = []

    def add(name: str, get: Any, suffix: str | None) -> None:
        try:
            children.append((name, get(), suffix))
        except Exception as exc:
            children.append((name, f"<{type(exc).__name__}: {exc}>"[:200], None))

    add("shape", lambda: tuple(t.shape), ".shape")
    add("dtype", lambda: t.dtype, ".dtype")
    add("device", lambda: t.device, ".device")
    add("requires_grad", lambda: t.requires_grad, ".requires_grad")
    add("is_leaf", lambda: t.is_leaf, ".is_leaf")
    add("grad", lambda: _grad(t), ".grad")
    add("grad_fn", lambda: t.grad_fn, ".grad_fn")
    add("stats", lambda: _stats_dict(t), None)
    try:
        dim = t.dim()
        if dim == 1 and t.layout == torch.strided and not _is_wrapper_subclass(t) and not t.is_meta:
            n = min(HEAD_VALUES, t.shape[0])
            add(f"[:{n}]", lambda: _plain(t)[:n].detach().tolist(), f"[:{n}]")
        elif dim >= 2:
            first = t.shape[0]
            for i in range(min(MAX_SLICES, first)):
                add(f"[{i}]", lambda i=i: t[i], f"[{i}]")
            if first > MAX_SLICES:
                add("[-1]", lambda: t[-1], "[-1]")
    except Exception:
        pass
    return children


def _grad(t: torch.Tensor) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # .grad of a non-leaf warns; asking is harmless here
        return t.grad


def _stats_dict(t: torch.Tensor) -> dict[str, Any]:
    summary = tensor_summary(t)
    keep = (
        "numel",
        "mean",
        "std",
        "min",
        "max",
        "absmax",
        "norm",
        "zeroFrac",
        "nan",
        "posinf",
        "neginf",
        "sampled",
        "sampleSize",
        "note",
    )
    return {k: summary[k] for k in keep if k in summary}
