// The Tensors panel is never wrong and has room: sessions start clean, pictures are cleared when
// what they are of changes, captions say what was rendered, the table folds to a side bar, and
// the controller turns render replies into images, notes or errors (one request for two webviews).
import { strict as assert } from 'node:assert';
import { RequestError } from '../../extension/src/backend/connection';
import type { BackendHub } from '../../extension/src/backend/hub';
import { Emitter } from '../../extension/src/common/events';
import { nullTracer, type Logger } from '../../extension/src/common/logger';

const quietLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
import type { HitMessage, Phase, TensorSummary } from '../../extension/src/protocol/messages.gen';
import type { PanelView } from '../../extension/src/protocol/webview';
import { PanelController } from '../../extension/src/views/panelController';
import { initialPanelState, panelReducer, panelView, type PanelAction, type PanelState } from '../../extension/src/views/panelState';
import { captionOf, describeImage, isPixelImage } from '../../extension/webview/caption';
import { figureTensors, pictureKey } from '../../extension/webview/state';
import { COLUMNS, foldedParts, rowTooltip } from '../../extension/webview/table';

const run = (actions: PanelAction[], state: PanelState = initialPanelState()): PanelState => actions.reduce(panelReducer, state);

const hit = (layer: string, phase: Phase, step: number): HitMessage => ({
  type: 'hit', breakpoint: 'bp', model: 'm', layer, phase, reason: `Layer breakpoint: ${layer} (${phase})`, step, summaries: [], pausing: true,
});

describe('panel: a new debug session starts clean', () => {
  it("drops the notices of ended sessions when a new one connects, and any that come late", () => {
    let s = run([
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 14104', session: 'A' }] },
      { type: 'notice', notice: { level: 'warning', message: 'first session warns', session: 'A' } },
      { type: 'exited', processId: 'c1', label: 'pid 14104', reason: 'the process exited', session: 'A' },
    ]);
    assert.deepEqual(panelView(s).notices.map((n) => n.message), ['first session warns', 'pid 14104 exited (the process exited)'],
      'after the session ends its notices stay until the next one');
    s = run([{ type: 'processes', processes: [{ id: 'c2', label: 'pid 20000', session: 'B' }] }], s);
    assert.deepEqual(panelView(s).notices, [], 'the second session shows none of the first');
    s = run([
      { type: 'notice', notice: { level: 'info', message: 'late from A', session: 'A' } },
      { type: 'exited', processId: 'c9', label: 'pid 14105', reason: 'gone', session: 'A' },
      { type: 'notice', notice: { level: 'info', message: 'from B', session: 'B' } },
    ], s);
    assert.deepEqual(panelView(s).notices.map((n) => n.message), ['from B']);
  });

  it('keeps the notices of a session that is still connected when another starts', () => {
    const s = run([
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 1', session: 'A' }] },
      { type: 'notice', notice: { level: 'info', message: 'A runs', session: 'A' } },
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 1', session: 'A' }, { id: 'c2', label: 'pid 2', session: 'B' }] },
      { type: 'notice', notice: { level: 'info', message: 'A still runs', session: 'A' } },
    ]);
    assert.deepEqual(panelView(s).notices.map((n) => n.message), ['A runs', 'A still runs']);
  });

  it('says the stop reason once, and names the stop', () => {
    const s = run([
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 1', session: 'A' }] },
      { type: 'hit', processId: 'c1', processLabel: 'pid 1', hit: hit('blocks.1.mix', 'backward', 4) },
    ]);
    const v = panelView(s);
    assert.equal(v.headline, 'Paused in layer blocks.1.mix (backward)');
    assert.equal(v.pausedReason, 'Layer breakpoint: blocks.1.mix (backward)');
    assert.equal(v.detail, 'step 4');
    assert.deepEqual(v.stop, { processId: 'c1', model: 'm', layer: 'blocks.1.mix', phase: 'backward', step: 4, hit: 1 });
  });
});

const target = { processId: 'c1', processLabel: 'pid 1', model: 'm', layer: 'blocks.1.mix' };
const viewOf = (over: Partial<PanelView>): PanelView => ({
  status: 'live', headline: '', detail: '', tensors: [], interventions: [], notices: [], breakOnNonFinite: false, processes: 1, revision: 0,
  target, ...over,
});

