"""Writes the shared protocol test vectors (run by the Python and the TypeScript suites).

valid.json: message -> exact msgpack bytes (hex). Binary values are written
as {"$bin": "<hex>"} in JSON. invalid.json: frame bytes (hex, header
included) that a decoder must refuse, with the error code it must give.
An entry of either with "replyTo" is a reply whose body is also checked against
that request's reply fields (validate_reply / validateReply).
handshake.json: token, both nonces -> each role's proof (hookscope.link.handshake),
which the TypeScript side must compute to the same bytes.
layer_targets.json: layer names against globs, as the backend's model_index matches them
(``fnmatch.fnmatchcase``), and typed targets read as a class or a layer name the way
``hookscope run --break`` reads them: the editor's "Add Layer Breakpoint by Name…" previews both.
Regenerate with `.venv/bin/python tests/vectors/make_vectors.py` after a
protocol change; test_protocol.py fails when the files are stale.
"""

from __future__ import annotations

import fnmatch
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))

from hookscope.link import codec, handshake  # noqa: E402
from hookscope.link.protocol_messages import MESSAGES_BY_TYPE  # noqa: E402
from hookscope.link.protocol_vocabulary import MAX_FRAME_BYTES, PROTOCOL_VERSION  # noqa: E402
from hookscope.terminal.break_spec import parse_spec  # noqa: E402

HERE = Path(__file__).resolve().parent
# Floats in the vectors are never whole numbers: JavaScript has one number type, so its encoder writes
# 1.0 as the int 1 and the bytes would differ (both sides accept an int where a float is declared).

FEATURE_MAP_META = {
    "kind": "feature_map",
    "shape": [1, 4, 2, 2],
    "dtype": "float32",
    "cmap": "viridis",
    "markers": {"nan": [255, 0, 255], "posinf": [255, 255, 255], "neginf": [0, 0, 0]},
    "batch": 0,
    "layout": "grid",
    "page": 0,
    "pages": 1,
    "per_page": 16,
    "channels": [0, 1, 2, 3],
    "ranges": [[-1.5, 1.25], [0.5, 0.5], [None, None], [-0.5, 2.5]],
    "constant": [1],
    "shared_scale": False,
    "sorted_by_strength": False,
    "grid": {"rows": 2, "cols": 2, "tile_h": 32, "tile_w": 32, "gap": 2, "upscale": 16, "downscale": 1},
    "nonfinite": {"nan": 4, "posinf": 0, "neginf": 0},
    "page_nonfinite": {"nan": 4, "posinf": 0, "neginf": 0},
    "of": {"layer": "conv1", "tensor": "output", "step": 3, "phase": "forward"},
}
"""A feature-map grid's meta as engine/core.py's render returns it (a channel with no finite value: [nil, nil])."""

