// What an unknown local client can make the extension host do before it proves a session token:
// read one small frame (HANDSHAKE_FRAME_BYTES), within a deadline, a bounded number at a time.
// A 32 MiB first frame is refused from its header, and so is a small hello followed by more.

import { strict as assert } from 'node:assert';
import { createServer, type Server, type Socket } from 'node:net';
import { BackendConnection } from '../../extension/src/backend/connection';
import { BackendHub } from '../../extension/src/backend/hub';
import { waitFor } from '../../extension/src/common/events';
import type { Logger } from '../../extension/src/common/logger';
import { frameMessage } from '../../extension/src/protocol/codec';
import { newNonce } from '../../extension/src/protocol/handshake';
import {
  HANDSHAKE_FRAME_BYTES,
  MAX_PENDING_HANDSHAKES,
  PROTOCOL_VERSION,
} from '../../extension/src/protocol/messages.gen';
import { quietLog, rawBackend, rawClient } from './rawBackend';

const BIG = 32 * 1024 * 1024;

/** Writes `first`, then a frame header announcing 32 MiB and its body, until the peer stops reading. */
function streamBigFrame(socket: Socket, first: Buffer = Buffer.alloc(0)): void {
  const header = Buffer.alloc(4);
  header.writeUInt32BE(BIG);
  const chunk = Buffer.alloc(64 * 1024, 0x80); // empty maps: one object per byte, were it decoded
  let sent = 0;
  const pump = (): void => {
    while (sent < BIG && !socket.destroyed) {
      sent += chunk.length;
      if (!socket.write(chunk)) {
        socket.once('drain', pump);
        return;
      }
    }
  };
  socket.write(Buffer.concat([first, header]));
  pump();
}

describe('trust: nothing big before the token is proved (extension side)', function () {
  this.timeout(60000);

  async function serveOne(): Promise<{ server: Server; port: number; accepted: Promise<{ socket: Socket; connection: BackendConnection }> }> {
    let resolveAccepted: (v: { socket: Socket; connection: BackendConnection }) => void = () => undefined;
    const accepted = new Promise<{ socket: Socket; connection: BackendConnection }>((r) => (resolveAccepted = r));
    const server = createServer((socket) => {
      const connection = new BackendConnection(socket, { sessions: () => [['a-token', 'key']], log: quietLog, helloDeadlineMs: 5000 });
      resolveAccepted({ socket, connection });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const address = server.address();
    return { server, port: typeof address === 'object' && address ? address.port : 0, accepted };
  }

  for (const [name, first] of [
    ['a 32 MiB first frame', Buffer.alloc(0)],
    ['a small hello followed by a 32 MiB frame', frameMessage({ type: 'hello', protocol: PROTOCOL_VERSION, hookscope: '0', nonce: newNonce() })],
  ] as const) {
    it(`refuses ${name} after a few KiB, without decoding it`, async () => {
      const { server, port, accepted } = await serveOne();
      try {
        const client = rawClient(port);
        streamBigFrame(client.socket, first);
        const { socket, connection } = await accepted;
        const closedReason = new Promise<string>((r) => connection.onClose(({ reason }) => r(reason)));
        const reason = await closedReason;
        await client.closed;
        assert.match(reason, new RegExp(`${HANDSHAKE_FRAME_BYTES}`));
        // Node reads 64 KiB at a time: the connection stopped after the first read or two.
        assert.ok(socket.bytesRead <= 4 * 64 * 1024, `read ${socket.bytesRead} bytes of an unauthenticated client`);
        assert.equal(connection.state, 'closed');
        assert.equal(connection.process, undefined);
      } finally {
        server.close();
      }
    });
  }

  it('the hub keeps at most MAX_PENDING_HANDSHAKES unknown clients, each until the deadline', async () => {
    const hub = new BackendHub({ log: quietLog, helloDeadlineMs: 3000 });
    const port = await hub.start();
    const ticket = hub.openSession();
    const clients = [];
    try {
      for (let i = 0; i < MAX_PENDING_HANDSHAKES + 5; i++) {
        clients.push(rawClient(port));
        await new Promise((r) => setTimeout(r, 5)); // in order: the first ones are the ones kept
      }
      const started = Date.now();
      const early = await Promise.all(clients.slice(MAX_PENDING_HANDSHAKES).map((c) => c.closed));
      assert.ok(early.every((ms) => ms < 2500), `the extra clients were closed after ${early.join(", ")} ms`);
      // The silent ones are closed at the deadline, and then a real backend gets in.
      await Promise.all(clients.slice(0, MAX_PENDING_HANDSHAKES).map((c) => c.closed));
      assert.ok(Date.now() - started < 10000);
      const connected = waitFor(hub.onDidConnect, (p) => p.pid === 77, 10000, 'a backend after the flood');
      const backend = await rawBackend(port, ticket.token, 77);
      await connected;
      backend.socket.destroy();
    } finally {
      for (const c of clients) c.socket.destroy();
      hub.dispose();
    }
  });

  it('refuses a backend of protocol 1 (token in its hello) with a clear message and never echoes the token', async () => {
    const logged: string[] = [];
    const log: Logger = { debug: () => undefined, info: () => undefined, warn: (m) => logged.push(m), error: (m) => logged.push(m) };
    const hub = new BackendHub({ log, helloDeadlineMs: 3000 });
    const port = await hub.start();
    const ticket = hub.openSession();
    try {
      const rejected = waitFor(hub.onDidReject, () => true, 10000, 'the refusal');
      const old = rawClient(port);
      old.socket.write(frameMessage({
        type: 'hello', token: ticket.token, protocol: 1, pid: 5, rank: 0, worldSize: 1, python: '3', torch: '2',
        hookscope: '0.0.9', argv: [], debugger: false,
      }));
      const { reason } = await rejected;
      await old.closed;
      assert.match(reason, /^protocol version mismatch: .*speaks protocol 1, this extension speaks 2\. Use the hookscope bundled/);
      const reply = old.frames[0] as { error?: { code: string; message: string } };
      assert.equal(reply.error?.code, 'protocolMismatch');
      assert.ok(!logged.join('\n').includes(ticket.token) && !JSON.stringify(old.frames).includes(ticket.token));
    } finally {
      hub.dispose();
    }
  });
});
