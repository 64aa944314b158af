"""Tensors in debugpy's own views and "Show in Hookscope", through real debug sessions.

The program (written to a temporary folder) pauses with ``debugpy.breakpoint()``
inside ``inner``; ``outer``, one frame down, holds the interesting locals: a
4-D tensor with a NaN, a tensor subclass whose ``__repr__`` would sleep a
minute (and leaves a marker file when called), a model, tensors inside a
dict, a list and a dataclass.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from hs_session import DEADLINE, DebugSession

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PROGRAM = """
import dataclasses, os, sys, time
import debugpy
import torch

REPR_MARKER = sys.argv[1]


class SlowRepr(torch.Tensor):
    def __repr__(self, *args, **kwargs):
        open(REPR_MARKER, "w").write("repr called")
        time.sleep(float(os.environ.get("SLOW_REPR_SECONDS", "60")))
        return "slow"

    __str__ = __repr__


@dataclasses.dataclass
class Batch:
    image: torch.Tensor
    label: int


def inner(scale):
    here = torch.ones(3) * scale
    debugpy.breakpoint()
    return here


def outer():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5) / 7.0
    x[1, 2, 3, 4] = float("nan")
    half = (x[0, 0] * 3).to(torch.bfloat16)
    slow = torch.randn(64, 64).as_subclass(SlowRepr)
    model = torch.nn.Linear(3, 4)
    w = model.weight
    nested = {"a": [torch.full((2, 3), 5.0), 7], "b": Batch(torch.eye(4) * 2, 1)}
    big = torch.randn(2048, 2048)
    grads = (torch.full((16, 16, 32, 32), 0.5),)
    pair = [torch.ones(2, 2), None, slow]
    by_name = {"w": torch.zeros(3, 3), "n": 4}
    plain = (1, "a", [2.5])
    many = [torch.ones(1)] * 20 + [torch.randn(4, 4)]
    return inner(2.0) + x.sum() * 0 + half.float().sum() * 0


