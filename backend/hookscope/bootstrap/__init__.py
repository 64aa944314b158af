"""What the editor prepends to ``PYTHONPATH`` so the agent starts with no change to the script.

This folder holds a pydevd plugin (``pydevd_plugins/extensions``: debugpy
imports it when it loads and it starts the agent) and a ``sitecustomize``
that starts the agent in processes without a debugger and then runs the
user's own ``sitecustomize``. ``path()`` is the folder to put on the path.
"""

from __future__ import annotations

import os


def path() -> str:
    """The folder to prepend to ``PYTHONPATH``."""
    return os.path.dirname(os.path.abspath(__file__))


def pythonpath(existing: str | None = None) -> str:
    """``PYTHONPATH`` with the bootstrap prepended to ``existing`` (never replacing it)."""
    return path() if not existing else path() + os.pathsep + existing
