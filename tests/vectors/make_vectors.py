"""Writes the shared protocol test vectors (run by the Python and the TypeScript suites).

valid.json: message -> exact msgpack bytes (hex). Binary values are written
as {"$bin": "<hex>"} in JSON. invalid.json: frame bytes (hex, header
included) that a decoder must refuse, with the error code it must give.
handshake.json: token, both nonces -> each role's proof (hookscope.link.handshake),
which the TypeScript side must compute to the same bytes.
Regenerate with `.venv/bin/python tests/vectors/make_vectors.py` after a
protocol change; test_protocol.py fails when the files are stale.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))

from hookscope.link import codec, handshake  # noqa: E402
from hookscope.link.protocol_messages import MESSAGES_BY_TYPE  # noqa: E402
from hookscope.link.protocol_vocabulary import MAX_FRAME_BYTES, PROTOCOL_VERSION  # noqa: E402

HERE = Path(__file__).resolve().parent

VALID = {
    "hello": {"type": "hello", "protocol": PROTOCOL_VERSION, "hookscope": "0.1.0", "nonce": {"$bin": "11" * 32}},
    "challenge": {"type": "challenge", "protocol": PROTOCOL_VERSION, "nonce": {"$bin": "22" * 32}},
    "proof": {"type": "proof", "proof": {"$bin": "33" * 32}},
    "process": {
        "type": "process",
        "pid": 4242,
        "session": "s-1",
        "rank": 0,
        "worldSize": 1,
        "python": "3.11.7",
        "torch": "2.13.0",
        "hookscope": "0.1.0",
        "argv": ["train.py", "--lr", "0.1"],
        "debugger": True,
    },
    "modelAdded": {
        "type": "modelAdded",
        "model": {
            "id": "m1",
            "name": "model",
            "cls": "SmallCNN",
            "params": 1234,
            "modules": [
                {"name": "", "cls": "SmallCNN", "params": 0, "totalParams": 1234, "leaf": False},
                {
                    "name": "conv1",
                    "cls": "Conv2d",
                    "params": 448,
                    "totalParams": 448,
                    "file": "/w/cnn.py",
                    "line": 12,
                    "leaf": True,
                },
            ],
        },
    },
    "hit": {
        "type": "hit",
        "breakpoint": "bp1",
        "model": "m1",
        "layer": "layer1.0.conv1",
        "phase": "backward",
        "reason": "Layer breakpoint: layer1.0.conv1 (backward)",
        "step": 3,
        "summaries": [
            {
                "path": "grad_output[0]",
                "shape": [8, 16, 4, 4],
                "dtype": "float32",
                "device": "cpu",
                "numel": 2048,
                "mean": 0.25,
                "std": 1.5,
                "min": -2.5,
                "max": 3.5,
                "absmax": 3.5,
                "norm": 12.5,
                "nan": 0,
                "posinf": 0,
                "neginf": 0,
                "zeroFrac": 0.125,
                "hist": {"lo": -2.5, "hi": 3.5, "counts": [1, 5, 9, 3]},
            }
        ],
        "pausing": True,
    },
    "setBreakpoints": {
        "type": "setBreakpoints",
        "id": 7,
        "breakpoints": [
            {
                "id": "bp1",
                "layer": "layer*.conv1",
                "phases": ["forward", "backward"],
                "condition": {"kind": "grad_norm_above", "threshold": 100.5},
                "enabled": True,
            }
        ],
    },
    "replyOk": {"type": "reply", "re": 7, "body": {"resolved": [{"id": "bp1", "layers": ["layer1.conv1"]}]}},
    "replyError": {"type": "reply", "re": 9, "error": {"code": "unknownLayer", "message": "no layer named 'fc9'"}},
    "renderReply": {
        "type": "reply",
        "re": 11,
        "body": {"png": {"$bin": "89504e470d0a1a0a"}, "width": 8, "height": 4, "meta": {"channels": 64}},
    },
    "unicode": {"type": "notice", "level": "info", "message": "μ=0.12 σ=0.98 ✓"},
    # One more of every message type, so both codecs and both validators see each of them.
    "modelRemoved": {"type": "modelRemoved", "id": "m1"},
    "summaries": {
        "type": "summaries",
        "model": "m1",
        "layer": "fc1",
        "phase": "forward",
        "step": 0,
        "tensors": [
            {
                "path": "output",
                "shape": [2, 4],
                "dtype": "float32",
                "device": "cpu",
                "numel": 8,
                "nan": 0,
                "posinf": 0,
                "neginf": 0,
                "note": "sparse",
            }
        ],
    },
    "shapes": {"type": "shapes", "model": "m1", "shapes": {"fc1": [2, 4], "": [2, 10]}},
    "resumed": {"type": "resumed", "breakpoint": "bp1", "layer": "fc1"},
    "stats": {"type": "stats", "dropped": 3, "queued": 1, "shed": 0},
    "heartbeat": {"type": "heartbeat", "id": 1},
    "ping": {"type": "ping", "id": 2},
    "setBreakOnNonFinite": {"type": "setBreakOnNonFinite", "id": 3, "enabled": True},
    "setBreakOnGradients": {"type": "setBreakOnGradients", "id": 4, "exploding": 1234.5, "vanishing": 1e-7},
    "setCompiledEager": {"type": "setCompiledEager", "id": 5, "enabled": False},
    "watch": {"type": "watch", "id": 6, "layers": ["fc1", "act"], "model": "m1", "rateHz": 4.5},
    "getSummaries": {"type": "getSummaries", "id": 8, "layer": "fc1"},
    "getParamGrads": {"type": "getParamGrads", "id": 10, "model": "m1"},
    "listHooks": {"type": "listHooks", "id": 12},
    "removeHooks": {"type": "removeHooks", "id": 13},
    "render": {
        "type": "render",
        "id": 14,
        "view": "featureMap",
        "layer": "conv1",
        "model": "m1",
        "options": {"page": 1, "per_page": 16, "cmap": "viridis"},
        "tensor": "grad_output[0]",
    },
    "addIntervention": {
        "type": "addIntervention",
        "id": 15,
        "layer": "conv1",
        "kind": "zero_channels",
        "channels": [0, 3],
    },
    "removeIntervention": {"type": "removeIntervention", "id": 16, "intervention": "i1"},
    "listInterventions": {"type": "listInterventions", "id": 17},
    "inspectValue": {
        "type": "inspectValue",
        "id": 18,
        "expression": "x[0]",
        "options": {"view": "slice", "axes": [0, 1], "index": {"2": 5}},
    },
    "releaseInspected": {"type": "releaseInspected", "id": 19, "handles": ["h1"]},
    "resolveLayers": {"type": "resolveLayers", "id": 20, "spec": {"file": "/w/cnn.py", "line": 14}},
    "bye": {"type": "bye"},
}


def _to_python(value):
    if isinstance(value, dict):
        if set(value) == {"$bin"}:
            return bytes.fromhex(value["$bin"])
        return {k: _to_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_python(v) for v in value]
    return value


def _framed(body: bytes) -> str:
    return (struct.pack(">I", len(body)) + body).hex()


def invalid_frames() -> list[dict]:
    deep = b"\x91" * 40 + b"\xc0"  # 40 nested one-element arrays
    return [
        {"name": "oversize header", "hex": struct.pack(">I", MAX_FRAME_BYTES + 1).hex(), "code": "badMessage"},
        {"name": "truncated map", "hex": _framed(b"\x82\xa4type"), "code": "badMessage"},
        {"name": "not a map", "hex": _framed(b"\x93\x01\x02\x03"), "code": "badMessage"},
        {"name": "type not a string", "hex": _framed(codec.encode({"type": 5})), "code": "badMessage"},
        {
            "name": "unknown type",
            "hex": _framed(codec.encode({"type": "launchMissiles", "id": 1})),
            "code": "unknownType",
        },
        {"name": "request without id", "hex": _framed(codec.encode({"type": "ping"})), "code": "badMessage"},
        {
            "name": "wrong field type",
            "hex": _framed(codec.encode({"type": "setBreakOnNonFinite", "id": 3, "enabled": "yes"})),
            "code": "badMessage",
        },
        {
            "name": "missing field",
            "hex": _framed(codec.encode({"type": "getSummaries", "id": 4})),
            "code": "badMessage",
        },
        {"name": "too deep", "hex": _framed(b"\x81\xa4type" + deep), "code": "badMessage"},
        {"name": "invalid utf-8", "hex": _framed(b"\x81\xa4type\xa2\xff\xfe"), "code": "badMessage"},
        *_broken_messages(),
    ]


def _broken_messages() -> list[dict]:
    """For each message type of VALID: one copy missing what it cannot do without (a request's id, else
    its first required field) and one with a required field of the wrong type. bye has neither."""
    out = []
    seen = set()
    for msg in VALID.values():
        definition = MESSAGES_BY_TYPE[msg["type"]]
        if definition.type in seen:
            continue
        seen.add(definition.type)
        required = [f for f in definition.fields if not f.optional]
        if definition.kind == "request":
            missing = "id"
        elif required:
            missing = required[0].name
        else:
            continue
        without = {k: v for k, v in _to_python(msg).items() if k != missing}
        out.append(
            {
                "name": f"{definition.type} without {missing}",
                "hex": _framed(codec.encode(without)),
                "code": "badMessage",
            }
        )
        if required:
            wrong = dict(_to_python(msg), **{required[0].name: _WRONG[required[0].type]})
            out.append(
                {
                    "name": f"{definition.type} with {required[0].name} of the wrong type",
                    "hex": _framed(codec.encode(wrong)),
                    "code": "badMessage",
                }
            )
    return out


# A value of another type than each field type (bool is not an int, an int not a bool).
_WRONG = {"str": 7, "int": "7", "float": "7.5", "bool": 1, "bin": "not bytes", "list": {"a": 1}, "map": [1]}


def valid_vectors() -> list[dict]:
    return [{"name": name, "message": msg, "hex": codec.frame(_to_python(msg)).hex()} for name, msg in VALID.items()]


def handshake_vectors() -> list[dict]:
    cases = [
        ("t0k3n", "11" * 32, "22" * 32),
        ("9f" * 24, bytes(range(32)).hex(), bytes(range(32, 64)).hex()),
        ("tøken-ü", "00" * 32, "ff" * 32),
    ]
    out = []
    for token, backend_nonce, editor_nonce in cases:
        nb, ne = bytes.fromhex(backend_nonce), bytes.fromhex(editor_nonce)
        out.append(
            {
                "token": token,
                "backendNonce": backend_nonce,
                "editorNonce": editor_nonce,
                "backendProof": handshake.proof(token, handshake.BACKEND, nb, ne).hex(),
                "editorProof": handshake.proof(token, handshake.EDITOR, nb, ne).hex(),
            }
        )
    return out


def main() -> None:
    (HERE / "valid.json").write_text(json.dumps(valid_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "invalid.json").write_text(json.dumps(invalid_frames(), indent=1) + "\n", encoding="utf-8")
    (HERE / "handshake.json").write_text(
        json.dumps(handshake_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print("wrote", HERE / "valid.json", HERE / "invalid.json", HERE / "handshake.json")


if __name__ == "__main__":
    main()
