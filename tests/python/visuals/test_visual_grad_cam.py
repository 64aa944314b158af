"""Grad-CAM on models built so the right answer is known."""

from __future__ import annotations

import torch
from torch import nn

from hookscope.hooks import inventory
from hookscope.visuals import compute_grad_cam, grad_cam


class QuadrantNet(nn.Module):
    """Channel 0 sees bright blobs, channel 1 dark blobs; the class reads only channel 0 in the top-left quadrant."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(1, 2, 3, padding=1, bias=False)
        with torch.no_grad():
            self.features.weight.zero_()
            self.features.weight[0, 0, 1, 1] = 1.0
            self.features.weight[1, 0, 1, 1] = -1.0
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.act(self.features(x))
        h, w = a.shape[-2:]
        s = a[:, 0, : h // 2, : w // 2].mean(dim=(1, 2))
        return torch.stack((s, -s), dim=1)


def blob_image() -> torch.Tensor:
    x = torch.zeros(1, 1, 16, 16)
    x[0, 0, 2:6, 2:6] = 1.0  # bright blob, top-left: decides the class
    x[0, 0, 10:14, 10:14] = -1.0  # dark blob, bottom-right: a distractor channel 0 ignores
    x[0, 0, 2:6, 10:14] = 0.0
    return x


def quadrant_mass(cam: torch.Tensor) -> torch.Tensor:
    h, w = cam.shape[-2:]
    q = torch.stack(
        [
            cam[: h // 2, : w // 2].sum(),
            cam[: h // 2, w // 2 :].sum(),
            cam[h // 2 :, : w // 2].sum(),
            cam[h // 2 :, w // 2 :].sum(),
        ]
    )
    return q / q.sum()


def test_mass_is_in_the_deciding_quadrant():
    model = QuadrantNet()
    result = compute_grad_cam(model, model.features, blob_image())
    assert int(result.predicted[0]) == 0 and int(result.target[0]) == 0
    assert result.gradient_source == "full_backward_hook"
    assert result.cam.shape == (1, 16, 16)
    assert float(quadrant_mass(result.cam[0])[0]) > 0.95


def test_no_hook_left_and_model_state_untouched():
    model = QuadrantNet().train()
    before = [p.grad for p in model.parameters()]
    compute_grad_cam(model, model.features, blob_image())
    assert inventory.list_hooks({"m": model})["hooks"] == []
    assert model.training and model.act.training
    assert [p.grad for p in model.parameters()] == before  # autograd.grad: .grad untouched


class InplaceNet(nn.Module):
    """conv -> ReLU(inplace=True): full backward hooks are refused on the conv's output."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.relu(self.conv(x)).mean(dim=(2, 3)))


def test_inplace_successor_falls_back_to_a_tensor_hook():
    model = InplaceNet()
    result = compute_grad_cam(model, model.conv, torch.randn(2, 3, 8, 8), target=[1, 2])
    assert result.gradient_source == "tensor_hook"
    assert result.target.tolist() == [1, 2]
    assert inventory.list_hooks({"m": model})["hooks"] == []


class TinyViT(nn.Module):
    """4x4 patches of a 16x16 image -> 16 tokens + CLS; the class reads feature 0 of top-left tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, 8, 4, stride=4, bias=False)
        with torch.no_grad():
            self.patch.weight.zero_()
            self.patch.weight[0] = 1.0 / 16  # feature 0 = patch mean
            self.patch.weight[1] = -1.0 / 16
        self.cls = nn.Parameter(torch.zeros(1, 1, 8))
        self.blocks = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)  # (N, 16, 8)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)
        tokens = self.blocks(tokens)
        grid = tokens[:, 1:, 0].reshape(-1, 4, 4)
        s = torch.relu(grid[:, :2, :2]).mean(dim=(1, 2))
        return torch.stack((s, -s), dim=1)


def test_token_layer_with_cls_token():
    model = TinyViT()
    result = compute_grad_cam(model, model.blocks, blob_image())
    assert result.dropped_tokens == 1 and result.low_res.shape == (1, 4, 4)
    assert float(quadrant_mass(result.low_res[0])[0]) > 0.99  # on the token grid: only top-left tokens
    assert float(quadrant_mass(result.cam[0])[0]) > 0.8  # bilinear upsampling blurs the 4x4 grid a little


def test_rendered_overlay(pixels):
    model = QuadrantNet()
    x = blob_image().repeat(1, 1, 1, 1)
    im = grad_cam(model, model.features, x)
    assert (im.width, im.height) == (16, 16) and im.meta["layout"] == "overlay"
    assert im.meta["target"] == 0 and im.meta["predicted"] == 0
    cam = torch.tensor(im.meta["cam"])
    assert cam.shape == (16, 16) and float(cam[:8, :8].sum()) > 0.95 * float(cam.sum())
    img = pixels(im.png).astype(int)
    # The top-left quadrant is the hot (red end of 'jet') part of the overlay.
    assert img[:8, :8, 0].mean() > img[8:, 8:, 0].mean() + 40
