// A reply whose body is not the declared shape fails its request at the boundary, naming the field,
// instead of reaching the caller as a cast (connection.ts checks replies with validateReply).

import { strict as assert } from 'node:assert';
import { BackendHub } from '../../extension/src/backend/hub';
import { waitFor } from '../../extension/src/common/events';
import type { Logger } from '../../extension/src/common/logger';
import { frameMessage } from '../../extension/src/protocol/codec';
import { rawBackend, type RawClient } from './rawBackend';

const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

/** Waits for the request of `type` the raw backend received and returns its id. */
async function requestId(backend: RawClient, type: string): Promise<number> {
  const deadline = Date.now() + 10000;
  for (;;) {
    const found = backend.frames.find((f) => (f as { type?: string }).type === type) as { id: number } | undefined;
    if (found) return found.id;
    if (Date.now() > deadline) throw new Error(`no ${type} request (got ${JSON.stringify(backend.frames)})`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('replies are validated at the boundary (extension side)', function () {
  this.timeout(20000);
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['a body field of the wrong type', { body: { layers: [3] } }, /reply to watch: field 'layers'\[0\] must be str, got int/],
    ['a body without its required field', { body: {} }, /reply to watch: missing field 'layers'/],
    ['a malformed error', { error: { code: 5 } }, /malformed reply to watch: reply: field 'error'\.code must be str, got int/],
  ];
  for (const [name, reply, expected] of cases) {
    it(`fails the request on ${name}`, async () => {
      const hub = new BackendHub({ log: quiet });
      const port = await hub.start();
      const ticket = hub.openSession();
      let backend: RawClient | undefined;
      try {
        const connected = waitFor(hub.onDidConnect, (p) => p.pid === 91, 10000, 'the raw backend');
        backend = await rawBackend(port, ticket.token, 91);
        const proc = await connected;
        const pending = hub.request(proc.id, 'watch', { layers: ['fc'] });
        const id = await requestId(backend, 'watch');
        backend.socket.write(frameMessage({ type: 'reply', re: id, ...reply }));
        await assert.rejects(pending, (err: Error) => expected.test(err.message) || assert.fail(err.message));
      } finally {
        backend?.socket.destroy();
        hub.dispose();
      }
    });
  }
});