describe('panel: what is pictured, and when pictures go stale', () => {
  const stop = { processId: 'c1', model: 'm', layer: 'blocks.1.mix', phase: 'backward', step: 4, hit: 7 };

  it('pictures the gradient and the output at a backward stop, the output otherwise', () => {
    assert.deepEqual(figureTensors('featureMap', viewOf({ status: 'paused', stop })), ['grad_output', 'output']);
    assert.deepEqual(figureTensors('histogram', viewOf({ status: 'paused', stop: { ...stop, phase: 'param_grad' } })), ['grad']);
    assert.deepEqual(figureTensors('featureMap', viewOf({ status: 'paused', stop: { ...stop, phase: 'forward' } })), ['output']);
    assert.deepEqual(figureTensors('featureMap', viewOf({ status: 'paused', stop, target: { ...target, layer: 'other' } })), ['output'],
      'another layer selected while paused: its output');
    assert.equal(figureTensors('attention', viewOf({ status: 'paused', stop })), undefined);
  });

  it('changes its key with the layer, the stop, the visual and the end of the session, not with a live step', () => {
    const live = pictureKey('featureMap', viewOf({}));
    assert.equal(pictureKey('featureMap', viewOf({ revision: 5 })), live, 'live steps refresh the picture in place');
    const keys = [
      live,
      pictureKey('featureMap', viewOf({ target: { ...target, layer: 'blocks.2.mix' } })),
      pictureKey('featureMap', viewOf({ status: 'paused', stop })),
      pictureKey('featureMap', viewOf({ status: 'paused', stop: { ...stop, hit: 8 } })),
      pictureKey('attention', viewOf({ status: 'paused', stop: { ...stop, hit: 8 } })),
    ];
    assert.equal(new Set(keys).size, keys.length);
    assert.equal(pictureKey('featureMap', viewOf({ status: 'notConnected', target: undefined })), '');
  });
});

describe('panel: captions in words', () => {
  const grid = {
    kind: 'feature_map', layout: 'grid', shape: [16, 32, 8, 8], batch: 0, page: 0, pages: 1, channels: Array.from({ length: 32 }, (_, i) => i),
    shared_scale: false, constant: [3], nonfinite: { nan: 2, posinf: 0, neginf: 1 },
    of: { layer: 'blocks.1.mix', tensor: 'grad_output[0]', step: 4, phase: 'backward' },
  };

  it('names the layer, the tensor and the step the backend rendered', () => {
    assert.equal(captionOf(grid), 'blocks.1.mix · grad_output[0] · step 4');
    assert.equal(captionOf({ kind: 'gradient_flow', of: { layer: '', tensor: 'parameter gradients', step: 2 } }), 'model · parameter gradients · step 2');
    assert.equal(captionOf({ kind: 'feature_map' }), '', 'no subject, no caption made up');
  });

  it('says how to read the image, never a raw key: value dump', () => {
    const words = describeImage(grid);
    assert.equal(words, '[16, 32, 8, 8]: 32 channels · batch item 0 · each channel on its own scale · 1 constant channel · 2 NaN · 1 -Inf');
    assert.doesNotMatch(words, /shared_scale|constant:|kind:/);
    assert.match(describeImage({ kind: 'attention', heads: 4, queries: 6, keys: 6, range: [0, 0.5],
      of: { layer: 'attn', tensor: 'attention weights', note: 'recomputed from the call' } }), /4 heads and their average · 6 queries × 6 keys · weights 0 … 0.5 · recomputed/);
    assert.match(describeImage({ kind: 'feature_map', layout: 'heatmap', shape: [4, 16], range: [-1, 2] }), /\[4, 16\] as a heat map · range -1 … 2/);
    assert.equal(isPixelImage(grid), true);
    assert.equal(isPixelImage({ kind: 'gradient_flow' }), false);
    // At a gradient-health stop the bars are norms (what the switches compare), not mean and max |grad|.
    assert.equal(describeImage({ kind: 'gradient_flow', metric: 'norm', flagged: ['fc'] }),
      "each layer's gradient norm and its largest parameter's, log scale · 1 layer vanishing or exploding");
    assert.equal(describeImage({ kind: 'gradient_flow', metric: 'mean' }), 'mean and max |grad| per layer, log scale');
  });
});

describe('panel: the table folds to a side bar', () => {
  const t: TensorSummary = {
    path: 'grad_output[0]', shape: [16, 32, 8, 8], dtype: 'float32', device: 'cpu', numel: 32768,
    mean: 0.5, std: 0.25, min: -1, max: 2, nan: 3, posinf: 0, neginf: 0, zeroFrac: 0.5, norm: 12.5,
  };

  it('keeps the norm and the histogram as columns; what folds goes to the second line and the tooltip', () => {
    const kept = COLUMNS.filter((c) => !c.fold).map((c) => c.col);
    assert.deepEqual(kept, ['path', 'norm', 'hist']);
    const folded = Object.fromEntries(foldedParts(t).map(([text, fold]) => [text, fold]));
    assert.deepEqual(folded, {
      '[16, 32, 8, 8]': 'narrow', 'f32 cpu': 'medium', 'μ 0.5': 'narrow', 'σ 0.25': 'medium', '[-1, 2]': 'medium', '50% zeros': 'medium', '3 NaN': 'medium',
    });
    for (const word of ['[16, 32, 8, 8]', 'float32', 'mean 0.5', 'std 0.25', 'min -1', 'max 2', 'NaN/Inf 3 NaN', 'zeros 50%', 'norm 12.5']) {
      assert.ok(rowTooltip(t).includes(word), `${word} in the tooltip:\n${rowTooltip(t)}`);
    }
  });
});

