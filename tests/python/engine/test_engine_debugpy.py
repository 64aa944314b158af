"""The stop frame under the real debugpy adapter: where it lands, the locals it shows, continue.

The debuggee uses the Engine directly (no agent, no editor socket): the agent
and the whole editor round trip are covered by tests/python/integration.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hookscope.terminal.dap_client import DapClient

pytestmark = pytest.mark.slow

DEBUGGEE = textwrap.dedent("""
    import json, sys
    import torch
    from torch import nn
    from hookscope.engine.core import Engine

    events = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    engine.set_breakpoints([{"id": "bp1", "layer": "0", "phases": ["backward"]}])
    model(torch.randn(3, 4)).sum().backward()  # @backward
    engine.shutdown()
    with open(sys.argv[1], "w") as f:
        json.dump([{k: v for k, v in e.items() if k != "summaries"} for e in events], f)
""")


def launch(tmp_path: Path, rules: list[dict]) -> tuple[DapClient, Path]:
    script = tmp_path / "debuggee.py"
    script.write_text(DEBUGGEE)
    out = tmp_path / "events.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSCOPE_")}
    dap = DapClient.start_adapter(sys.executable)
    dap.initialize("hookscope-engine-test")
    arguments = {
        "name": "engine test",
        "type": "debugpy",
        "request": "launch",
        "program": str(script),
        "args": [str(out)],
        "cwd": str(tmp_path),
        "python": [sys.executable],
        "console": "internalConsole",
        "justMyCode": True,
        "env": env,
    }
    arguments["rules"] = rules
    pending = dap.send_request("launch", arguments)
    dap.wait_event("initialized", timeout=120)
    dap.request("setExceptionBreakpoints", {"filters": []})
    dap.request("configurationDone")
    pending.result(120)
    return dap, out


def backward_line() -> int:
    return next(n for n, text in enumerate(DEBUGGEE.splitlines(), 1) if text.endswith("# @backward"))


def test_stop_is_shown_in_user_code_and_continue_works(tmp_path):
    dap, out = launch(tmp_path, [{"module": "hookscope", "include": False}])
    try:
        stopped = dap.wait_event("stopped", timeout=120)
        frame = dap.top_frame(stopped["body"]["threadId"])
        # nn.Sequential calls layer 0 from torch's code and the engine here records no creation
        # lines (no discovery): the backward stop is shown at the line running backward.
        assert (frame["name"], frame["source"]["path"], frame["line"]) == (
            "0 · backward",
            str(tmp_path / "debuggee.py"),
            backward_line(),
        )
        stack = dap.request("stackTrace", {"threadId": stopped["body"]["threadId"]})["stackFrames"]
        assert [f["source"]["path"] for f in stack] == [str(tmp_path / "debuggee.py")] * 2, stack
        names = dap.frame_variables(frame["id"])
        assert {"layer", "module", "grad_input", "grad_output", "reason", "stats"} <= set(names)
        assert dap.evaluate("layer", frame["id"]) == "'0'"
        norm = float(dap.evaluate("grad_output[0].norm().item()", frame["id"]))
        assert norm > 0
        assert "Layer breakpoint: 0 (backward)" in dap.evaluate("reason", frame["id"])
        dap.request("continue", {"threadId": stopped["body"]["threadId"]})
        dap.wait_event("terminated", timeout=120)
    finally:
        dap.close()
    events = json.loads(out.read_text())
    assert [e["type"] for e in events if e["type"] in ("hit", "resumed")] == ["hit", "resumed"]
    assert events[0]["pausing"] is True


def test_a_stop_the_debugger_would_hide_is_reported(tmp_path):
    # The model's own file excluded by a rule: no line is left to show the stop at.
    dap, out = launch(tmp_path, [{"path": str(tmp_path), "include": False}, {"module": "hookscope", "include": False}])
    try:
        deadline = time.monotonic() + 120
        while not dap.events("terminated"):
            assert not dap.events("stopped"), "the stop should have been filtered"
            assert time.monotonic() < deadline, "the debuggee did not finish"
            time.sleep(0.2)
    finally:
        dap.close()
    events = json.loads(out.read_text())
    hit = next(e for e in events if e["type"] == "hit")
    assert hit["pausing"] is False
    assert any(e["type"] == "notice" and e.get("code") == "justMyCode" for e in events)
