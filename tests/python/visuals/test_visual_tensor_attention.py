"""2-D slices of N-D tensors and attention maps: the right slice, the right pattern."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookscope.visuals import attention_map, colormap, tensor_image

LOW = colormap.colormap_rgb("viridis")[0]
HIGH = colormap.colormap_rgb("viridis")[-1]
NAN = np.array(colormap.MARKER_COLOURS["nan"])


def test_tensor_image_picks_the_asked_slice(pixels):
    t = torch.zeros(2, 3, 4, 5)
    t[1, :, 2, :] = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    im = tensor_image(t, axes=(1, 3), index={0: 1, 2: 2})
    assert im.meta["range"] == [0.0, 14.0] and im.meta["index"] == {"0": 1, "2": 2}
    f = im.meta["upscale"]
    assert (im.height, im.width) == (3 * f, 5 * f)
    img = pixels(im.png)
    assert (img[0, 0] == LOW).all() and (img[-1, -1] == HIGH).all()
    # Swapped axes give the transposed picture.
    swapped = tensor_image(t, axes=(3, 1), index=[1, 2])
    assert (swapped.height, swapped.width) == (5 * f, 3 * f)
    assert np.array_equal(pixels(swapped.png), img.transpose(1, 0, 2))


def test_tensor_image_rejects_bad_axes_and_index():
    t = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError):
        tensor_image(t, axes=(0, 0))
    with pytest.raises(ValueError):
        tensor_image(t, axes=(0, 5))
    with pytest.raises(ValueError):
        tensor_image(t, axes=(1, 2), index=[7])
    with pytest.raises(ValueError):
        tensor_image(t, axes=(1, 2), index={1: 0})


def test_huge_slice_is_reduced_and_keeps_its_nan(pixels):
    t = torch.randn(5000, 300)
    t[4321, 17] = float("nan")
    im = tensor_image(t)
    assert max(im.width, im.height) <= 2048
    assert im.meta["nonfinite"]["nan"] == 1
    assert (pixels(im.png) == NAN).all(axis=-1).any()


def test_attention_grid_has_every_head_and_the_average(pixels):
    w = torch.full((1, 3, 4, 4), 0.25)
    w[0, 1] = torch.eye(4)  # head 1 attends to itself
    im = attention_map(w)
    assert im.meta["tiles"] == ["0", "1", "2", "avg"]
    assert im.meta["range"] == [0.0, 1.0]
    g = im.meta["grid"]
    img = pixels(im.png)
    y0, x0 = 0, g["tile_w"] + g["gap"]  # head 1 is the second tile of the first row
    tile = img[y0 : y0 + g["tile_h"], x0 : x0 + g["tile_w"]]
    f = g["upscale"]
    diagonal = np.stack([tile[i * f, i * f] for i in range(4)])
    assert (diagonal == HIGH).all() and (tile[0, f] == LOW).all()


def test_attention_single_head_and_average():
    w = torch.softmax(torch.randn(2, 4, 5, 5), dim=-1)
    one = attention_map(w, head=2, batch=1)
    assert one.meta["head"] == "2" and one.meta["layout"] == "single"
    lo, hi = one.meta["range"]
    assert lo == pytest.approx(float(w[1, 2].min())) and hi == pytest.approx(float(w[1, 2].max()))
    avg = attention_map(w, head="avg")
    assert avg.meta["range"][1] == pytest.approx(float(w[0].mean(0).max()))


def test_attention_with_labels_is_a_figure(pixels):
    w = torch.softmax(torch.randn(2, 5, 5), dim=-1)  # (H, L, S)
    im = attention_map(w, labels=["the", "cat", "sat", "on", "mat"])
    assert im.meta["layout"] == "figure" and im.meta["tiles"] == ["0", "1", "avg"]
    assert im.meta["labels"][0] == ["the", "cat", "sat", "on", "mat"]
    assert pixels(im.png).shape == (im.height, im.width, 3)
    with pytest.raises(ValueError):
        attention_map(w, labels=["too", "few"])


def test_attention_nan_is_marked(pixels):
    w = torch.full((1, 4, 4), 0.25)
    w[0, 1, 2] = float("nan")
    im = attention_map(w, min_tile=4)
    assert im.meta["nonfinite"]["nan"] == 1
    assert im.meta["grid"]["upscale"] == 1
    assert (pixels(im.png) == NAN).all(axis=-1).sum() == 1
