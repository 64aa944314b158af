"""Break on NaN/Inf finds a NaN in the very first step of a model built after the optimizer.

The program runs for real, connected the way a debug session connects it, and the editor turns
break on NaN/Inf on before the program imports torch (the extension sends its settings at once).
The program then builds its optimizer, then the model it trains, and runs the first step at once:
the agent's hooks race the first forward. Each case runs several times (the race went the wrong
way 7 times out of 7 before it was fixed: the check then stayed quiet for the whole run).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from reliability_support import subprocess_env

from hookscope import bootstrap

SCRIPT = textwrap.dedent("""
    import os, sys, time

    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.02)          # the editor has turned break on NaN/Inf on

    import torch
    from torch import nn

    class Log(nn.Module):
        def forward(self, x):
            return torch.log(x)                 # NaN where x < 0: born here, in the forward

    class SqrtAtZero(nn.Module):
        def forward(self, x):
            return torch.sqrt(x * 0.0) + x      # finite forward; NaN born here in the backward

    class Net(nn.Module):
        def __init__(self, culprit):
            super().__init__()
            self.fc1 = nn.Linear(4, 8)
            self.culprit = culprit
            self.fc2 = nn.Linear(8, 1)

        def forward(self, x):
            return self.fc2(self.culprit(self.fc1(x)))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x)

    torch.manual_seed(0)
    case, where = sys.argv[2], sys.argv[3]
    if case == "optimizer-first":       # an optimizer over a bare parameter, the model after it
        scale = nn.Parameter(torch.ones(1))
        opt = torch.optim.SGD([scale], lr=0.01)
        extra = lambda: scale.sum() * 0.0
    else:                               # a model, its optimizer, then a second model that is trained
        encoder = Encoder()
        opt = torch.optim.SGD(encoder.parameters(), lr=0.01)
        extra = lambda: encoder(torch.ones(1, 4)).sum() * 0.0
    model = Net(Log() if where == "forward" else SqrtAtZero())
    opt.add_param_group({"params": list(model.parameters())})
    for step in range(3):               # the first step at once: a NaN in it
        loss = model(torch.randn(16, 4)).mean() + extra()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("trained", flush=True)
""")

CASES = [(c, w) for c in ("optimizer-first", "second-model") for w in ("forward", "backward")]


@pytest.mark.parametrize("case, where", CASES)
@pytest.mark.parametrize("run", range(5))
def test_a_nan_in_the_first_step_of_a_model_built_after_the_optimizer_is_found(link, tmp_path, case, where, run):
    script, go = tmp_path / "train.py", tmp_path / "go"
    script.write_text(SCRIPT)
    env = subprocess_env({**link.env(), "PYTHONPATH": bootstrap.pythonpath(None)})
    proc = subprocess.Popen(
        [sys.executable, str(script), str(go), case, where],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        conn = link.wait_connection(120)
        assert conn.request("setBreakOnNonFinite", enabled=True, timeout=60) == {"enabled": True}
        go.touch()
        hit = conn.wait_event("hit", timeout=120)
        out, err = proc.communicate(timeout=120)
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "trained" in out, err[-3000:]
    models = {m["model"]["id"]: m["model"]["cls"] for m in conn.received if m.get("type") == "modelAdded"}
    assert (models.get(hit["model"]), hit["layer"], hit["phase"], hit["step"]) == ("Net", "culprit", where, 0), (
        hit["reason"],
        models,
    )
    notices = [m["message"] for m in conn.received if m.get("type") == "notice" and m.get("level") != "info"]
    assert not notices, notices