REPLY_TO = {
    "replyOk": "setBreakpoints",
    "renderReply": "render",
    "histogramReply": "render",
    "paramGradsReply": "getParamGrads",
    "listHooksReply": "listHooks",
    "inspectValueReply": "inspectValue",
}
"""Replies of VALID that are also checked against their request's reply fields."""

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
        "body": {"png": {"$bin": "89504e470d0a1a0a"}, "width": 8, "height": 4, "meta": FEATURE_MAP_META},
    },
    "histogramReply": {
        "type": "reply",
        "re": 21,
        "body": {
            "png": {"$bin": "89504e470d0a1a0a"},
            "width": 500,
            "height": 300,
            "meta": {
                "kind": "histogram",
                "shape": [4],
                "dtype": "float32",
                "log": False,
                "edges": [-1.5, 0.25, 1.5],
                "counts": [1, 2],
                "nonfinite": {"nan": 1, "posinf": 0, "neginf": 0},
                "numel": 4,
                "mean": 0.25,
                "min": -1.5,
                "max": 1.5,
                "markers": {"nan": [255, 0, 255]},
                "of": {"layer": "fc1", "tensor": "output"},
            },
        },
    },
    "paramGradsReply": {
        "type": "reply",
        "re": 22,
        "body": {
            "params": [
                {"name": "fc1.weight", "shape": [4, 2], "norm": 1.5, "mean": 0.125, "absmax": 0.75, "nan": 0, "inf": 0},
                {"name": "fc1.bias", "shape": [4], "norm": 2.5, "absmax": 0.5, "nan": 1, "inf": 0},
            ]
        },
    },
    "listHooksReply": {
        "type": "reply",
        "re": 23,
        "body": {
            "hooks": [
                {
                    "model": "m1",
                    "module": "fc1",
                    "kind": "forward",
                    "owner": "user",
                    "function": "train.log_output",
                    "file": "/w/train.py",
                    "line": 30,
                },
                {"model": "*", "module": "*", "kind": "global_forward", "owner": "hookscope", "function": "f"},
            ],
            "leaks": [
                {
                    "model": "m1",
                    "module": "fc1",
                    "kind": "forward",
                    "function": "train.log_output",
                    "file": "/w/train.py",
                    "line": 30,
                    "counts": [1, 2, 3],
                }
            ],
        },
    },
    "inspectValueReply": {
        "type": "reply",
        "re": 24,
        "body": {
            "summary": {
                "path": "x",
                "shape": [2, 2],
                "dtype": "float32",
                "device": "cpu",
                "numel": 4,
                "nan": 0,
                "posinf": 0,
                "neginf": 0,
            },
            "png": {"$bin": "89504e470d0a1a0a"},
            "width": 2,
            "height": 2,
            "meta": {"kind": "tensor", "layout": "heatmap", "axes": [0, 1], "index": {"2": 5}, "range": [None, None]},
            "values": {"$bin": "0000803f"},
            "valuesShape": [1, 1],
            "valuesStep": [1, 2],
        },
    },
    "hitNonFinite": {
        "type": "hit",
        "breakpoint": "nonfinite",
        "model": "m1",
        "layer": "act",
        "phase": "forward",
        "reason": "NaN/Inf in act (forward)",
        "step": 2,
        "summaries": [],
        "pausing": True,
        "origin": "born here",
        "op": {
            "op": "torch.log",
            "phase": "forward",
            "stack": ["/w/model.py:21 forward", "/usr/lib/torch/nn/module.py:1700 _call_impl"],
            "file": "/w/model.py",
            "line": 21,
            "function": "Act.forward",
        },
        "rearm": "the next step",
    },
    "hitGradients": {
        "type": "hit",
        "breakpoint": "gradients",
        "model": "m1",
        "layer": "fc1",
        "phase": "backward",
        "reason": "exploding gradients",
        "step": 5,
        "summaries": [],
        "pausing": True,
        "view": "gradientFlow",
        "viewOptions": {"metric": "norm", "highlight": "fc1", "exploding": 1000.5},
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
        *_broken_leaves(),
    ]


def _changed(name: str, path: tuple[str | int, ...], value: object) -> dict:
    """A deep copy of VALID[name] (in Python form) with the value at ``path`` replaced (or removed: _GONE)."""
    msg = _to_python(VALID[name])
    where = msg
    for key in path[:-1]:
        where = where[key]
    if value is _GONE:
        del where[path[-1]]
    else:
        where[path[-1]] = value
    return msg


_GONE = object()


