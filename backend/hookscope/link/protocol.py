"""The Hookscope wire protocol's front door: check what arrives, build replies.

Both sides speak one protocol, declared once in this package's ``link/protocol_*`` modules:
``protocol_messages`` (the catalogue: each message, its direction, fields and reply),
``protocol_structs`` (the shapes inside messages), ``protocol_vocabulary`` (version, limits,
error codes, enums) and ``protocol_schema`` (how they are declared).
``hookscope.link.protocol_gen`` turns them into ``extension/src/protocol/messages.gen.ts`` and a
test fails when that file is out of date, so the TypeScript mirror cannot drift.

``validate`` checks a decoded message against the catalogue, down to the leaves its fields name;
both the agent and the extension (``validate``/``validateReply`` in ``codec.ts``) answer a message
that fails it with an error reply instead of acting on it. The shared vectors in tests/vectors keep
the two validators in step.
"""

from __future__ import annotations

from typing import Any, get_args

from hookscope.link.bounds import BoundsError, check_bounds
from hookscope.link.protocol_messages import MESSAGES_BY_TYPE
from hookscope.link.protocol_schema import Field, FieldType, Message
from hookscope.link.protocol_structs import STRUCTS_BY_NAME
from hookscope.link.protocol_vocabulary import ENUMS, ERR_BAD_MESSAGE, ERR_UNKNOWN_TYPE, ProtocolError

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "bin": (bytes, bytearray, memoryview),
    "list": (list, tuple),
    "map": (dict,),
}


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
    item_type, item_of, nullable = _leaf(of)
    items = enumerate(value) if type_ == "list" else value.items()
    for key, item in items:
        if item is None and nullable:
            continue
        _check_value(f"{where}[{key!r}]" if type_ == "map" else f"{where}[{key}]", item, item_type, item_of)


_LEAF_TYPES: dict[str, FieldType] = {name: name for name in get_args(FieldType)}


def _leaf(of: str) -> tuple[FieldType, str | None, bool]:
    """The field type and ``of`` of one element named by ``of`` ('int', 'TensorSummary', 'str[]',
    'float?'), and whether it may be nil."""
    if of.endswith("[]"):
        return "list", of[:-2], False
    if of in STRUCTS_BY_NAME:
        return "map", of, False
    if of in ENUMS:
        return "str", of, False
    return _LEAF_TYPES[of.removesuffix("?")], None, of.endswith("?")


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
