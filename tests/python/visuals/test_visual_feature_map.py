"""Feature-map grids, single channels and heat maps: dimensions and pixel content."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from hookscope.visuals import colormap, feature_map

LOW = colormap.colormap_rgb("viridis")[0]
HIGH = colormap.colormap_rgb("viridis")[-1]
NAN = np.array(colormap.MARKER_COLOURS["nan"])
POSINF = np.array(colormap.MARKER_COLOURS["posinf"])
NEGINF = np.array(colormap.MARKER_COLOURS["neginf"])


def tile_of(img: np.ndarray, meta: dict, position: int) -> np.ndarray:
    g = meta["grid"]
    r, c = divmod(position, g["cols"])
    y, x = r * (g["tile_h"] + g["gap"]), c * (g["tile_w"] + g["gap"])
    return img[y : y + g["tile_h"], x : x + g["tile_w"]]


def test_grid_dimensions_of_64_channels():
    im = feature_map(torch.randn(1, 64, 56, 56))
    assert (im.width, im.height) == (8 * 56 + 7, 8 * 56 + 7)
    assert im.meta["grid"] == {"rows": 8, "cols": 8, "tile_h": 56, "tile_w": 56, "gap": 1, "upscale": 1, "downscale": 1}
    assert im.meta["channels"] == list(range(64))
    assert im.meta["pages"] == 1


def test_small_maps_are_upscaled_to_readable_tiles(pixels):
    im = feature_map(torch.randn(2, 10, 7, 7))
    g = im.meta["grid"]
    assert g["upscale"] == 5 and g["tile_h"] == 35
    assert (g["rows"], g["cols"]) == (3, 4)
    assert (im.width, im.height) == (4 * 35 + 3, 3 * 35 + 2)
    assert pixels(im.png).shape == (im.height, im.width, 3)


def test_known_pattern_survives_per_channel_normalisation(pixels):
    x = torch.zeros(1, 4, 16, 16)
    x[0, 3, :, :8] = 5.0  # channel 3: left half high, right half low
    x[0, 1, :, :8] = 1000.0  # channel 1: same pattern, very different scale
    x[0, 1, :, 8:] = 900.0
    im = feature_map(x, min_tile=1)
    img = pixels(im.png)
    for ch in (1, 3):
        t = tile_of(img, im.meta, ch)
        assert (t[:, :8] == HIGH).all() and (t[:, 8:] == LOW).all(), ch
    assert im.meta["ranges"][3] == [0.0, 5.0]
    assert im.meta["ranges"][1] == [900.0, 1000.0]


def test_shared_scale_compares_channels(pixels):
    x = torch.zeros(1, 2, 8, 8)
    x[0, 0] = 1.0
    x[0, 1] = 10.0
    x[0, 0, 0, 0] = 0.0
    im = feature_map(x, shared_scale=True, min_tile=1)
    img = pixels(im.png)
    assert im.meta["scale"] == [0.0, 10.0]
    assert (tile_of(img, im.meta, 1) == HIGH).all()
    level = colormap.colormap_rgb("viridis")[round(0.1 * (colormap.LEVELS - 1))]
    assert (tile_of(img, im.meta, 0)[1:, :] == level).all()


def test_constant_channel_does_not_divide_by_zero(pixels):
    x = torch.randn(1, 3, 8, 8)
    x[0, 1] = 7.25
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        im = feature_map(x, min_tile=1)
    assert im.meta["constant"] == [1]
    assert im.meta["ranges"][1] == [7.25, 7.25]
    assert (tile_of(pixels(im.png), im.meta, 1) == LOW).all()


def test_nan_and_infinities_get_marker_colours(pixels):
    x = torch.arange(64, dtype=torch.float32).reshape(1, 1, 8, 8).repeat(1, 2, 1, 1)
    x[0, 0, 2, 3] = float("nan")
    x[0, 0, 4, 5] = float("inf")
    x[0, 0, 6, 1] = float("-inf")
    x[0, 1] = float("nan")  # a channel with nothing finite
    im = feature_map(x, min_tile=1)
    img = pixels(im.png)
    t0 = tile_of(img, im.meta, 0)
    assert (t0[2, 3] == NAN).all() and (t0[4, 5] == POSINF).all() and (t0[6, 1] == NEGINF).all()
    assert (t0[0, 0] == LOW).all() and (t0[7, 7] == HIGH).all()  # finite range ignores the markers
    assert (tile_of(img, im.meta, 1) == NAN).all()
    assert im.meta["ranges"][1] == [None, None]
    assert im.meta["nonfinite"] == {"nan": 65, "posinf": 1, "neginf": 1}
    assert im.meta["markers"]["nan"] == list(NAN)


def test_paging_counts_and_shows_the_right_channels():
    x = torch.randn(1, 70, 4, 4)
    x[0, 3, 0, 0] = float("nan")
    im = feature_map(x, page=1)
    assert im.meta["pages"] == 2 and im.meta["page"] == 1
    assert im.meta["channels"] == list(range(64, 70))
    assert im.meta["nonfinite"]["nan"] == 1  # the whole batch item
    assert im.meta["page_nonfinite"]["nan"] == 0  # just this page
    with pytest.raises(ValueError):
        feature_map(x, page=2)


def test_sort_by_strength_orders_channels():
    x = torch.zeros(1, 5, 4, 4)
    for ch, strength in enumerate([0.1, 3.0, -5.0, 0.5, 2.0]):
        x[0, ch] = strength
    im = feature_map(x, sort_by_strength=True)
    assert im.meta["channels"] == [2, 1, 4, 3, 0]
    assert im.meta["ranges"][0] == [-5.0, -5.0]


def test_single_channel_renders_large_with_its_range(pixels):
    x = torch.zeros(2, 3, 8, 8)
    x[1, 2, :4] = 2.0
    x[1, 2, 4:] = -1.0
    im = feature_map(x, batch=1, channel=2)
    assert im.meta["layout"] == "single" and im.meta["range"] == [-1.0, 2.0]
    assert im.width >= 256 and im.width == im.height
    img = pixels(im.png)
    assert (img[: im.height // 2] == HIGH).all() and (img[im.height // 2 :] == LOW).all()


def test_batch_item_is_chosen():
    x = torch.zeros(3, 1, 4, 4)
    x[2] = 9.0
    assert feature_map(x, batch=2).meta["ranges"] == [[9.0, 9.0]]
    assert feature_map(x, batch=0).meta["ranges"] == [[0.0, 0.0]]
    with pytest.raises(ValueError):
        feature_map(x, batch=3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_renders_like_float32(dtype):
    x = torch.randint(-8, 8, (1, 6, 9, 9)).to(dtype)
    assert feature_map(x).png == feature_map(x.float()).png
    assert feature_map(x).meta["dtype"] == str(dtype).replace("torch.", "")


def test_token_and_1d_activations_get_a_heat_map(pixels):
    tokens = torch.zeros(2, 6, 32)  # (N, T, D)
    tokens[1, 2] = 1.0
    im = feature_map(tokens, batch=1)
    assert im.meta["layout"] == "heatmap" and im.meta["range"] == [0.0, 1.0]
    f = im.meta["upscale"]
    assert (im.width, im.height) == (32 * f, 6 * f)
    img = pixels(im.png)
    assert (img[2 * f : 3 * f] == HIGH).all() and (img[: 2 * f] == LOW).all()
    seq = feature_map(torch.randn(4, 8, 100))  # (N, C, L)
    assert seq.meta["layout"] == "heatmap"
    assert seq.height * 100 == seq.width * 8


def test_five_d_shows_the_middle_depth():
    x = torch.zeros(1, 2, 5, 4, 4)
    x[0, :, 2] = 3.0
    im = feature_map(x)
    assert im.meta["depth_slice"] == 2 and im.meta["ranges"] == [[3.0, 3.0], [3.0, 3.0]]


def test_large_maps_are_reduced_on_device_keeping_nan(pixels):
    x = torch.zeros(1, 1, 1024, 1024)
    x[0, 0, 700, 900] = float("nan")
    im = feature_map(x)
    assert im.meta["grid"]["downscale"] == 4 and im.width == 256
    assert (pixels(im.png) == NAN).all(axis=-1).sum() == 1
