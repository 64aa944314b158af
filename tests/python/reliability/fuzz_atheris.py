"""Atheris (coverage-guided) harness for the Python decoder and validator.

Run by ``test_atheris.py`` with a small fixed budget, or by hand for longer:
``python tests/python/reliability/fuzz_atheris.py -atheris_runs=200000``.
Any exception other than ``ProtocolError`` out of ``FrameReader.feed`` or
``protocol.validate`` is a crash; libFuzzer's ``-timeout`` catches hangs.
Needs atheris (in the dev extras on Linux x86_64, CPython <= 3.11).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from hookscope.link import codec, protocol
    from hookscope.link.protocol_vocabulary import ProtocolError


def test_one_input(data: bytes) -> None:
    reader = codec.FrameReader()
    # Half the inputs as a raw stream (headers included), half as a body with a correct header.
    if data[:1] == b"\x00":
        stream = data[1:]
    else:
        stream = len(data).to_bytes(4, "big") + data
    try:
        messages = reader.feed(stream)
    except ProtocolError:
        return
    for message in messages:
        try:
            protocol.validate(message)
        except ProtocolError:
            pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