outer()
print("done")
"""


@pytest.fixture
def program(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "tensor_program.py"
    script.write_text(PROGRAM, encoding="utf-8")
    return script, tmp_path / "repr_called"


def _paused_frames(session: DebugSession) -> tuple[int, list[dict]]:
    event = session.dap.wait_event("stopped", timeout=DEADLINE)
    thread_id = event["body"]["threadId"]
    frames = session.dap.request("stackTrace", {"threadId": thread_id, "startFrame": 0, "levels": 20}, DEADLINE)[
        "stackFrames"
    ]
    return thread_id, frames


def _frame(frames: list[dict], name: str) -> dict:
    return next(f for f in frames if f["name"] == name)


def _children(session: DebugSession, variable: dict) -> dict[str, dict]:
    assert variable["variablesReference"] > 0, variable
    found = session.dap.request("variables", {"variablesReference": variable["variablesReference"]}, DEADLINE)[
        "variables"
    ]
    return {v["name"]: v for v in found}


def _png_indices(png: bytes) -> np.ndarray:
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    assert image.mode == "P"
    return np.asarray(image)


def _publish(session: DebugSession, frame_id: int, expression: str, handle: str) -> str:
    call = f"__import__('hookscope.debugger.inspector', fromlist=['publish']).publish({expression!r}, {handle!r})"
    return session.dap.evaluate(call, frame_id, context="repl")


def test_variables_show_the_summary_line_and_show_in_hookscope_renders_any_frame(program):
    script, marker = program
    session = DebugSession(script, [str(marker)])
    try:
        conn = session.start()
        thread_id, frames = _paused_frames(session)
        assert frames[0]["name"] == "inner"
        outer = _frame(frames, "outer")
        variables = session.dap.frame_variables(outer["id"], timeout=DEADLINE)

        # The line is the summary, never the data's repr.
        x_line = variables["x"]["value"]
        assert x_line.startswith("tensor[2, 3, 4, 5] f32 cpu μ="), x_line
        assert "nan!1" in x_line and "tensor(" not in x_line
        assert variables["half"]["value"].startswith("tensor[4, 5] bf16 cpu μ=")
        assert variables["big"]["value"].startswith("tensor[2048, 2048] f32 cpu μ=")
        assert "(sampled 65536)" in variables["big"]["value"]
        assert variables["model"]["value"] == "Linear · 16 params · cpu f32 · train"
        assert variables["w"]["value"].startswith("tensor[4, 3] f32 cpu grad μ=")
        # The subclass with a minute-long __repr__ is shown at once, and its __repr__ never ran.
        assert variables["slow"]["value"].startswith("tensor[64, 64] f32 cpu μ=")
        assert not marker.exists()

        # Tuples, lists and dicts of tensors: one line of summaries, never the data's text.
        grads_line = "(tensor[16, 16, 32, 32] f32 cpu μ=0.5 σ=0 [0.5, 0.5],)"
        assert variables["grads"]["value"] == grads_line
        pair_line = variables["pair"]["value"]
        assert pair_line.startswith("[tensor[2, 2] f32 cpu x=[1, 1, 1, 1], None, tensor[64, 64] f32 cpu μ="), pair_line
        assert variables["by_name"]["value"] == "{'w': tensor[3, 3] f32 cpu μ=0 σ=0 [0, 0], 'n': 4}"
        assert variables["plain"]["value"] == "(1, 'a', [2.5])"  # no tensor: debugpy's own text
        many_line = variables["many"]["value"]
        assert many_line.count("tensor[1]") == 8 and many_line.endswith(", …+13]"), many_line
        assert variables["nested"]["value"].startswith(
            "{'a': [tensor[2, 3] f32 cpu x=[5, 5, 5, 5, 5, 5], 7], 'b': <Batch>}"
        )
        assert not marker.exists()  # the slow subclass inside the list: its __repr__ never ran
        # Expanding a tuple shows its tensors' lines as before.
        assert (
            _children(session, variables["grads"])["0"]["value"]
            == "tensor[16, 16, 32, 32] f32 cpu μ=0.5 σ=0 [0.5, 0.5]"
        )
        # The same text in Watch, hover and the Debug Console.
        for context in ("watch", "hover", "repl"):
            assert session.dap.evaluate("grads", outer["id"], context=context) == grads_line, context
            assert session.dap.evaluate("by_name", outer["id"], context=context).startswith("{'w': tensor[3, 3] f32"), (
                context
            )
            assert (
                session.dap.evaluate("pair[:1]", outer["id"], context=context)
                == "[tensor[2, 2] f32 cpu x=[1, 1, 1, 1]]"
            )

        # Expanding shows metadata, grad, grad_fn and a few slices, with evaluate names.
        children = _children(session, variables["x"])
        assert {
            "shape",
            "dtype",
            "device",
            "requires_grad",
            "grad",
            "grad_fn",
            "is_leaf",
            "stats",
            "[0]",
            "[1]",
        } <= set(children), sorted(children)
        assert children["shape"]["value"] == "(2, 3, 4, 5)"
        assert children["dtype"]["value"] == "torch.float32"
        assert children["grad"]["value"] == "None"
        assert children["[1]"]["evaluateName"] == "x[1]"
        assert children["[1]"]["value"].startswith("tensor[3, 4, 5] f32 cpu")
        assert _children(session, variables["w"])["requires_grad"]["value"] == "True"
        # Watch / hover / console use the same line.
        assert session.dap.evaluate("x", outer["id"], context="watch").startswith("tensor[2, 3, 4, 5] f32")
        assert session.dap.evaluate("x", outer["id"], context="hover").startswith("tensor[2, 3, 4, 5] f32")

        # "Show in Hookscope" of a local of the non-top frame: slice x[1, :, 3, :] (axes 1 and 3).
        published = _publish(session, outer["id"], "x", "h1")
        assert published.strip("'\"").startswith("hookscope-ok pid="), published
        assert f"pid={conn.pid}" in published
        body = conn.request(
            "inspectValue",
            expression="x",
            handle="h1",
            options={"view": "slice", "axes": [1, 3], "index": {"0": 1, "2": 3}},
        )
        assert body["summary"]["shape"] == [2, 3, 4, 5] and body["summary"]["nan"] == 1
        assert body["meta"]["axes"] == [1, 3] and body["meta"]["index"] == {"0": 1, "2": 3}
        expected = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) / np.float32(7.0)
        expected[1, 2, 3, 4] = np.nan
        plane = expected[1, :, 3, :]
        values = np.frombuffer(body["values"], dtype="<f4").reshape(body["valuesShape"])
        assert body["valuesStep"] == [1, 1]
        np.testing.assert_array_equal(values, plane)  # NaN at the same place too
        indices = _png_indices(body["png"])
        factor = body["meta"]["upscale"]
        assert indices.shape == (3 * factor, 5 * factor)
        lo, hi = body["meta"]["range"]
        assert lo == pytest.approx(np.nanmin(plane)) and hi == pytest.approx(np.nanmax(plane))
        for i in range(3):
            for j in range(5):
                pixel = indices[i * factor, j * factor]
                if math.isnan(plane[i, j]):
                    assert pixel == 252  # the NaN marker
                else:
                    assert pixel == round((plane[i, j] - lo) / (hi - lo) * 251), (i, j)

        # The feature-map grid of the same (N, C, H, W) tensor, batch item 1.
        grid = conn.request("inspectValue", expression="x", handle="h1", options={"view": "featureMap", "batch": 1})
        assert grid["meta"]["layout"] == "grid" and grid["meta"]["channels"] == [0, 1, 2]
        assert grid["meta"]["nonfinite"]["nan"] == 1

        # bf16, and tensors inside a dict, a list and a dataclass, by the Variables view's evaluate names.
        assert _publish(session, outer["id"], "half", "h2").strip("'\"").startswith("hookscope-ok")
        half = conn.request("inspectValue", expression="half", handle="h2", options={})
        assert half["summary"]["dtype"] == "bfloat16"
        np.testing.assert_allclose(
            np.frombuffer(half["values"], dtype="<f4").reshape(4, 5), expected[0, 0] * 3, rtol=1e-2
        )
        nested = _children(session, variables["nested"])
        in_list = _children(session, nested["'a'"])["0"]
        in_dataclass = _children(session, nested["'b'"])["image"]
        assert in_list["value"] == "tensor[2, 3] f32 cpu x=[5, 5, 5, 5, 5, 5]"
        for handle, variable in (("h3", in_list), ("h4", in_dataclass)):
            assert (
                _publish(session, outer["id"], variable["evaluateName"], handle).strip("'\"").startswith("hookscope-ok")
            )
        assert (in_list["evaluateName"], in_dataclass["evaluateName"]) == ("nested['a'][0]", "nested['b'].image")
        assert conn.request("inspectValue", expression="nested['a'][0]", handle="h3")["summary"]["mean"] == 5.0
        eye = conn.request("inspectValue", expression="nested['b'].image", handle="h4", options={"view": "slice"})
        np.testing.assert_array_equal(np.frombuffer(eye["values"], dtype="<f4").reshape(4, 4), np.eye(4) * 2)
        # A container: the first tensor inside it, and its path.
        assert _publish(session, outer["id"], "nested", "h5").strip("'\"").startswith("hookscope-ok")
        assert conn.request("inspectValue", expression="nested", handle="h5")["path"] == "nested.a[0]"
        # Errors are answers, not exceptions in the program.
        assert "hookscope-error: NameError" in _publish(session, outer["id"], "nope", "h6")
        assert "not a tensor" in _publish(session, outer["id"], "nested['a'][1]", "h7")
        assert "hookscope-error" in _publish(session, outer["id"], "x)\nimport os\n(x", "h8")

        # Released on resume: asking again is a clear error.
        assert conn.request("releaseInspected")["released"] >= 4
        conn.send({"type": "inspectValue", "id": 4242, "expression": "x", "handle": "h1"})
        assert conn.wait_reply(4242, DEADLINE)["error"]["code"] == "notAvailable"

        session.resume(thread_id)
        assert session.continue_until_exit() == 0
        assert "done" in session.output()
        assert not marker.exists()
    finally:
        session.close()


def test_the_setting_turns_the_presentation_off(program, monkeypatch):
    script, marker = program
    monkeypatch.setenv("HOOKSCOPE_TENSOR_VIEW", "0")
    monkeypatch.setenv("SLOW_REPR_SECONDS", "0")
    session = DebugSession(script, [str(marker)])
    try:
        session.start()
        thread_id, frames = _paused_frames(session)
        outer = _frame(frames, "outer")
        scopes = session.dap.request("scopes", {"frameId": outer["id"]}, DEADLINE)["scopes"]
        local_scope = next(s for s in scopes if s["name"].lower().startswith("local"))
        variables = session.dap.request(
            "variables", {"variablesReference": local_scope["variablesReference"]}, DEADLINE
        )["variables"]
        by_name = {v["name"]: v for v in variables}
        assert by_name["x"]["value"].startswith("tensor([[[["), by_name["x"]["value"][:80]
        assert not by_name["model"]["value"].startswith("Linear ·")
        assert by_name["grads"]["value"].startswith("(tensor([[[["), by_name["grads"]["value"][:80]
        assert marker.exists()  # debugpy's default does call __repr__ (what the first test rules out)
        session.resume(thread_id)
    finally:
        session.close()
