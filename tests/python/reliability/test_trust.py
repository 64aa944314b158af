"""Trust: what a local process that is not the editor can do to the debuggee (nothing), and what
the editor itself can cost it (a bounded share).

* A process that binds the editor's port after the editor went away (a port squatter) gets no
  token, no pid or argv, and cannot run code: the expression condition it sends never runs.
* Without an editor that proves the token, the agent gives up after RECONNECT_GIVE_UP_S and says so.
* A 32 MiB first frame is refused from its header on both sides (agent and EditorLink), with
  O(1) memory.
* Request fields that size work are bounded, with an error that names the field and the limit.
* A flood of requests takes only its share of the interpreter (what the agent thread may take; stale
  ones are shed as 'busy' and counted).
* An error reply with badToken affects nothing but the request it answers.
* EditorLink.close() ends the thread blocked in accept().
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest
from reliability_support import ROOT, SmallNet, batches, hook_count, subprocess_env, train, wait_until

from hookscope.link import agent as agent_mod
from hookscope.link import bounds, codec, handshake, protocol, request_pacing, serve_loop
from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    ERR_BUSY,
    ERR_TOKEN,
    ERR_VERSION,
    HANDSHAKE_FRAME_BYTES,
    MAX_REQUEST_FRAME_BYTES,
    PROTOCOL_VERSION,
)
from hookscope.link.request_pacing import RequestBudget
from hookscope.terminal.editor_link import EditorLink, RequestError


def _read_all(sock: socket.socket, limit_s: float) -> bytes:
    """What the peer sends until it closes (or ``limit_s`` passes)."""
    data = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _expression_breakpoint(marker) -> dict:
    payload = f"open({str(marker)!r}, 'w').write('x') > 0"
    return {
        "type": "setBreakpoints",
        "id": 1,
        "breakpoints": [
            {
                "id": "evil",
                "layer": "*",
                "phases": ["forward"],
                "condition": {"kind": "expression", "expression": payload},
            }
        ],
    }


# ---------------------------------------------------------------- the port squatter


def test_port_squatter_gets_no_token_and_cannot_run_code(link, live_agent, tmp_path):
    marker = tmp_path / "pwned"
    model = SmallNet()
    a = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    token = link.token
    link.close()  # the editor goes away; the program runs on
    wait_until(lambda: not a.connected, what="the agent to notice")
    squatter = socket.create_server(("127.0.0.1", link.port))  # any local process may bind it now
    squatter.settimeout(30)
    received = b""
    try:
        for attempt in ("requests at once", "plays the protocol without the token"):
            peer, _ = squatter.accept()
            hello = handshake.read_frame(peer, time.monotonic() + 10)
            assert hello["type"] == "hello" and set(hello) == {"type", "protocol", "hookscope", "nonce"}
            if attempt == "requests at once":  # as an editor of protocol 1 would
                peer.sendall(codec.frame(_expression_breakpoint(marker)) + codec.frame({"type": "ping", "id": 2}))
            else:
                peer.sendall(
                    codec.frame({"type": "challenge", "protocol": PROTOCOL_VERSION, "nonce": handshake.new_nonce()})
                )
                backend_proof = handshake.read_frame(peer, time.monotonic() + 10)
                assert backend_proof["type"] == "proof"
                peer.sendall(
                    codec.frame({"type": "proof", "proof": handshake.new_nonce()})
                    + codec.frame(_expression_breakpoint(marker))
                )
            received += codec.frame(hello) + _read_all(peer, 10)
            peer.close()
        train(model, batches(4))  # every forward would evaluate the condition, were it installed
    finally:
        squatter.close()
    assert not marker.exists(), "a squatter ran code in the debuggee"
    assert hook_count(model) == 0
    assert token.encode() not in received
    types = {m.get("type") for m in codec.FrameReader().feed(received)}
    assert types <= {"hello", "proof", "reply"}, types  # no process description, no reply to a request
    assert a.refused is None and a.connections == 1


def test_agent_gives_up_without_an_editor_that_proves_the_token(link, live_agent, monkeypatch, capfd):
    monkeypatch.setattr(agent_mod, "RECONNECT_GIVE_UP_S", 2.0)
    a = live_agent(link, SmallNet())
    link.wait_connection(20)
    port = link.port
    link.close()
    left = time.monotonic()
    # A squatter that answers every connection with a wrong proof: it does not count as an editor.
    squatter = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def squat() -> None:
        squatter.settimeout(0.2)
        while not stop.is_set():
            try:
                peer, _ = squatter.accept()
            except OSError:
                continue
            try:
                handshake.read_frame(peer, time.monotonic() + 5)
                peer.sendall(
                    codec.frame({"type": "challenge", "protocol": PROTOCOL_VERSION, "nonce": handshake.new_nonce()})
                )
                handshake.read_frame(peer, time.monotonic() + 5)
                peer.sendall(codec.frame({"type": "proof", "proof": b"\0" * 32}))
                _read_all(peer, 2)
            except (OSError, handshake.HandshakeFailed):
                pass
            peer.close()

    thread = threading.Thread(target=squat, daemon=True)
    thread.start()
    try:
        wait_until(lambda: a.gave_up is not None, timeout=20, what="the agent to give up")
        took = time.monotonic() - left
        wait_until(lambda: not a._thread.is_alive(), what="the agent thread to end")
    finally:
        stop.set()
        thread.join(5)
        squatter.close()
    assert 2.0 <= took < 2.0 + max(agent_mod.RECONNECT_BACKOFF_S) + 3
    assert a.attempts > 2 and a.connections == 1  # it tried the squatter, which never proved the token
    err = capfd.readouterr().err
    assert "the editor is gone" in err and "Hookscope is off in this process" in err


# ---------------------------------------------------------------- nothing big before the token is proved

BIG = 32 * 1024 * 1024


def _stream_big_frame(sock: socket.socket, body: memoryview) -> threading.Thread:
    """Send a frame announcing 32 MiB and its body (sent without copies), until the peer stops reading."""

    def send() -> None:
        try:
            sock.sendall(BIG.to_bytes(4, "big"))
            for i in range(0, BIG, 1 << 16):
                sock.sendall(body[i : i + (1 << 16)])
        except OSError:
            pass

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_editor_link_refuses_a_32_mib_first_frame_from_its_header():
    link = EditorLink()
    sock = socket.create_connection((link.host, link.port))
    body = memoryview(bytes(BIG))  # allocated before the measurement starts
    tracemalloc.start()
    try:
        sender = _stream_big_frame(sock, body)
        start = time.monotonic()
        data = _read_all(sock, 10)
        took = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        sock.close()
        link.close()
    sender.join(10)
    reply = codec.FrameReader().feed(data)[0]
    assert reply["error"]["code"] == ERR_BAD_MESSAGE
    assert f"exceeds the limit of {HANDSHAKE_FRAME_BYTES}" in reply["error"]["message"]
    assert took < 5
    assert peak < 1024 * 1024, f"the link buffered {peak} bytes of an unauthenticated frame"


def test_agent_refuses_a_32_mib_frame_from_a_peer_that_did_not_prove_the_token():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(20)
    a = agent_mod.Agent(
        "127.0.0.1",
        server.getsockname()[1],
        "the-token",
        discover=False,
        engine_factory=lambda emit: None,
        engine_ready=lambda: False,
    )
    body = memoryview(bytes(BIG))  # allocated before the measurement starts
    tracemalloc.start()
    try:
        a.start()
        peer, _ = server.accept()
        hello = handshake.read_frame(peer, time.monotonic() + 10)
        assert hello["type"] == "hello"
        sender = _stream_big_frame(peer, body)
        start = time.monotonic()
        _read_all(peer, 10)  # the agent closes the connection
        took = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
        peer.close()
    finally:
        tracemalloc.stop()
        a.stop()
        server.close()
    sender.join(10)
    assert took < 5
    assert peak < 1024 * 1024, f"the agent buffered {peak} bytes of an unauthenticated frame"
    assert a.connections == 0 and a.refused is None  # not final: it would try again, bounded


# ---------------------------------------------------------------- bounded by construction


@pytest.mark.parametrize(
    "view,options,field",
    [
        ("histogram", {"bins": 10**7}, "bins"),
        ("featureMap", {"per_page": 10**6}, "per_page"),
        ("featureMap", {"min_tile": 10**5}, "min_tile"),
        ("featureMap", {"page": -1}, "page"),
        ("featureMap", {"cmap": "x" * 10**5}, "string of"),
        ("attention", {"labels": ["x"] * 10**5}, "labels"),
        ("histogram", {"bins": 10, "verbose": True}, "unknown option 'verbose'"),
    ],
)
def test_huge_render_options_are_refused_with_a_clear_error(link, live_agent, view, options, field):
    model = SmallNet()
    agent = live_agent(link, model)
    # The time share is another test's subject: on a slow host the first renders spend more than its
    # burst, and the refusal then waited ~5 s for its turn, which the bound below is not about.
    agent.budget = RequestBudget(share=1.0, burst=60.0)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    with pytest.raises(RequestError):
        conn.request("render", view="histogram", layer="head", model="m1")  # the panel shows head from now on
    train(model, batches(1))  # its output is kept: a render of head would now work
    assert conn.request("render", view="histogram", layer="head", model="m1")["png"]
    start = time.monotonic()
    with pytest.raises(RequestError) as err:
        conn.request("render", view=view, layer="head", model="m1", options=options)
    assert err.value.code == ERR_BAD_MESSAGE
    assert field in err.value.message
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "message,field",
    [
        ({"type": "watch", "layers": ["head"], "rateHz": 1e9}, "rateHz"),
        (
            {"type": "addIntervention", "layer": "head", "kind": "zero_channels", "channels": list(range(10**5))},
            "channels",
        ),
        ({"type": "inspectValue", "expression": "x", "handle": "h", "options": {"per_page": 10**6}}, "per_page"),
        (
            {
                "type": "setBreakpoints",
                "breakpoints": [
                    {"id": str(i), "layer": "x", "phases": ["forward"]} for i in range(bounds.MAX_BREAKPOINTS + 1)
                ],
            },
            "breakpoints",
        ),
    ],
)
def test_other_requests_that_size_work_are_bounded(link, live_agent, message, field):
    live_agent(link, SmallNet())
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    with pytest.raises(RequestError) as err:
        conn.request(message["type"], **{k: v for k, v in message.items() if k != "type"})
    assert err.value.code == ERR_BAD_MESSAGE and field in err.value.message


def test_a_frame_of_empty_maps_is_refused_before_it_becomes_objects(link, live_agent):
    live_agent(link, SmallNet())
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    # 1 MiB of empty maps inside one request: within the frame limit, far over the containers allowed.
    body = b"\x82\xa4type\xa4ping\xa2id\x01"
    flood = codec.encode({"type": "ping", "id": 3, "junk": [{}] * 900_000})
    assert len(flood) <= MAX_REQUEST_FRAME_BYTES
    conn.send_raw(len(flood).to_bytes(4, "big") + flood)
    error = conn.wait_event("reply", lambda m: "error" in m, timeout=20)
    assert "maps and arrays" in error["error"]["message"]
    conn.send_raw(len(body).to_bytes(4, "big") + body)
    assert conn.wait_reply(1, 20)["body"]["pid"] > 0  # the connection serves on


def test_a_bad_token_reply_affects_only_the_request_it_answers(link, live_agent):
    a = live_agent(link, SmallNet())
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    conn.send(protocol.error_reply(7, ERR_TOKEN, "a reply that says badToken"))
    conn.send(protocol.error_reply(-1, ERR_VERSION, "and one that says protocolMismatch"))
    assert conn.request("ping")["pid"] > 0
    assert a.refused is None and a.connected and a.connections == 1
    assert not conn.closed


# ---------------------------------------------------------------- a request flood

FLOOD_TARGET = r"""
import json, sys, time
import torch
from torch import nn
import hookscope

