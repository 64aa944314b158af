"""One ``hookscope run``: launch the script under debugpy, send the breakpoints, pair each hit with its stop.

The editor's part played in a terminal: it listens for the agent (``EditorLink``), launches the
script through the real debugpy adapter, configures every process that connects, prints each hit
and the debugger stop that goes with it, then continues (or ends the run, ``--stop-on-hit``).
"""

from __future__ import annotations

import argparse
import os
import queue
import time
from dataclasses import dataclass, field
from typing import Any

from hookscope import bootstrap
from hookscope.link.process_policy import is_distributed_launcher
from hookscope.terminal.break_spec import PHASE_ALIASES, parse_spec
from hookscope.terminal.dap_client import DapClient, DapError
from hookscope.terminal.dap_sessions import DebugSessions
from hookscope.terminal.editor_link import BackendConnection, EditorLink, RequestError
from hookscope.terminal.printer import Printer
from hookscope.terminal.report import Report

EXIT_STOPPED_AT_HIT = 3
"""Exit status of ``--stop-on-hit`` when a breakpoint fired."""


@dataclass
class RunState:
    specs: list[dict[str, Any]]
    nonfinite: bool
    gradients: dict[str, float] = field(default_factory=dict)
    """setBreakOnGradients's thresholds ({exploding?, vanishing?}); empty: off."""
    models: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    resolved: dict[str, set[str]] = field(default_factory=dict)
    """spec id -> layers it matched, over every model seen."""
    reported_unresolved: set[str] = field(default_factory=set)
    fired: set[str] = field(default_factory=set)
    """ids of the specs that produced a hit."""
    pending_hits: list[tuple[BackendConnection, dict[str, Any], float]] = field(default_factory=list)
    pending_stops: list[tuple[DapClient, int | None, float]] = field(default_factory=list)
    """(session, thread id, when) of debugger stops not yet paired with a hit (DAP's threadId is optional)."""
    hits: int = 0
    exit_code: int | None = None
    stopped_at_hit: bool = False


