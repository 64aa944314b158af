"""Fuzzing the Python decoder and validator with Hypothesis, on a fixed budget.

Three generators: raw bytes, structured msgpack values mutated at the byte
level, and protocol-shaped messages with fields of random types. The only
exception allowed out of ``codec.decode`` / ``FrameReader.feed`` /
``protocol.validate`` is ``ProtocolError``; a hang is caught by a per-input
time bound (and pytest-timeout as the last resort). A last property feeds
protocol-shaped requests to a real agent+engine and checks that every request
gets exactly one reply and the agent keeps serving.
"""

from __future__ import annotations

import struct
import time

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import SmallNet, hook_count

from hookscope.link import codec, protocol, protocol_messages
from hookscope.link.protocol_vocabulary import ERROR_CODES, ProtocolError

BUDGET = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PER_INPUT_S = 2.0
"""A single input that takes longer than this is a hang for our purposes."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=30,
)


def _pack(value: object) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return b"\xc0"


def _decode_checked(data: bytes) -> object:
    start = time.monotonic()
    try:
        value = codec.decode(data)
    except ProtocolError:
        value = None
    assert time.monotonic() - start < PER_INPUT_S, f"decode of {len(data)} bytes took too long"
    return value


def _validate_checked(value: object) -> None:
    try:
        protocol.validate(value)
    except ProtocolError as exc:
        assert exc.code in ERROR_CODES


@BUDGET
@given(st.binary(max_size=512))
def test_random_bytes_decode_or_protocol_error(data):
    _validate_checked(_decode_checked(data))


@BUDGET
@given(values, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6), st.integers(0, 8))
def test_mutated_msgpack_decode_or_protocol_error(value, flips, cut):
    data = bytearray(_pack(value))
    for pos, byte in flips:
        if data:
            data[pos % len(data)] = byte
    if cut and len(data) > cut:
        data = data[:-cut]
    _validate_checked(_decode_checked(bytes(data)))


_field_values = {
    "str": st.text(max_size=30),
    "int": st.integers(-5, 2**40),
    "float": st.floats(allow_nan=True),
    "bool": st.booleans(),
    "bin": st.binary(max_size=30),
    "list": st.lists(scalars, max_size=4),
    "map": st.dictionaries(st.text(max_size=6), scalars, max_size=4),
    "any": scalars,
}


@st.composite
def protocol_shaped(draw) -> dict:
    """A message of a known type whose fields are sometimes of the right type, sometimes not."""
    definition = draw(st.sampled_from(protocol_messages.MESSAGES))
    message: dict = {"type": definition.type}
    if definition.kind == "request":
        message["id"] = draw(st.one_of(st.integers(0, 1000), scalars))
    for field in definition.fields:
        choice = draw(st.integers(0, 3))
        if choice == 0 and field.optional:
            continue
        message[field.name] = draw(_field_values[field.type] if choice < 3 else values)
    return message


@BUDGET
@given(protocol_shaped())
def test_protocol_shaped_messages_through_frames(message):
    try:
        data = codec.frame(message)
    except (TypeError, OverflowError):  # not encodable (ints beyond 64 bits): cannot be on the wire
        return
    reader = codec.FrameReader()
    decoded = []
    try:
        for i in range(0, len(data), 7):  # split arbitrarily, as TCP may
            decoded += reader.feed(data[i : i + 7])
    except ProtocolError:
        return
    assert len(decoded) == 1
    _validate_checked(decoded[0])


@BUDGET
@given(st.lists(st.binary(min_size=0, max_size=64), max_size=8), st.integers(0, 2**32 - 1))
def test_frame_reader_random_stream(chunks, header):
    reader = codec.FrameReader()
    start = time.monotonic()
    try:
        reader.feed(struct.pack(">I", header))
        for chunk in chunks:
            for value in reader.feed(chunk):
                _validate_checked(value)
    except ProtocolError:
        pass
    assert time.monotonic() - start < PER_INPUT_S


def test_requests_to_a_live_agent_each_get_one_reply(link, live_agent):
    """Protocol-shaped requests (fields of random types) against a real engine: one reply each,
    no exception escapes the message loop, the connection survives all of them."""

    model = SmallNet()
    a = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    requests = [
        m
        for m in protocol_messages.MESSAGES
        if m.kind == "request" and m.direction != "toExtension" and m.type not in ("removeHooks",)
    ]
    sent: list[int] = []

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        st.sampled_from(requests).flatmap(
            lambda d: st.fixed_dictionaries(
                {
                    f.name: _field_values[f.type]
                    if not f.optional
                    else st.one_of(st.none(), _field_values[f.type], values)
                    for f in d.fields
                }
            ).map(lambda fields, d=d: {"type": d.type, **fields})
        )
    )
    def one(message):
        request_id = len(sent) + 1
        sent.append(request_id)
        conn.send({**{k: v for k, v in message.items() if v is not None}, "id": request_id})
        reply = conn.wait_reply(request_id, 30)
        assert ("body" in reply) != ("error" in reply)
        if "error" in reply:
            assert reply["error"]["code"] in ERROR_CODES

    one()
    assert conn.request("ping")["pid"]
    assert a.connections == 1
    # Whatever was requested, shutting down leaves no hook behind.
    conn.request("removeHooks")

    assert hook_count(model) == 0
