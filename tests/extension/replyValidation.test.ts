// A reply whose body is not the declared shape fails its request at the boundary, naming the field,
// instead of reaching the caller as a cast (connection.ts checks replies with validateReply).

import { strict as assert } from 'node:assert';
import { frameMessage } from '../../extension/src/protocol/codec';
import { requestId, withRawBackend } from './rawBackend';

describe('replies are validated at the boundary (extension side)', function () {
  this.timeout(20000);
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['a body field of the wrong type', { body: { layers: [3] } }, /reply to watch: field 'layers'\[0\] must be str, got int/],
    ['a body without its required field', { body: {} }, /reply to watch: missing field 'layers'/],
    ['a malformed error', { error: { code: 5 } }, /malformed reply to watch: reply: field 'error'\.code must be str, got int/],
  ];
  for (const [name, reply, expected] of cases) {
    it(`fails the request on ${name}`, () =>
      withRawBackend(91, async (hub, proc, backend) => {
        const pending = hub.request(proc.id, 'watch', { layers: ['fc'] });
        const id = await requestId(backend, 'watch');
        backend.socket.write(frameMessage({ type: 'reply', re: id, ...reply }));
        await assert.rejects(pending, (err: Error) => expected.test(err.message) || assert.fail(err.message));
      }));
  }
});
