"""Many processes: DataLoader workers, subprocess/multiprocessing children, and DDP ranks.

The agent is started the way a debug session starts it without a debugger:
the bootstrap folder on ``PYTHONPATH`` and ``HOOKSCOPE_ADDR``/``TOKEN`` in the
environment. Only the processes that train should connect: the main script,
or each DDP rank (with its own ``rank`` in ``hello``), never a DataLoader
worker, a multiprocessing child or the ``torchrun`` launcher.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from reliability_support import ROOT, subprocess_env, wait_until

from hookscope import bootstrap

CHILDREN_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, subprocess, sys
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    def square(v):
        return v * v

    if __name__ == "__main__":
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(2):
            for x, y in DataLoader(data, batch_size=8, num_workers=2):
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad(); loss.backward(); opt.step()
        with mp.get_context("spawn").Pool(2) as pool:
            assert pool.map(square, [1, 2, 3]) == [1, 4, 9]
        with mp.get_context("fork").Pool(2) as pool:
            assert pool.map(square, [1, 2, 3]) == [1, 4, 9]
        out = subprocess.run([sys.executable, "-c", "import torch; print('child ok')"],
                             capture_output=True, text=True, check=True).stdout
        assert "child ok" in out
        print("loss", round(loss.item(), 6), flush=True)
""")


def _env(link, extra=None):
    env = subprocess_env({**link.env(), "PYTHONPATH": bootstrap.pythonpath(None)})
    env.update(extra or {})
    return env


def test_workers_and_children_do_not_start_agents(link, tmp_path):
    script = tmp_path / "children.py"
    script.write_text(CHILDREN_SCRIPT)
    plain = subprocess.run(
        [sys.executable, str(script)], env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    run = subprocess.run([sys.executable, str(script)], env=_env(link), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == plain.stdout.strip().splitlines()[-1], "training changed"
    assert "hookscope" not in run.stderr.lower(), run.stderr[-2000:]
    pids = sorted({c.pid for c in link.connections})
    assert len(pids) >= 1, "the main process must connect"
    main = link.connections[0]
    assert main.hello["argv"][0].endswith("children.py")
    # Only the main script connected: no DataLoader worker, no pool child.
    others = [c.hello for c in link.connections if c.pid != main.pid]
    plain_python_children = [
        h for h in others if h["argv"][:2] == ["-c", "import torch; print('child ok')"] or h["argv"] == ["-c"]
    ]
    assert not [h for h in others if h not in plain_python_children], others
    # A plain `python -c` child is a separate program (as debugpy's subProcess follows it): it
    # connects as its own process; workers and pool children never do.
    assert len(plain_python_children) == 1, others


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
    reason="torchrun is not installed next to this Python",
)
def test_ddp_each_rank_connects_and_rank1_nan_is_reported_by_rank1(link, tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    hits: list[tuple[int, dict]] = []

    go = tmp_path / "go"
    link.on_event = lambda conn, event: hits.append((conn.hello["rank"], event)) if event["type"] == "hit" else None
    # The ranks build their model, then wait for `go`: the test first turns break on NaN on in both.
    proc = subprocess.Popen(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--standalone",
            str(ROOT / "examples" / "ddp.py"),
            "--steps",
            "6",
            "--nan-step",
            "3",
            "--go-file",
            str(go),
        ],
        env=_env(link),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for index in (0, 1):
            conn = link.wait_connection(120, index=index)
            conn.wait_event("modelAdded", timeout=120)
            assert conn.request("setBreakOnNonFinite", enabled=True, timeout=60) == {"enabled": True}
        go.touch()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-4000:]
    assert "rank 0 done" in out and "rank 1 done" in out
    ranks = sorted((c.hello["rank"], c.hello["worldSize"]) for c in link.connections)
    assert ranks == [(0, 2), (1, 2)], f"only the ranks connect, each with its rank: {ranks}"
    first = wait_until(lambda: hits, timeout=30, what="a hit")[0]
    rank, hit = first
    assert rank == 1 and hit["breakpoint"] == "nonfinite" and hit["layer"] == "module.fc1", hits[:2]
    assert hit["pausing"] is False  # no debugger: logged
    assert all(r == 1 for r, h in hits if h["step"] <= hits[0][1]["step"]), "rank 0 was clean at that step"


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
    reason="torchrun is not installed next to this Python",
)
def test_ddp_under_the_debugger_pauses_rank1_and_continues_without_deadlock():
    """``hookscope run --break-on-nonfinite torchrun ...``: debugpy follows the ranks (one child DAP
    session each), both connect, rank 1's NaN pauses rank 1 in the layer it was born in, and
    continuing lets both ranks finish (rank 0 waited in the gradient all-reduce meanwhile)."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookscope.terminal.cli",
            "run",
            "--json",
            "--break-on-nonfinite",
            torchrun,
            "--nproc_per_node",
            "2",
            "--standalone",
            str(ROOT / "examples" / "ddp.py"),
            "--steps",
            "6",
            "--nan-step",
            "3",
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    detail = result.stdout[-4000:] + result.stderr[-3000:]
    assert result.returncode == 0, detail
    connected = sorted(e["rank"] for e in events if e["event"] == "connected")
    assert connected == [0, 1], detail
    hits = [e for e in events if e["event"] == "hit"]
    assert hits, detail
    first = hits[0]
    assert (first["rank"], first["worldSize"], first["layer"], first["breakpoint"]) == (1, 2, "module.fc1", "nonfinite")
    assert first["pausing"] is True, "rank 1 pauses under the debugger"
    paused = [e for e in events if e["event"] == "paused"]
    assert paused and (paused[0]["rank"], paused[0]["pid"], paused[0]["layer"]) == (1, first["pid"], "module.fc1"), (
        f"the debugger really stopped rank 1 (its own DAP session): {detail}"
    )
    program = "".join(e["output"] for e in events if e["event"] == "output")
    assert "rank 0 done" in program and "rank 1 done" in program, detail
    assert "incompatible copy of pydevd" not in program, "Hookscope's pydevd plugin adds no warning to the ranks"
    assert not [e for e in events if e["event"] == "warning"], detail
