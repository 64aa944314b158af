"""Drives a real debug session for the integration tests: the debugpy adapter over DAP plus
an editor stand-in on the Hookscope socket, the way VS Code and the extension do."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hookscope
from hookscope import bootstrap
from hookscope.terminal.dap_client import DapClient
from hookscope.terminal.editor_link import BackendConnection, EditorLink

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]
DEADLINE = 120.0
"""Generous: other test suites share this 2-core machine."""


def marker_line(path: Path, marker: str) -> int:
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text.rstrip().endswith(f"# @{marker}"):
            return number
    raise AssertionError(f"no marker {marker} in {path}")


def wait_for(condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class DebugSession:
    """One launch of a script under debugpy with Hookscope's bootstrap on PYTHONPATH."""

    def __init__(
        self,
        script: Path,
        args: list[str] | None = None,
        just_my_code: bool = True,
        extra_pythonpath: list[str] | None = None,
        python: str = sys.executable,
        bootstrap_dir: str | None = None,
    ) -> None:
        """``python``/``bootstrap_dir``: another interpreter and the bootstrap of the hookscope it has
        (the editor asks the interpreter for it); default: this one's."""
        self.script, self.args, self.just_my_code = script, args or [], just_my_code
        self.python, self.bootstrap_dir = python, bootstrap_dir or bootstrap.path()
        self.link = EditorLink()
        self.dap = DapClient.start_adapter()
        self.conn: BackendConnection | None = None
        self.extra_pythonpath = extra_pythonpath or []

    def start(self, before_run: Callable[[BackendConnection], None] | None = None) -> BackendConnection:
        """Launch; ``before_run`` talks to the agent before the script's first line runs."""
        self.dap.initialize("hookscope-tests")
        env = dict(self.link.env())
        user_path = os.pathsep.join(self.extra_pythonpath + [os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join([self.bootstrap_dir] + ([user_path] if user_path else []))
        launch = self.dap.send_request(
            "launch",
            {
                "program": str(self.script),
                "args": self.args,
                "cwd": str(ROOT),
                "python": [self.python],
                "console": "internalConsole",
                "justMyCode": self.just_my_code,
                "env": env,
                "rules": [{"module": "hookscope", "include": False}],
            },
        )
        self.dap.wait_event("initialized", timeout=DEADLINE)
        self.conn = self.link.wait_connection(DEADLINE)
        if before_run is not None:
            before_run(self.conn)
        self.dap.request("setExceptionBreakpoints", {"filters": []})
        self.dap.request("configurationDone", timeout=DEADLINE)
        launch.result(DEADLINE)
        return self.conn

    def output(self) -> str:
        return "".join(
            e["body"].get("output", "")
            for e in self.dap.events("output")
            if e["body"].get("category") in ("stdout", "stderr")
        )

    def stopped(self) -> tuple[int, dict]:
        """The next stop: (thread id, top frame)."""
        event = self.dap.wait_event("stopped", timeout=DEADLINE)
        thread_id = event["body"]["threadId"]
        return thread_id, self.dap.top_frame(thread_id)

    def stack(self, thread_id: int) -> list[dict]:
        """The Call Stack the editor would show."""
        return self.dap.request("stackTrace", {"threadId": thread_id})["stackFrames"]

    def assert_shown_in_user_code(self, thread_id: int, frame: dict, name: str, file: Path, line: int) -> None:
        """The stop frame is named for the layer, at the user's line, and no Hookscope frame is shown."""
        assert (frame["name"], frame["source"]["path"], frame["line"]) == (name, str(file), line), frame
        checkout = str(Path(hookscope.__file__).parent) + os.sep
        shown = [(f["name"], f["source"].get("path", "")) for f in self.stack(thread_id)]
        ours = [s for s in shown if s[1].startswith(checkout) or f"site-packages{os.sep}hookscope{os.sep}" in s[1]]
        assert not ours, shown

    def resume(self, thread_id: int) -> None:
        self.dap.request("continue", {"threadId": thread_id})

    def continue_until_exit(self) -> int:
        """Continue every further stop until the program exits; its exit code."""
        while True:
            if self.dap.events("exited"):
                return int(self.dap.wait_event("exited", timeout=1)["body"]["exitCode"])
            if self.dap.events("stopped"):
                thread_id, _ = self.stopped()
                self.resume(thread_id)
                continue
            if self.dap.closed:
                raise AssertionError("the adapter ended without an exited event")
            time.sleep(0.05)
            self._deadline_check()

    _started_waiting: float | None = None

    def _deadline_check(self) -> None:
        if self._started_waiting is None:
            self._started_waiting = time.monotonic()
        if time.monotonic() - self._started_waiting > DEADLINE:
            raise AssertionError("the program did not exit in time:\n" + self.output()[-2000:])

    def close(self) -> None:
        try:
            if not self.dap.closed and not self.dap.events("terminated"):
                self.dap.request("disconnect", {"terminateDebuggee": True}, timeout=30)
        except Exception:
            pass
        self.dap.close()
        self.link.close()
