"""Protocol latency and throughput, in one process (no debugger): the agent talks to a stand-in editor.

* hook -> ``hit`` frame arriving at the editor's socket reader (p50/p95), with a
  layer breakpoint whose action is "log" (no debugger to pause);
* hook -> ``summaries`` frame arriving there (p50/p95), a layer watched at an
  unlimited rate;
* a panel update: hook -> ``summaries`` frame -> the editor's ``render`` request
  for a feature-map grid -> the PNG at the editor (p50/p95; target <= 150 ms),
  on the CNN of examples/ while it trains;
* summaries per second and MB/s streamed through the protocol for a
  1000-layer model watched at an unlimited rate.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "examples"))

from cnn import SmallCNN, make_batch  # noqa: E402

import hookscope  # noqa: E402
from hookscope.hooks.summary_budget import DEFAULT_SHARE  # noqa: E402
from hookscope.link import codec  # noqa: E402
from hookscope.link.bounds import MAX_RATE_HZ  # noqa: E402
from hookscope.terminal.editor_link import EditorLink, RequestError  # noqa: E402

PANEL_TARGET_MS = 150.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    link = EditorLink()
    hookscope.connect(link.addr, link.token, timeout=30)
    conn = link.wait_connection(30)

    small = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    stack = nn.Sequential(*[nn.Linear(8, 8) for _ in range(1000)])
    cnn = SmallCNN()
    models = {}
    while len(models) < 3:
        model = conn.wait_event("modelAdded", timeout=30)["model"]
        models[len(model["modules"])] = model["id"]
    small_id, stack_id, cnn_id = models[4], models[1001], models[len(list(cnn.modules()))]

    fired: list[float] = []
    small[2].register_forward_pre_hook(lambda *_: fired.append(time.perf_counter()))
    conn.request("setBreakpoints", breakpoints=[{"id": "lat", "layer": "2", "phases": ["forward"], "action": "log"}])
    latencies = []
    x = torch.randn(4, 16)
    for _ in range(200):
        small(x)
        conn.wait_event("hit", timeout=10)
        latencies.append((time.perf_counter() - fired[-1]) * 1e3)
    conn.request("setBreakpoints", breakpoints=[])
    print(
        f"hook -> hit frame at the editor: p50 {statistics.median(latencies):.2f} ms, "
        f"p95 {percentile(latencies, 0.95):.2f} ms (200 hits)"
    )

    summary_latency(conn, small, small_id)
    panel_update_latency(conn, cnn, cnn_id)

    layers = [str(i) for i in range(1000)]
    conn.request("watch", model=stack_id, layers=layers, rateHz=MAX_RATE_HZ)
    before = len(conn.received)
    x = torch.randn(2, 8)
    start = time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - start < 3.0:
            stack(x)
    deadline = time.perf_counter() + 5
    while time.perf_counter() < deadline:  # let the queue drain
        n = len(conn.received)
        time.sleep(0.2)
        if len(conn.received) == n:
            break
    elapsed = time.perf_counter() - start
    frames = [m for m in conn.received[before:] if m.get("type") == "summaries"]
    size = sum(len(codec.encode(m)) for m in frames)
    tensors = sum(len(m["tensors"]) for m in frames)
    conn.request("watch", model=stack_id, layers=[])
    print(
        f"summaries streamed, 1000 layers watched at the highest rate (the summary budget keeps their "
        f"cost under {DEFAULT_SHARE:.1%} of the time): {len(frames) / elapsed:.0f} frames/s ({tensors / elapsed:.0f} tensor "
        f"summaries/s), {size / elapsed / 1e6:.2f} MB/s over {elapsed:.1f} s"
    )
    link.close()


def summary_latency(conn, small: nn.Module, small_id: str, frames: int = 200) -> None:
    """A watched layer's forward: time from its hook to the ``summaries`` frame at the editor."""
    fired: list[float] = []
    handle = small[0].register_forward_pre_hook(lambda *_: fired.append(time.perf_counter()))
    conn.request("watch", model=small_id, layers=["0"], rateHz=MAX_RATE_HZ)
    latencies = []
    x = torch.randn(4, 16)
    calls = 0
    while len(latencies) < frames and calls < 20 * frames:
        with torch.no_grad():
            small(x)
        calls += 1
        try:  # the summary budget may stretch the interval past this call: wait for the next one
            conn.wait_event("summaries", lambda m: m.get("layer") == "0" and m.get("phase") == "forward", timeout=0.1)
        except TimeoutError:
            continue
        latencies.append((time.perf_counter() - fired[-1]) * 1e3)
    conn.request("watch", model=small_id, layers=[])
    handle.remove()
    print(
        f"hook -> summaries frame at the editor: p50 {statistics.median(latencies):.2f} ms, "
        f"p95 {percentile(latencies, 0.95):.2f} ms ({len(latencies)} frames in {calls} calls)"
    )


def panel_update_latency(conn, cnn: SmallCNN, cnn_id: str, steps: int = 60) -> None:
    """What the Tensors panel does while a watched conv layer trains: each summary frame is
    followed by a feature-map render request; time from the hook to the PNG at the editor."""
    fired: list[float] = []
    cnn.conv1.register_forward_pre_hook(lambda *_: fired.append(time.perf_counter()))
    conn.request("watch", model=cnn_id, layers=["conv1"], rateHz=MAX_RATE_HZ)
    try:  # the panel opens on conv1 before its first forward pass: nothing to show yet
        conn.request("render", view="featureMap", model=cnn_id, layer="conv1")
    except RequestError as exc:
        if exc.code != "notAvailable":
            raise
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.02)
    generator = torch.Generator().manual_seed(0)
    latencies = []
    trained = 0
    while len(latencies) < steps and trained < 50 * steps:
        images, labels = make_batch(generator)
        optimizer.zero_grad()
        nn.functional.cross_entropy(cnn(images), labels).backward()
        optimizer.step()
        trained += 1
        try:  # the summary budget may skip this step's summary; the panel then waits for the next
            conn.wait_event(
                "summaries", lambda m: m.get("layer") == "conv1" and m.get("phase") == "forward", timeout=0.1
            )
        except TimeoutError:
            continue
        image = conn.request("render", view="featureMap", model=cnn_id, layer="conv1")
        assert image["png"][:8] == b"\x89PNG\r\n\x1a\n"
        latencies.append((time.perf_counter() - fired[-1]) * 1e3)
    conn.request("watch", model=cnn_id, layers=[])
    p95 = percentile(latencies, 0.95)
    verdict = "meets" if p95 <= PANEL_TARGET_MS else "MISSES"
    print(
        f"panel update, hook -> summaries -> feature-map PNG at the editor (examples/cnn.py conv1, "
        f"{image['width']}x{image['height']} px): p50 {statistics.median(latencies):.1f} ms, "
        f"p95 {p95:.1f} ms ({len(latencies)} updates in {trained} steps; target <= {PANEL_TARGET_MS:.0f} ms "
        f"at p95: {verdict})"
    )


if __name__ == "__main__":
    main()