/** The parts of BackendHub the controller uses, answering `render` with `answer`. */
function fakeHub(answer: (params: Record<string, unknown>) => Promise<unknown>) {
  const e = () => new Emitter<never>();
  const processes = [{ id: 'c1', label: 'pid 1', sessionKey: 'A', models: new Map(), interventions: [] }];
  const requests: Record<string, unknown>[] = [];
  const hit = new Emitter<unknown>();
  const hub = {
    onDidChangeProcesses: e().event, onResumed: e().event, onSummaries: e().event, onDidChangeInterventions: e().event,
    onNotice: e().event, onDidExit: e().event, onDidConnect: e().event, onHit: hit.event,
    processes: () => processes, process: (id: string) => processes.find((p) => p.id === id),
    refreshInterventions: async () => undefined,
    request: async (_p: string, type: string, params: Record<string, unknown>) => {
      if (type !== 'render') throw new RequestError('notAvailable', 'not in this test');
      requests.push(params);
      return answer(params);
    },
  };
  return { hub: hub as unknown as BackendHub, requests, hit };
}

describe('panel: render replies become images, notes or errors', () => {
  const png = { png: new Uint8Array([1, 2, 3]), width: 4, height: 2 };

  it('asks once per tensor, turns notAvailable into a note and shares one request between two webviews', async () => {
    const { hub, requests, hit: hits } = fakeHub(async (p) => {
      if (p.tensor === 'output') throw new RequestError('notAvailable', 'no forward of blocks.1.mix was seen in step 4');
      return { ...png, meta: { of: { layer: 'blocks.1.mix', tensor: 'grad_output[0]', step: 4 } } };
    });
    const panel = new PanelController(hub, quietLogger, nullTracer, () => 4);
    hits.fire({ process: { id: 'c1', label: 'pid 1', models: new Map() }, hit: hit('blocks.1.mix', 'backward', 4) });
    const [side, editor] = await Promise.all([
      panel.renderFigures('featureMap', { page: 0 }, ['grad_output', 'output']),
      panel.renderFigures('featureMap', { page: 0 }, ['grad_output', 'output']),
    ]);
    assert.deepEqual(side.map((f) => [f.tensor, !!f.image, f.note ?? null, f.error ?? null]), [
      ['grad_output', true, null, null],
      ['output', false, 'no forward of blocks.1.mix was seen in step 4', null],
    ]);
    assert.equal(editor[0].image, side[0].image, 'the second webview gets the same image');
    assert.deepEqual(requests.map((r) => r.tensor), ['grad_output', 'output'], 'the two webviews share each request');
    await panel.renderFigures('featureMap', { page: 0 }, ['grad_output', 'output']);
    assert.deepEqual(requests.map((r) => r.tensor), ['grad_output', 'output', 'output'], 'the image is kept for its stop; a note is asked again');
    assert.equal(requests[0].layer, 'blocks.1.mix');
    panel.dispose();
  });

  it('reports any other failure as an error, and asks again after a new stop', async () => {
    let fail = true;
    const { hub, requests, hit: hits } = fakeHub(async () => {
      if (fail) throw new RequestError('badMessage', 'render featureMap: bad options');
      return { ...png, meta: {} };
    });
    const panel = new PanelController(hub, quietLogger, nullTracer, () => 4);
    hits.fire({ process: { id: 'c1', label: 'pid 1', models: new Map() }, hit: hit('a', 'forward', 1) });
    const [failed] = await panel.renderFigures('featureMap', {}, ['output']);
    assert.equal(failed.error, 'render featureMap: bad options');
    fail = false;
    await panel.renderFigures('featureMap', {}, ['output']);
    await panel.renderFigures('featureMap', {}, ['output']);
    hits.fire({ process: { id: 'c1', label: 'pid 1', models: new Map() }, hit: hit('a', 'forward', 2) });
    await panel.renderFigures('featureMap', {}, ['output']);
    assert.equal(requests.length, 3, 'the failure is retried, the image cached for its stop, the next stop asked anew');
    panel.dispose();
  });
});
