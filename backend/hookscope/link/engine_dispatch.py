"""What the agent does with the editor's messages and the program's models: this connection's engine.

Each authenticated connection gets a fresh ``Engine`` (``engine/core.py``), created only once
the program has imported torch itself: settings the editor sends before then are answered and
kept (``_DEFERRABLE``), and replayed into the engine when it exists. Models found by discovery
are reported to every editor and handed to every engine. The editor's ``bye`` and ``ping``, and
its replies to our heartbeats, are handled here without the engine.

``EngineDispatch`` is the lowest layer of ``Agent`` (``link/agent.py``): a mixin whose state
``Agent.__init__`` sets up; the layers above it (``link/serve_loop.py``, ``Agent``) call into it.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from hookscope.link import protocol
from hookscope.link.agent_log import log
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_INTERNAL, ERR_NOT_AVAILABLE, ProtocolError

_DEFERRABLE = frozenset({"setBreakpoints", "setBreakOnNonFinite", "setBreakOnGradients", "setCompiledEager", "watch"})
"""Requests that replace a whole setting: kept until the engine exists, then applied."""


class EngineLike(Protocol):
    """What the agent needs of ``hookscope.engine.core.Engine`` (tests pass stand-ins)."""

    def add_model(self, model_id: str, model: Any, locations: dict[str, tuple[str, int]] | None = None) -> None: ...
    def remove_model(self, model_id: str) -> None: ...
    def handle(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def shutdown(self) -> int: ...


EngineFactory = Callable[[Callable[[dict[str, Any]], None]], EngineLike]
"""Makes a connection's engine from the agent's ``emit``."""


class DiscoveryLike(Protocol):
    """What the agent needs of ``hookscope.engine.discovery.Discovery``: it reports models to the agent."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def forget_listener(self) -> None: ...
    def poll(self, *, blocking: bool = True) -> bool: ...
    def check_structure(self, blocking: bool = True) -> None: ...


def default_engine_factory(emit: Callable[[dict[str, Any]], None]) -> EngineLike:
    from hookscope.engine.core import Engine  # heavy (torch): only once connected

    engine = Engine(emit)
    engine.requests_off_thread = True  # requests run on the agent's thread, training on another
    return engine


def torch_ready() -> bool:
    """Whether the program has finished importing torch (the engine may then import it too)."""
    torch = sys.modules.get("torch")
    spec = getattr(torch, "__spec__", None)
    return torch is not None and not getattr(spec, "_initializing", False)


