"""Unit tests of the tensor presentation (hookscope.debugger.tensor_repr), the pydevd type plugin and
hookscope.debugger.inspector (publish / answer / release), without a debugger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hookscope import bootstrap
from hookscope.debugger import inspector, tensor_repr
from hookscope.link.protocol_vocabulary import ProtocolError

PYDEVD = Path(__import__("debugpy").__file__).parent / "_vendored" / "pydevd"


def test_line_is_the_summary_with_nonfinite_counts():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t[0, 1] = float("nan")
    t[2, 2] = float("inf")
    line = tensor_repr.tensor_line(t)
    finite = t[torch.isfinite(t)]
    assert line.startswith("tensor[3, 4] f32 cpu μ=")
    assert f"μ={tensor_repr.fmt(float(finite.mean()))}" in line
    assert f"[{tensor_repr.fmt(float(finite.min()))}, {tensor_repr.fmt(float(finite.max()))}]" in line
    assert "nan!1" in line and "+inf!1" in line and "-inf" not in line


def test_small_scalar_empty_and_odd_tensors():
    assert tensor_repr.tensor_line(torch.tensor([1.5, -2.0])) == "tensor[2] f32 cpu x=[1.5, -2]"
    assert tensor_repr.tensor_line(torch.tensor(3)) == "tensor i64 cpu x=[3]"
    assert tensor_repr.tensor_line(torch.zeros(0, 3)) == "tensor[0, 3] f32 cpu empty"
    assert tensor_repr.tensor_line(torch.ones(4, 4).to_sparse()).endswith("(sparse_coo tensor)")
    assert tensor_repr.tensor_line(torch.empty(5, 5, device="meta")) == "tensor[5, 5] f32 meta (meta)"
    assert " grad " in tensor_repr.tensor_line(torch.randn(4, 4, requires_grad=True))
    bf = tensor_repr.tensor_line((torch.ones(10, 10) * 2).bfloat16())
    assert bf == "tensor[10, 10] bf16 cpu μ=2 σ=0 [2, 2]"


def test_big_tensors_are_sampled_without_copying_a_transposed_view():
    big = torch.randn(1024, 1024).t()  # not contiguous: a reshape would copy 4 MB
    summary = tensor_repr.tensor_summary(big)
    assert summary["sampled"] is True and summary["sampleSize"] == tensor_repr.SAMPLE_SIZE
    assert summary["shape"] == [1024, 1024] and summary["numel"] == 1024 * 1024
    assert abs(summary["mean"]) < 0.05 and 0.95 < summary["std"] < 1.05
    assert tensor_repr.tensor_line(big).endswith(f"(sampled {tensor_repr.SAMPLE_SIZE})")
    # The sample is deterministic (seeded): the same line every time the view refreshes.
    assert tensor_repr.tensor_line(big) == tensor_repr.tensor_line(big)


def test_subclass_repr_is_never_called_and_failures_fall_back():
    class Loud(torch.Tensor):
        def __repr__(self, *args, **kwargs):
            raise AssertionError("repr must not be called")

    loud = torch.randn(8, 8).as_subclass(Loud)
    assert tensor_repr.tensor_line(loud).startswith("tensor[8, 8] f32 cpu μ=")

    class Broken(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.as_subclass or getattr(func, "__name__", "") in ("shape", "__get__"):
                return super().__torch_function__(func, types, args, kwargs or {})
            raise RuntimeError("no ops on this one")

    broken = torch.randn(16, 16).as_subclass(Broken)
    line = tensor_repr.tensor_line(broken)
    assert line.startswith("tensor[16, 16]") or line == "<Broken>"


def test_module_line_and_children():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[1].weight.requires_grad_(False)
    assert tensor_repr.module_line(model) == "Sequential · 26 params (18 trainable) · cpu f32 · train"
    w = torch.randn(5, 3, requires_grad=True)
    (w * 2).sum().backward()
    children = {name: (value, suffix) for name, value, suffix in tensor_repr.tensor_children(w)}
    assert {
        "shape",
        "dtype",
        "device",
        "requires_grad",
        "is_leaf",
        "grad",
        "grad_fn",
        "stats",
        "[0]",
        "[1]",
        "[2]",
        "[-1]",
    } == set(children)
    assert children["shape"] == ((5, 3), ".shape")
    assert torch.equal(children["grad"][0], torch.full((5, 3), 2.0))
    assert children["[-1]"][1] == "[-1]" and torch.equal(children["[-1]"][0], w[-1])
    assert children["stats"][0]["numel"] == 15
    row = {name: value for name, value, _ in tensor_repr.tensor_children(torch.arange(20.0))}
    assert row["[:10]"] == list(range(10))


def test_containers_of_tensors_are_one_line_of_summaries():
    grad = torch.full((16, 16, 32, 32), 2.0)
    assert tensor_repr.container_line((grad,)) == "(tensor[16, 16, 32, 32] f32 cpu μ=2 σ=0 [2, 2],)"
    assert tensor_repr.container_line((None, torch.ones(3))) == "(None, tensor[3] f32 cpu x=[1, 1, 1])"
    assert tensor_repr.container_line({"a": [torch.zeros(2), 7], "b": "x" * 100}) == (
        "{'a': [tensor[2] f32 cpu x=[0, 0], 7], 'b': '" + "x" * 38 + "…}"
    )
    # No tensor among the items shown: None (debugpy's own text stays).
    assert tensor_repr.container_line([1, 2, 3]) is None
    assert tensor_repr.container_line(torch.ones(2)) is None

    # Objects that are not plain values show by class: their repr may format tensors.
    class Batch:
        def __repr__(self) -> str:
            raise AssertionError("repr must not be called")

    assert tensor_repr.container_line([torch.ones(1), Batch(), torch.nn.Linear(2, 2)]) == (
        "[tensor[1] f32 cpu x=[1], <Batch>, <Linear>]"
    )


def test_container_lines_are_bounded():
    n = tensor_repr.CONTAINER_ITEMS
    long = [torch.ones(1)] * 50
    assert tensor_repr.container_line(long).endswith(f", …+{50 - n}]")
    assert tensor_repr.container_line(long).count("tensor[1]") == n
    # Only the items shown are looked at: a tensor after a million numbers leaves the list alone.
    assert tensor_repr.container_line(list(range(10**6)) + [torch.ones(2)]) is None
    # Nesting: a level deeper than CONTAINER_DEPTH is a count, and a tensor only there does not count.
    deep = [[[torch.ones(2), [torch.ones(2)]]]]
    assert tensor_repr.container_line(deep) == "[[[tensor[2] f32 cpu x=[1, 1], […1]]]]"
    assert tensor_repr.container_line([[[[torch.ones(2)]]]]) is None
    # At most CONTAINER_SUMMARIES tensors are summarised; the rest show shape, dtype and device.
    nested = tuple([torch.randn(3, 30)] * 4 for _ in range(3))
    line = tensor_repr.container_line(nested)
    assert line.count("μ=") == tensor_repr.CONTAINER_SUMMARIES == 8
    assert line.endswith(
        ", [tensor[3, 30] f32 cpu, tensor[3, 30] f32 cpu, tensor[3, 30] f32 cpu, tensor[3, 30] f32 cpu])"
    )


def test_switch_reads_the_environment(monkeypatch):
    monkeypatch.setenv(tensor_repr.ENV_SWITCH, "0")
    assert not tensor_repr.enabled()
    monkeypatch.setenv(tensor_repr.ENV_SWITCH, "1")
    assert tensor_repr.enabled()


def _run_plugin(code: str, env_extra: dict[str, str] | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([bootstrap.path(), str(PYDEVD)]), **(env_extra or {})}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_plugin_is_found_by_pydevd_and_never_imports_torch():
    out = _run_plugin(
        "import sys\n"
        "from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider, TypeResolveProvider\n"
        "from _pydevd_bundle.pydevd_extension_utils import extensions_of_type\n"
        "names = [type(p).__name__ for p in extensions_of_type(StrPresentationProvider)]\n"
        "resolvers = [type(p).__name__ for p in extensions_of_type(TypeResolveProvider)]\n"
        "print('str', 'HookscopeTensorStr' in names, 'resolver', 'HookscopeTensorResolver' in resolvers)\n"
        "p = [p for p in extensions_of_type(StrPresentationProvider) if type(p).__name__ == 'HookscopeTensorStr'][0]\n"
        "print('int', p.can_provide(int, 'int'), 'torch', 'torch' in sys.modules)\n"
        "import torch\n"
        "print('tensor', p.can_provide(torch.Tensor, 'Tensor'), p.get_str(torch.ones(20)))\n"
    )
    assert "str True resolver True" in out
    assert "int False torch False" in out
    assert "tensor True tensor[20] f32 cpu μ=1 σ=0 [1, 1]" in out


def test_plugin_presents_containers_of_tensors_even_when_asked_before_torch_is_imported():
    # pydevd caches can_provide per type: a tuple shown before `import torch` must not lose the line.
    out = _run_plugin(
        "import sys\n"
        "from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider\n"
        "from _pydevd_bundle.pydevd_extension_utils import extensions_of_type\n"
        "p = [p for p in extensions_of_type(StrPresentationProvider) if type(p).__name__ == 'HookscopeTensorStr'][0]\n"
        "print('tuple', p.can_provide(tuple, 'tuple'), p.get_str((1, 2)), 'torch' in sys.modules)\n"
        "import torch\n"
        "print('after', p.get_str((torch.ones(2),)), p.get_str([1]), p.get_str({'k': torch.zeros(1)}))\n"
    )
    assert "tuple True None False" in out
    assert "after (tensor[2] f32 cpu x=[1, 1],) None {'k': tensor[1] f32 cpu x=[0]}" in out


def test_plugin_steps_aside_when_switched_off():
    out = _run_plugin(
        "import torch\n"
        "from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider\n"
        "from _pydevd_bundle.pydevd_extension_utils import extensions_of_type\n"
        "p = [p for p in extensions_of_type(StrPresentationProvider) if type(p).__name__ == 'HookscopeTensorStr'][0]\n"
        "print('tensor', p.can_provide(torch.Tensor, 'Tensor'), 'tuple', p.can_provide(tuple, 'tuple'))\n",
        {"HOOKSCOPE_TENSOR_VIEW": "0"},
    )
    assert "tensor False tuple False" in out


# ---------------------------------------------------------------- inspector


@pytest.fixture(autouse=True)
def _release_all():
    yield
    inspector.release(None)


def _frame_with_locals() -> str:
    volume = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # noqa: F841 - published by name
    return inspector.publish("volume", "vol")


def test_publish_evaluates_in_the_callers_frame_and_answer_renders_a_slice():
    assert _frame_with_locals().startswith(f"hookscope-ok pid={os.getpid()} handle=vol tensor[2, 3, 4]")
    body = inspector.answer({"handle": "vol", "expression": "volume", "options": {"axes": [0, 2], "index": {"1": 2}}})
    expected = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, 2, :]
    values = np.frombuffer(body["values"], dtype="<f4").reshape(body["valuesShape"])
    np.testing.assert_array_equal(values, expected)
    assert body["meta"]["axes"] == [0, 2] and body["meta"]["index"] == {"1": 2}
    assert body["summary"]["path"] == "volume" and body["summary"]["numel"] == 24
    assert body["png"][:8] == b"\x89PNG\r\n\x1a\n"
    # Rows before columns or the other way round: axes [2, 0] is the transpose.
    flipped = inspector.answer({"handle": "vol", "options": {"axes": [2, 0], "index": {"1": 2}}})
    np.testing.assert_array_equal(np.frombuffer(flipped["values"], dtype="<f4").reshape(4, 2), expected.T)


def test_large_slices_send_strided_values():
    big = torch.arange(600 * 10, dtype=torch.float32).reshape(600, 10)  # noqa: F841
    assert inspector.publish("big", "big").startswith("hookscope-ok")
    body = inspector.answer({"handle": "big", "options": {}})
    assert body["valuesStep"] == [3, 1] and body["valuesShape"] == [200, 10]
    values = np.frombuffer(body["values"], dtype="<f4").reshape(200, 10)
    assert values[5, 7] == 15 * 10 + 7  # row 5 of the values is row 15 of the slice


def test_bad_requests_and_release():
    _frame_with_locals()
    with pytest.raises(ProtocolError) as info:
        inspector.answer({"handle": "vol", "options": {"axes": [1, 1]}})
    assert info.value.code == "badMessage"
    with pytest.raises(ProtocolError):
        inspector.answer({"handle": "vol", "options": {"axes": [0, 1], "index": {"2": 9}}})
    with pytest.raises(ProtocolError):
        inspector.answer({"handle": "vol", "options": {"view": "nope"}})
    assert inspector.answer({"handle": "vol", "options": {"view": "summary"}}).keys() == {"summary", "path"}
    assert inspector.release(["vol", "other"]) == 1
    with pytest.raises(ProtocolError) as info:
        inspector.answer({"handle": "vol"})
    assert info.value.code == "notAvailable"
    assert inspector.publish("1 +", "h").startswith("hookscope-error: SyntaxError")
    assert inspector.publish("torch", "bad handle!") == "hookscope-error: bad handle"
    assert "not a tensor" in inspector.publish("[1, 2]", "h")


def test_only_a_few_values_are_held():
    for i in range(inspector.MAX_HELD + 3):
        value = torch.full((2, 2), float(i))  # noqa: F841
        assert inspector.publish("value", f"h{i}").startswith("hookscope-ok")
    assert inspector.held("h0") is None and inspector.held("h2") is None
    assert float(inspector.held(f"h{inspector.MAX_HELD + 2}")[0][0, 0]) == inspector.MAX_HELD + 2
    assert inspector.release(None) == inspector.MAX_HELD


def test_feature_map_view_of_nchw():
    acts = torch.randn(2, 5, 6, 6)  # noqa: F841
    inspector.publish("acts", "acts")
    body = inspector.answer({"handle": "acts", "options": {"view": "featureMap", "batch": 1}})
    assert body["meta"]["layout"] == "grid" and body["meta"]["channels"] == [0, 1, 2, 3, 4]
    assert body["meta"]["batch"] == 1


def test_without_numpy_the_value_keeps_its_summary_and_says_what_the_picture_needs(monkeypatch):
    import importlib.util
    import sys

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real_find_spec(name, *a)
    )
    acts = torch.randn(2, 5, 6, 6)  # noqa: F841
    inspector.publish("acts", "acts")
    for view in ("featureMap", "slice"):
        body = inspector.answer({"handle": "acts", "options": {"view": view}})
        assert "png" not in body and body["summary"]["numel"] == 2 * 5 * 6 * 6
        assert body["summary"]["note"].endswith(
            "need numpy, which "
            + sys.executable
            + " does not have (install with: "
            + sys.executable
            + " -m pip install numpy); summaries and breakpoints work without them."
        )
