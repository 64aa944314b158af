"""The shapes inside messages: every struct a field's ``of`` can name (TypeScript interfaces in the mirror)."""

from __future__ import annotations

from hookscope.link.protocol_schema import Struct
from hookscope.link.protocol_schema import f as _f

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


STRUCTS_BY_NAME: dict[str, Struct] = {s.name: s for s in STRUCTS}
