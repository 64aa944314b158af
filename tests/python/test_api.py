"""The Python API: each seed pattern works and leaves no hook behind."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import hookscope
from hookscope.hooks import inventory


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act2(self.conv2(self.act1(self.conv1(x))))
        return self.fc(self.pool(x).flatten(1))


@pytest.fixture
def model() -> SmallCNN:
    return SmallCNN()


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    assert hookscope.live_hook_count() == 0, "an API object kept hooks after the test"


def no_hooks(model: nn.Module) -> bool:
    return inventory.list_hooks({"m": model})["hooks"] == []


X = torch.randn(2, 3, 8, 8)


def test_lazy_import_does_not_load_torch():
    import subprocess
    import sys

    code = "import sys, hookscope; assert 'torch' not in sys.modules; hookscope.HookSet; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_lazy_names_are_the_api_names():
    """``hookscope/__init__`` lists the API's names itself (importing ``hookscope.api`` to read its
    ``__all__`` would import torch): the two lists must not drift apart."""
    from hookscope import _API_NAMES, api

    assert _API_NAMES == set(api.__all__)


def test_capture_one_layer_detached(model):
    acts = hookscope.capture(model, "conv1")
    out = model(X)
    expected = model.conv1(X)
    assert torch.equal(acts["conv1"], expected) and not acts["conv1"].requires_grad
    assert out.requires_grad  # the model's own graph is untouched
    assert list(acts) == ["conv1"] and "conv1" in repr(acts)
    assert acts.remove() == 1 and no_hooks(model)
    assert torch.equal(acts["conv1"], expected)  # still readable after removal


def test_capture_every_layer_of_a_type_on_cpu(model):
    with hookscope.capture(model, types=nn.Conv2d, cpu=True, keep="all") as acts:
        model(X)
        model(X[:1])
    assert set(acts) == {"conv1", "conv2"}
    assert [t.shape[0] for t in acts.history["conv2"]] == [2, 1]
    assert acts["conv2"].device.type == "cpu"
    assert no_hooks(model)


def test_capture_by_glob_module_and_inputs(model):
    with hookscope.capture(model, ["act*", model.fc], inputs=True, clone=True) as acts:
        model(X)
    assert set(acts) == {"act1", "act2", "fc"}
    assert isinstance(acts["fc"], tuple) and acts["fc"][0].shape == (2, 8)


def test_capture_explains_bad_names(model):
    with pytest.raises(ValueError, match="did you mean 'conv1'"):
        hookscope.capture(model, "conv_1")
    acts = hookscope.capture(model, "conv1")
    with pytest.raises(KeyError, match="has not run yet"):
        acts["conv1"]
    with pytest.raises(KeyError, match="not captured"):
        acts["fc"]
    acts.remove()


def test_scope_removes_everything_even_when_the_body_raises(model):
    with pytest.raises(RuntimeError, match="boom"):
        with hookscope.scope(model) as hooks:
            hooks.forward(model.conv1, lambda m, i, o: None)
            hookscope.capture(model, types=nn.ReLU)  # joins the scope
            hookscope.activation_stats(model)
            model.fc.register_forward_hook(lambda m, i, o: None)  # the user's own, registered in the body
            model.fc.weight.register_hook(lambda g: None)
            assert len(inventory.list_hooks({"m": model})["hooks"]) > 5
            raise RuntimeError("boom")
    assert no_hooks(model)


def test_scope_keeps_hooks_from_before(model):
    before = model.conv1.register_forward_hook(lambda m, i, o: None)
    with hookscope.scope(model):
        model.conv2.register_forward_hook(lambda m, i, o: None)
    assert [h["module"] for h in inventory.list_hooks({"m": model})["hooks"]] == ["conv1"]
    before.remove()


def test_hookset_bookkeeping_and_remove_all(model):
    hooks = hookscope.HookSet()
    seen = []
    hooks.forward_pre(model.conv1, lambda m, args: seen.append("pre"))
    hooks.forward(model.conv1, lambda m, args, out: seen.append("fwd"))
    hooks.backward(model.conv2, lambda m, gi, go: seen.append("bwd"))
    hooks.backward_pre(model.fc, lambda m, go: seen.append("bwd_pre"))
    hooks.post_accumulate_grad(model.fc.weight, lambda p: seen.append("acc"))
    hooks.add(model.fc.register_forward_hook(lambda m, i, o: None))
    acts = hookscope.capture(model, "conv2")  # another API object: also found by remove_all
    assert len(hooks) == 6
    model(X).sum().backward()
    assert seen[:2] == ["pre", "fwd"] and {"bwd", "bwd_pre", "acc"} <= set(seen)
    assert hookscope.remove_all() == 7
    assert len(hooks) == 0 and no_hooks(model) and hookscope.remove_all() == 0
    del acts


def test_activation_stats_per_layer(model):
    with hookscope.activation_stats(model, types=nn.Conv2d) as stats:
        model(X)
        model(X * 2)
    conv1 = stats["conv1"]
    assert conv1.calls == 2
    ref = [model.conv1(X).detach(), model.conv1(X * 2).detach()]
    assert conv1.means == pytest.approx([float(r.mean()) for r in ref], rel=1e-5)
    assert conv1.stds == pytest.approx([float(r.std()) for r in ref], rel=1e-5)
    assert list(stats.summary()) == ["conv1", "conv2"] and "conv2" in stats.table()
    default = hookscope.activation_stats(model)  # every leaf layer
    assert default.layers == ["conv1", "act1", "conv2", "act2", "pool", "fc"]
    default.remove()
    assert no_hooks(model)


def test_gradient_checks_with_tensor_hooks():
    w = torch.randn(4, requires_grad=True)
    h1, h2, h3 = w * 1.0, w * 2.0, w * 3.0
    with hookscope.grad_check({"h1": h1, "h2": h2, "h3": h3}, vanishing=1e-6, exploding=1e3) as gc:
        (h1 * 1e-9 + h2 * 1e5 + h3).sum().backward()
    assert sorted((e.name, e.kind) for e in gc.events) == [("h1", "vanishing"), ("h2", "exploding")]
    assert gc.norms["h1"] == pytest.approx([2e-9])
    assert gc.norms["h2"] == pytest.approx([2e5])
    assert gc.norms["h3"] == pytest.approx([2.0])


def test_gradient_check_flags_vanishing_parameters_and_activations(model):
    with hookscope.grad_check(model, vanishing=1e-6, activations=True) as gc:
        (model(X).sum() * 1e-12).backward()
    names = {e.name for e in gc.events if e.kind == "vanishing"}
    assert {"conv1.weight", "fc.weight", "conv1:output"} <= names
    assert gc.norms["fc.weight"][0] == pytest.approx(float(model.fc.weight.grad.norm()), rel=1e-5)
    assert "vanishing gradient at" in gc.report()
    assert no_hooks(model)


def test_gradient_check_actions():
    w = torch.randn(3, requires_grad=True)
    with hookscope.grad_check({"w": w}, exploding=1.0, action="raise"):
        with pytest.raises(hookscope.GradientError) as info:
            (w * 100).sum().backward()
    assert info.value.event.name == "w" and info.value.event.kind == "exploding"
    seen = []
    with hookscope.grad_check([("w", w)], exploding=1.0, action=seen.append):
        (w * 100).sum().backward()
    assert len(seen) == 1
    with hookscope.grad_check(w, exploding=1.0, action="warn"):
        with pytest.warns(hookscope.GradientWarning):
            (w * 100).sum().backward()
    with pytest.raises(ValueError):
        hookscope.grad_check({"x": torch.zeros(2)})


def test_grad_norms_and_flow(model):
    model(X).sum().backward()
    norms = hookscope.grad_norms(model)
    assert set(norms) == {n for n, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        assert norms[name] == pytest.approx(float(p.grad.norm()), rel=1e-5)
    model.conv1.weight.grad = None
    assert "conv1.weight" not in hookscope.grad_norms(model)
    flow = hookscope.grad_flow(model)
    assert [layer["name"] for layer in flow] == ["conv1", "conv2", "fc"]
    assert all(layer["status"] == "ok" for layer in flow)


def test_grad_cam_through_the_api(model):
    result = hookscope.grad_cam(model, "conv2", X, target=1)
    assert result.cam.shape == (2, 8, 8) and result.target.tolist() == [1, 1]
    assert float(result.cam.min()) >= 0 and float(result.cam.max()) <= 1
    assert result.gradient_source == "full_backward_hook"
    assert no_hooks(model)


def test_interventions_through_the_api(model):
    base = model.conv1(X)
    with hookscope.zero_channels(model, "conv1", [0, 5]) as iv:
        out = model.conv1(X)
        assert hookscope.list_interventions()[0]["layer"] == "conv1" and iv.active
    assert (out[:, [0, 5]] == 0).all() and torch.equal(out[:, 1:5], base[:, 1:5])
    assert hookscope.list_interventions() == [] and no_hooks(model)
    with hookscope.scope(model):
        hookscope.scale_output(model, model.conv1, 3.0)
        hookscope.mean_ablate(model, "conv2")
        hookscope.input_noise(model, "fc", 0.0)
        assert torch.equal(model.conv1(X), base * 3.0)
        assert len(hookscope.list_interventions()) == 3
    assert hookscope.list_interventions() == [] and no_hooks(model)


def test_no_warnings_from_the_api(model):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hookscope.scope(model):
            hookscope.capture(model, types=nn.Conv2d)
            hookscope.activation_stats(model)
            model(X).sum().backward()
            hookscope.grad_cam(model, "conv1", X)
