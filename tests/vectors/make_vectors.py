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
from hookscope.link.protocol import MAX_FRAME_BYTES, PROTOCOL_VERSION  # noqa: E402

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
    ]


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
