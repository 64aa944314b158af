"""The Hookscope wire protocol: the one source of truth for both sides.

Every message is a msgpack map with a ``type`` string. Requests carry an
``id``; the answer is a ``reply`` with ``re`` (the request id) and either
``body`` or ``error`` ({code, message}). Events carry neither.

``MESSAGES`` below defines each message type, its direction and its fields.
``hookscope.link.protocol_gen`` turns it into ``extension/src/protocol/messages.gen.ts``
and a test fails when that file is out of date, so the TypeScript mirror
cannot drift. ``validate`` checks a decoded message against the table; both
the agent and the extension answer a message that fails it with an error
reply instead of acting on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hookscope.link.bounds import BoundsError, check_bounds

PROTOCOL_VERSION = 2
"""Bumped on any incompatible change; ``hello`` carries it and a mismatch closes the connection.
2: the token never crosses the socket (challenge-response in both directions), small handshake frames."""

MAX_FRAME_BYTES = 32 * 1024 * 1024
"""Frames larger than this are refused before they are decoded."""

MAX_REQUEST_FRAME_BYTES = 1024 * 1024
"""Largest frame the backend reads from the editor once it is authenticated (requests are small;
images only travel the other way)."""

MAX_REQUEST_CONTAINERS = 50_000
"""Most maps and arrays one decoded request may hold (each breakpoint uses two or three)."""

HANDSHAKE_FRAME_BYTES = 4096
"""Every frame before the peer has proved the session token: larger is refused from its header."""

MAX_DEPTH = 32
"""Deepest nesting of maps/arrays a decoded message may have."""

MAX_COLLECTION = 1_000_000
"""Largest number of entries in one decoded map or array."""

HELLO_DEADLINE_S = 5.0
"""The whole handshake (hello to proofs) must be over by then, or the connection is closed."""

NONCE_BYTES = 32
"""Length of each side's fresh random challenge."""

PROOF_LABEL = b"hookscope-handshake-v2"
"""Domain separation of the handshake's HMACs (see ``hookscope.link.handshake``)."""

MAX_PENDING_HANDSHAKES = 32
"""Connections an editor keeps in the handshake at once; more are closed at once."""

FieldType = Literal["str", "int", "float", "bool", "bin", "list", "map", "any"]
Direction = Literal["toExtension", "toBackend", "both"]
Kind = Literal["event", "request", "reply"]


@dataclass(frozen=True)
class Field:
    name: str
    type: FieldType
    doc: str
    optional: bool = False
    of: str | None = None
    """What's inside: a list's element, a map's struct (or the type of its values), a string's enum.
    A field type, a name of STRUCTS or ENUMS, or one of those with ``[]`` (a list of them)."""


@dataclass(frozen=True)
class Message:
    type: str
    kind: Kind
    direction: Direction
    doc: str
    fields: tuple[Field, ...] = field(default_factory=tuple)
    reply: tuple[Field, ...] = field(default_factory=tuple)
    """Fields of the reply body (requests only)."""


def _f(name: str, type_: FieldType, doc: str, optional: bool = False, of: str | None = None) -> Field:
    return Field(name, type_, doc, optional, of)


# Error codes carried in reply.error.code.
ERR_BAD_MESSAGE = "badMessage"
ERR_UNKNOWN_TYPE = "unknownType"
ERR_UNKNOWN_LAYER = "unknownLayer"
ERR_NOT_AVAILABLE = "notAvailable"
ERR_INTERNAL = "internal"
ERR_TOKEN = "badToken"
ERR_VERSION = "protocolMismatch"
ERR_BUSY = "busy"
"""The request was shed unprocessed: the backend is behind (a flood of requests)."""

ERROR_CODES = (
    ERR_BAD_MESSAGE,
    ERR_UNKNOWN_TYPE,
    ERR_UNKNOWN_LAYER,
    ERR_NOT_AVAILABLE,
    ERR_INTERNAL,
    ERR_TOKEN,
    ERR_VERSION,
    ERR_BUSY,
)

PHASES = ("forward_pre", "forward", "backward", "param_grad")

