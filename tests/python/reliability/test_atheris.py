"""Runs the Atheris harness (fuzz_atheris.py) for a small fixed budget; skipped without atheris."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).with_name("fuzz_atheris.py")


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None,
    reason="atheris is not installed (a dev dependency on Linux x86_64, CPython <= 3.11)",
)
def test_atheris_decoder_budget(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # Seed with valid frames so the fuzzer starts from real messages.
    from hookscope.link import codec

    for i, message in enumerate(
        [
            {"type": "ping", "id": 1},
            {"type": "watch", "id": 2, "layers": ["a"]},
            {"type": "setBreakpoints", "id": 3, "breakpoints": [{"id": "x"}]},
        ]
    ):
        (corpus / f"seed{i}").write_bytes(codec.encode(message))
    result = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "-atheris_runs=20000",
            "-max_len=4096",
            "-timeout=5",
            "-rss_limit_mb=2048",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
