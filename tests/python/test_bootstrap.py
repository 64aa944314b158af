"""The bootstrap folder on PYTHONPATH: what it changes in every Python process that inherits it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hookscope import bootstrap

PLUGIN = Path(bootstrap.__file__).parent / "pydevd_plugins" / "extensions" / "pydevd_plugin_hookscope.py"
WARN = (
    "import warnings\n"
    "warnings.warn('incompatible copy of pydevd already imported:\\n {{}}'.format('\\n  '.join({files!r})))\n"
)


def _stderr_of(files: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSCOPE_")}
    env["PYTHONPATH"] = bootstrap.pythonpath(None)
    result = subprocess.run(
        [sys.executable, "-c", WARN.format(files=files)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stderr


def test_debugpy_warning_that_names_only_our_plugin_is_silenced():
    # What debugpy's vendoring check says in a subprocess it follows (a DDP rank).
    assert "incompatible copy" not in _stderr_of([str(PLUGIN), str(PLUGIN.parent / "types" / "x.py")])


def test_debugpy_warning_about_a_real_foreign_pydevd_still_shows():
    stderr = _stderr_of([str(PLUGIN), "/opt/other/pydevd.py"])
    assert "incompatible copy of pydevd already imported" in stderr and "/opt/other/pydevd.py" in stderr


def _fake_bundle(tmp_path: Path) -> tuple[Path, Path]:
    """A bundled layout: <tool>/hookscope (with the real bootstrap) and <libs>/msgpack (a marker)."""
    import shutil

    tool, libs = tmp_path / "tool", tmp_path / "libs"
    shutil.copytree(Path(bootstrap.__file__).parent, tool / "hookscope" / "bootstrap")
    (tool / "hookscope" / "__init__.py").write_text("BUNDLED = True\n", encoding="utf-8")
    (libs / "msgpack").mkdir(parents=True)
    (libs / "msgpack" / "__init__.py").write_text("BUNDLED = True\n", encoding="utf-8")
    return tool, libs


def _python(code: str, pythonpath: str, *flags: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSCOPE_")}
    env["PYTHONPATH"] = pythonpath
    result = subprocess.run(
        [sys.executable, *flags, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True, cwd="/"
    )
    return result.stdout.split()


def test_a_bootstrap_starts_the_hookscope_it_belongs_to_even_when_another_is_installed(tmp_path):
    # This interpreter has hookscope installed (the checkout, editable); the bundled bootstrap's own wins.
    tool, _ = _fake_bundle(tmp_path)
    boot = tool / "hookscope" / "bootstrap"
    code = (
        "import sys, hookscope_boot; hookscope_boot.use_own_hookscope(); import hookscope; "
        f"print(getattr(hookscope, 'BUNDLED', False)); print(sys.path.index({str(tool)!r}) - sys.path.index({str(boot)!r}))"
    )
    assert _python(code, str(boot)) == ["True", "1"], "the bundled package, right after its bootstrap"


def test_an_installed_packages_bootstrap_moves_nothing_on_sys_path(tmp_path):
    # The interpreter's own hookscope (hookscope.backend: environment): its folder is on sys.path already.
    site, _ = _fake_bundle(tmp_path)
    boot = site / "hookscope" / "bootstrap"
    code = (
        "import sys; before = list(sys.path); import hookscope_boot; hookscope_boot.use_own_hookscope(); "
        "import hookscope; print(sys.path == before, getattr(hookscope, 'BUNDLED', False))"
    )
    assert _python(code, os.pathsep.join([str(boot), str(site)])) == ["True", "True"]


def test_bundled_libraries_fill_only_what_is_missing_and_never_stay_on_sys_path(tmp_path):
    tool, libs = _fake_bundle(tmp_path)
    boot = str(tool / "hookscope" / "bootstrap")
    code = (
        f"import sys, hookscope_boot; hookscope_boot.load_missing_libraries({str(libs)!r}); import msgpack; "
        f"print(getattr(msgpack, 'BUNDLED', False)); print({str(libs)!r} in sys.path)"
    )
    # This environment has msgpack: the user's copy stays.
    assert _python(code, boot) == ["False", "False"]
    # Without site-packages (-S) it has none: the bundled one is loaded, and libs leaves sys.path again.
    assert _python(code, boot, "-S") == ["True", "False"]
