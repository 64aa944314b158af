"""Framing and msgpack coding of protocol messages, with the bounds checked before decoding.

A frame is a 4-byte big-endian length followed by one msgpack map. Decoding
refuses oversize frames from the header alone, bounds collection sizes in
the unpacker itself, and checks nesting depth afterwards.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from .protocol import ERR_BAD_MESSAGE, MAX_COLLECTION, MAX_DEPTH, MAX_FRAME_BYTES, ProtocolError

_HEADER = struct.Struct(">I")
HEADER_BYTES = _HEADER.size


def encode(message: dict[str, Any]) -> bytes:
    """msgpack bytes of one message (no frame header). bin stays bin, str stays str."""
    return msgpack.packb(message, use_bin_type=True, default=_default)


def frame(message: dict[str, Any]) -> bytes:
    """One complete frame: header plus body."""
    body = encode(message)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(ERR_BAD_MESSAGE, f"message of {len(body)} bytes exceeds the frame limit")
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """Body length announced by a header; refuses an oversize frame before reading it."""
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(ERR_BAD_MESSAGE,
                            f"frame of {length} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    return length


def decode(body: bytes) -> Any:
    """Decode one frame body with bounded sizes and depth. Raises ProtocolError."""
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(ERR_BAD_MESSAGE, "frame exceeds the limit")
    try:
        value = msgpack.unpackb(
            body, raw=False, strict_map_key=True, use_list=True,
            max_str_len=len(body), max_bin_len=len(body),
            max_array_len=min(len(body), MAX_COLLECTION),
            max_map_len=min(len(body) // 2, MAX_COLLECTION),
            max_ext_len=0,
        )
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError,
            TypeError, UnicodeDecodeError) as exc:
        raise ProtocolError(ERR_BAD_MESSAGE, f"undecodable frame: {exc}") from None
    _check_depth(value)
    return value


def _check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ProtocolError(ERR_BAD_MESSAGE, f"message nested deeper than {MAX_DEPTH}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _default(obj: Any) -> Any:
    # numpy scalars and the like reach here from summaries; encode them as plain numbers.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


class FrameReader:
    """Incremental frame splitter for a byte stream (used by the agent and by tests)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: int | None = None

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return every complete decoded message. Raises ProtocolError on a bad frame."""
        self._buf += data
        out = []
        while True:
            if self._need is None:
                if len(self._buf) < HEADER_BYTES:
                    break
                self._need = frame_length(bytes(self._buf[:HEADER_BYTES]))
                del self._buf[:HEADER_BYTES]
            if len(self._buf) < self._need:
                break
            body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._need = None
            out.append(decode(body))
        return out
