"""Pausing Python's cyclic garbage collector while a request builds its answer.

An analysis allocates ~100k AST nodes and dicts; that many allocations set
off full collections in the middle of the request, which traverse every live
object (both versions' trees) and add 5-10 ms to the slow requests (p95).
The trees hold no reference cycles, so reference counting frees them anyway;
collection simply resumes, with its counters intact, when the request is done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (re-entrant)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