STEP_MEANING = (
    "step: forward calls of the model's root seen while Hookscope watches the model "
    "(a breakpoint, break on NaN/Inf, a watched layer), counted from 0 like `for step in range(n)`"
)
"""What every ``step`` in the protocol counts (the panel and status show it as the step's tooltip)."""
"""Where a layer breakpoint can fire: before forward (inputs), after forward
(outputs), on the module's gradients, and on each parameter's ``.grad``."""

CONDITIONS = ("always", "nonfinite", "grad_norm_below", "grad_norm_above", "absmax_above", "expression")
"""Kinds of breakpoint condition (``BreakpointSpec.condition.kind``)."""

INTERVENTIONS = ("zero_channels", "scale", "mean_ablate", "input_noise")
"""Kinds of intervention (``addIntervention.kind``)."""

VIEWS = ("featureMap", "attention", "gradCam", "gradientFlow", "histogram", "tensor")
"""What ``render`` draws (``render.view``); RENDER_OPTIONS has the options of each."""

NOTICE_LEVELS = ("info", "warning", "error")

ENUMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Phase": ("PHASES", PHASES),
    "ConditionKind": ("CONDITIONS", CONDITIONS),
    "InterventionKind": ("INTERVENTIONS", INTERVENTIONS),
    "ErrorCode": ("ERROR_CODES", ERROR_CODES),
    "View": ("VIEWS", VIEWS),
    "NoticeLevel": ("NOTICE_LEVELS", NOTICE_LEVELS),
}
"""String enums by their TypeScript type name: (constant name, values); a field names one with ``of``."""


