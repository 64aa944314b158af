"""The protocol table, the codec and the shared vectors; the TS mirror must be up to date."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from hookscope.link import codec, protocol, protocol_gen, protocol_messages, protocol_structs
from hookscope.link.protocol_vocabulary import ENUMS, MAX_FRAME_BYTES, VIEWS, ProtocolError

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
    assert (
        json.loads((VECTORS / "layer_targets.json").read_text(encoding="utf-8")) == make_vectors.layer_target_vectors()
    )


@pytest.mark.parametrize(
    "vector", json.loads((VECTORS / "valid.json").read_text(encoding="utf-8")), ids=lambda v: v["name"]
)
def test_valid_vector_roundtrip(vector):
    message = make_vectors._to_python(vector["message"])
    assert codec.frame(message).hex() == vector["hex"]
    decoded = codec.FrameReader().feed(bytes.fromhex(vector["hex"]))
    assert decoded == [message]
    protocol.validate(decoded[0])
    if "replyTo" in vector:
        protocol.validate_reply(vector["replyTo"], decoded[0]["body"])


@pytest.mark.parametrize(
    "vector", json.loads((VECTORS / "invalid.json").read_text(encoding="utf-8")), ids=lambda v: v["name"]
)
def test_invalid_vector_refused(vector):
    with pytest.raises(ProtocolError) as err:
        for message in codec.FrameReader().feed(bytes.fromhex(vector["hex"])):
            protocol.validate(message)
            if "replyTo" in vector:
                protocol.validate_reply(vector["replyTo"], message["body"])
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
        reader.feed(struct.pack(">I", MAX_FRAME_BYTES + 1))


def test_every_request_has_reply_fields_documented():
    for m in protocol_messages.MESSAGES:
        for f in m.fields + m.reply:
            assert f.doc, f"{m.type}.{f.name} needs a doc"


def test_bool_is_not_an_int():
    with pytest.raises(ProtocolError):
        protocol.validate({"type": "reply", "re": True})


def test_vectors_cover_every_message_type():
    """Both suites run the vectors: every type needs a valid one, and an invalid one where it can be wrong."""
    decoded = [
        codec.FrameReader().feed(bytes.fromhex(v["hex"]))[0]
        for v in json.loads((VECTORS / "valid.json").read_text(encoding="utf-8"))
    ]
    assert {m["type"] for m in decoded} == set(protocol_messages.MESSAGES_BY_TYPE)
    names = [v["name"] for v in json.loads((VECTORS / "invalid.json").read_text(encoding="utf-8"))]
    for m in protocol_messages.MESSAGES:
        if m.kind == "request" or any(not f.optional for f in m.fields):
            assert any(n.startswith(f"{m.type} without ") for n in names), f"no invalid vector for {m.type}"


def test_nested_fields_are_checked_and_named():
    summary = {
        "path": "output",
        "shape": [2],
        "dtype": "float32",
        "device": "cpu",
        "numel": 2,
        "nan": 0,
        "posinf": 0,
        "neginf": 0,
    }
    event = {"type": "summaries", "model": "m", "layer": "fc", "phase": "forward", "step": 0, "tensors": [summary]}
    protocol.validate(event)
    with pytest.raises(ProtocolError, match=r"'tensors'\[0\]\.nan must be int, got str"):
        protocol.validate({**event, "tensors": [{**summary, "nan": "0"}]})
    with pytest.raises(ProtocolError, match=r"'tensors'\[0\]: missing field 'numel'"):
        protocol.validate({**event, "tensors": [{k: v for k, v in summary.items() if k != "numel"}]})
    with pytest.raises(ProtocolError, match=r"'shapes'\['fc'\]\[1\] must be int"):
        protocol.validate({"type": "shapes", "model": "m", "shapes": {"fc": [2, "x"]}})


def test_replies_are_checked_against_their_request():
    assert protocol.validate_reply("watch", {"layers": ["fc"]}) == {"layers": ["fc"]}
    with pytest.raises(ProtocolError, match=r"reply to watch: field 'layers'\[0\] must be str, got int"):
        protocol.validate_reply("watch", {"layers": [3]})
    with pytest.raises(ProtocolError, match=r"reply to setBreakpoints: field 'resolved'\[0\]: missing field 'layers'"):
        protocol.validate_reply("setBreakpoints", {"resolved": [{"id": "bp"}]})
    with pytest.raises(ProtocolError, match="the body must be a map"):
        protocol.validate_reply("ping", [1])


def test_a_malformed_leaf_of_the_nested_reply_and_event_shapes_is_refused_by_its_path():
    hooks = {
        "hooks": [{"model": "m", "module": "fc", "kind": "forward", "owner": "user", "function": "f"}],
        "leaks": [],
    }
    protocol.validate_reply("listHooks", hooks)
    with pytest.raises(ProtocolError, match=r"reply to listHooks: field 'hooks'\[0\]\.line must be int, got str"):
        protocol.validate_reply("listHooks", {**hooks, "hooks": [{**hooks["hooks"][0], "line": "3"}]})
    meta = {"range": [None, 1.5], "grid": {"rows": 2, "cols": 2}, "of": {"tensor": "output"}}
    protocol.validate_reply("render", {"png": b"", "width": 1, "height": 1, "meta": meta})
    with pytest.raises(ProtocolError, match=r"field 'meta'\.grid\.cols must be int, got float"):
        protocol.validate_reply(
            "render", {"png": b"", "width": 1, "height": 1, "meta": {**meta, "grid": {"rows": 2, "cols": 2.5}}}
        )
    with pytest.raises(ProtocolError, match=r"field 'meta'\.range\[1\] must be float, got str"):
        protocol.validate_reply("render", {"png": b"", "width": 1, "height": 1, "meta": {**meta, "range": [0, "1"]}})
    with pytest.raises(ProtocolError, match=r"reply to getParamGrads: field 'params'\[0\]: missing field 'norm'"):
        protocol.validate_reply(
            "getParamGrads", {"params": [{"name": "w", "shape": [1], "absmax": 0, "nan": 0, "inf": 0}]}
        )
    hit = make_vectors._to_python(make_vectors.VALID["hitNonFinite"])
    with pytest.raises(ProtocolError, match=r"hit: field 'op'\.stack\[0\] must be str, got int"):
        protocol.validate({**hit, "op": {**hit["op"], "stack": [3]}})


def test_every_field_of_names_a_known_shape():
    """``of`` is the one place nested shapes are declared: each name must exist (the TS side is generated)."""
    known = set(protocol_structs.STRUCTS_BY_NAME) | set(ENUMS) | {"str", "int", "float", "bool", "bin"}
    for owner, fields in [(m.type, m.fields + m.reply) for m in protocol_messages.MESSAGES] + [
        (s.name, s.fields) for s in protocol_structs.STRUCTS
    ]:
        for f in fields:
            if f.of is not None:
                assert f.of.removesuffix("[]").removesuffix("?") in known, f"{owner}.{f.name}: unknown of={f.of!r}"


def test_views_match_render_options():
    from hookscope.link.bounds import RENDER_OPTIONS

    assert set(RENDER_OPTIONS) == set(VIEWS)
