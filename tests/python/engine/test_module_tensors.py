"""ModuleTensors: a model's parameters and buffers stay current without a tree walk per step."""

from __future__ import annotations

import torch
from engine_models import Net, hooks_left, train
from torch import nn

from hookscope.engine.core import Engine
from hookscope.hooks.module_tensors import REFRESH_EVERY, ModuleTensors, StructureWatch


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return [id(t) for t in a] == [id(t) for t in b]


def watched(model: nn.Module) -> tuple[ModuleTensors, StructureWatch]:
    structure = StructureWatch()
    structure.acquire()
    return ModuleTensors(model, structure), structure


def test_lists_what_parameters_and_buffers_list_tied_weights_once():
    model = nn.Sequential(nn.Embedding(10, 4), nn.BatchNorm1d(4), nn.Linear(4, 10))
    model[2].weight = model[0].weight  # tied embedding / output weights
    tensors, structure = watched(model)
    try:
        assert same(tensors.parameters(), list(model.parameters()))
        assert same(tensors.buffers(), list(model.buffers()))
    finally:
        structure.release()


def test_a_layer_assigned_later_is_seen_at_once_and_a_direct_write_within_the_refresh_period():
    model = nn.Sequential(nn.Linear(2, 2))
    tensors, structure = watched(model)
    try:
        tensors.parameters()
        model.extra = nn.Linear(2, 3)  # through __setattr__: the registration hook reports it
        assert same(tensors.parameters(), list(model.parameters()))
        model._modules["hidden"] = nn.Linear(3, 3)  # what Sequential.insert does: no hook sees it
        for _ in range(REFRESH_EVERY + 1):
            found = tensors.parameters()
        assert same(found, list(model.parameters()))
    finally:
        structure.release()


def test_replaced_tensors_are_current_without_any_structure_change():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    tensors, structure = watched(model)
    try:
        tensors.buffers()
        model.half()  # replaces every buffer object in _buffers directly
        assert same(tensors.buffers(), list(model.buffers()))
        model[0].weight.grad = torch.ones(2, 2, dtype=torch.half)
        assert same(sum(tensors.grad_groups(), []), [model[0].weight.grad])
    finally:
        structure.release()


def test_gradients_come_in_two_groups_small_cpu_ones_to_flatten_each_tied_weight_once():
    from hookscope.hooks.module_tensors import FLATTEN_MAX_NUMEL

    model = nn.Sequential(nn.Embedding(1000, 16), nn.Linear(16, 16), nn.Linear(16, 1000))
    model[2].weight = model[0].weight  # tied: one gradient, checked once
    model(torch.arange(4)).sum().backward()
    tensors, structure = watched(model)
    try:
        flat, norm = tensors.grad_groups()
        assert model[0].weight.numel() > FLATTEN_MAX_NUMEL >= model[2].bias.numel()
        assert same(flat, [model[1].weight.grad, model[1].bias.grad, model[2].bias.grad])
        assert same(norm, [model[0].weight.grad])
        model[1].bias.grad = None  # a parameter without a gradient is skipped
        assert len(sum(tensors.grad_groups(), [])) == 3
        assert not tensors.half_grads
        model.half()
        for _ in range(REFRESH_EVERY + 1):
            tensors.grad_groups()
        assert tensors.half_grads  # dtype changes are seen at the next rebuild
    finally:
        structure.release()


def test_the_global_registration_hooks_exist_only_while_break_on_nan_is_on():
    model = Net()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True)
    assert "global module registration hooks" in hooks_left(model)
    engine.set_break_on_nonfinite(False)
    assert hooks_left(model) == []
    engine.set_break_on_nonfinite(True)
    engine.shutdown()
    assert hooks_left(model) == []


def test_break_on_nan_checks_the_gradients_of_a_layer_added_after_it_was_turned_on():
    torch.manual_seed(0)
    model = Net()
    hits = []
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)
    train(model, 2)
    model.fc2 = nn.Linear(model.fc2.in_features, model.fc2.out_features)  # a fresh head
    # only this new weight's gradient goes bad: the forward and every other gradient stay finite
    model.fc2.weight.register_hook(lambda grad: torch.full_like(grad, float("nan")))
    train(model, 1, optimizer=False)
    engine.shutdown()
    assert [(h.layer, h.phase) for h in hits] == [("fc2", "param_grad")], [h.reason for h in hits]
