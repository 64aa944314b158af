"""Render times of Hookscope's images on one CPU core (``torch.set_num_threads(1)``).

Rows: the fast path (feature-map grid of a (1, 64, 56, 56) conv output —
target <= 30 ms —, one channel large, a token heat map, an attention grid),
the matplotlib figures (labelled attention, gradient flow, histogram) and
Grad-CAM on a small CNN. For reference, the same grid through matplotlib's
``imsave`` (the best matplotlib path measured in DESIGN.md).

Usage: .venv/bin/python bench/render_bench.py [--rounds 30] [--json]
Prints a table of median / p95 milliseconds (or one JSON object).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from hookscope import visuals  # noqa: E402

GRID_TARGET_MS = 30.0


def conv_activation() -> torch.Tensor:
    """A realistic (1, 64, 56, 56) map: a ReLU'd conv of a smooth random image."""
    torch.manual_seed(0)
    image = nn.functional.avg_pool2d(torch.rand(1, 3, 60, 60), 5, stride=1)
    conv = nn.Conv2d(3, 64, 3, padding=1)
    with torch.no_grad():
        return torch.relu(conv(image))


def small_cnn() -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, padding=1), nn.ReLU()]
    for _ in range(8):
        layers += [nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)]
    return nn.Sequential(*layers)


def imsave_grid(act: torch.Tensor) -> bytes:
    import matplotlib.pyplot as plt

    grid = act[0].reshape(8, 8, 56, 56).permute(0, 2, 1, 3).reshape(8 * 56, 8 * 56).numpy()
    buf = io.BytesIO()
    plt.imsave(buf, grid, cmap="viridis", format="png")
    return buf.getvalue()


def measure(fn: Callable[[], object], rounds: int) -> dict[str, float]:
    fn()  # warm-up: colormap tables, matplotlib import, first allocation
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    times.sort()
    return {"median_ms": statistics.median(times), "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    torch.set_num_threads(1)

    act = conv_activation()
    tokens = torch.randn(1, 197, 384)
    attn = torch.softmax(torch.randn(1, 8, 32, 32), dim=-1)
    labels = [f"t{i}" for i in range(32)]
    cnn = small_cnn()
    image = torch.rand(4, 3, 32, 32)
    cnn(image).sum().backward()
    params = list(cnn.named_parameters())
    hist_data = torch.randn(1_000_000)

    rows: list[tuple[str, Callable[[], object]]] = [
        ("feature map 8x8 grid (1,64,56,56)", lambda: visuals.feature_map(act)),
        ("  same grid via plt.imsave (reference)", lambda: imsave_grid(act)),
        ("feature map grid, sorted by strength", lambda: visuals.feature_map(act, sort_by_strength=True)),
        ("one channel large", lambda: visuals.feature_map(act, channel=5)),
        ("token heat map (1,197,384)", lambda: visuals.feature_map(tokens)),
        ("attention grid 8 heads x 32 tokens", lambda: visuals.attention_map(attn)),
        ("attention figure with labels", lambda: visuals.attention_map(attn, head="avg", labels=labels)),
        ("gradient flow (27 layers, matplotlib)", lambda: visuals.gradient_flow(params)),
        ("histogram of 1M values (matplotlib)", lambda: visuals.histogram(hist_data)),
        ("Grad-CAM (small CNN, 4x3x32x32)", lambda: visuals.grad_cam(cnn, cnn[20], image)),
    ]
    results = {name.strip(): measure(fn, args.rounds) for name, fn in rows}
    grid = results["feature map 8x8 grid (1,64,56,56)"]["median_ms"]
    if args.json:
        print(
            json.dumps(
                {
                    "threads": 1,
                    "rounds": args.rounds,
                    "grid_target_ms": GRID_TARGET_MS,
                    "grid_within_target": grid <= GRID_TARGET_MS,
                    "rows": results,
                }
            )
        )
        return 0
    width = max(len(n) for n, _ in rows)
    print(f"Render times, 1 thread, {args.rounds} rounds")
    print(f"{'image':<{width}}  {'median ms':>9}  {'p95 ms':>8}")
    for name, _ in rows:
        r = results[name.strip()]
        print(f"{name:<{width}}  {r['median_ms']:>9.1f}  {r['p95_ms']:>8.1f}")
    verdict = "OK" if grid <= GRID_TARGET_MS else "OVER TARGET"
    print(f"\nfeature-map grid target <= {GRID_TARGET_MS:.0f} ms: {grid:.1f} ms ({verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
