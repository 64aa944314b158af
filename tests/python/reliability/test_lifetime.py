"""Hookscope never keeps the program's models alive: a model the program drops is freed and reported removed.

A sweep, a k-fold loop or an evaluation that builds a fresh model per run must
not keep every earlier model (and its GPU memory) alive because the editor
once saw it. The program runs for real with the agent connected the way a
debug session connects it, with everything turned on that holds per-model
state: break on NaN, a layer breakpoint, a watch and an intervention.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from reliability_support import subprocess_env

from hookscope import bootstrap

SCRIPT = textwrap.dedent("""
    import gc, os, sys, time, weakref
    import torch
    from torch import nn

    def wait_for(path):
        deadline = time.monotonic() + 120
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)

    def train(steps):
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(steps):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        return model

    torch.manual_seed(0)
    first = train(1)
    wait_for(sys.argv[1])              # the editor turns everything on for the first model
    train_again = train(0)             # a second model, alive until the end
    ref = weakref.ref(first)
    first(torch.randn(2, 4)).pow(2).mean().backward()   # hooks fire, state is taken
    del first
    gc.collect()
    print("first freed", ref() is None, flush=True)
    wait_for(sys.argv[2])              # the editor saw the model go
""")


def test_a_model_the_program_drops_is_freed_and_reported_removed(link, tmp_path):
    script, go, done = tmp_path / "sweep.py", tmp_path / "go", tmp_path / "done"
    script.write_text(SCRIPT)
    env = subprocess_env({**link.env(), "PYTHONPATH": bootstrap.pythonpath(None)})
    proc = subprocess.Popen(
        [sys.executable, str(script), str(go), str(done)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        conn = link.wait_connection(120)
        added = conn.wait_event("modelAdded", timeout=120)["model"]["id"]
        assert conn.request("setBreakOnNonFinite", enabled=True, timeout=60) == {"enabled": True}
        resolved = conn.request(
            "setBreakpoints",
            timeout=60,
            breakpoints=[
                {"id": "b", "layer": "0", "phases": ["forward", "backward"], "condition": {"kind": "nonfinite"}}
            ],
        )
        assert resolved["resolved"][0]["layers"] == ["0"], resolved
        assert conn.request("watch", layers=["0", "2"], model=added, timeout=60)["layers"] == ["0", "2"]
        conn.request("addIntervention", layer="2", kind="scale", value=1.0, model=added, timeout=60)
        go.touch()
        removed = conn.wait_event("modelRemoved", timeout=60)
        assert removed["id"] == added
        done.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        done.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "first freed True" in out, out + err[-3000:]