torch.manual_seed(0)
# Many small layers: a step spent mostly in Python, where another thread's work costs it the most.
model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(30)])
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(8, 32)
agent = hookscope.connect(timeout=30)
print("ready", flush=True)

def steps(n):
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.thread_time()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        wall.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    return wall, cpu

def agent_cpu():
    return time.clock_gettime(time.pthread_getcpuclockid(agent._thread.ident))

for line in sys.stdin:
    if line.strip() == "quit":
        break
    cpu, wall = agent_cpu(), time.perf_counter()
    step_wall, step_cpu = steps(int(line))
    share = (agent_cpu() - cpu) / (time.perf_counter() - wall)
    print(json.dumps({"steps": step_wall, "stepCpu": step_cpu, "shed": agent.shed, "agentShare": share}), flush=True)
"""

FLOOD_REQUESTS = 200_000


def test_a_request_flood_takes_only_its_share_of_the_interpreter(link, tmp_path):
    script = tmp_path / "flood_target.py"
    script.write_text(FLOOD_TARGET, encoding="utf-8")
    env = subprocess_env({**link.env(), "PYTHONPATH": str(ROOT / "backend")})
    child = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        conn = link.wait_connection(30)

        def measure(n: int) -> dict:
            child.stdin.write(f"{n}\n")
            child.stdin.flush()
            return json.loads(child.stdout.readline())

        measure(50)  # warm up
        quiet = measure(1000)
        # Requests that read no .grad: reading a .grad from another thread while backward writes it
        # can crash torch (a separate issue); these cost the agent thread Python time only.
        kinds = [{"type": "ping"}, {"type": "listHooks"}, {"type": "listInterventions"}]
        blob = b"".join(codec.frame({**kinds[i % len(kinds)], "id": i}) for i in range(1, FLOOD_REQUESTS + 1))

        def flood() -> None:
            try:
                conn.send_raw(blob)  # as fast as the agent takes them
            except OSError:
                pass  # the child is gone

        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        wait_until(lambda: len(conn.received) > 100, what="the flood to be answered")
        measure(300)  # the budget's initial burst is spent here
        answered_before = len(conn.received)
        flooded = measure(1000)
        answered = len(conn.received) - answered_before
        child.stdin.write("quit\n")
        child.stdin.flush()
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    quiet_cpu, flooded_cpu = statistics.median(quiet["stepCpu"]), statistics.median(flooded["stepCpu"])
    print(
        f"step median: {statistics.median(quiet['steps']) * 1e3:.2f} ms without, "
        f"{statistics.median(flooded['steps']) * 1e3:.2f} ms during a flood of {FLOOD_REQUESTS} requests "
        f"(training thread's CPU {quiet_cpu * 1e3:.2f} and {flooded_cpu * 1e3:.2f} ms); the agent thread took "
        f"{flooded['agentShare']:.1%} of the time ({answered} answered while the steps ran, {flooded['shed']} shed)"
    )
    assert len(conn.received) < FLOOD_REQUESTS, "the flood was over before the steps were measured"
    assert answered > 100, "the agent answered (almost) nothing while the steps ran: the share below says nothing"
    # What a flood can cost a step is what the agent thread takes of the interpreter: its share, however
    # much it is asked. That share is read on the agent thread's own CPU clock. Step times are printed, not
    # asserted: on a shared 2-core host a step's median (wall or thread CPU) moves by 1.5x between two
    # quiet runs, and CI failed on exactly that (1.12 ms quiet, 1.95 ms flooded, with the agent at 5.5%).
    assert flooded["agentShare"] < request_pacing.REQUEST_SHARE * 1.5 + 0.02


def test_stale_requests_are_shed_as_busy_and_counted(link, live_agent, monkeypatch):
    monkeypatch.setattr(request_pacing, "SHED_AFTER_S", 0.2)
    monkeypatch.setattr(serve_loop, "STATS_INTERVAL_S", 0.2)
    a = live_agent(link, SmallNet())
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    a.budget = RequestBudget(share=0.02, burst=0.002)  # a small share: 2,000 pings take a while
    n = 2000
    conn.send_raw(b"".join(codec.frame({"type": "ping", "id": i}) for i in range(10, 10 + n)))
    replies = [conn.wait_reply(i, 60) for i in range(10, 10 + n)]  # every request gets exactly one answer
    busy = [r for r in replies if r.get("error", {}).get("code") == ERR_BUSY]
    assert busy and len(busy) < n and a.shed == len(busy)
    # The editor is told (stats events while requests are shed), up to the final count.
    assert conn.wait_event("stats", lambda m: m.get("shed") == a.shed, timeout=20)


def test_editor_link_close_ends_the_thread_blocked_in_accept():
    link = EditorLink()
    assert link.accepting
    start = time.monotonic()
    link.close()
    assert not link.accepting and time.monotonic() - start < 2
    with pytest.raises(OSError):
        socket.create_connection((link.host, link.port), timeout=2).close()


SEQUENTIAL_2000 = r"""
import sys
import torch
from torch import nn
import hookscope

