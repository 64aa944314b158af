// The Tensors panel at a break on NaN/Inf stop: when it stops again (the hit's `rearm`) and where the value was born (`op`).
import { strict as assert } from 'node:assert';
import type { HitMessage } from '../../extension/src/protocol/messages.gen';
import { initialPanelState, panelReducer, panelView } from '../../extension/src/views/panelState';

const RULE = 'Break on NaN/Inf stops again at the next step with a new NaN/Inf.';

function pausedAt(hit: HitMessage) {
  let state = panelReducer(initialPanelState(), { type: 'processes', processes: [{ id: 'c1', label: 'pid 1' }] });
  state = panelReducer(state, { type: 'hit', processId: 'c1', processLabel: 'pid 1', hit });
  return state;
}

describe('panel: when break on NaN/Inf fires again', () => {
  const base: HitMessage = {
    type: 'hit', breakpoint: 'nonfinite', model: 'm1', layer: 'fc1', phase: 'forward',
    reason: 'NaN/Inf first produced in layer fc1 (forward): 4 NaN', step: 3, summaries: [], pausing: true,
  };

  it('a NaN stop shows the rule while paused, and not after Continue', () => {
    const state = pausedAt({ ...base, rearm: RULE });
    assert.equal(panelView(state).rearm, RULE);
    assert.match(panelView(state).detail, /\bstep 3$/);
    const resumed = panelReducer(state, { type: 'resumed', processId: 'c1' });
    assert.equal(panelView(resumed).rearm, undefined);
  });

  it('a layer breakpoint stop has no such line', () => {
    assert.equal(panelView(pausedAt({ ...base, breakpoint: 'lbp-1' })).rearm, undefined);
  });
});

describe('panel: where break on NaN/Inf saw the value born', () => {
  const hit: HitMessage = {
    type: 'hit', breakpoint: 'nonfinite', model: 'm1', layer: 'head.standardize', phase: 'forward',
    reason: 'NaN/Inf first produced in layer head.standardize (forward)', step: 8, summaries: [], pausing: true,
  };

  it('names the op and links the user line while paused', () => {
    const state = pausedAt({ ...hit, op: { op: 'Tensor.div', phase: 'forward', file: '/w/nan.py', line: 22, function: 'Standardize.forward', stack: [] } });
    assert.deepEqual(panelView(state).bornAt, { op: 'Tensor.div', file: '/w/nan.py', line: 22, fn: 'Standardize.forward' });
    assert.equal(panelView(panelReducer(state, { type: 'resumed', processId: 'c1' })).bornAt, undefined);
  });

  // A malformed op never gets here: the connection refuses the hit (tests/vectors: "hit op with a string line").
  it('shows no link for an op outside the user code', () => {
    assert.equal(panelView(pausedAt({ ...hit, op: { op: 'torch.exp', phase: 'forward', stack: [] } })).bornAt, undefined);
    assert.equal(panelView(pausedAt(hit)).bornAt, undefined);
  });
});
