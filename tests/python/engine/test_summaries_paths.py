"""The CPU fast path and the branch-free accelerator path of summaries agree."""

from __future__ import annotations

import math

import pytest
import torch

from hookscope.hooks import summaries


def _cases():
    g = torch.Generator().manual_seed(3)
    with_bad = torch.randn(1000, generator=g)
    with_bad[[3, 10]] = math.nan
    with_bad[5] = math.inf
    with_bad[7] = -math.inf
    return {
        "normal": torch.randn(64, 33, generator=g),
        "non-finite": with_bad,
        "constant": torch.full((50,), 2.5),
        "zeros and ints": torch.tensor([0, 0, 1, 2, 3, 5], dtype=torch.int64),
        "bf16": torch.randn(300, generator=g).to(torch.bfloat16),
        "one value": torch.tensor([4.0]),
        "all nan": torch.full((4,), math.nan),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_cpu_and_accelerator_paths_agree(name):
    t = _cases()[name]
    fast = summaries._cpu_stats(t).tolist()
    exact = summaries._accelerator_stats(t).tolist()
    assert fast[:5] == exact[:5], "counts (finite, nan, +inf, -inf, zeros) must be identical"
    if exact[0] == 0:
        return  # no finite value: the moments are not reported (see _finish)
    assert fast[5:10] == pytest.approx(exact[5:10], rel=1e-5, abs=1e-6)
    # Histogram bin edges are computed in float32 by histc: a value on an edge may move one bin.
    assert sum(fast[10:]) == sum(exact[10:])
    assert sum(abs(a - b) for a, b in zip(fast[10:], exact[10:])) <= 2


def test_cpu_summary_of_a_known_tensor():
    s = summaries.summarize(torch.tensor([[1.0, -2.0], [0.0, math.nan]]), "output")
    assert (s["nan"], s["posinf"], s["neginf"]) == (1, 0, 0)
    assert s["min"] == -2.0 and s["max"] == 1.0 and s["absmax"] == 2.0
    assert s["mean"] == pytest.approx(-1 / 3)
    assert s["norm"] == pytest.approx(math.sqrt(5))
    assert s["zeroFrac"] == pytest.approx(0.25)
    assert sum(s["hist"]["counts"]) == 3
