"""Framing and msgpack coding of protocol messages, with the bounds checked before decoding.

A frame is a 4-byte big-endian length followed by one msgpack map. Decoding
refuses oversize frames from the header alone (each reader has its own
limit: a few KiB during the handshake, 1 MiB for requests), bounds
collection sizes in the unpacker itself (and, for requests, the number of
maps and arrays), and checks nesting depth afterwards.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    MAX_COLLECTION,
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    ProtocolError,
)

_HEADER = struct.Struct(">I")
HEADER_BYTES = _HEADER.size


def encode(message: dict[str, Any]) -> bytes:
    """msgpack bytes of one message (no frame header). bin stays bin, str stays str."""
    body: bytes = msgpack.packb(message, use_bin_type=True, default=_default)
    return body


def frame(message: dict[str, Any]) -> bytes:
    """One complete frame: header plus body."""
    body = encode(message)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(ERR_BAD_MESSAGE, f"message of {len(body)} bytes exceeds the frame limit")
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes, limit: int = MAX_FRAME_BYTES) -> int:
    """Body length announced by a header; refuses a frame over ``limit`` before reading it."""
    length: int = _HEADER.unpack(header)[0]
    if length > limit:
        raise ProtocolError(ERR_BAD_MESSAGE, f"frame of {length} bytes exceeds the limit of {limit}")
    return length


class _TooManyContainers(Exception):
    pass


class UndecodableFrame(ProtocolError):
    """A whole frame was read but its body is refused: the stream is still in step (unlike a bad header)."""


def decode(body: bytes, max_containers: int | None = None) -> Any:
    """Decode one frame body with bounded sizes and depth (and, when given, at most
    ``max_containers`` maps and arrays in all). Raises ProtocolError."""
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(ERR_BAD_MESSAGE, "frame exceeds the limit")
    hooks: dict[str, Any] = {}
    if max_containers is not None:
        built = [0]

        def count(container: Any) -> Any:
            # Called as each map or array is finished: the decoding stops at the first one too many,
            # so a frame of empty maps cannot become millions of objects.
            built[0] += 1
            if built[0] > max_containers:
                raise _TooManyContainers
            return container

        hooks = {"object_hook": count, "list_hook": count}
    try:
        value = msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_str_len=len(body),
            max_bin_len=len(body),
            max_array_len=min(len(body), MAX_COLLECTION),
            max_map_len=min(len(body) // 2, MAX_COLLECTION),
            max_ext_len=0,
            **hooks,
        )
    except _TooManyContainers:
        raise ProtocolError(ERR_BAD_MESSAGE, f"a message may hold at most {max_containers} maps and arrays") from None
    except (
        ValueError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
        TypeError,
        UnicodeDecodeError,
    ) as exc:
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
    """Incremental frame splitter for a byte stream (used by the agent and by tests).

    ``limit`` caps each frame (from its header, before its body is read); ``max_containers``
    caps the maps and arrays one decoded frame may hold.
    """

    def __init__(self, limit: int = MAX_FRAME_BYTES, max_containers: int | None = None) -> None:
        self._buf = bytearray()
        self._need: int | None = None
        self.limit = limit
        self._max_containers = max_containers

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return every complete decoded message. Raises ProtocolError on a bad frame."""
        self._buf += data
        out = []
        while True:
            if self._need is None:
                if len(self._buf) < HEADER_BYTES:
                    break
                self._need = frame_length(bytes(self._buf[:HEADER_BYTES]), self.limit)
                del self._buf[:HEADER_BYTES]
            if len(self._buf) < self._need:
                break
            body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._need = None
            out.append(decode(body, self._max_containers))
        return out

    def next(self) -> tuple[bool, Any]:
        """At most one message from what was fed: (True, message) or (False, None)."""
        if not self.has_frame():
            return False, None
        assert self._need is not None
        body = bytes(self._buf[: self._need])
        del self._buf[: self._need]
        self._need = None
        try:
            return True, decode(body, self._max_containers)
        except ProtocolError as exc:
            raise UndecodableFrame(exc.code, str(exc)) from None

    def has_frame(self) -> bool:
        """Whether a whole frame is buffered (checks its header against the limit)."""
        if self._need is None:
            if len(self._buf) < HEADER_BYTES:
                return False
            self._need = frame_length(bytes(self._buf[:HEADER_BYTES]), self.limit)
            del self._buf[:HEADER_BYTES]
        return len(self._buf) >= self._need

    def push(self, data: bytes) -> None:
        """Add bytes without decoding (``next`` takes messages one at a time)."""
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)
