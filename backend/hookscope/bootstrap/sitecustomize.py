"""Hookscope's sitecustomize: start the agent where no debugger will, then run the user's own.

Python imports the first ``sitecustomize`` on ``sys.path``; this one is first
because the editor prepends the bootstrap folder. It runs the next
``sitecustomize`` further down ``sys.path`` (the user's, the distribution's)
so that one keeps working, then starts the agent unless debugpy is about to
load and start it through the pydevd plugin.
"""


def _run_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # `import sitecustomize` now means the user's
    try:
        spec.loader.exec_module(module)
    except Exception:
        # What site.py does with a failing sitecustomize: report and go on.
        print("Error in sitecustomize; set PYTHONVERBOSE for traceback:", file=sys.stderr)
        traceback.print_exc()


def _main() -> None:
    import os
    import sys

    _run_next_sitecustomize()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import hookscope_boot
    finally:
        sys.path.pop(0)
    hookscope_boot.ignore_debugpy_warning_about_this_plugin()
    if not hookscope_boot.debugger_will_load():
        hookscope_boot.start("sitecustomize")


_main()
