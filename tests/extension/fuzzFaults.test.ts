// Fault injection against the extension's server (BackendHub + BackendConnection), with real sockets:
// hostile or broken peers (dribbled hello, garbage after hello, oversize headers), the heartbeat the
// backend uses to detect a hung editor, and a real Python debuggee SIGKILLed while it streams summaries:
// the hub must drop that process's state, reject its pending requests and say so (onDidExit), while
// the other processes keep working.

import { strict as assert } from 'node:assert';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { BackendHub, type ProcessState } from '../../extension/src/backend/hub';
import { RequestError } from '../../extension/src/backend/connection';
import { waitFor } from '../../extension/src/common/events';
import type { Logger } from '../../extension/src/common/logger';
import { frameMessage } from '../../extension/src/protocol/codec';
import { newNonce, proof } from '../../extension/src/protocol/handshake';
import { PROTOCOL_VERSION } from '../../extension/src/protocol/messages.gen';
import { rawBackend, rawClient } from './rawBackend';

const ROOT = resolve(__dirname, '..', '..');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const DEADLINE_MS = 60000;

/** A debuggee that trains forever (until killed): small model, watch-able layers. */
const TRAIN_FOREVER = `
import torch, time
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("ready", flush=True)
while True:
    x = torch.randn(4, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.002)
`;

function hello(): object {
  return { type: 'hello', protocol: PROTOCOL_VERSION, hookscope: '0', nonce: newNonce() };
}

