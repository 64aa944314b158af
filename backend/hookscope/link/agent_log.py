"""The agent's one logger: never into the user's logging setup; to a file per process when asked.

Every module of the agent logs through ``log`` (named ``hookscope.link.agent``), so that one
``HOOKSCOPE_LOG_DIR`` file holds the whole story of a process's link to the editor.
"""

from __future__ import annotations

import logging
import os
import sys

ENV_LOG_DIR = "HOOKSCOPE_LOG_DIR"

log = logging.getLogger("hookscope.link.agent")
log.propagate = False  # never into the user's logging setup
log.addHandler(logging.NullHandler())


def setup_file_logging() -> None:
    """Log everything to ``$HOOKSCOPE_LOG_DIR/hookscope-agent-<pid>.log`` when that is set."""
    log_dir = os.environ.get(ENV_LOG_DIR)
    if not log_dir:
        return
    try:
        os.makedirs(log_dir, exist_ok=True)
        handler = logging.FileHandler(os.path.join(log_dir, f"hookscope-agent-{os.getpid()}.log"), encoding="utf-8")
    except OSError as exc:
        print(f"hookscope: cannot log to {log_dir}: {exc}", file=sys.stderr)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
