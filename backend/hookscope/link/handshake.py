"""The handshake of a Hookscope connection: each side proves it holds the session token.

::

    backend (connects)                                 editor (listens)
    hello {protocol, hookscope, nonce Nb}       --->
                                                <---   challenge {protocol, nonce Ne}
    proof {HMAC(token, backend | Nb | Ne)}      --->   checked against each live token
                                                <---   proof {HMAC(token, editor | Nb | Ne)}
    checked
    process {pid, rank, argv, ...}              --->   then requests, replies and events

The token never crosses the socket. Both nonces are fresh and random, so a proof cannot be
replayed on another connection, and the role inside each HMAC keeps one side's proof from
being reflected as the other's. Proofs are compared in constant time. The backend proves
first so that the editor, which holds one token per debug session, can tell which one; the
backend says nothing about its process (pid, argv) until the editor has proved itself too.
A process that binds the editor's port after the editor went away gets a proof under a dead
token, which it can do nothing with, and cannot prove itself: it can send no request.

Until a peer has proved the token, each frame it sends is at most ``HANDSHAKE_FRAME_BYTES``
(refused from its 4-byte header) and the whole handshake has ``HELLO_DEADLINE_S``; frames
are read exactly, one at a time, so an unknown peer costs O(1) memory.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from hookscope import __version__
from hookscope.link import codec, protocol
from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    ERR_TOKEN,
    ERR_VERSION,
    HANDSHAKE_FRAME_BYTES,
    HELLO_DEADLINE_S,
    MAX_FRAME_BYTES,
    NONCE_BYTES,
    PROOF_LABEL,
    PROTOCOL_VERSION,
    ProtocolError,
)

BACKEND = b"backend"
EDITOR = b"editor"

_HANDSHAKE_CONTAINERS = 16
"""Maps and arrays a handshake frame may hold (it needs one)."""


class HandshakeFailed(Exception):
    """The handshake did not complete; ``code`` is a protocol error code.

    ``final``: the peer at the editor's address refused this process (wrong token, other
    protocol): trying again cannot help.
    """

    def __init__(self, code: str, message: str, final: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.final = final


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(token: str, role: bytes, backend_nonce: bytes, editor_nonce: bytes) -> bytes:
    """HMAC-SHA256 keyed by the token over the label, the prover's role and both challenges."""
    message = PROOF_LABEL + b"\0" + role + b"\0" + bytes(backend_nonce) + bytes(editor_nonce)
    return hmac.new(token.encode("utf-8"), message, hashlib.sha256).digest()


def proof_matches(expected: bytes, got: Any) -> bool:
    """Constant-time comparison of a received proof with the expected one."""
    return isinstance(got, (bytes, bytearray)) and hmac.compare_digest(expected, bytes(got))


def version_mismatch(theirs: Any, them: str, us: str) -> str:
    """The clear message for a peer of another protocol version."""
    return (
        f"protocol version mismatch: {them} speaks protocol {theirs!r}, {us} speaks "
        f"{PROTOCOL_VERSION}. Use a hookscope Python package and a Hookscope extension of the "
        "same release (pip install -U hookscope, or update the extension)."
    )


# ---------------------------------------------------------------------------
# Reading and writing handshake frames (blocking, under one deadline).


def read_frame(sock: socket.socket, deadline: float, limit: int = HANDSHAKE_FRAME_BYTES) -> Any:
    """Exactly one frame: its header checked against ``limit`` before any of the body is read."""
    header = _recv_exact(sock, codec.HEADER_BYTES, deadline)
    try:
        length = codec.frame_length(header, limit)
    except ProtocolError as exc:
        raise HandshakeFailed(ERR_BAD_MESSAGE, f"before the token was proved: {exc}") from None
    body = _recv_exact(sock, length, deadline)
    try:
        return codec.decode(body, _HANDSHAKE_CONTAINERS if limit == HANDSHAKE_FRAME_BYTES else None)
    except ProtocolError as exc:
        raise HandshakeFailed(exc.code, str(exc)) from None


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < n:
        # One deadline for the whole handshake: a peer sending a byte now and then cannot hold it open.
        left = deadline - time.monotonic()
        if left <= 0:
            raise HandshakeFailed(ERR_BAD_MESSAGE, f"the handshake took longer than {HELLO_DEADLINE_S:g} s")
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            continue
        if not chunk:
            raise ConnectionError("the peer closed the connection during the handshake")
        data += chunk
    return bytes(data)


def send(sock: socket.socket, message: dict[str, Any], deadline: float) -> None:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    sock.sendall(codec.frame(message))


