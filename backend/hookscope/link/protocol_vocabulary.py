"""The words both sides of the wire share: version, size and time limits, error codes, enums.

Every room may read this module (tests/python/test_layering.py): the engine raises ``ProtocolError``
with these codes, the hook primitives check ``CONDITIONS``, the agent and the codec enforce the limits.
``hookscope.link.protocol_gen`` copies the constants and enums into the TypeScript mirror.
"""

from __future__ import annotations

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


class ProtocolError(ValueError):
    """A message that does not follow the protocol; ``code`` goes into the error reply."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


PHASES = ("forward_pre", "forward", "backward", "param_grad")
"""Where a layer breakpoint can fire: before forward (inputs), after forward
(outputs), on the module's gradients, and on each parameter's ``.grad``."""

STEP_MEANING = (
    "step: forward calls of the model's root since Hookscope found the model (whatever was watched "
    "then, so a breakpoint added mid-run reads the program's step), counted from 0 like `for step in range(n)`"
)
"""What every ``step`` in the protocol counts (the panel and status show it as the step's tooltip)."""

CONDITIONS = ("always", "nonfinite", "grad_norm_below", "grad_norm_above", "absmax_above", "expression")
"""Kinds of breakpoint condition (``BreakpointSpec.condition.kind``)."""

INTERVENTIONS = ("zero_channels", "scale", "mean_ablate", "input_noise")
"""Kinds of intervention (``addIntervention.kind``)."""

VIEWS = ("featureMap", "attention", "gradCam", "gradientFlow", "histogram", "tensor")
"""What ``render`` draws (``render.view``); RENDER_OPTIONS has the options of each."""

NOTICE_LEVELS = ("info", "warning", "error")

HOOK_OWNERS = ("hookscope", "user")
"""Whose a hook is (``HookInfo.owner``): Hookscope's own, or anything else."""

ENUMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Phase": ("PHASES", PHASES),
    "ConditionKind": ("CONDITIONS", CONDITIONS),
    "InterventionKind": ("INTERVENTIONS", INTERVENTIONS),
    "ErrorCode": ("ERROR_CODES", ERROR_CODES),
    "View": ("VIEWS", VIEWS),
    "NoticeLevel": ("NOTICE_LEVELS", NOTICE_LEVELS),
    "HookOwner": ("HOOK_OWNERS", HOOK_OWNERS),
}
"""String enums by their TypeScript type name: (constant name, values); a field names one with ``of``."""
