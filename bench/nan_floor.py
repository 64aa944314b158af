"""Break on NaN/Inf at its floor: the per-step check's torch calls on the stack of ten, added one at a time.

Per step, the sentinel (backend/hookscope/engine/replay/nonfinite.py) needs hooks on the
model root, the RNG state (so a bad step replays exactly), a check of the
forward output, a hook on the output's gradient that queues an
end-of-backward callback, and a check of every gradient. Here those same
torch calls run in bare hooks with no Hookscope code around them, one part
more in each configuration, the configurations taking turns in one process;
the last line is Hookscope's own sentinel. The gap between "all parts" and
Hookscope is Hookscope's own Python; the rest is what a per-step check of
this kind costs on a 0.4 ms step. One intra-op thread; ``make bench`` runs it
in plain Python and again under debugpy.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "backend"))
sys.path.insert(0, str(HERE))

import models  # noqa: E402
from worker import timed_step  # noqa: E402

from hookscope.engine.core import Engine  # noqa: E402

PARTS = (
    "root hooks",
    "RNG state",
    "forward output check",
    "output-gradient hook + end-of-backward callback",
    "gradient check",
)
ROUNDS = 80
BLOCK_STEPS = 10
SETTLE_S = 0.02


class BareCheck:
    """The sentinel's per-step torch calls, the first ``parts`` of PARTS, in plain hooks."""

    def __init__(self, model: torch.nn.Module, parts: int) -> None:
        self.model, self.parts = model, parts
        self.params = list(model.parameters())
        self.handles: list[Any] = []
        self.args: tuple = ()  # kept for a replay, as the sentinel keeps them
        self.rng: torch.Generator | None = None
        self.root_grad: torch.Tensor | None = None

    def install(self) -> None:
        self.handles = [
            self.model.register_forward_pre_hook(self.pre, with_kwargs=True),
            self.model.register_forward_hook(self.post, with_kwargs=True),
            register_optimizer_step_pre_hook(self.before_optimizer),
        ]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def pre(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        self.args = args
        if self.parts >= 2:
            self.rng = torch.default_generator.clone_state()

    def post(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: torch.Tensor) -> None:
        if self.parts >= 3 and not math.isfinite(output.detach().sum().item()):
            raise AssertionError("the benchmark's model went non-finite")
        if self.parts >= 4:  # as leaf_hooks.hook_gradient places it: Tensor.register_hook less its frames
            hooks = output._backward_hooks
            if hooks is None:
                hooks = output._backward_hooks = OrderedDict()
                output.grad_fn._register_hook_dict(output)
            hooks[self.output_grad] = self.output_grad

    def output_grad(self, grad: torch.Tensor) -> None:
        self.root_grad = grad
        torch.autograd.Variable._execution_engine.queue_callback(self.after_backward)

    def after_backward(self) -> None:
        if self.parts >= 5:
            grads = [p.grad for p in self.params if p.grad is not None] + [self.root_grad]
            if not math.isfinite(torch._C._nn.flatten_dense_tensors(grads).sum().item()):
                raise AssertionError("the benchmark's model went non-finite")

    def before_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        pass


def main() -> None:
    torch.set_num_threads(1)
    model, batch, loss_fn = models.build("stack10", "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    engine = Engine(lambda event: None, shapes=False)
    engine.add_model("stack10", model)

    def bare(parts: int) -> tuple[Callable[[], None], Callable[[], None]]:
        check = BareCheck(model, parts)
        return check.install, check.remove

    configs: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {"nothing": (lambda: None, lambda: None)}
    for n, part in enumerate(PARTS, 1):
        configs[("+ " if n > 1 else "") + part] = bare(n)
    configs["Hookscope's sentinel"] = (
        lambda: engine.set_break_on_nonfinite(True),
        lambda: engine.set_break_on_nonfinite(False),
    )
    times: dict[str, list[float]] = {name: [] for name in configs}
    shuffler = random.Random(7)
    for round_ in range(ROUNDS + 1):  # the first round warms up
        order = list(configs)
        shuffler.shuffle(order)
        for name in order:
            install, remove = configs[name]
            install()
            settle_from = time.perf_counter()
            while time.perf_counter() < settle_from + SETTLE_S:
                timed_step(model, batch, loss_fn, optimizer, lambda: None)
            block = [timed_step(model, batch, loss_fn, optimizer, lambda: None) for _ in range(BLOCK_STEPS)]
            remove()
            if round_:
                times[name] += block
    engine.shutdown()
    base = statistics.median(times["nothing"])
    where = "under debugpy" if "debugpy" in sys.modules else "plain Python"
    print(
        f"Break on NaN/Inf on the stack of ten, {where}: median of {ROUNDS * BLOCK_STEPS} steps per line, "
        "configurations taking turns; each line adds one part to the one above"
    )
    print(f"{'configuration':52} {'step ms':>8} {'÷ nothing':>9} {'added µs':>9}")
    previous = base
    for name, samples in times.items():
        median = statistics.median(samples)
        added = "" if name in ("nothing", "Hookscope's sentinel") else f"{(median - previous) * 1e6:+9.0f}"
        print(f"{name:52} {median * 1e3:8.3f} {median / base:8.3f}× {added:>9}")
        if name != "Hookscope's sentinel":
            previous = median


if __name__ == "__main__":
    main()
