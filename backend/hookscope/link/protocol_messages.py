"""The message catalogue: every message type, its direction, its fields and its reply's fields.

Every message is a msgpack map with a ``type`` string. Requests carry an
``id``; the answer is a ``reply`` with ``re`` (the request id) and either
``body`` or ``error`` ({code, message}). Events carry neither. The shapes a
field's ``of`` names are in ``protocol_structs``; ``hookscope.link.protocol``
checks decoded messages against both, and ``protocol_gen`` writes the
TypeScript mirror.
"""

from __future__ import annotations

from hookscope.link.protocol_schema import Message
from hookscope.link.protocol_schema import f as _f
from hookscope.link.protocol_vocabulary import STEP_MEANING

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
                "for nonfinite: the op where the first NaN/Inf was born, from the replay",
                True,
                of="NanOrigin",
            ),
            _f("rearm", "str", "for nonfinite and gradients: when that switch stops again after this stop", True),
            _f("view", "str", "a view the panel shows at this stop ('gradientFlow' at a gradient-health stop)", True),
            _f("viewOptions", "map", "render options of that view", True, of="GradientFlowOptions"),
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
        (_f("params", "list", "in named_parameters() order, those with a .grad", of="ParamGrad"),),
    ),
    Message(
        "listHooks",
        "request",
        "toBackend",
        "Every hook on the watched models, Hookscope's and the user's.",
        (_f("model", "str", "model id; default all", True),),
        (
            _f("hooks", "list", "every hook, model by model", of="HookInfo"),
            _f("leaks", "list", "hooks whose count keeps growing", of="HookLeak"),
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
            _f("meta", "map", "what the image shows and (meta.of) what it is of", of="ImageMeta"),
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
            _f("meta", "map", "what the image shows (range, axes, index, NaN/Inf counts, grid)", True, of="ImageMeta"),
            _f("values", "bin", "the displayed slice's values, float32 little-endian, row-major", True),
            _f("valuesShape", "list", "[rows, cols] of 'values'", True, of="int"),
            _f(
                "valuesStep",
                "list",
                "[row step, col step]: values[i][j] is the slice's element (i*step0, j*step1)",
                True,
                of="int",
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


MESSAGES_BY_TYPE: dict[str, Message] = {m.type: m for m in MESSAGES}
