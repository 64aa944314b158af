"""The protocol table, the codec and the shared vectors; the TS mirror must be up to date."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from hookscope.link import codec, protocol, protocol_gen
from hookscope.link.protocol import ProtocolError

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors"
sys.path.insert(0, str(VECTORS))
import make_vectors  # noqa: E402


def test_generated_typescript_is_up_to_date():
    committed = (ROOT / "extension/src/protocol/messages.gen.ts").read_text(encoding="utf-8")
    assert committed == protocol_gen.generate(), "run `make protocol` and commit the result"


def test_vectors_are_up_to_date():
    assert json.loads((VECTORS / "valid.json").read_text(encoding="utf-8")) == make_vectors.valid_vectors()
    assert json.loads((VECTORS / "invalid.json").read_text(encoding="utf-8")) == make_vectors.invalid_frames()
    assert json.loads((VECTORS / "handshake.json").read_text(encoding="utf-8")) == make_vectors.handshake_vectors()


@pytest.mark.parametrize(
    "vector", json.loads((VECTORS / "valid.json").read_text(encoding="utf-8")), ids=lambda v: v["name"]
)
def test_valid_vector_roundtrip(vector):
    message = make_vectors._to_python(vector["message"])
    assert codec.frame(message).hex() == vector["hex"]
    decoded = codec.FrameReader().feed(bytes.fromhex(vector["hex"]))
    assert decoded == [message]
    protocol.validate(decoded[0])


@pytest.mark.parametrize(
    "vector", json.loads((VECTORS / "invalid.json").read_text(encoding="utf-8")), ids=lambda v: v["name"]
)
def test_invalid_vector_refused(vector):
    with pytest.raises(ProtocolError) as err:
        for message in codec.FrameReader().feed(bytes.fromhex(vector["hex"])):
            protocol.validate(message)
    assert err.value.code == vector["code"]


def test_frames_split_across_reads():
    frames = codec.frame({"type": "ping", "id": 1}) + codec.frame({"type": "ping", "id": 2})
    reader = codec.FrameReader()
    got = []
    for i in range(len(frames)):
        got += reader.feed(frames[i : i + 1])
    assert got == [{"type": "ping", "id": 1}, {"type": "ping", "id": 2}]


def test_oversize_refused_from_header_alone():
    reader = codec.FrameReader()
    with pytest.raises(ProtocolError):
        reader.feed(struct.pack(">I", protocol.MAX_FRAME_BYTES + 1))


def test_every_request_has_reply_fields_documented():
    for m in protocol.MESSAGES:
        for f in m.fields + m.reply:
            assert f.doc, f"{m.type}.{f.name} needs a doc"


def test_bool_is_not_an_int():
    with pytest.raises(ProtocolError):
        protocol.validate({"type": "reply", "re": True})
