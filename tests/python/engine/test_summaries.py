"""TensorSummary numbers, odd tensors, nested outputs, and one transfer per device."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import pytest
import torch

from hookscope.hooks import summaries
from hookscope.hooks.summaries import all_finite, summarize, summarize_many, summarize_tree, tensors_in


def test_exact_numbers_over_finite_values():
    t = torch.tensor([1.0, 2.0, float("nan"), 3.0, 0.0, float("inf"), float("-inf"), float("-inf")])
    s = summarize(t, "output")
    assert (s["path"], s["shape"], s["dtype"], s["device"], s["numel"]) == ("output", [8], "float32", "cpu", 8)
    assert (s["nan"], s["posinf"], s["neginf"]) == (1, 1, 2)
    assert s["mean"] == 1.5 and s["min"] == 0.0 and s["max"] == 3.0 and s["absmax"] == 3.0
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))  # unbiased, like torch.std
    assert s["norm"] == pytest.approx(math.sqrt(14))
    assert s["zeroFrac"] == 1 / 8
    hist = s["hist"]
    assert (hist["lo"], hist["hi"], len(hist["counts"])) == (0.0, 3.0, 32)
    assert sum(hist["counts"]) == 4 and hist["counts"][0] == 1 and hist["counts"][-1] == 1
    assert "sampled" not in s and "note" not in s


def test_matches_torch_on_random_data():
    t = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    s = summarize(t, "x")
    assert s["mean"] == pytest.approx(float(t.mean()), abs=1e-6)
    assert s["std"] == pytest.approx(float(t.std()), rel=1e-5)
    assert s["norm"] == pytest.approx(float(t.norm()), rel=1e-5)
    assert s["min"] == float(t.min()) and s["max"] == float(t.max())
    assert s["hist"]["counts"] == torch.histc(t, 32, float(t.min()), float(t.max())).long().tolist()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_low_and_high_precision_floats(dtype):
    s = summarize(torch.tensor([60000.0, 60000.0, -2.0], dtype=dtype), "h")
    assert s["dtype"] == str(dtype).removeprefix("torch.")
    assert s["mean"] == pytest.approx((2 * float(torch.tensor(60000.0, dtype=dtype)) - 2) / 3)  # no fp16 overflow


def test_int_and_bool_tensors():
    s = summarize(torch.tensor([[1, 2], [3, 0]]), "i")
    assert (s["dtype"], s["mean"], s["max"], s["zeroFrac"], s["nan"]) == ("int64", 1.5, 3.0, 0.25, 0)
    b = summarize(torch.tensor([True, False, True, True]), "b")
    assert (b["dtype"], b["mean"], b["zeroFrac"]) == ("bool", 0.75, 0.25)


def test_all_nonfinite_and_single_value():
    s = summarize(torch.tensor([float("nan"), float("inf")]), "x")
    assert (s["nan"], s["posinf"]) == (1, 1)
    assert "mean" not in s and "hist" not in s
    one = summarize(torch.tensor([4.0]), "y")
    assert one["mean"] == 4.0 and "std" not in one and one["hist"]["counts"][0] == 1


def test_odd_tensors_get_a_note_not_an_exception():
    notes = {
        "empty": summarize(torch.empty(0, 3), "e"),
        "sparse": summarize(torch.eye(3).to_sparse(), "s"),
        "meta": summarize(torch.empty(2, 2, device="meta"), "m"),
        "complex": summarize(torch.randn(4, dtype=torch.complex64), "c"),
        "quantized": summarize(torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8), "q"),
        "not a tensor": summarize(3, "n"),
    }
    for word, s in notes.items():
        assert word in s["note"], (word, s)
        assert s["nan"] == 0
    assert notes["empty"]["shape"] == [0, 3]


def test_huge_tensors_are_sampled_but_nonfinite_counts_stay_exact(monkeypatch):
    monkeypatch.setattr(summaries, "SAMPLE_ABOVE", 1000)
    monkeypatch.setattr(summaries, "SAMPLE_SIZE", 256)
    t = torch.ones(5000)
    t[:7] = float("nan")
    t[7:10] = float("inf")
    s = summarize(t, "big")
    assert s["sampled"] is True and s["nan"] == 7 and s["posinf"] == 3
    assert s["mean"] == 1.0 and s["norm"] == pytest.approx(math.sqrt(4990))
    assert summarize(t, "big")["hist"] == s["hist"]  # seeded: the same sample every time


@dataclass
class Out:
    logits: torch.Tensor
    hidden: tuple


class ModelOutput(OrderedDict):
    """Stand-in for transformers.utils.ModelOutput (an OrderedDict subclass)."""


def test_nested_outputs_get_paths():
    a, b, c = torch.zeros(2), torch.ones(3), torch.full((1,), 2.0)
    paths = [s["path"] for s in summarize_tree((a, [b, {"x": c, 1: a}], None, "text"), "output")]
    assert paths == ["output[0]", "output[1][0]", "output[1][1].x", "output[1][1][1]"]
    paths = [s["path"] for s in summarize_tree(Out(a, (b, c)), "output")]
    assert paths == ["output.logits", "output.hidden[0]", "output.hidden[1]"]
    paths = [s["path"] for s in summarize_tree(ModelOutput(loss=a, logits=b), "output")]
    assert paths == ["output.loss", "output.logits"]


def test_one_transfer_for_many_tensors(monkeypatch):
    calls = []
    original = torch.Tensor.tolist

    def counting(self):
        calls.append(self.shape)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    out = summarize_many([(f"t{i}", torch.randn(10, 10)) for i in range(5)])
    assert len(out) == 5 and len(calls) == 1


def test_all_finite_is_exact_for_overflowing_sums_odd_dtypes_and_several_tensors():
    nan, inf = float("nan"), float("inf")
    assert all_finite([torch.full((1000,), 60000.0, dtype=torch.half)])  # sums past fp16's max
    assert all_finite([torch.full((8,), 3e38), torch.ones(2)])  # the sum overflows fp32
    assert all_finite([]) and all_finite([torch.arange(4)])
    for bad in (nan, inf, -inf):
        assert not all_finite([torch.tensor([1.0, bad])])
        assert not all_finite([torch.ones(3), torch.tensor([bad], dtype=torch.bfloat16)])
    assert not all_finite([torch.tensor([inf, -inf])])  # the sum is NaN, not a finite cancel


def test_tensors_in_finds_every_tensor_of_flat_and_nested_values():
    a, b = torch.ones(1), torch.zeros(2)
    assert [id(t) for t in tensors_in(a)] == [id(a)]
    assert [id(t) for t in tensors_in((a, None, b))] == [id(a), id(b)]  # grad_input with a None
    assert [id(t) for t in tensors_in((a, [b], {"c": a}))] == [id(a), id(b), id(a)]  # nested: the generic walk
    assert tensors_in((1, None)) == [] and tensors_in(None) == [] and tensors_in(()) == []


def test_all_finite_builds_no_autograd_graph():
    from torch.overrides import TorchFunctionMode

    graph_outputs = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.requires_grad:
                graph_outputs.append(func)
            return out

    x = torch.ones(3, requires_grad=True) * 2  # a non-leaf that needs grad, like a layer output
    with Spy():
        assert all_finite([x]) and all_finite([x, x])
    assert graph_outputs == []  # no op in the check made a node of the autograd graph
