"""Hook inventory: every hook with its function and source line, owners, leaks, removal."""

from __future__ import annotations

import functools

import torch
from torch import nn

import hookscope
from hookscope.hooks import inventory
from hookscope.hooks.inventory import Inventory


def log_output(module, args, output):
    return None


def log_with_kwargs(module, args, kwargs, output):
    return None


class Counter:
    def __call__(self, module, grad_input, grad_output):
        return None


def small_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def entries(result, **match):
    return [h for h in result["hooks"] if all(h[k] == v for k, v in match.items())]


def test_user_hooks_of_every_kind_are_listed_with_their_source():
    m = small_model()
    handles = [
        m[0].register_forward_hook(log_output),
        m[0].register_forward_hook(log_with_kwargs, with_kwargs=True),
        m[1].register_forward_pre_hook(functools.partial(lambda module, args, tag: None, tag="x")),
        m[2].register_full_backward_hook(Counter()),
        m[2].register_full_backward_pre_hook(lambda module, grad_output: None),
        m.register_state_dict_pre_hook(lambda *a: None),
        m.register_load_state_dict_post_hook(lambda *a: None),
        m[0].weight.register_hook(lambda g: None),
        m[0].bias.register_post_accumulate_grad_hook(lambda p: None),
        nn.modules.module.register_module_forward_hook(log_output),
    ]
    try:
        result = inventory.list_hooks({"net": m})
        fwd = entries(result, model="net", module="0", kind="forward")
        assert [h["function"] for h in fwd] == [f"{__name__}.log_output", f"{__name__}.log_with_kwargs"]
        assert fwd[0]["file"] == __file__ and fwd[0]["line"] == log_output.__code__.co_firstlineno
        assert all(h["owner"] == "user" for h in result["hooks"])
        kinds = {(h["module"], h["kind"]) for h in result["hooks"]}
        assert kinds >= {
            ("1", "forward_pre"),
            ("2", "backward"),
            ("2", "backward_pre"),
            ("", "state_dict_pre"),
            ("", "load_state_dict_post"),
            ("0.weight", "param_grad"),
            ("0.bias", "post_accumulate_grad"),
            ("*", "global_forward"),
        }
        assert entries(result, kind="backward")[0]["function"] == f"{__name__}.Counter"
        partial = entries(result, kind="forward_pre")[0]
        assert partial["function"].endswith("<lambda>") and partial["file"] == __file__
    finally:
        for h in handles:
            h.remove()
    assert inventory.list_hooks({"net": m})["hooks"] == []


def test_a_hook_registered_every_step_is_flagged_as_a_leak():
    m = small_model()
    inv = Inventory()
    m[2].register_forward_hook(log_with_kwargs, with_kwargs=True)  # registered once: fine
    reports = []
    for _step in range(4):
        m[0].register_forward_hook(log_output)  # the classic bug: once per step, never removed
        m(torch.randn(2, 3))
        reports.append(inv.list_hooks({"net": m}))
    assert reports[0]["leaks"] == [] and reports[1]["leaks"] == []
    leaks = reports[3]["leaks"]
    assert len(leaks) == 1
    leak = leaks[0]
    assert (leak["model"], leak["module"], leak["kind"]) == ("net", "0", "forward")
    assert leak["function"] == f"{__name__}.log_output" and leak["counts"] == [1, 2, 3, 4]
    # Once the hooks are cleaned up, the leak is no longer reported.
    m[0]._forward_hooks.clear()
    assert inv.list_hooks({"net": m})["leaks"] == []


def test_hookscope_hooks_are_told_apart_and_can_be_swept():
    m = small_model()
    user = m[0].register_forward_hook(log_output)
    acts = hookscope.capture(m, types=nn.Linear)
    result = inventory.list_hooks({"net": m})
    owners = sorted((h["module"], h["owner"]) for h in result["hooks"])
    assert owners == [("0", "hookscope"), ("0", "user"), ("2", "hookscope")]
    assert len(inventory.hookscope_hooks({"net": m})) == 2
    assert inventory.remove_hookscope_hooks({"net": m}) == 2
    assert [h["owner"] for h in inventory.list_hooks({"net": m})["hooks"]] == ["user"]
    acts.remove()  # removing already-swept handles is harmless
    user.remove()


def test_remove_added_since_only_touches_newer_hooks():
    m = small_model()
    old = m[0].register_forward_hook(log_output)
    first = inventory.next_handle_id()
    m[1].register_forward_hook(log_output)
    m[2].weight.register_hook(lambda g: None)
    assert inventory.remove_added_since({"net": m}, first) == 2
    assert [h["module"] for h in inventory.list_hooks({"net": m})["hooks"]] == ["0"]
    old.remove()