MESSAGES: tuple[Message, ...] = (
    # ---- generic -------------------------------------------------------
    Message(
        "reply",
        "reply",
        "both",
        "Answer to a request.",
        (
            _f("re", "int", "id of the request answered"),
            _f("body", "map", "the result, when it succeeded", True),
            _f("error", "map", "why it failed", True, of="ErrorBody"),
        ),
    ),
    # ---- backend -> extension ------------------------------------------
    Message(
        "hello",
        "event",
        "toExtension",
        "First frame of every connection (at most HANDSHAKE_FRAME_BYTES): no token and nothing about "
        "the process until the editor has proved the token (hookscope.link.handshake).",
        (
            _f("protocol", "int", "PROTOCOL_VERSION of the backend"),
            _f("hookscope", "str", "hookscope package version (for the mismatch message)"),
            _f("nonce", "bin", "the backend's fresh challenge: NONCE_BYTES random bytes"),
        ),
    ),
    Message(
        "challenge",
        "event",
        "toBackend",
        "The editor's answer to hello: its own fresh challenge.",
        (
            _f("protocol", "int", "PROTOCOL_VERSION of the editor"),
            _f("nonce", "bin", "the editor's fresh challenge: NONCE_BYTES random bytes"),
        ),
    ),
    Message(
        "proof",
        "event",
        "both",
        "HMAC-SHA256 keyed by the session token over both challenges and the sender's role: the backend "
        "sends its proof after the challenge, the editor its own once the backend's checked out.",
        (_f("proof", "bin", "HMAC-SHA256(token, PROOF_LABEL | role | backend nonce | editor nonce)"),),
    ),
    Message(
        "process",
        "event",
        "toExtension",
        "The debuggee describes itself, once both sides have proved the token; then requests flow.",
        (
            _f("pid", "int", "process id of the debuggee"),
            _f("session", "str", "debug session id from HOOKSCOPE_SESSION", True),
            _f("rank", "int", "distributed rank (RANK), 0 when not distributed"),
            _f("worldSize", "int", "distributed world size (WORLD_SIZE), 1 when not distributed"),
            _f("python", "str", "Python version"),
            _f("torch", "str", "torch version"),
            _f("hookscope", "str", "hookscope package version"),
            _f("argv", "list", "the debuggee's sys.argv", of="str"),
            _f("debugger", "bool", "whether debugpy is active in the process"),
        ),
    ),
    Message(
        "modelAdded",
        "event",
        "toExtension",
        "A model root was found; carries its whole named_modules() tree.",
        (_f("model", "map", "the model and its modules", of="ModelTree"),),
    ),
    Message(
        "modelRemoved", "event", "toExtension", "A model root was garbage-collected.", (_f("id", "str", "model id"),)
    ),
    Message(
        "hit",
        "event",
        "toExtension",
        "A layer breakpoint fired; the thread pauses right after this is sent.",
        (
            _f(
                "breakpoint",
                "str",
                "id of the breakpoint that fired ('nonfinite' for break on NaN/Inf, 'gradients' "
                "for break on exploding/vanishing gradients)",
            ),
            _f("model", "str", "model id"),
            _f("layer", "str", "qualified module name"),
            _f("phase", "str", "one of PHASES", of="Phase"),
            _f("reason", "str", "human-readable reason shown as the stop reason"),
            _f("step", "int", STEP_MEANING),
            _f("summaries", "list", "TensorSummary of inputs/outputs/gradients", of="TensorSummary"),
            _f("pausing", "bool", "whether the debugger will pause (false: no debugger attached)"),
            _f("origin", "str", "for nonfinite: 'born here' or 'came in through inputs'", True),
            _f(
                "op",
                "map",
                "for nonfinite: the op where the first NaN/Inf was born, from the replay: "
                "op, phase, file, line, function, stack (user frames, innermost first), "
                "node (backward), tensor (a parameter/buffer already non-finite)",
                True,
            ),
            _f("rearm", "str", "for nonfinite and gradients: when that switch stops again after this stop", True),
            _f("view", "str", "a view the panel shows at this stop ('gradientFlow' at a gradient-health stop)", True),
            _f(
                "viewOptions",
                "map",
                "render options of that view ({metric: 'norm', exploding?, vanishing?, highlight: the stopped layer})",
                True,
            ),
        ),
    ),
    Message(
        "summaries",
        "event",
        "toExtension",
        "Live summaries of watched layers, at the panel's rate.",
        (
            _f("model", "str", "model id"),
            _f("layer", "str", "qualified module name"),
            _f("phase", "str", "one of PHASES", of="Phase"),
            _f("step", "int", STEP_MEANING),
            _f("tensors", "list", "TensorSummary list", of="TensorSummary"),
        ),
    ),
    Message(
        "shapes",
        "event",
        "toExtension",
        "Last output shape of each layer seen in a forward pass (sent once per model, then on change).",
        (
            _f("model", "str", "model id"),
            _f("shapes", "map", "layer name -> shape list", of="int[]"),
        ),
    ),
    Message(
        "resumed",
        "event",
        "toExtension",
        "The thread paused by a hit resumed.",
        (
            _f("breakpoint", "str", "id of the breakpoint"),
            _f("layer", "str", "qualified module name"),
        ),
    ),
    Message(
        "notice",
        "event",
        "toExtension",
        "Something the user should know (a breakpoint matched nothing, a hook raised, compiled modules...).",
        (
            _f("level", "str", "how much it matters", of="NoticeLevel"),
            _f("message", "str", "text for the user"),
            _f("code", "str", "machine-readable category", True),
        ),
    ),
    Message(
        "stats",
        "event",
        "toExtension",
        "Queue health, sent every few seconds while events are dropped.",
        (
            _f("dropped", "int", "events dropped since the start because the editor was slow"),
            _f("queued", "int", "events waiting"),
            _f(
                "shed",
                "int",
                "requests answered 'busy' unprocessed since the start (the editor asked for more "
                "work than the backend's share)",
                True,
            ),
        ),
    ),
    Message(
        "heartbeat",
        "request",
        "toExtension",
        "The backend checks that a silent editor is alive; answer with an empty reply body. "
        "Once the editor has answered one, about 2 s without any traffic from it count as a "
        "dead editor: the backend removes every hook and reconnects (only to an editor that proves the "
        "token; it gives up after a minute without one).",
        (),
        (),
    ),
    # ---- extension -> backend ------------------------------------------
    Message("ping", "request", "toBackend", "Liveness check.", (), (_f("pid", "int", "process id"),)),
    Message(
        "setBreakpoints",
        "request",
        "toBackend",
        "Replace the whole set of layer breakpoints.",
        (_f("breakpoints", "list", "BreakpointSpec list", of="BreakpointSpec"),),
        (_f("resolved", "list", "what each breakpoint matched", of="Resolution"),),
    ),
    Message(
        "resolveLayers",
        "request",
        "toBackend",
        "Which layers a breakpoint spec means, in every model, without setting anything: the one "
        "answer to 'which layers does this line mean' (definition lines and call sites), also for "
        "names, globs and classes.",
        (_f("spec", "map", "a BreakpointSpec's layer / cls / file + line (id, phases and condition are ignored)"),),
        (_f("layers", "list", "in each model's named_modules() order", of="ResolvedLayer"),),
    ),
    Message(
        "setBreakOnNonFinite",
        "request",
        "toBackend",
        "Break at the first layer that produces NaN/Inf (forward or backward).",
        (_f("enabled", "bool", "on or off"),),
        (_f("enabled", "bool", "the state now"),),
    ),
    Message(
        "setBreakOnGradients",
        "request",
        "toBackend",
        "Break on exploding gradients (some parameter's gradient norm above 'exploding') and on vanishing "
        "gradients (some layer's gradient norm below 'vanishing'), checked once per step at the end of the "
        "backward; a threshold left out turns that switch off. Hits have breakpoint 'gradients'.",
        (
            _f("exploding", "float", "gradient norm threshold per parameter; absent: off", True),
            _f("vanishing", "float", "gradient norm threshold per layer; absent: off", True),
        ),
        (
            _f("exploding", "float", "the threshold now (absent: off)", True),
            _f("vanishing", "float", "the threshold now (absent: off)", True),
        ),
    ),
    Message(
        "setCompiledEager",
        "request",
        "toBackend",
        "Run torch.compile'd code eagerly while debugging, so layer hooks inside compiled modules "
        "fire (torch.compiler.set_stance('force_eager')); off restores the stance it replaced.",
        (_f("enabled", "bool", "on or off"),),
        (_f("enabled", "bool", "whether compiled code runs eagerly now"),),
    ),
    Message(
        "watch",
        "request",
        "toBackend",
        "Stream summaries of these layers (empty list: stop).",
        (
            _f("layers", "list", "qualified names", of="str"),
            _f("model", "str", "model id; default the first model", True),
            _f("rateHz", "float", "most updates per second per layer", True),
        ),
        (_f("layers", "list", "names now watched", of="str"),),
    ),
    Message(
        "getSummaries",
        "request",
        "toBackend",
        "Last summaries of a layer and its parameters' gradients.",
        (
            _f("layer", "str", "qualified module name"),
            _f("model", "str", "model id; default the first model", True),
        ),
        (
            _f("layer", "str", "qualified module name"),
            _f(
                "tensors",
                "list",
                "TensorSummary list (inputs, outputs, gradients, parameter grads)",
                of="TensorSummary",
            ),
            _f("step", "int", "the step they were taken at; " + STEP_MEANING),
        ),
    ),
    Message(
        "getParamGrads",
        "request",
        "toBackend",
        "Summaries of every parameter's .grad of a model.",
        (_f("model", "str", "model id; default the first model", True),),
        (_f("params", "list", "[{name, shape, norm, mean, absmax, nan, inf}]"),),
    ),
    Message(
        "listHooks",
        "request",
        "toBackend",
        "Every hook on the watched models, Hookscope's and the user's.",
        (_f("model", "str", "model id; default all", True),),
        (
            _f("hooks", "list", "[{module, kind, owner, function, file, line}]"),
            _f("leaks", "list", "[{module, kind, function, counts}] hooks whose count keeps growing"),
        ),
    ),
    Message(
        "removeHooks",
        "request",
        "toBackend",
        "Remove every Hookscope hook now.",
        (),
        (_f("removed", "int", "number of hooks removed"),),
    ),
    Message(
        "render",
        "request",
        "toBackend",
        "Render an image of a layer's tensors (feature map, attention, Grad-CAM, gradient flow, histogram).",
        (
            _f("view", "str", "what to draw", of="View"),
            _f("layer", "str", "qualified module name", True),
            _f("model", "str", "model id", True),
            _f("options", "map", "view-specific options (channel page, batch item, colormap, target class...)", True),
            _f(
                "tensor",
                "str",
                "which tensor of the layer (featureMap, histogram, tensor): 'output' (default), "
                "'inputs', 'grad_output', 'grad_input' (those three at a stop in the layer) or 'grad' (a parameter "
                "gradient stop), optionally indexed: 'grad_output[0]'",
                True,
            ),
        ),
        (
            _f("png", "bin", "the PNG bytes"),
            _f("width", "int", "pixels"),
            _f("height", "int", "pixels"),
            _f(
                "meta",
                "map",
                "what the image shows: value range, channel order, NaN/Inf counts...; "
                "meta.of = {layer, tensor, step, phase, note?}: what the image is of",
            ),
        ),
    ),
    Message(
        "addIntervention",
        "request",
        "toBackend",
        "Change a layer's activations without editing code.",
        (
            _f("layer", "str", "qualified module name"),
            _f("kind", "str", "one of INTERVENTIONS", of="InterventionKind"),
            _f("model", "str", "model id", True),
            _f("channels", "list", "channel (or head) indices for zero_channels", True, of="int"),
            _f("value", "float", "scale factor or noise std", True),
        ),
        (_f("id", "str", "intervention id"),),
    ),
    Message(
        "removeIntervention",
        "request",
        "toBackend",
        "Remove one intervention, or all when 'intervention' is absent.",
        (
            # Not named 'id': that field is the request id (an int) on every request.
            _f("intervention", "str", "intervention id (from addIntervention's reply)", True),
        ),
        (_f("removed", "int", "number removed"),),
    ),
    Message(
        "listInterventions",
        "request",
        "toBackend",
        "Active interventions.",
        (),
        (_f("interventions", "list", "the active interventions", of="InterventionInfo"),),
    ),
    Message(
        "inspectValue",
        "request",
        "toBackend",
        "Summarize (and optionally render) a tensor the debugger names by expression in a paused frame.",
        (
            _f("expression", "str", "expression evaluated in the paused hit frame; with 'handle', only its label"),
            _f(
                "options",
                "map",
                "render options: {view: 'slice' | 'featureMap' | 'summary', axes: [row, col], "
                "index: {axis: position}, batch, page, per_page, channel, shared_scale, cmap}",
                True,
            ),
            _f(
                "handle",
                "str",
                "a value published from any paused frame through DAP evaluate of "
                "hookscope.debugger.inspector.publish(expression, handle); nothing is evaluated then",
                True,
            ),
        ),
        (
            _f("summary", "map", "TensorSummary", of="TensorSummary"),
            _f("png", "bin", "an image of the selected 2-D slice", True),
            _f("path", "str", "where the tensor sits in the published value ('batch.image', 'out[0]')", True),
            _f("width", "int", "image pixels", True),
            _f("height", "int", "image pixels", True),
            _f("meta", "map", "what the image shows (range, axes, index, NaN/Inf counts, grid)", True),
            _f("values", "bin", "the displayed slice's values, float32 little-endian, row-major", True),
            _f("valuesShape", "list", "[rows, cols] of 'values'", True, of="int"),
            _f(
                "valuesStep",
                "list",
                "[row step, col step]: values[i][j] is the slice's element (i*step0, j*step1)",
                True,
            ),
        ),
    ),
    Message(
        "releaseInspected",
        "request",
        "toBackend",
        "Forget values published for inspectValue (the program resumed).",
        (_f("handles", "list", "handles to drop; all when absent", True, of="str"),),
        (_f("released", "int", "how many were held"),),
    ),
    Message("bye", "event", "toBackend", "The editor is going away: remove all hooks and resume."),
)


