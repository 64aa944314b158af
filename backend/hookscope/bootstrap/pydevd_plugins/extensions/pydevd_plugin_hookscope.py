"""pydevd plugin: starts the Hookscope agent as soon as debugpy has loaded.

pydevd imports every ``pydevd_plugins.extensions.pydevd_plugin*`` module it
finds on ``sys.path`` and calls ``on_debugger_modules_loaded`` of each
``DebuggerEventHandler`` subclass: at launch, under ``python -m debugpy
--listen`` and at ``--pid`` attach alike.
"""

from _pydevd_bundle.pydevd_extension_api import DebuggerEventHandler

__all__ = ["HookscopeDebuggerEventHandler"]


class HookscopeDebuggerEventHandler(DebuggerEventHandler):
    def on_debugger_modules_loaded(self, **kwargs):
        try:
            import hookscope_boot
        except ImportError:  # the bootstrap folder is not on sys.path (attach by path): find it
            import os
            import sys

            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            import hookscope_boot
        hookscope_boot.start("pydevd plugin")
