// A breakpoint is judged "matches no layer" only on resolutions asked for with every model of the
// process: right after modelAdded the older (model-less) answer stands until the resend replies,
// and the Breakpoints view must not flash a problem in between.

import { strict as assert } from 'node:assert';
import { BackendHub, resolutionsJudgeable, type ProcessState } from '../../extension/src/backend/hub';
import { breakpointStatuses } from '../../extension/src/breakpoints/model';
import { waitFor } from '../../extension/src/common/events';
import type { Logger } from '../../extension/src/common/logger';
import { frameMessage } from '../../extension/src/protocol/codec';
import { rawBackend, type RawClient } from './rawBackend';

const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

const MODEL = {
  id: 'm1', name: 'model', cls: 'Tiny', params: 448,
  modules: [
    { name: '', cls: 'Tiny', params: 0, totalParams: 448, leaf: false },
    { name: 'conv1', cls: 'Conv2d', params: 448, totalParams: 448, file: '/w/tiny.py', line: 12, leaf: true },
  ],
};

/** Answers the next setBreakpoints request the raw backend receives (after `seen` of them). */
async function answerSetBreakpoints(backend: RawClient, seen: number, layers: string[]): Promise<void> {
  const deadline = Date.now() + 10000;
  for (;;) {
    const requests = backend.frames.filter((f) => (f as { type?: string }).type === 'setBreakpoints') as { id: number }[];
    if (requests.length > seen) {
      backend.socket.write(frameMessage({ type: 'reply', re: requests[seen].id, body: { resolved: [{ id: 'bp', layers }] } }));
      return;
    }
    if (Date.now() > deadline) throw new Error(`no setBreakpoints request #${seen + 1}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const problemOf = (p: ProcessState) =>
  breakpointStatuses(['bp'], [{ hasModels: resolutionsJudgeable(p), resolutions: p.resolutions }]).get('bp')?.problem;

describe('breakpoint statuses wait for the resolutions of the models a process has', function () {
  this.timeout(20000);
  for (const [name, layersAfter, problemAfter] of [
    ['a line that means a layer of the new model', ['conv1'], undefined],
    ['a line that means no layer of it', [], 'matches no layer of the models found'],
  ] as const) {
    it(name, async () => {
      const hub = new BackendHub({ log: quiet });
      const port = await hub.start();
      const ticket = hub.openSession();
      let backend: RawClient | undefined;
      try {
        const connected = waitFor(hub.onDidConnect, (p) => p.pid === 92, 10000, 'the raw backend');
        backend = await rawBackend(port, ticket.token, 92);
        const proc = await connected;
        let resolved = waitFor(hub.onDidResolveBreakpoints, (p) => p.id === proc.id, 10000, 'the first resolution');
        void hub.setBreakpoints([{ id: 'bp', file: '/w/tiny.py', line: 12, phases: ['forward'], enabled: true }]);
        await answerSetBreakpoints(backend, 0, []);
        await resolved;
        assert.equal(problemOf(proc), undefined, 'no model yet: not judged');

        const added = waitFor(hub.onDidChangeModels, (p) => p.id === proc.id, 10000, 'modelAdded');
        backend.socket.write(frameMessage({ type: 'modelAdded', model: MODEL }));
        await added;
        assert.equal(proc.models.size, 1);
        assert.equal(problemOf(proc), undefined, 'the model-less answer is not judged against the new model');

        resolved = waitFor(hub.onDidResolveBreakpoints, (p) => p.id === proc.id, 10000, 'the resend');
        await answerSetBreakpoints(backend, 1, [...layersAfter]);
        await resolved;
        assert.ok(resolutionsJudgeable(proc));
        assert.equal(problemOf(proc), problemAfter);
      } finally {
        backend?.socket.destroy();
        hub.dispose();
      }
    });
  }
});