@dataclass(frozen=True)
class Struct:
    """A map shape used inside messages (mirrored as a TypeScript interface)."""

    name: str
    doc: str
    fields: tuple[Field, ...]


STRUCTS: tuple[Struct, ...] = (
    Struct(
        "ModuleInfo",
        "One entry of a model's named_modules().",
        (
            _f("name", "str", "qualified name ('' for the root)"),
            _f("cls", "str", "class name"),
            _f("params", "int", "parameters owned directly (not recursively)"),
            _f("totalParams", "int", "parameters including submodules"),
            _f("file", "str", "source file of the line that created it in its parent", True),
            _f("line", "int", "1-based line of that creation", True),
            _f("leaf", "bool", "has no submodules"),
            _f("compiled", "bool", "inside a torch.compile'd module: hooks may not fire", True),
        ),
    ),
    Struct(
        "ModelTree",
        "A model root and its modules.",
        (
            _f("id", "str", "stable id within the process"),
            _f("name", "str", "variable name or class name"),
            _f("cls", "str", "class name of the root"),
            _f("params", "int", "total parameters"),
            _f("modules", "list", "ModuleInfo list, in named_modules() order", of="ModuleInfo"),
        ),
    ),
    Struct(
        "TensorSummary",
        "Statistics of one tensor, computed on its device.",
        (
            _f("path", "str", "where it sits: 'output', 'inputs[0]', 'grad_output[0]', 'weight.grad'..."),
            _f("shape", "list", "sizes", of="int"),
            _f("dtype", "str", "e.g. 'float32'"),
            _f("device", "str", "e.g. 'cpu', 'cuda:0'"),
            _f("numel", "int", "number of elements"),
            _f("mean", "float", "mean of the finite values", True),
            _f("std", "float", "standard deviation of the finite values", True),
            _f("min", "float", "smallest finite value", True),
            _f("max", "float", "largest finite value", True),
            _f("absmax", "float", "largest finite absolute value", True),
            _f("norm", "float", "L2 norm of the finite values", True),
            _f("nan", "int", "NaN count"),
            _f("posinf", "int", "+Inf count"),
            _f("neginf", "int", "-Inf count"),
            _f("zeroFrac", "float", "fraction of exact zeros", True),
            _f("hist", "map", "{lo, hi, counts: list[int]} over the finite values", True),
            _f("note", "str", "why stats are missing (sparse, quantized, meta, not a tensor...)", True),
            _f("sampled", "bool", "stats come from an on-device sample of a huge tensor", True),
        ),
    ),
    Struct(
        "Condition",
        "When a layer breakpoint pauses.",
        (
            _f("kind", "str", "one of CONDITIONS", of="ConditionKind"),
            _f(
                "threshold", "float", "the gradient norm / absmax limit of the grad_norm_* and absmax_above kinds", True
            ),
            _f("expression", "str", "a Python expression over the hook's locals (kind 'expression')", True),
        ),
    ),
    Struct(
        "Resolution",
        "What one breakpoint of setBreakpoints matched in the process.",
        (
            _f("id", "str", "the breakpoint's id"),
            _f("layers", "list", "qualified names of the layers it hooks", of="str"),
            _f("error", "str", "why it matched nothing or was refused", True),
        ),
    ),
    Struct(
        "ResolvedLayer",
        "One layer resolveLayers found.",
        (
            _f("model", "str", "model id"),
            _f("layer", "str", "qualified module name"),
            _f("cls", "str", "class name"),
        ),
    ),
    Struct(
        "InterventionInfo",
        "An active intervention.",
        (
            _f("id", "str", "intervention id"),
            _f("layer", "str", "qualified module name"),
            _f("kind", "str", "one of INTERVENTIONS", of="InterventionKind"),
            _f("channels", "list", "channel (or head) indices", True, of="int"),
            _f("value", "float", "scale factor or noise std", True),
        ),
    ),
    Struct(
        "ErrorBody",
        "Why a request failed (reply.error).",
        (
            _f("code", "str", "one of ERROR_CODES", of="ErrorCode"),
            _f("message", "str", "text for the user"),
        ),
    ),
    Struct(
        "BreakpointSpec",
        "A layer breakpoint as the editor sends it.",
        (
            _f("id", "str", "editor-side id"),
            _f("layer", "str", "qualified name or glob ('layer*.conv1')", True),
            _f("cls", "str", "class name ('Conv2d')", True),
            _f("file", "str", "source file of a definition or call site", True),
            _f("line", "int", "1-based line in that file", True),
            _f("phases", "list", "subset of PHASES", of="Phase"),
            _f("condition", "map", "when it pauses (absent: always)", True, of="Condition"),
            _f("hitCount", "int", "pause on the Nth hit only", True),
            _f("every", "int", "pause on every Nth hit", True),
            _f("enabled", "bool", "disabled breakpoints keep their place but install no hook", True),
            _f("action", "str", "without a debugger: 'log' | 'raise' (default log)", True),
        ),
    ),
)

