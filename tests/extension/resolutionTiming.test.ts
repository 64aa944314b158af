// A breakpoint is judged "matches no layer" only on resolutions asked for with every model of the
// process: right after modelAdded the older (model-less) answer stands until the resend replies,
// and the Breakpoints view must not flash a problem in between.

import { strict as assert } from 'node:assert';
import { resolutionsJudgeable, type ProcessState } from '../../extension/src/backend/hub';
import { breakpointStatuses } from '../../extension/src/breakpoints/model';
import { waitFor } from '../../extension/src/common/events';
import { frameMessage } from '../../extension/src/protocol/codec';
import { requestId, withRawBackend, type RawClient } from './rawBackend';

const MODEL = {
  id: 'm1', name: 'model', cls: 'Tiny', params: 448,
  modules: [
    { name: '', cls: 'Tiny', params: 0, totalParams: 448, leaf: false },
    { name: 'conv1', cls: 'Conv2d', params: 448, totalParams: 448, file: '/w/tiny.py', line: 12, leaf: true },
  ],
};

/** Answers the `nth` setBreakpoints request the raw backend receives: breakpoint 'bp' resolved to `layers`. */
async function answerSetBreakpoints(backend: RawClient, nth: number, layers: string[]): Promise<void> {
  const id = await requestId(backend, 'setBreakpoints', nth);
  backend.socket.write(frameMessage({ type: 'reply', re: id, body: { resolved: [{ id: 'bp', layers }] } }));
}

const problemOf = (p: ProcessState) =>
  breakpointStatuses(['bp'], [{ hasModels: resolutionsJudgeable(p), resolutions: p.resolutions }]).get('bp')?.problem;

describe('breakpoint statuses wait for the resolutions of the models a process has', function () {
  this.timeout(20000);
  for (const [name, layersAfter, problemAfter] of [
    ['a line that means a layer of the new model', ['conv1'], undefined],
    ['a line that means no layer of it', [], 'matches no layer of the models found'],
  ] as const) {
    it(name, () =>
      withRawBackend(92, async (hub, proc, backend) => {
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
      }));
  }
});
