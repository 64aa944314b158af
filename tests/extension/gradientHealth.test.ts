// Break on exploding/vanishing gradients in the editor: thresholds typed in the menu, the status bar's
// text, and the panel turning to the gradient-norm profile at such a stop (once per stop).
import { strict as assert } from 'node:assert';
import type { HitMessage } from '../../extension/src/protocol/messages.gen';
import { gradientStatusText, parseThreshold } from '../../extension/src/common/thresholds';
import { initialPanelState, panelReducer, panelView } from '../../extension/src/views/panelState';
import { initialUiState, renderOptions, uiReducer } from '../../extension/webview/state';
import { besideAtStop, placeAtStop } from '../../extension/src/common/stopPlacement';

describe('gradient-norm switches: thresholds', () => {
  it('reads positive numbers, empty as off, and refuses the rest', () => {
    assert.equal(parseThreshold('100'), 100);
    assert.equal(parseThreshold(' 1e-7 '), 1e-7);
    assert.equal(parseThreshold(''), undefined);
    for (const bad of ['0', '-3', 'big', 'Infinity']) assert.equal(typeof parseThreshold(bad), 'string');
  });

  it('says in the status bar what is on', () => {
    assert.equal(gradientStatusText({}), '$(pulse) Gradients: off');
    assert.equal(gradientStatusText({ exploding: 100, vanishing: 1e-7 }), '$(pulse) Gradient norm > 100 · < 1e-7: break');
    assert.equal(gradientStatusText({ vanishing: 1e-7 }), '$(pulse) Gradient norm < 1e-7: break');
  });
});

describe('panel: a gradient-health stop shows the step\'s gradient-norm profile', () => {
  const hit: HitMessage = {
    type: 'hit', breakpoint: 'gradients', model: 'm1', layer: 'blocks.2.mlp.0', phase: 'param_grad',
    reason: 'Exploding gradient: blocks.2.mlp.0.weight gradient norm 153 > 100', step: 4, summaries: [], pausing: true,
    rearm: 'stops again once a step has run within the thresholds', view: 'gradientFlow',
    viewOptions: { metric: 'norm', highlight: 'blocks.2.mlp.0', exploding: 100 },
  };

  function paused(h: HitMessage) {
    let state = panelReducer(initialPanelState(), { type: 'processes', processes: [{ id: 'c1', label: 'pid 1' }] });
    state = panelReducer(state, { type: 'hit', processId: 'c1', processLabel: 'pid 1', hit: h });
    return panelView(state);
  }

  it('asks for the gradient-flow view by norm, the stopped layer marked', () => {
    const view = paused(hit);
    assert.deepEqual(view.suggested, { visual: 'gradientFlow', options: { metric: 'norm', highlight: 'blocks.2.mlp.0', exploding: 100 } });
    assert.equal(paused({ ...hit, view: undefined, viewOptions: undefined, breakpoint: 'nonfinite' }).suggested, undefined);
  });

  it('the webview switches once per stop; a view picked by hand afterwards stays', () => {
    const suggested = { type: 'suggested', stop: 'c1/m1/blocks.2.mlp.0:param_grad:4:1', visual: 'gradientFlow', options: { metric: 'norm', exploding: 100 } } as const;
    let ui = uiReducer(initialUiState(), suggested);
    assert.equal(ui.visual, 'gradientFlow');
    assert.deepEqual(renderOptions(ui), { metric: 'norm', exploding: 100 });
    ui = uiReducer(ui, { type: 'visual', visual: 'histogram' });
    ui = uiReducer(ui, suggested);  // the same stop's view again (a re-render): the user's choice stays
    assert.equal(ui.visual, 'histogram');
    ui = uiReducer(ui, { type: 'visual', visual: 'gradientFlow' });
    assert.deepEqual(renderOptions(ui), {});  // picked by hand: the plain view
  });
});

describe('where the Tensors panel shows itself at a stop', () => {
  const gradientStop = { view: 'gradientFlow' };
  const layerStop = {};
  it('opens beside the code at a stop that comes with a figure, by default', () => {
    const setting = besideAtStop(undefined);
    assert.equal(setting, 'figures');
    assert.equal(placeAtStop(setting, gradientStop), 'editor');
    assert.equal(placeAtStop(setting, layerStop), 'side');
  });
  it('follows the setting: every stop, or never', () => {
    assert.equal(placeAtStop(besideAtStop('always'), layerStop), 'editor');
    assert.equal(placeAtStop(besideAtStop('never'), gradientStop), 'side');
    assert.equal(besideAtStop('sideways'), 'figures', 'an unknown value is the default');
  });
});