describe('fault injection: extension server', function () {
  this.timeout(180000);
  const logged: string[] = [];
  const log: Logger = {
    debug: (m) => logged.push(`debug ${m}`), info: (m) => logged.push(`info ${m}`),
    warn: (m) => logged.push(`warn ${m}`), error: (m) => logged.push(`error ${m}`),
  };
  let hub: BackendHub;
  const children: ChildProcess[] = [];

  beforeEach(async () => {
    logged.length = 0;
    hub = new BackendHub({ log, helloDeadlineMs: 1500, requestTimeoutMs: 20000 });
    await hub.start();
  });

  afterEach(() => {
    for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
    hub.dispose();
  });

  it('closes a client that dribbles its hello past the deadline (total, not per read)', async () => {
    const ticket = hub.openSession();
    const port = Number(ticket.address.split(':')[1]);
    const { socket, closed } = rawClient(port);
    const frame = frameMessage(hello());
    let sent = 0;
    const timer = setInterval(() => {
      if (sent < frame.length - 1 && !socket.destroyed) socket.write(frame.subarray(sent, ++sent));
    }, 300);
    try {
      const took = await closed;
      assert.ok(took < 1500 + 10000, `closed after ${took} ms`);
    } finally {
      clearInterval(timer);
    }
    assert.equal(hub.processes().length, 0);
  });

  it('refuses a wrong token without echoing it, and an oversize header before reading the body', async () => {
    const ticket = hub.openSession();
    const port = Number(ticket.address.split(':')[1]);
    const wrong = 'f'.repeat(ticket.token.length);
    const a = rawClient(port);
    const mine = newNonce();
    a.socket.write(frameMessage({ type: 'hello', protocol: PROTOCOL_VERSION, hookscope: '0', nonce: mine }));
    while (a.frames.length === 0) await new Promise((r) => setTimeout(r, 10));
    const challenge = a.frames[0] as { type: string; nonce: Uint8Array };
    assert.equal(challenge.type, 'challenge');
    a.socket.write(frameMessage({ type: 'proof', proof: proof(wrong, 'backend', mine, challenge.nonce) }));
    await a.closed;
    const reply = a.frames[1] as { error?: { code: string; message: string } };
    assert.equal(reply.error?.code, 'badToken');
    assert.ok(a.frames.every((f) => (f as { type?: string }).type !== 'proof'), 'the hub proves nothing to an unproven peer');
    assert.ok(!JSON.stringify(a.frames).includes(wrong) && !logged.join('\n').includes(wrong));
    assert.ok(!logged.join('\n').includes(ticket.token));

    const b = rawClient(port);
    const header = Buffer.alloc(4);
    header.writeUInt32BE(0xffffffff);
    b.socket.write(header);
    const took = await b.closed;
    assert.ok(took < 10000, `oversize header must be refused at once (took ${took} ms)`);
    assert.equal((b.frames[0] as { error?: { code: string } }).error?.code, 'badMessage');
    assert.equal(hub.processes().length, 0);
  });

  it('answers heartbeats and replies with errors to garbage after hello, keeping the connection', async () => {
    const ticket = hub.openSession();
    const port = Number(ticket.address.split(':')[1]);
    const connected = waitFor(hub.onDidConnect, (p) => p.pid === 3, DEADLINE_MS, 'the raw client to connect');
    const c = await rawBackend(port, ticket.token, 3);
    await connected;
    const handshakeFrames = c.frames.length;
    c.socket.write(frameMessage({ type: 'heartbeat', id: 41 }));
    c.socket.write(frameMessage({ type: 'frobnicate', id: 42 }));
    c.socket.write(frameMessage({ type: 'hit', breakpoint: 1 }));
    c.socket.write(frameMessage({ type: 'ping', id: 43 }));
    c.socket.write(frameMessage({ type: 'modelAdded', model: { id: 5 } }));
    c.socket.write(frameMessage({ type: 'heartbeat', id: 44 }));
    const deadline = Date.now() + DEADLINE_MS;
    while (c.frames.length < handshakeFrames + 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const byRe = (re: number) => c.frames.find((f) => (f as { re?: number }).re === re) as
      { body?: object; error?: { code: string } } | undefined;
    assert.deepEqual(byRe(41)?.body, {});
    assert.deepEqual(byRe(44)?.body, {});
    assert.equal(byRe(42)?.error?.code, 'unknownType');
    assert.equal(byRe(43)?.error?.code, 'badMessage'); // ping goes to the backend, not to the editor
    assert.ok(c.frames.some((f) => (f as { re?: number; error?: { code: string } }).re === -1), 'bad hit answered');
    assert.equal(hub.processes().length, 1, 'garbage after hello must not cost the connection');
    assert.equal(hub.processes()[0].models.size, 0, 'a modelAdded without a usable tree is ignored');
    c.socket.destroy();
    await waitFor(hub.onDidExit, () => true, DEADLINE_MS, 'the exit');
  });

  it('a debuggee SIGKILLed mid-stream: state dropped, pending requests rejected, user told', async function () {
    if (!existsSync(PYTHON)) this.skip();
    const bootstrap = execFileSync(PYTHON, ['-c', 'import hookscope.bootstrap as b; print(b.path())'], {
      encoding: 'utf8', timeout: 60000,
    }).trim();
    const ticket = hub.openSession();
    const env = {
      ...process.env, ...ticket.env, OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1',
      PYTHONPATH: [bootstrap, process.env.PYTHONPATH].filter(Boolean).join(':'),
    };
    const start = (): ChildProcess => {
      const child = spawn(PYTHON, ['-c', TRAIN_FOREVER], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      return child;
    };
    const victim = start();
    const survivor = start();
    const modelsOf = (pid: number | undefined) =>
      waitFor(hub.onDidChangeModels, (p) => p.pid === pid && p.models.size > 0, DEADLINE_MS, `models of ${pid}`);
    const [victimState, survivorState] = await Promise.all([modelsOf(victim.pid), modelsOf(survivor.pid)]);
    const streamed = new Map<string, number>();
    hub.onSummaries(({ process: p }) => streamed.set(p.id, (streamed.get(p.id) ?? 0) + 1));
    for (const state of [victimState, survivorState]) {
      await hub.request(state.id, 'watch', { layers: ['0', '2'], rateHz: 30 });
    }
    const streaming = (s: ProcessState) => waitFor(hub.onSummaries, ({ process: p }) => p.id === s.id && (streamed.get(s.id) ?? 0) > 10,
      DEADLINE_MS, `summaries from ${s.label}`);
    await Promise.all([streaming(victimState), streaming(survivorState)]);

    const exited = waitFor(hub.onDidExit, ({ process: p }) => p.id === victimState.id, DEADLINE_MS, 'the exit');
    // A request in flight when the process dies must be rejected, not left hanging.
    const pending = hub.request(victimState.id, 'listHooks', {}, 60000).then(
      () => 'answered', (err: RequestError) => err.code);
    victim.kill('SIGKILL');
    const { reason } = await exited;
    const outcome = await pending;
    assert.ok(outcome === 'closed' || outcome === 'answered', `pending request: ${outcome}`);
    assert.ok(reason.length > 0);
    assert.equal(hub.process(victimState.id), undefined, 'the killed process state must be gone');
    assert.ok(hub.processes().every((p) => p.pid !== victim.pid));
    assert.ok(logged.some((l) => l.includes(`pid ${victim.pid}`) && l.includes('disconnected')), 'the user is told');
    await assert.rejects(hub.request(victimState.id, 'ping', {}), (err: RequestError) => err.code === 'notAvailable');

    // The other process is unaffected: still connected, still streaming, still answering.
    const before = streamed.get(survivorState.id) ?? 0;
    await waitFor(hub.onSummaries, ({ process: p }) => p.id === survivorState.id && (streamed.get(p.id) ?? 0) > before + 5,
      DEADLINE_MS, 'the survivor to keep streaming');
    const pong = await hub.request(survivorState.id, 'ping', {});
    assert.equal(pong.pid, survivor.pid);
  });
});
