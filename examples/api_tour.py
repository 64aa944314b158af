"""A tour of Hookscope's Python API (no editor needed) on a small CNN. Runs in seconds on a CPU.

    .venv/bin/python examples/api_tour.py [--out DIR]

Each step is one pattern of the classic PyTorch-hooks articles as a short
call; the images land in DIR (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn

import hookscope
from hookscope import visuals
from hookscope.hooks import inventory


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(2)  # keeps left/right apart
        self.fc = nn.Linear(16 * 4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(self.pool(x).flatten(1))


def batch(n: int = 32, labels: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy images with a bright square in the left (class 0) or right (class 1) half."""
    y = torch.tensor(labels) if labels is not None else torch.randint(0, 2, (n,))
    x = torch.rand(len(y), 3, 32, 32) * 0.2
    for i, label in enumerate(y.tolist()):
        col = 4 if label == 0 else 20
        x[i, :, 12:20, col:col + 8] = 1.0
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for the PNGs")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="hookscope-tour-"))
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = TinyCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    print("1. Train while watching activation statistics of every conv layer")
    with hookscope.activation_stats(model, types=nn.Conv2d) as stats:
        for _ in range(60):
            x, y = batch()
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(stats.table())

    print("\n2. Capture a layer's feature maps (detached) and render them")
    x, y = batch(labels=[0, 1, 0, 1])
    with hookscope.capture(model, "conv1") as acts:
        logits = model(x)
    visuals.feature_map(acts["conv1"], sort_by_strength=True).save(out / "conv1_features.png")
    print(f"   conv1 output {tuple(acts['conv1'].shape)}, accuracy on 4 images: "
          f"{(logits.argmax(1) == y).float().mean():.2f}")

    print("\n3. Every layer of a type in one object, inside a scope that removes all hooks")
    with hookscope.scope(model):
        convs = hookscope.capture(model, types=nn.Conv2d, cpu=True)
        model(x)
        print("   captured:", {k: tuple(v.shape) for k, v in convs.items()})
    print("   hooks left on the model:", len(inventory.list_hooks({"model": model})["hooks"]))

    print("\n4. Gradients: per-parameter norms, per-layer flow, vanishing checks by tensor hooks")
    with hookscope.grad_check(model, vanishing=1e-6, activations=True) as check:
        nn.functional.cross_entropy(model(x), y).backward()
    norms = hookscope.grad_norms(model)
    print("   grad norms:", {k: round(v, 4) for k, v in norms.items()})
    print("   grad check:", check.report())
    visuals.gradient_flow(model.named_parameters()).save(out / "gradient_flow.png")

    print("\n5. Grad-CAM (forward hook for activations, full backward hook for gradients)")
    cam = hookscope.grad_cam(model, "conv2", x)
    left = cam.cam[:, :, :16].sum(dim=(1, 2)) / cam.cam.sum(dim=(1, 2)).clamp(min=1e-12)
    for i in range(len(x)):
        print(f"   image {i}: class {int(y[i])}, predicted {int(cam.predicted[i])}, "
              f"share of the heat map on the left half {float(left[i]):.0%}")
    visuals.grad_cam(model, model.conv2, x).save(out / "grad_cam.png")

    print("\n6. Interventions: ablate channels, scale, mean-ablate, add input noise")
    with torch.no_grad():
        base = model(x).softmax(1)
        strongest = acts["conv1"].abs().mean(dim=(0, 2, 3)).argsort(descending=True)[:4].tolist()
        with hookscope.zero_channels(model, "conv1", strongest):
            ablated = model(x).softmax(1)
        with hookscope.scale_output(model, "conv2", 0.1):
            scaled = model(x).softmax(1)
        with hookscope.mean_ablate(model, "conv2"):
            mean_ablated = model(x).softmax(1)
        with hookscope.input_noise(model, "conv1", std=0.5):
            noisy = model(x).softmax(1)
    for what, probs in ((f"zeroing conv1 channels {strongest}", ablated), ("conv2 output x 0.1", scaled),
                        ("conv2 mean-ablated", mean_ablated), ("noise std 0.5 on conv1's input", noisy)):
        print(f"   {what:<36} mean |change in p(class)| {float((probs - base).abs().mean()):.3f}")

    print("\n7. Stop on NaN with the layer named")
    with torch.no_grad():
        model.conv2.weight[0, 0, 0, 0] = float("nan")
    try:
        with hookscope.stop_on_nonfinite(model):
            model(x)
    except hookscope.NonFiniteError as e:
        print(f"   NonFiniteError: {e}")

    print("\n8. Attention weights, even when the model asks for none")
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
                                    enable_nested_tensor=False).eval()
    tokens = torch.randn(1, 6, 32)
    with torch.no_grad(), hookscope.capture_attention(encoder) as attn:
        encoder(tokens)
    w = attn["layers.0.self_attn"]
    print(f"   layers.0.self_attn weights {tuple(w.shape)} (batch, heads, queries, keys)")
    visuals.attention_map(w, labels=["the", "cat", "sat", "on", "the", "mat"]).save(out / "attention.png")

    left_over = hookscope.remove_all()
    print(f"\nHooks still held by the API at the end: {hookscope.live_hook_count()} (removed {left_over})")
    print(f"Images written to {out}")


if __name__ == "__main__":
    main()