def _broken_leaves() -> list[dict]:
    """One malformed leaf deep inside each typed nested field: the validators check to the leaves."""
    cases = [
        ("hit summary hist with a string count", "hit", ("summaries", 0, "hist", "counts", 1), "5"),
        ("hit summary hist without hi", "hit", ("summaries", 0, "hist", "hi"), _GONE),
        ("hit op with a string line", "hitNonFinite", ("op", "line"), "21"),
        ("hit op without op", "hitNonFinite", ("op", "op"), _GONE),
        ("hit op stack of numbers", "hitNonFinite", ("op", "stack", 0), 21),
        ("hit viewOptions with a string threshold", "hitGradients", ("viewOptions", "exploding"), "1e3"),
        ("hit viewOptions without metric", "hitGradients", ("viewOptions", "metric"), _GONE),
        ("getParamGrads reply with a string nan count", "paramGradsReply", ("body", "params", 0, "nan"), "0"),
        ("getParamGrads reply without name", "paramGradsReply", ("body", "params", 1, "name"), _GONE),
        ("listHooks reply with a numeric owner", "listHooksReply", ("body", "hooks", 0, "owner"), 1),
        ("listHooks reply with a string line", "listHooksReply", ("body", "hooks", 0, "line"), "30"),
        ("listHooks reply leak counts of strings", "listHooksReply", ("body", "leaks", 0, "counts", 2), "3"),
        ("listHooks reply without leaks", "listHooksReply", ("body", "leaks"), _GONE),
        ("render reply without meta", "renderReply", ("body", "meta"), _GONE),
        ("render reply meta grid rows a string", "renderReply", ("body", "meta", "grid", "rows"), "2"),
        ("render reply meta range end a string", "renderReply", ("body", "meta", "ranges", 0, 1), "1.0"),
        ("render reply meta channels a number", "renderReply", ("body", "meta", "channels"), 64),
        ("render reply meta of without tensor", "renderReply", ("body", "meta", "of", "tensor"), _GONE),
        ("render reply meta nonfinite nan a float", "histogramReply", ("body", "meta", "nonfinite", "nan"), 1.5),
        ("render reply meta edges with a string", "histogramReply", ("body", "meta", "edges", 0), "-1"),
        ("inspectValue reply meta index a string", "inspectValueReply", ("body", "meta", "index", "2"), "5"),
        ("inspectValue reply valuesStep of strings", "inspectValueReply", ("body", "valuesStep", 0), "1"),
    ]
    out = []
    for title, name, path, value in cases:
        vector = {"name": title, "hex": _framed(codec.encode(_changed(name, path, value))), "code": "badMessage"}
        if name in REPLY_TO:
            vector["replyTo"] = REPLY_TO[name]
        out.append(vector)
    return out


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
    out = []
    for name, msg in VALID.items():
        vector = {"name": name, "message": msg, "hex": codec.frame(_to_python(msg)).hex()}
        if name in REPLY_TO:
            vector["replyTo"] = REPLY_TO[name]
        out.append(vector)
    return out


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


_LAYER_NAMES = [
    "",
    "embed",
    "encoder",
    "encoder.layers.0",
    "encoder.layers.0.self_attn",
    "encoder.layers.0.self_attn.out_proj",
    "encoder.layers.1.linear1",
    "encoder.layers.10.linear1",
    "blocks.2.attn",
    "heads.my head",
    "heads.a]b",
    "heads.[x]",
    "Mixed.Case",
]
_GLOBS = [
    "*",
    "encoder.*",
    "encoder.layers.?.linear1",
    "encoder.layers.*.linear1",
    "*.attn",
    "*attn*",
    "blocks.[0-2].attn",
    "blocks.[!0-1].attn",
    "heads.[]a]*",
    "heads.a[]]b",
    "heads.[[]x]",
    "heads.[x",
    "heads.my *",
    "*.Case",
    "mixed.*",
    "encoder.layers.[z-a]",
    "embed",
    "encoder.layers.0",
]
_TARGET_TEXTS = [
    "*",
    "Linear",
    "MultiheadAttention",
    "Conv2d",
    "encoder",
    "encoder.*",
    "Encoder.layers",
    "L*",
    "layer_1",
    "X",
]


def layer_target_vectors() -> dict:
    return {
        "globs": [
            {"glob": glob, "name": name, "match": fnmatch.fnmatchcase(name, glob)}
            for glob in _GLOBS
            for name in _LAYER_NAMES
        ],
        "targets": [
            {"text": text, "kind": "cls" if "cls" in parse_spec(text, "v") else "layer"} for text in _TARGET_TEXTS
        ],
    }


def main() -> None:
    (HERE / "valid.json").write_text(json.dumps(valid_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "invalid.json").write_text(json.dumps(invalid_frames(), indent=1) + "\n", encoding="utf-8")
    (HERE / "handshake.json").write_text(
        json.dumps(handshake_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "layer_targets.json").write_text(json.dumps(layer_target_vectors(), indent=1) + "\n", encoding="utf-8")
    print("wrote", HERE / "valid.json", HERE / "invalid.json", HERE / "handshake.json", HERE / "layer_targets.json")


if __name__ == "__main__":
    main()
