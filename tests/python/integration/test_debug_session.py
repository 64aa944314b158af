"""Real debug sessions: debugpy adapter + DAP client + an editor stand-in on the Hookscope socket."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hs_session import DEADLINE, FIXTURES, ROOT, DebugSession, marker_line, wait_for

from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_UNKNOWN_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

TINY_CNN = FIXTURES / "tiny_cnn.py"


@pytest.fixture(scope="module")
def plain_cnn_loss() -> str:
    """The training result without Hookscope or a debugger."""
    result = subprocess.run(
        [sys.executable, str(TINY_CNN), "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=ROOT,
        check=True,
    )
    return re.search(r"final loss (\S+)", result.stdout).group(1)


@pytest.mark.parametrize("just_my_code", [True, False], ids=["justMyCode", "allCode"])
def test_layer_breakpoints_pause_in_the_layer_and_leave_no_hook(tmp_path, plain_cnn_loss, just_my_code):
    wait_file = tmp_path / "disconnected"
    session = DebugSession(
        TINY_CNN,
        ["--steps", "3", "--wait-file", str(wait_file)],
        just_my_code,
        extra_pythonpath=[str(FIXTURES / "user_site")],
    )
    fc_line = marker_line(TINY_CNN, "head.1")
    try:

        def before_run(conn):
            hello = conn.hello
            assert hello["debugger"] is True and hello["argv"][-4:] == ["--steps", "3", "--wait-file", str(wait_file)]
            # Set before the script runs: resolved once the model exists, before its first step.
            conn.request(
                "setBreakpoints",
                breakpoints=[
                    {"id": "b1", "layer": "conv2", "phases": ["backward"], "hitCount": 1},
                    {"id": "b2", "file": str(TINY_CNN), "line": fc_line, "phases": ["forward"], "hitCount": 2},
                ],
            )

        conn = session.start(before_run)
        tree = conn.wait_event("modelAdded", timeout=DEADLINE)["model"]
        modules = {m["name"]: m for m in tree["modules"]}
        assert tree["cls"] == "TinyCNN" and tree["name"] == "model"
        for name, marker in [
            ("", "model"),
            ("conv1", "conv1"),
            ("conv2", "conv2"),
            ("head.0", "head.0"),
            ("head.1", "head.1"),
        ]:
            assert modules[name]["file"] == str(TINY_CNN), name
            assert modules[name]["line"] == marker_line(TINY_CNN, marker), name

        # 1. backward of conv2 at its first hit: shown at the forward line that calls conv2.
        hit = conn.wait_event("hit", timeout=DEADLINE)
        assert (hit["breakpoint"], hit["layer"], hit["phase"], hit["pausing"]) == ("b1", "conv2", "backward", True)
        thread_id, frame = session.stopped()
        session.assert_shown_in_user_code(
            thread_id, frame, "conv2 · backward", TINY_CNN, marker_line(TINY_CNN, "call.conv2")
        )
        variables = session.dap.frame_variables(frame["id"])
        assert {"layer", "module", "grad_input", "grad_output", "reason"} <= set(variables)
        norm = float(session.dap.evaluate("grad_output[0].norm().item()", frame["id"]))
        assert norm > 0
        assert session.dap.evaluate("layer", frame["id"]) == "'conv2'"
        # The agent keeps serving while the program is paused, and bad input gets error replies.
        assert conn.request("ping")["pid"] == conn.pid
        conn.send({"type": "noSuchThing", "id": 900})
        assert conn.wait_reply(900, DEADLINE)["error"]["code"] == ERR_UNKNOWN_TYPE
        conn.send({"type": "setBreakOnNonFinite", "id": 901, "enabled": "yes"})
        assert conn.wait_reply(901, DEADLINE)["error"]["code"] == ERR_BAD_MESSAGE
        session.resume(thread_id)

        # 2. the source-line breakpoint: head.1's forward at its second call.
        hit = conn.wait_event("hit", timeout=DEADLINE)
        assert (hit["breakpoint"], hit["layer"], hit["phase"]) == ("b2", "head.1", "forward")
        thread_id, frame = session.stopped()
        session.assert_shown_in_user_code(
            thread_id, frame, "head.1 · forward", TINY_CNN, marker_line(TINY_CNN, "call.head")
        )
        assert {"inputs", "output"} <= set(session.dap.frame_variables(frame["id"]))
        assert session.dap.evaluate("tuple(output.shape)", frame["id"]) == "(8, 2)"
        session.resume(thread_id)

        # 3. the editor goes away: every hook is removed, the program finishes unharmed.
        wait_for(lambda: "final loss" in session.output(), "the end of training")
        session.link.close()  # no editor to come back to: a reconnect would bring a fresh engine
        wait_file.write_text("go")  # the script now waits (with a deadline) for its hooks to go
        assert session.continue_until_exit() == 0
        output = session.output()
        assert "USER_SITECUSTOMIZE_RAN" in output
        assert f"final loss {plain_cnn_loss}" in output
        assert "HOOKS_LEFT 0" in output, output[-2000:]
    finally:
        session.close()


@pytest.mark.parametrize(
    "script, args, layer, phase, line_text, frame_name, op",
    [
        (
            ROOT / "examples" / "nan.py",
            ["--steps", "10"],
            "head.standardize",
            "forward",
            "return (x - x.mean(dim=0)) / x.std(dim=0)",
            "Standardize.forward · Tensor.div → NaN/Inf",
            "Tensor.div",
        ),
        (
            FIXTURES / "nan_backward.py",
            ["--steps", "4"],
            "sqrt",
            "backward",
            "return torch.sqrt(x)",
            "Sqrt.forward · torch.sqrt → NaN/Inf",
            "SqrtBackward0",
        ),
    ],
    ids=["forward", "backward"],
)
def test_break_on_nonfinite_stops_at_the_op_that_made_it(script, args, layer, phase, line_text, frame_name, op):
    session = DebugSession(script, args)
    try:
        conn = session.start(lambda c: c.request("setBreakOnNonFinite", enabled=True))
        hit = conn.wait_event("hit", timeout=DEADLINE)
        assert (hit["breakpoint"], hit["layer"], hit["phase"]) == ("nonfinite", layer, phase)
        assert hit["origin"] == "born here"
        assert op in hit["reason"], hit["reason"]
        thread_id, frame = session.stopped()
        line = next(n for n, text in enumerate(script.read_text().splitlines(), 1) if line_text in text)
        # The stop is at the line whose op made the first NaN/Inf (for a backward one: the line
        # of the forward op whose backward did), with that frame's locals and the layer's values.
        session.assert_shown_in_user_code(thread_id, frame, frame_name, script, line)
        names = set(session.dap.frame_variables(frame["id"]))
        assert {"self", "x", "layer", "nan_origin", "reason"} <= names, names
        assert session.dap.evaluate("layer", frame["id"]) == repr(layer)
        assert session.dap.evaluate("bool(torch.isfinite(x).all())", frame["id"]) == "True"
        session.resume(thread_id)
        assert session.continue_until_exit() == 0
    finally:
        session.close()


def test_bootstrap_without_debugger_runs_user_sitecustomize_and_stays_lazy():
    from hookscope import bootstrap
    from hookscope.terminal.editor_link import EditorLink

    link = EditorLink()
    try:
        env = {**os.environ, **link.env(), "PYTHONPATH": bootstrap.pythonpath(str(FIXTURES / "user_site"))}
        code = (
            "import sys, os, hookscope.link.agent as a; agent = a.current();"
            "print('connected', agent is not None and agent.wait_connected(60));"
            "print('torch imported', 'torch' in sys.modules);"
            "print('user env', os.environ.get('USER_SITECUSTOMIZE_RAN'))"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=DEADLINE, cwd=ROOT
        )
        assert result.returncode == 0, result.stderr
        assert "USER_SITECUSTOMIZE_RAN" in result.stdout
        assert "connected True" in result.stdout and "torch imported False" in result.stdout
        assert "user env 1" in result.stdout
        assert link.wait_connection(DEADLINE).hello["pid"] > 0
    finally:
        link.close()


def test_launch_module_starts_the_agent():
    from hookscope.terminal.editor_link import EditorLink

    link = EditorLink()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSCOPE_")}
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hookscope.launch",
                "--addr",
                link.addr,
                "--token",
                link.token,
                str(TINY_CNN),
                "--steps",
                "2",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        conn = link.wait_connection(DEADLINE)
        assert conn.hello["argv"] == [str(TINY_CNN), "--steps", "2"]
        assert conn.hello["debugger"] is False
        tree = conn.wait_event("modelAdded", timeout=DEADLINE)["model"]
        assert tree["cls"] == "TinyCNN"
        out, err = process.communicate(timeout=DEADLINE)
        assert process.returncode == 0, err
        assert "final loss" in out
    finally:
        link.close()


def test_connect_after_the_model_exists_finds_it_and_logs(tmp_path):
    from hookscope.terminal.editor_link import EditorLink

    link = EditorLink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSCOPE_")}
    env["HOOKSCOPE_LOG_DIR"] = str(tmp_path)
    process = subprocess.Popen(
        [sys.executable, str(FIXTURES / "attach_later.py"), link.addr, link.token],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        conn = link.wait_connection(DEADLINE)
        tree = conn.wait_event("modelAdded", timeout=DEADLINE)["model"]
        modules = {m["name"]: m for m in tree["modules"]}
        assert tree["cls"] == "TinyCNN" and tree["name"] == "model"
        # Made before Hookscope was there: lines come from the class source.
        assert modules["conv2"]["line"] == marker_line(TINY_CNN, "conv2")
        assert modules["head.1"]["line"] == marker_line(TINY_CNN, "head.1")
        logs = list(tmp_path.glob("hookscope-agent-*.log"))
        assert len(logs) == 1
        wait_for(lambda: "model m1: model (TinyCNN" in logs[0].read_text(encoding="utf-8"), "the agent's log")
    finally:
        out, _ = process.communicate("\n", timeout=DEADLINE)
        link.close()
    assert process.returncode == 0 and "connected True" in out