class Runner:
    """One ``hookscope run``."""

    STOP_WITHOUT_HIT_S = 3.0
    """A debugger stop with no Hookscope hit after this long is someone else's (a user breakpoint)."""
    HIT_WITHOUT_STOP_S = 20.0

    def __init__(self, args: argparse.Namespace, printer: Printer) -> None:
        self.args = args
        self.printer = printer
        default_phases = [PHASE_ALIASES[p] for p in args.phase] if args.phase else None
        specs = [parse_spec(text, f"b{i + 1}", default_phases) for i, text in enumerate(args.breaks)]
        self.spec_text = {spec["id"]: text for spec, text in zip(specs, args.breaks)}
        gradients = {
            k: v
            for k, v in (
                ("exploding", getattr(args, "break_on_exploding", None)),
                ("vanishing", getattr(args, "break_on_vanishing", None)),
            )
            if v is not None
        }
        self.state = RunState(specs, args.break_on_nonfinite, gradients)
        self.events: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.report = Report(args.report, [args.script, *args.args]) if args.report else None
        self.link: EditorLink | None = None
        self.dap: DapClient | None = None
        self.sessions: DebugSessions | None = None
        self._configured: set[BackendConnection] = set()
        """Connections already sent the breakpoints (the first waited for, and each that connects)."""

    # -- setup --------------------------------------------------------------
    def run(self) -> int:
        self.link = EditorLink(on_event=lambda conn, msg: self.events.put(("hs", conn, msg)))
        self.link.on_connect = lambda conn: self.events.put(("connect", conn, None))
        # A process that could not prove the session token (or speaks another protocol) is refused:
        # say so, it is not the program's own agent being slow.
        self.link.on_refused = lambda why: self.printer.event(
            "warning", f"hookscope: refused a connection ({why})", message=f"refused a connection: {why}"
        )
        try:
            self.dap = DapClient.start_adapter()  # this interpreter has debugpy; the script may use another
            self.sessions = DebugSessions(
                self.dap,
                on_event=lambda client, event: self.events.put(("dap", event, client)),
                on_error=lambda text: self.printer.event("warning", f"hookscope: {text}", message=text),
                timeout=self.args.timeout,
            )
            self._launch()
            return self._loop()
        except (DapError, TimeoutError) as exc:
            self.printer.event("error", f"hookscope: {exc}", message=str(exc))
            return 1
        finally:
            if self.report is not None:
                self.report.exit_code = self.state.exit_code
                page = self.report.write()
                self.printer.event("report", f"hookscope: report written to {page}", path=page)
            if self.sessions is not None:
                self.sessions.close()
            if self.dap is not None:
                self.dap.close()
            self.link.close()

    def _launch(self) -> None:
        assert self.dap is not None and self.link is not None
        self.dap.initialize("hookscope-cli")
        env = dict(self.link.env())
        env["PYTHONPATH"] = bootstrap.pythonpath(os.environ.get("PYTHONPATH"))
        launch = self.dap.send_request(
            "launch",
            {
                "name": "hookscope run",
                "type": "debugpy",
                "request": "launch",
                "program": os.path.abspath(self.args.script),
                "args": self.args.args,
                "cwd": os.getcwd(),
                "python": [self.args.python],
                "console": "internalConsole",
                "justMyCode": self.args.just_my_code,
                "env": env,
                # justMyCode hides a stop made from site-packages; this rule lets Hookscope's through.
                "rules": [{"module": "hookscope", "include": False}],
                "redirectOutput": True,
                "showReturnValue": False,
            },
        )
        self.dap.wait_event("initialized", timeout=self.args.timeout)
        if is_distributed_launcher([self.args.script, *self.args.args]):
            # torchrun has no agent of its own: each rank connects once the launcher runs.
            self.printer.event(
                "notice",
                "hookscope: a distributed launcher: each rank connects when it starts",
                level="info",
                message="distributed launcher",
                code="launcher",
            )
        else:
            self._wait_for_agent()
        self.dap.request("setExceptionBreakpoints", {"filters": []})
        self.dap.request("configurationDone")
        launch.result(self.args.timeout)

    def _wait_for_agent(self) -> None:
        assert self.link is not None
        try:
            # The agent starts when debugpy loads in the program, before it runs:
            # breakpoints are in place before the first step.
            conn = self.link.wait_connection(self.args.timeout)
            self._configure(conn)
        except TimeoutError:
            self.printer.event(
                "warning",
                "hookscope: the Hookscope agent did not connect; running without layer breakpoints",
                message="agent did not connect",
            )

    def _configure(self, conn: BackendConnection) -> None:
        if conn in self._configured:
            return
        self._configured.add(conn)
        self.printer.event("connected", None, pid=conn.pid, rank=conn.hello.get("rank"))
        if self.state.specs:
            conn.request("setBreakpoints", breakpoints=self.state.specs)
        if self.state.nonfinite:
            conn.request("setBreakOnNonFinite", enabled=True)
        if self.state.gradients:
            conn.request("setBreakOnGradients", **self.state.gradients)

    # -- the event loop -------------------------------------------------------------
    def _loop(self) -> int:
        terminated = False
        while not terminated:
            try:
                kind, a, b = self.events.get(timeout=0.5)
            except queue.Empty:
                kind = "tick"
                a = b = None
            if kind == "dap":
                terminated = self._on_dap(a, b)
            elif kind == "hs":
                self._on_backend(a, b)
            elif kind == "connect":
                self._configure(a)
            if self._pair_hits_and_stops():
                return EXIT_STOPPED_AT_HIT
            if self.dap is not None and self.dap.closed and self.events.empty():
                break
        self._drain_backend_events()
        for _ in self.state.pending_hits:  # the program ended before the debugger paused for them
            self._warn_hit_without_stop()
        self._report_unresolved(final=True)
        code = self.state.exit_code if self.state.exit_code is not None else 1
        self.printer.event(
            "exited", f"hookscope: the program exited with status {code}", exitCode=code, hits=self.state.hits
        )
        return code

    def _drain_backend_events(self) -> None:
        while True:
            try:
                kind, a, b = self.events.get_nowait()
            except queue.Empty:
                return
            if kind == "hs":
                self._on_backend(a, b)
            elif kind == "dap":
                self._on_dap(a, b)

    def _on_dap(self, event: dict[str, Any], client: DapClient) -> bool:
        """Handle one debugger event; True when the run is over (the launched program's session ended)."""
        name, body = event.get("event"), event.get("body") or {}
        root = client is self.dap
        if name == "output":
            category = body.get("category", "console")
            if category in ("stdout", "stderr"):
                self.printer.program_output(category, body.get("output", ""))
        elif name == "stopped":
            self.state.pending_stops.append((client, body.get("threadId"), time.monotonic()))
        elif name == "exited" and root:
            self.state.exit_code = int(body.get("exitCode", 0))
        elif name == "terminated":
            return root
        return False

    def _on_backend(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        mtype = message.get("type")
        if mtype == "modelAdded":
            tree = message["model"]
            self.state.models[(conn.pid, tree["id"])] = tree
            if self.report is not None:
                self.report.add_model(tree)
            self.printer.event(
                "model",
                f"hookscope: model {tree['name']} ({tree['cls']}, "
                f"{len(tree['modules'])} modules, {tree['params']:,} parameters)",
                pid=conn.pid,
                model=tree,
            )
            self._resolve_again(conn)
        elif mtype == "hit":
            self.state.hits += 1
            self.state.fired.add(str(message.get("breakpoint")))
            tree = self._tree_of(conn, message)
            self.printer.hit(
                self.state.hits,
                message,
                tree["name"] if tree else None,
                conn.pid,
                conn.hello.get("rank"),
                conn.hello.get("worldSize"),
            )
            if message.get("pausing"):
                self.state.pending_hits.append((conn, message, time.monotonic()))
            else:
                self._record_hit(conn, message)
                if self.args.stop_on_hit:
                    self.state.stopped_at_hit = True
        elif mtype == "notice":
            if message.get("code") == "breakpointUnresolved":
                return  # the CLI reports unresolved specs itself, once models are known
            self.printer.event(
                "notice",
                f"hookscope: {message.get('level')}: {message.get('message')}",
                level=message.get("level"),
                message=message.get("message"),
                code=message.get("code"),
            )
            if self.report is not None:
                self.report.add_notice(message)
        elif mtype == "stats":
            self.printer.event("stats", None, dropped=message.get("dropped"), queued=message.get("queued"))

    def _resolve_again(self, conn: BackendConnection) -> None:
        """Which specs match the layers of the models known now (reported once per spec).

        Asked of the backend's resolver (``resolveLayers``: names, globs, classes, definition lines
        and call sites, as a breakpoint resolves) rather than by re-sending the breakpoints: that
        would restart their hit counters (``every N``, ``hit N``) mid-run.
        """
        for spec in self.state.specs:
            selecting = {key: spec[key] for key in ("layer", "cls", "file", "line") if key in spec}
            try:
                layers = conn.request("resolveLayers", timeout=30, spec=selecting)["layers"]
            except (RequestError, TimeoutError, OSError):
                continue  # the process went away or cannot answer yet: judged again at the next model
            self.state.resolved.setdefault(spec["id"], set()).update(entry["layer"] for entry in layers)
        self._report_unresolved(final=False)

    def _report_unresolved(self, final: bool) -> None:
        if not self.state.models and not final:
            return
        for spec in self.state.specs:
            spec_id = spec["id"]
            if self.state.resolved.get(spec_id) or spec_id in self.state.reported_unresolved:
                continue
            if "file" in spec and not final:
                continue  # a line's layers may belong to a model not built yet: judged at the end
            if final and not self.state.models:
                detail = "no model was found in the program"
            elif "file" in spec:
                detail = "no layer is defined or called at that line"
            else:
                detail = "matches no layer" + self._suggestion(spec)
            self.state.reported_unresolved.add(spec_id)
            text = self.spec_text.get(spec_id, spec_id)
            self.printer.event(
                "error",
                f"hookscope: --break {text!r}: {detail}",
                message=f"--break {text!r}: {detail}",
                spec=text,
                code="breakpointUnresolved",
            )

    def _suggestion(self, spec: dict[str, Any]) -> str:
        import difflib

        names: list[str] = []
        for tree in self.state.models.values():
            key = "cls" if "cls" in spec else "name"
            names += [m[key] for m in tree["modules"] if m[key]]
        wanted = spec.get("layer") or spec.get("cls")
        if not wanted:
            return ""
        close = difflib.get_close_matches(wanted, sorted(set(names)), n=3, cutoff=0.5)
        return f" (did you mean {', '.join(close)}?)" if close else ""

    # -- pairing a hit (socket) with its debugger stop (DAP) -----------------------
    def _pair_hits_and_stops(self) -> bool:
        """Continue stopped threads; returns True when the run should end here (--stop-on-hit)."""
        assert self.dap is not None
        state = self.state
        if state.stopped_at_hit:
            self._terminate()
            return True
        now = time.monotonic()
        for entry in list(state.pending_hits):
            conn, hit, _ = entry
            stop = self._take_stop_of(conn.pid)
            if stop is None:
                continue
            state.pending_hits.remove(entry)
            client, thread_id, _ = stop
            self.printer.event(
                "paused",
                None,
                pid=conn.pid,
                rank=conn.hello.get("rank"),
                threadId=thread_id,
                layer=hit.get("layer"),
                breakpoint=hit.get("breakpoint"),
            )
            self._record_hit(conn, hit)  # while paused: the layer's tensors are this hit's
            if self.args.stop_on_hit:
                self._terminate()
                return True
            self._continue(client, thread_id)
        for client, thread_id, since in list(state.pending_stops):
            if now - since > self.STOP_WITHOUT_HIT_S:
                state.pending_stops.remove((client, thread_id, since))
                self.printer.event(
                    "notice",
                    "hookscope: the debugger paused the program outside a Hookscope "
                    "hit (a breakpoint in the code?); continuing",
                    level="info",
                    message="paused outside a Hookscope hit",
                    code="foreignStop",
                )
                self._continue(client, thread_id)
        for entry in list(state.pending_hits):
            if now - entry[2] > self.HIT_WITHOUT_STOP_S:
                state.pending_hits.remove(entry)
                self._warn_hit_without_stop()
        return False

    def _warn_hit_without_stop(self) -> None:
        self.printer.event(
            "warning",
            "hookscope: a hit was announced but the debugger did not pause (justMyCode filtering the stop?)",
            message="hit without a stop",
        )

    def _take_stop_of(self, pid: int) -> tuple[DapClient, int | None, float] | None:
        """The oldest unpaired debugger stop in process ``pid`` (DDP ranks pause one by one)."""
        assert self.sessions is not None
        stops = self.state.pending_stops
        for stop in stops:
            if self.sessions.pid_of(stop[0]) == pid:
                stops.remove(stop)
                return stop
        if stops and not self.sessions.children and self.sessions.pid_of(stops[0][0]) is None:
            return stops.pop(0)  # one process whose pid the debugger has not told yet
        return None

    def _tree_of(self, conn: BackendConnection, hit: dict[str, Any]) -> dict[str, Any] | None:
        """The layer tree of the model a hit names, as that process reported it."""
        model_id = hit.get("model")
        return self.state.models.get((conn.pid, model_id)) if isinstance(model_id, str) else None

    def _record_hit(self, conn: BackendConnection, hit: dict[str, Any]) -> None:
        if self.report is None:
            return
        image = None
        tree = self._tree_of(conn, hit)
        module = next((m for m in tree["modules"] if m["name"] == hit.get("layer")), None) if tree else None
        if module is not None and "Conv" in module["cls"] and len(self.report.hits) < 50:
            try:
                image = conn.request("render", timeout=30, view="featureMap", layer=hit["layer"], model=hit["model"])
            except (RequestError, TimeoutError) as exc:
                self.printer.event("notice", None, level="info", message=f"no feature map: {exc}")
        self.report.add_hit(hit, image)

    def _continue(self, client: DapClient, thread_id: int | None) -> None:
        try:
            client.request("continue", {"threadId": thread_id}, timeout=30)
        except DapError:
            pass  # the program may have ended meanwhile

    def _terminate(self) -> None:
        assert self.dap is not None and self.sessions is not None
        self.sessions.disconnect_children(terminate=True)
        try:
            self.dap.request("disconnect", {"terminateDebuggee": True}, timeout=30)
        except (DapError, TimeoutError):
            pass
        self.printer.event("stopped", "hookscope: stopped at the first hit (--stop-on-hit)", hits=self.state.hits)
