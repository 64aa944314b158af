"""Hooks torch still calls after Hookscope removed them, without their keyword arguments.

A module call copies the module's hook dict before looping over it, but asks the live
``_forward_hooks_with_kwargs`` (``_forward_pre_hooks_with_kwargs``) set, hook by hook, how to
call each one. A ``with_kwargs`` hook removed from another thread while that loop runs (the agent
removing every hook because the editor went away while the program was stopped in an earlier hook
of the same module) is still called, as a plain hook: ``hook(module, args, output)`` or
``hook(module, args)``, and a hook that needs ``kwargs`` would raise a TypeError into training.
So every hook Hookscope registers ``with_kwargs`` gives its last parameter the default
``CALLED_WITHOUT_KWARGS`` and returns at once when it gets it: it was removed, it does nothing.
"""

from __future__ import annotations

from typing import Any

CALLED_WITHOUT_KWARGS: Any = object()
"""Default of a ``with_kwargs`` hook's last parameter (``kwargs`` of a pre-hook, ``output`` of a
forward hook): torch called it as a removed hook."""
