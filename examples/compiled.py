"""A torch.compile'd model, to see what Hookscope can and cannot hook in it.

    python examples/compiled.py            (or debug it with Hookscope)

dynamo traces the submodules' forward into one graph and does not notice
hooks added afterwards, so layer breakpoints on ``fc1``/``fc2`` inside the
compiled model do not fire: Hookscope marks those layers "compiled" in the
Layers tree and sends a notice when a breakpoint lands there. To debug them,
click the notice's "Run Compiled Code Eagerly While Debugging" (the setting
``hookscope.runCompiledEagerly``): the next step runs eagerly and the breakpoint
fires. In code: ``torch.compiler.set_stance("force_eager")`` (``"default"`` to go
back); the script does that itself with ``--eager``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--backend", default="inductor", help="'eager' compiles in a second (same hook behaviour)")
    parser.add_argument("--eager", action="store_true", help="run the compiled model eagerly (hooks fire)")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause between steps (to watch it live)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.compile(Net(), backend=args.backend)
    if args.eager:
        torch.compiler.set_stance("force_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_seconds)


if __name__ == "__main__":
    main()