MESSAGES_BY_TYPE: dict[str, Message] = {m.type: m for m in MESSAGES}

STRUCTS_BY_NAME: dict[str, Struct] = {s.name: s for s in STRUCTS}

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "bin": (bytes, bytearray, memoryview),
    "list": (list, tuple),
    "map": (dict,),
}


class ProtocolError(ValueError):
    """A message that does not follow the protocol; ``code`` goes into the error reply."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check_type(value: Any, type_: FieldType) -> bool:
    if type_ == "any":
        return True
    if type_ in ("int", "float") and isinstance(value, bool):
        return False
    return isinstance(value, _PY_TYPES[type_])


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _check_fields(where: str, msg: dict[str, Any], fields: tuple[Field, ...], deep: bool = True) -> None:
    """Each field present with its type, down to the leaves ``of`` names (only the top level unless
    ``deep``); errors name the field's path."""
    for f in fields:
        value = msg.get(f.name)
        if value is None:
            if f.optional:
                continue
            raise ProtocolError(ERR_BAD_MESSAGE, f"{where}: missing field {f.name!r} ({f.type})")
        path = f"{where}: field {f.name!r}" if ":" not in where else f"{where}.{f.name}"
        _check_value(path, value, f.type, f.of if deep else None)


def _check_value(where: str, value: Any, type_: FieldType, of: str | None) -> None:
    if not _check_type(value, type_):
        raise ProtocolError(ERR_BAD_MESSAGE, f"{where} must be {type_}, got {_type_name(value)}")
    if of is None or type_ == "str":  # enums are types for the TS side; their values are checked where used
        return
    if type_ == "map" and of in STRUCTS_BY_NAME:
        _check_fields(where if ":" in where else f"{where}:", value, STRUCTS_BY_NAME[of].fields)
        return
    items = enumerate(value) if type_ == "list" else value.items()
    for key, item in items:
        _check_value(f"{where}[{key!r}]" if type_ == "map" else f"{where}[{key}]", item, *_leaf(of))