def _expect(message: Any, mtype: str, *, from_editor: bool) -> dict[str, Any]:
    """``message`` as a valid ``mtype``; an error reply from the editor raises its refusal."""
    if isinstance(message, dict) and message.get("type") == "reply" and isinstance(message.get("error"), dict):
        error = message["error"]
        code = str(error.get("code"))
        # Only the one holding the editor's address can refuse us (while the editor lives, the port
        # is its): a wrong token or another protocol cannot get better by trying again.
        raise HandshakeFailed(
            code, str(error.get("message"))[:500], final=from_editor and code in (ERR_TOKEN, ERR_VERSION)
        )
    try:
        protocol.validate(message)
    except ProtocolError as exc:
        raise HandshakeFailed(exc.code, f"during the handshake: {exc}") from None
    checked: dict[str, Any] = message  # validate() refuses anything but a map with a known string type
    if checked["type"] != mtype:
        raise HandshakeFailed(ERR_BAD_MESSAGE, f"expected {mtype!r} in the handshake, got {checked['type'][:32]!r}")
    return checked


def _nonce(message: dict[str, Any], other: bytes | None = None) -> bytes:
    nonce = message["nonce"]
    if len(nonce) != NONCE_BYTES or (other is not None and hmac.compare_digest(bytes(nonce), other)):
        raise HandshakeFailed(ERR_BAD_MESSAGE, f"a challenge must be {NONCE_BYTES} fresh random bytes")
    return bytes(nonce)


# ---------------------------------------------------------------------------
# The two sides.


def as_backend(sock: socket.socket, token: str, describe: Callable[[], dict[str, Any]], deadline: float) -> None:
    """The debuggee's side: returns once the editor proved the token and ``process`` was sent."""
    mine = new_nonce()
    send(
        sock,
        {"type": "hello", "protocol": PROTOCOL_VERSION, "hookscope": __version__, "nonce": mine},
        deadline,
    )
    first = read_frame(sock, deadline)
    if isinstance(first, dict) and first.get("type") == "challenge" and first.get("protocol") != PROTOCOL_VERSION:
        text = version_mismatch(first.get("protocol"), "the editor", "this hookscope package")
        _refuse(sock, ERR_VERSION, text, deadline)
        raise HandshakeFailed(ERR_VERSION, text, final=True)
    theirs = _nonce(_expect(first, "challenge", from_editor=True), mine)
    send(sock, {"type": "proof", "proof": proof(token, BACKEND, mine, theirs)}, deadline)
    answer = _expect(read_frame(sock, deadline), "proof", from_editor=True)
    if not proof_matches(proof(token, EDITOR, mine, theirs), answer["proof"]):
        text = "the peer at the editor's address could not prove the session token"
        _refuse(sock, ERR_TOKEN, "proof refused", deadline)
        raise HandshakeFailed(ERR_TOKEN, text)
    send(sock, {"type": "process", **describe()}, deadline)


def as_editor(sock: socket.socket, tokens: Callable[[], Iterable[str]], deadline: float) -> tuple[str, dict[str, Any]]:
    """The editor's side: returns (the token the backend proved, its ``process`` message).

    ``tokens`` gives the live session tokens. Raises HandshakeFailed (the caller sends the
    error reply and closes).
    """
    hello = read_frame(sock, deadline)
    # The version first: a backend of another protocol may say hello with other fields.
    if isinstance(hello, dict) and hello.get("type") == "hello" and hello.get("protocol") != PROTOCOL_VERSION:
        raise HandshakeFailed(
            ERR_VERSION, version_mismatch(hello.get("protocol"), "the debuggee's hookscope package", "this editor")
        )
    theirs = _nonce(_expect(hello, "hello", from_editor=False))
    mine = new_nonce()
    send(sock, {"type": "challenge", "protocol": PROTOCOL_VERSION, "nonce": mine}, deadline)
    claimed = _expect(read_frame(sock, deadline), "proof", from_editor=False)["proof"]
    token = None
    for candidate in tokens():  # every one compared, in constant time each
        if proof_matches(proof(candidate, BACKEND, theirs, mine), claimed) and token is None:
            token = candidate
    if token is None:
        raise HandshakeFailed(ERR_TOKEN, "the process could not prove a session token of this editor")
    send(sock, {"type": "proof", "proof": proof(token, EDITOR, theirs, mine)}, deadline)
    # The backend has proved itself: its description may be as large as any of its frames.
    return token, _expect(read_frame(sock, deadline, MAX_FRAME_BYTES), "process", from_editor=False)


def _refuse(sock: socket.socket, code: str, text: str, deadline: float) -> None:
    try:
        send(sock, protocol.error_reply(-1, code, text), deadline)
    except OSError:
        pass
