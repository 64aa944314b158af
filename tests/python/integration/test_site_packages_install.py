"""hookscope installed normally (a wheel in site-packages, not this checkout): with justMyCode on,
pydevd takes site-packages for library code and would hide the stop frame; the launch rule that
the editor and ``hookscope run`` add lets it through. Checks where the stop lands and that the
Variables view and evaluate see the layer's locals."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hs_session import DEADLINE, FIXTURES, ROOT, DebugSession, marker_line

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory) -> tuple[str, str]:
    """A fresh venv with hookscope pip-installed from this checkout (non-editable); torch, debugpy
    and the rest come from this environment's site-packages through a .pth file."""
    venv = tmp_path_factory.mktemp("site-install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=DEADLINE)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "hookscope_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", str(ROOT)], check=True, timeout=600, capture_output=True
    )
    where = subprocess.run(
        [python, "-c", "import hookscope, hookscope.bootstrap as b; print(hookscope.__file__); print(b.path())"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout.split()
    assert where[0].startswith(site), f"hookscope is imported from {where[0]}, not from {site}"
    return python, where[1]


def test_justmycode_stop_from_site_packages_lands_in_user_code(installed_python):
    python, bootstrap_dir = installed_python
    session = DebugSession(FIXTURES / "tiny_cnn.py", ["--steps", "2"], True, python=python, bootstrap_dir=bootstrap_dir)
    try:

        def before_run(conn):
            conn.request("setBreakpoints", breakpoints=[{"id": "b", "layer": "conv2", "phases": ["forward"]}])

        conn = session.start(before_run)
        hit = conn.wait_event("hit", timeout=DEADLINE)
        assert (hit["layer"], hit["pausing"]) == ("conv2", True), hit
        thread_id, frame = session.stopped()
        # Installed in site-packages, Hookscope is a library to justMyCode: the stop is still shown.
        session.assert_shown_in_user_code(
            thread_id,
            frame,
            "conv2 · forward",
            FIXTURES / "tiny_cnn.py",
            marker_line(FIXTURES / "tiny_cnn.py", "call.conv2"),
        )
        assert {"layer", "module", "inputs", "output", "reason"} <= set(session.dap.frame_variables(frame["id"]))
        assert session.dap.evaluate("tuple(output.shape)", frame["id"]) == "(8, 4, 8, 8)"
        session.resume(thread_id)
        assert session.continue_until_exit() == 0
    finally:
        session.close()
