"""How the protocol is declared: a message, a struct (a map shape inside messages) and their fields.

``hookscope.link.protocol`` (the messages) and ``hookscope.link.protocol_structs`` (the shapes inside
them) are written with these; ``protocol_validation`` checks decoded values against them and
``protocol_gen`` turns them into TypeScript.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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
    A field type, a name of STRUCTS or ENUMS, or one of those with ``[]`` (a list of them); a leaf
    type with ``?`` (``float?``) is one that may be nil (a range whose ends are not finite)."""


@dataclass(frozen=True)
class Message:
    type: str
    kind: Kind
    direction: Direction
    doc: str
    fields: tuple[Field, ...] = field(default_factory=tuple)
    reply: tuple[Field, ...] = field(default_factory=tuple)
    """Fields of the reply body (requests only)."""


@dataclass(frozen=True)
class Struct:
    """A map shape used inside messages (mirrored as a TypeScript interface)."""

    name: str
    doc: str
    fields: tuple[Field, ...]


def f(name: str, type_: FieldType, doc: str, optional: bool = False, of: str | None = None) -> Field:
    """A field, positionally: the catalogues declare hundreds of them."""
    return Field(name, type_, doc, optional, of)
