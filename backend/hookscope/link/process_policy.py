"""Which processes run an agent, and what an agent tells the editor about its process.

Multiprocessing workers (a DataLoader's) and a ``torchrun`` launcher get no agent: the launcher's
ranks each get their own, and a worker is a copy of the training process, not a new program.
What an agent says about its process (``describe_process``) goes to the editor once the editor
has proved the session token: the rank, the versions, the command line as the user's script sees
it under debugpy.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from hookscope import __version__


def is_distributed_launcher(argv: list[str]) -> bool:
    """Whether this command line is ``torchrun`` / ``python -m torch.distributed.run`` (or ``.launch``)."""
    joined = " ".join(argv)
    # Any position: under debugpy the command line is debugpy's launcher's, the program further on.
    return (
        "torch.distributed.run" in joined
        or "torch.distributed.launch" in joined
        or any(os.path.basename(arg) == "torchrun" for arg in argv)
    )


def skip_reason() -> str | None:
    """Why this process should not run an agent (None: it should)."""
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    if "multiprocessing" in argv and (
        "spawn_main" in argv or "--multiprocessing-fork" in argv or "forkserver" in argv or "resource_tracker" in argv
    ):
        return "multiprocessing worker"
    if is_distributed_launcher(getattr(sys, "orig_argv", sys.argv)) or is_distributed_launcher(sys.argv):
        return "distributed launcher (each rank gets its own agent)"
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            if mp.parent_process() is not None:
                return "multiprocessing worker"
        except Exception:
            pass
    return None


def describe_process(session: str | None) -> dict[str, Any]:
    """The ``process`` message's fields: sent only once the editor has proved the token."""
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "rank": _env_int("RANK", 0),
        "worldSize": _env_int("WORLD_SIZE", 1),
        "python": platform.python_version(),
        "torch": _torch_version(),
        "hookscope": __version__,
        "argv": user_argv(),
        "debugger": _debugger_active(),
    }
    if session:
        info["session"] = session
    return info


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        return str(torch.__version__)
    try:  # without importing torch: the bootstrap must stay cheap
        from importlib.metadata import version

        return version("torch")
    except Exception:
        return ""


def _debugger_active() -> bool:
    # A subprocess debugpy follows (a DDP rank) starts the agent from sitecustomize before
    # debugpy's own entry point has imported pydevd; its command line already says so.
    return "pydevd" in sys.modules or any("debugpy" in arg for arg in getattr(sys, "orig_argv", ()))


_DEBUGPY_OPTIONS_WITH_VALUE = {
    "--listen",
    "--connect",
    "--pid",
    "--log-to",
    "--configure-qt",
    "--adapter-access-token",
    "--parent-session-pid",
}


def user_argv() -> list[str]:
    """``sys.argv`` as the user's script will see it (not debugpy's own command line)."""
    argv = list(sys.argv)
    if argv and "debugpy" in argv[0]:
        args = list(getattr(sys, "orig_argv", argv))
        # skip the interpreter and its options up to the debugpy entry
        for i, arg in enumerate(args):
            if "debugpy" in arg and not arg.startswith("-"):
                args = args[i + 1 :]
                break
        i = 0
        while i < len(args) and args[i].startswith("--"):
            name = args[i].split("=", 1)[0]
            has_value = (name in _DEBUGPY_OPTIONS_WITH_VALUE or name.startswith("--configure-")) and "=" not in args[i]
            i += 2 if has_value else 1
        return args[i:]
    return argv