def _leaf(of: str) -> tuple[FieldType, str | None]:
    """The field type and ``of`` of one element named by ``of``: 'int', 'TensorSummary', 'str[]'."""
    if of.endswith("[]"):
        return "list", of[:-2]
    if of in STRUCTS_BY_NAME:
        return "map", of
    if of in ENUMS:
        return "str", of
    return of, None  # type: ignore[return-value]


def validate(msg: Any) -> Message:
    """Check a decoded message against ``MESSAGES``; return its definition or raise ProtocolError."""
    if not isinstance(msg, dict):
        raise ProtocolError(ERR_BAD_MESSAGE, f"a message must be a map, got {type(msg).__name__}")
    mtype = msg.get("type")
    if not isinstance(mtype, str):
        raise ProtocolError(ERR_BAD_MESSAGE, "a message needs a string 'type'")
    definition = MESSAGES_BY_TYPE.get(mtype)
    if definition is None:
        raise ProtocolError(ERR_UNKNOWN_TYPE, f"unknown message type {mtype[:64]!r}")
    if definition.kind == "request" and not _check_type(msg.get("id"), "int"):
        raise ProtocolError(ERR_BAD_MESSAGE, f"request {mtype!r} needs an integer 'id'")
    # Requests to the backend are checked at the top level (and by check_bounds): the engine answers a
    # malformed breakpoint inside setBreakpoints in its 'resolved' entry, not by refusing the whole set.
    _check_fields(mtype, msg, definition.fields, deep=definition.direction != "toBackend")
    if definition.kind == "request" and definition.direction == "toBackend":
        try:
            check_bounds(msg)
        except BoundsError as err:
            raise ProtocolError(ERR_BAD_MESSAGE, str(err)) from None
    return definition


def validate_reply(request_type: str, body: Any) -> dict[str, Any]:
    """Check the body of a successful reply to a ``request_type`` request; return it or raise ProtocolError."""
    if not isinstance(body, dict):
        raise ProtocolError(ERR_BAD_MESSAGE, f"reply to {request_type}: the body must be a map, got {_type_name(body)}")
    _check_fields(f"reply to {request_type}", body, MESSAGES_BY_TYPE[request_type].reply)
    return body


def reply(re: int, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """A successful reply to request ``re``."""
    return {"type": "reply", "re": re, "body": body or {}}


def error_reply(re: int, code: str, message: str) -> dict[str, Any]:
    """A failed reply to request ``re`` (re is -1 when the request had no usable id)."""
    return {"type": "reply", "re": re, "error": {"code": code, "message": message}}
