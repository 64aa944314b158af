// Test helper: a raw socket client that plays a backend's side of the handshake by hand,
// so fault-injection tests can send whatever they like before, during and after it.

import { connect, type Socket } from 'node:net';
import { BackendHub, type ProcessState } from '../../extension/src/backend/hub';
import { waitFor } from '../../extension/src/common/events';
import type { Logger } from '../../extension/src/common/logger';
import { FrameReader, frameMessage } from '../../extension/src/protocol/codec';
import { newNonce, proof, proofMatches } from '../../extension/src/protocol/handshake';
import { PROTOCOL_VERSION } from '../../extension/src/protocol/messages.gen';

export interface RawClient {
  socket: Socket;
  /** Every frame received, decoded. */
  frames: unknown[];
  /** Resolves (ms since connect) when the server closed the connection. */
  closed: Promise<number>;
}

/** A raw client: collects decoded frames, resolves `closed` when the server closes. */
export function rawClient(port: number): RawClient {
  const socket = connect(port, '127.0.0.1');
  const reader = new FrameReader();
  const frames: unknown[] = [];
  const started = Date.now();
  socket.on('data', (chunk) => {
    try {
      frames.push(...reader.feed(chunk));
    } catch {
      // the server may close mid-frame
    }
  });
  socket.on('error', () => undefined);
  const closed = new Promise<number>((res) => socket.on('close', () => res(Date.now() - started)));
  return { socket, frames, closed };
}

export function processMessage(pid: number): object {
  return { type: 'process', pid, rank: 0, worldSize: 1, python: '3', torch: '2', hookscope: '0', argv: [], debugger: false };
}

/** Waits for the next frame after `seen` frames (or throws when the server closed first). */
async function nextFrame(client: RawClient, seen: number, timeoutMs = 10000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  while (client.frames.length <= seen) {
    if (client.socket.destroyed || Date.now() > deadline) throw new Error(`no frame ${seen} (got ${JSON.stringify(client.frames)})`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return client.frames[seen] as Record<string, unknown>;
}

/**
 * Connects and proves `token` as a backend would; resolves once the editor proved it back and
 * `process` (for `pid`) was sent. Throws when the editor's proof is wrong or it closed.
 */
export async function rawBackend(port: number, token: string, pid: number): Promise<RawClient> {
  const client = rawClient(port);
  const mine = newNonce();
  client.socket.write(frameMessage({ type: 'hello', protocol: PROTOCOL_VERSION, hookscope: '0', nonce: mine }));
  const challenge = await nextFrame(client, 0);
  if (challenge.type !== 'challenge') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const theirs = challenge.nonce as Uint8Array;
  client.socket.write(frameMessage({ type: 'proof', proof: proof(token, 'backend', mine, theirs) }));
  const answer = await nextFrame(client, 1);
  if (answer.type !== 'proof' || !proofMatches(proof(token, 'editor', mine, theirs), answer.proof)) {
    throw new Error(`the editor did not prove the token: ${JSON.stringify(answer)}`);
  }
  client.socket.write(frameMessage(processMessage(pid)));
  return client;
}

/** Waits for the `nth` (0-based) request of `type` the raw backend received and returns its id. */
export async function requestId(backend: RawClient, type: string, nth = 0): Promise<number> {
  const deadline = Date.now() + 10000;
  for (;;) {
    const requests = backend.frames.filter((f) => (f as { type?: string }).type === type) as { id: number }[];
    if (requests.length > nth) return requests[nth].id;
    if (Date.now() > deadline) throw new Error(`no ${type} request #${nth + 1} (got ${JSON.stringify(backend.frames)})`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A logger that drops everything, for hubs whose log the test does not read. */
export const quietLog: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

/**
 * A hub with one raw backend connected as `pid`: `body` gets the hub, the backend's process as the
 * hub sees it, and the raw client; both are closed afterwards, whatever `body` did.
 */
export async function withRawBackend(
  pid: number,
  body: (hub: BackendHub, proc: ProcessState, backend: RawClient) => Promise<void>,
): Promise<void> {
  const hub = new BackendHub({ log: quietLog });
  let backend: RawClient | undefined;
  try {
    const port = await hub.start();
    const ticket = hub.openSession();
    const connected = waitFor(hub.onDidConnect, (p) => p.pid === pid, 10000, 'the raw backend');
    backend = await rawBackend(port, ticket.token, pid);
    await body(hub, await connected, backend);
  } finally {
    backend?.socket.destroy();
    hub.dispose();
  }
}