class EngineDispatch:
    """The agent's engine and message layer (a mixin: the state lives on ``Agent``, set up in its ``__init__``)."""

    _engine_factory: EngineFactory
    _engine_ready: Callable[[], bool]
    _engine: EngineLike | None
    _engine_failed: bool
    _deferred: dict[str, dict[str, Any]]
    _replaying: bool
    _engine_lock: threading.RLock
    _models: dict[str, Any]
    _modules: dict[str, weakref.ref[Any]]
    _connected: threading.Event

    if TYPE_CHECKING:  # defined by the layers above

        def emit(self, event: dict[str, Any]) -> None: ...
        def _on_reply(self, message: dict[str, Any]) -> None: ...

    # -- discovery callbacks (any thread) ------------------------------------------
    def _on_model_added(self, model_id: str, module: Any, tree: dict[str, Any]) -> None:
        with self._engine_lock:
            self._models[model_id] = tree
            self._modules[model_id] = weakref.ref(module)
            if self._engine is None and self._connected.is_set():
                self._create_engine()  # a model exists, so torch is loaded: the engine may load too
            if self._engine is not None:
                self._call_engine("add_model", model_id, module, locations=_locations(tree))
                self.emit({"type": "modelAdded", "model": tree})
        log.info("model %s: %s (%s, %d modules)", model_id, tree["name"], tree["cls"], len(tree["modules"]))

    def _on_model_removed(self, model_id: str) -> None:
        with self._engine_lock:
            self._models.pop(model_id, None)
            self._modules.pop(model_id, None)
            if self._engine is not None:
                self._call_engine("remove_model", model_id)
                self.emit({"type": "modelRemoved", "id": model_id})
        log.info("model %s removed", model_id)

    def _call_engine(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._engine, method)(*args, **kwargs)
        except Exception as exc:  # the engine must never take the agent (or training) down
            log.exception("engine.%s failed", method)
            self.emit(
                {
                    "type": "notice",
                    "level": "error",
                    "code": "engineError",
                    "message": f"Hookscope engine.{method} failed: {exc}",
                }
            )
            return None

    # -- this connection's engine ----------------------------------------------------
    def _open_engine(self) -> None:
        """A new editor proved the token: a fresh engine (if torch is there) and every model again.
        (The caller empties what was queued for the last editor, under the same re-entrant lock.)"""
        with self._engine_lock:
            self._deferred.clear()
            self._engine_failed = False
            self._connected.set()
            if self._engine_ready():
                self._create_engine()
            for model_id, tree in list(self._models.items()):
                ref = self._modules.get(model_id)
                module = ref() if ref is not None else None
                if self._engine is not None and module is not None:
                    self._call_engine("add_model", model_id, module, locations=_locations(tree))
                self.emit({"type": "modelAdded", "model": tree})

    def _create_engine(self) -> None:
        """Create this connection's engine (imports torch) and hand it what was asked before.

        Deferred until the program has imported torch itself: a script that never uses
        torch must not pay for it. Call with ``_engine_lock`` held.
        """
        if self._engine is not None or self._engine_failed:
            return
        try:
            self._engine = self._engine_factory(self.emit)
        except Exception as exc:
            log.exception("cannot create the engine")
            self._engine_failed = True
            self.emit(
                {
                    "type": "notice",
                    "level": "error",
                    "code": "engineError",
                    "message": f"Hookscope could not start its engine: {exc}",
                }
            )
            return
        deferred, self._deferred = self._deferred, {}
        self._replaying = True
        try:
            for request in deferred.values():
                try:
                    self._engine.handle(request)
                except Exception as exc:
                    self.emit(
                        {
                            "type": "notice",
                            "level": "warning",
                            "code": "badRequest",
                            "message": f"{request['type']} could not be applied: {exc}",
                        }
                    )
        finally:
            self._replaying = False

    def _ensure_engine(self) -> EngineLike | None:
        if self._engine is None and self._connected.is_set() and self._engine_ready():
            with self._engine_lock:
                self._create_engine()
        return self._engine

    # -- the editor's messages (the agent thread) -----------------------------------
    def _on_message(self, message: Any) -> None:
        """Answer one decoded message: exactly one reply per request, an error reply for a bad one."""
        request_id = message.get("id") if isinstance(message, dict) else None
        re = request_id if isinstance(request_id, int) and not isinstance(request_id, bool) else -1
        try:
            definition = protocol.validate(message)
        except ProtocolError as exc:
            self._reply_error(re, exc.code, str(exc))
            return
        mtype = definition.type
        if mtype == "reply":
            self._on_reply(message)
            return
        if definition.direction == "toExtension":
            self._reply_error(re, ERR_BAD_MESSAGE, f"{mtype!r} is sent by the backend, not to it")
            return
        engine = self._engine  # read without the lock: a paused training thread may hold it
        if mtype == "bye":
            log.info("bye from the editor: removing hooks")
            if engine is not None:
                self._call_engine("shutdown")
            return
        if mtype == "ping":
            self.emit(protocol.reply(re, {"pid": os.getpid()}))
            return
        if definition.kind != "request":
            return
        if engine is None:
            engine = self._ensure_engine()
        if engine is None:
            self._answer_without_engine(re, message)
            return
        try:
            body = engine.handle(message)
        except ProtocolError as exc:
            self._reply_error(re, exc.code, str(exc))
            return
        except Exception as exc:
            log.exception("request %s failed", mtype)
            self._reply_error(re, ERR_INTERNAL, f"{type(exc).__name__}: {exc}")
            return
        self.emit(protocol.reply(re, body if isinstance(body, dict) else {}))

    def _answer_without_engine(self, re: int, message: dict[str, Any]) -> None:
        """Before the program imports torch: keep the latest settings, apply them later."""
        mtype = message["type"]
        if self._engine_failed:
            self._reply_error(re, ERR_NOT_AVAILABLE, "the Hookscope engine could not start")
        elif mtype in _DEFERRABLE:
            self._deferred[mtype] = message
            if mtype == "setBreakpoints":
                specs = message["breakpoints"]
                body = {
                    "resolved": [
                        {"id": str(s.get("id", "")) if isinstance(s, dict) else "", "layers": []} for s in specs
                    ]
                }
            elif mtype in ("setBreakOnNonFinite", "setCompiledEager"):
                body = {"enabled": message["enabled"]}
            elif mtype == "setBreakOnGradients":
                body = {k: message[k] for k in ("exploding", "vanishing") if message.get(k) is not None}
            else:
                body = {"layers": list(message["layers"])}
            self.emit(protocol.reply(re, body))
        else:
            self._reply_error(re, ERR_NOT_AVAILABLE, "no PyTorch model yet: the program has not imported torch")

    def _reply_error(self, re: int, code: str, text: str) -> None:
        log.info("error reply to %s: %s %s", re, code, text)
        self.emit(protocol.error_reply(re, code, text))


def _locations(tree: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """name -> (file, line) of each module, as discovery found them (the engine resolves file:line specs)."""
    return {m["name"]: (m["file"], m["line"]) for m in tree.get("modules", ()) if "file" in m and "line" in m}