hookscope.connect(timeout=30)
print("ready", flush=True)
sys.stdin.readline()  # the editor has set its breakpoints
model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(2000)])
with torch.no_grad():
    model(torch.zeros(1, 16))
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_2000_layer_sequential_is_one_model_and_its_breakpoint_resolves(link, tmp_path):
    """Through the agent's own discovery, in a fresh process: the layers made before their
    Sequential are not models of their own, and a breakpoint on the last one, set before the
    model exists, fires without a false 'matches no layer'."""
    script = tmp_path / "sequential_2000.py"
    script.write_text(SEQUENTIAL_2000, encoding="utf-8")
    env = subprocess_env({**link.env(), "PYTHONPATH": str(ROOT / "backend")})
    child = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        conn = link.wait_connection(30)
        conn.request("setBreakpoints", breakpoints=[{"id": "last", "layer": "1999", "phases": ["forward"]}])
        child.stdin.write("go\n")
        child.stdin.flush()
        hit = conn.wait_event("hit", lambda m: m["breakpoint"] == "last", timeout=60)
        assert hit["layer"] == "1999"
        assert child.stdout.readline().strip() == "done"
        conn.request("ping")  # everything the agent sent before is in
        added = [m["model"] for m in conn.received if m["type"] == "modelAdded"]
        assert [len(t["modules"]) for t in added] == [2001], [t["cls"] for t in added][:5]
        assert not [m for m in conn.received if m["type"] == "notice" and m.get("code") == "breakpointUnresolved"]
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
