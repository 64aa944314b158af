// The Layers tree content, the Tensors panel reducer/view, and the webview's pure helpers.
import { strict as assert } from 'node:assert';
import { buildLayerTree, findNode, formatCount, pathTo } from '../../extension/src/views/layersModel';
import { initialPanelState, mergeTensors, panelReducer, panelView, type PanelAction, type PanelState } from '../../extension/src/views/panelState';
import type { HitMessage, ModelTree, TensorSummary } from '../../extension/src/protocol/messages.gen';
import { formatNonFinite, formatNumber, formatPercent, parseChannels } from '../../extension/webview/format';
import { histOf, histogramBars } from '../../extension/webview/histogram';
import { channelAt, initialUiState, pageCount, renderOptions, uiReducer } from '../../extension/webview/state';

const tree: ModelTree = {
  id: 'm1', name: 'model', cls: 'SmallCNN', params: 1234,
  modules: [
    { name: '', cls: 'SmallCNN', params: 0, totalParams: 1234, leaf: false },
    { name: 'features', cls: 'Sequential', params: 0, totalParams: 448, leaf: false, file: '/w/cnn.py', line: 10 },
    { name: 'features.0', cls: 'Conv2d', params: 448, totalParams: 448, leaf: true, file: '/w/cnn.py', line: 11 },
    { name: 'fc', cls: 'Linear', params: 786, totalParams: 786, leaf: true, file: '/w/cnn.py', line: 13 },
  ],
};

function processOf(id: string, extra: Partial<{ paused: { model: string; layer: string; phase: string }; interventions: { layer: string; kind: string }[] }> = {}) {
  return {
    id, label: `pid ${id}`, models: new Map([['m1', { tree, shapes: { 'features.0': [8, 16, 32, 32] } }]]),
    paused: extra.paused, interventions: extra.interventions ?? [],
  };
}

describe('views: Layers tree model', () => {
  it('nests modules under the model with class, shape, params, badges', () => {
    const roots = buildLayerTree({
      processes: [processOf('c1', { interventions: [{ layer: 'fc', kind: 'scale' }] })],
      breakpointPhases: (_p, _m, layer) => ({ forward: layer === 'features.0', backward: false }),
      hooks: (_p, _m, layer) => (layer === 'fc' ? { ours: 1, user: 2 } : undefined),
    });
    assert.equal(roots.length, 1, 'a single process shows its models at the top');
    const model = roots[0];
    assert.equal(model.kind, 'model');
    assert.equal(model.description, 'SmallCNN · 1.2K params');
    assert.deepEqual(model.children.map((c) => c.label), ['features', 'fc']);
    const conv = findNode(roots, 'c1/m1/features.0')!;
    assert.equal(conv.label, '0');
    assert.equal(conv.description, 'Conv2d · [8, 16, 32, 32] · 448 params · ● fwd');
    assert.equal(conv.forward, true);
    assert.equal(conv.line, 11);
    const fc = findNode(roots, 'c1/m1/fc')!;
    assert.match(fc.description, /⚓3/);
    assert.match(fc.description, /✎ scale/);
    assert.equal(fc.interventions, 1);
    assert.deepEqual(pathTo(roots, 'c1/m1/features.0')!.map((n) => n.key), ['c1/m1', 'c1/m1/features', 'c1/m1/features.0']);
  });

  it('shows each process as a row when several are connected, and marks the paused layer', () => {
    const roots = buildLayerTree({
      processes: [processOf('c1'), processOf('c2', { paused: { model: 'm1', layer: 'fc', phase: 'backward' } })],
      breakpointPhases: () => ({ forward: false, backward: false }),
    });
    assert.deepEqual(roots.map((r) => r.kind), ['process', 'process']);
    assert.match(roots[1].description, /paused/);
    assert.equal(findNode(roots, 'c2/m1/fc')!.paused, true);
    assert.equal(findNode(roots, 'c1/m1/fc')!.paused, false);
  });

  it('formats counts', () => {
    assert.deepEqual([5, 1234, 11_200_000, 3e9].map(formatCount), ['5', '1.2K', '11.2M', '3B']);
  });
});

const summary = (path: string, mean: number): TensorSummary => ({
  path, shape: [8, 16], dtype: 'float32', device: 'cpu', numel: 128, mean, nan: 0, posinf: 0, neginf: 0,
});

const hit: HitMessage = {
  type: 'hit', breakpoint: 'bp1', model: 'm1', layer: 'features.0', phase: 'backward',
  reason: 'Layer breakpoint: features.0 (backward)', step: 3, summaries: [summary('grad_output[0]', 0.5)], pausing: true,
};

function run(actions: PanelAction[], state: PanelState = initialPanelState()): PanelState {
  return actions.reduce(panelReducer, state);
}

describe('views: Tensors panel state', () => {
  it('goes from not connected to waiting to paused to live', () => {
    let s = initialPanelState();
    assert.equal(panelView(s).status, 'notConnected');
    assert.equal(panelView(s).headline, 'Not connected');
    s = run([{ type: 'processes', processes: [{ id: 'c1', label: 'pid 1' }] }], s);
    assert.equal(panelView(s).status, 'waiting');
    assert.equal(panelView(s).headline, 'Waiting for the first forward');
    s = run([{ type: 'hit', processId: 'c1', processLabel: 'pid 1', hit }], s);
    const paused = panelView(s);
    assert.equal(paused.status, 'paused');
    assert.equal(paused.headline, 'Paused in layer features.0 (backward)');
    assert.equal(paused.pausedReason, 'Layer breakpoint: features.0 (backward)');
    assert.deepEqual(paused.tensors.map((t) => t.path), ['grad_output[0]']);
    s = run([{ type: 'resumed', processId: 'c1' }], s);
    assert.equal(panelView(s).status, 'live');
    assert.equal(panelView(s).headline, 'Layer features.0 (backward)');
  });

  it('merges live summaries of the target only, newest per path', () => {
    let s = run([
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 1' }] },
      { type: 'select', target: { processId: 'c1', processLabel: 'pid 1', model: 'm1', layer: 'fc' } },
    ]);
    assert.equal(panelView(s).headline, 'Waiting for the first forward of fc');
    const rev = s.revision;
    s = run([
      { type: 'summaries', processId: 'c1', model: 'm1', layer: 'other', step: 1, tensors: [summary('output', 9)] },
      { type: 'summaries', processId: 'c1', model: 'm1', layer: 'fc', phase: 'forward', step: 1, tensors: [summary('inputs[0]', 1), summary('output', 2)] },
      { type: 'summaries', processId: 'c1', model: 'm1', layer: 'fc', phase: 'forward', step: 2, tensors: [summary('output', 3)] },
    ], s);
    assert.deepEqual(s.tensors.map((t) => [t.path, t.mean]), [['inputs[0]', 1], ['output', 3]]);
    assert.equal(s.step, 2);
    assert.ok(s.revision > rev, 'a new step bumps the revision (the image re-renders)');
    assert.deepEqual(mergeTensors([summary('a', 1)], [summary('a', 2), summary('b', 3)]).map((t) => t.mean), [2, 3]);
  });

  it('clears a process that exited and says so', () => {
    const s = run([
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 1' }] },
      { type: 'hit', processId: 'c1', processLabel: 'pid 1', hit },
      { type: 'interventions', processId: 'c1', interventions: [{ id: 'i1', layer: 'fc', kind: 'scale', value: 2 }] },
      { type: 'exited', processId: 'c1', label: 'pid 1', reason: 'the process closed the connection' },
    ]);
    const v = panelView(s);
    assert.equal(v.status, 'notConnected');
    assert.equal(v.tensors.length, 0);
    assert.equal(v.target, undefined);
    assert.deepEqual(s.interventions, {});
    assert.match(v.notices.at(-1)!.message, /pid 1 exited/);
  });

  it('lists the target process interventions and keeps the last notices', () => {
    let s = run([
      { type: 'processes', processes: [{ id: 'c1', label: 'pid 1' }] },
      { type: 'select', target: { processId: 'c1', processLabel: 'pid 1', model: 'm1', layer: 'fc' } },
      { type: 'interventions', processId: 'c1', interventions: [{ id: 'i1', layer: 'fc', kind: 'zero_channels', channels: [0, 1] }] },
    ]);
    assert.equal(panelView(s).interventions.length, 1);
    for (let i = 0; i < 10; i++) s = panelReducer(s, { type: 'notice', notice: { level: 'info', message: `n${i}` } });
    assert.deepEqual(panelView(s).notices.map((n) => n.message), ['n6', 'n7', 'n8', 'n9']);
  });
});

describe('webview: formatting and histogram', () => {
  it('formats numbers readably and shows non-finite values', () => {
    assert.deepEqual([0, 12.5, 0.000123, 123456, -2.5, NaN, Infinity, -Infinity, undefined].map(formatNumber),
      ['0', '12.5', '1.23e-4', '1.23e+5', '-2.5', 'NaN', '+Inf', '-Inf', '—']);
    assert.equal(formatPercent(0.125), '12.5%');
    assert.equal(formatPercent(0.0001), '<0.1%');
    assert.equal(formatNonFinite({ nan: 3, posinf: 1, neginf: 0 }), '3 NaN · 1 +Inf');
    assert.equal(formatNonFinite({ nan: 0, posinf: 0, neginf: 0 }), '0');
  });

  it('parses channel lists', () => {
    assert.deepEqual(parseChannels('0, 3-5 3'), [0, 3, 4, 5]);
    assert.equal(parseChannels('a'), undefined);
    assert.equal(parseChannels(''), undefined);
    assert.equal(parseChannels('5-2'), undefined);
  });

  it('draws bars proportional (sqrt) to counts with empty bins empty', () => {
    const bars = histogramBars([0, 1, 4, 16], 40, 20);
    assert.deepEqual(bars.map((b) => b.x), [0, 10, 20, 30]);
    assert.equal(bars[0].height, 0);
    assert.equal(bars[3].height, 20);
    assert.equal(bars[2].height, 10);
    assert.equal(bars[1].height, 5);
    assert.ok(bars.every((b) => Math.abs(b.y + b.height - 20) < 1e-9));
    assert.deepEqual(histogramBars([], 40, 20), []);
    assert.deepEqual(histOf({ lo: -1, hi: 1, counts: [1, 2] }), { lo: -1, hi: 1, counts: [1, 2] });
    assert.equal(histOf({ lo: 0, hi: 0, counts: [] }), undefined);
    assert.equal(histOf(undefined), undefined);
  });
});

describe('webview: visual options', () => {
  it('builds render options from the UI state', () => {
    let ui = initialUiState();
    assert.deepEqual(renderOptions(ui), { page: 0, per_page: 64, batch: 0, shared_scale: false, sort_by_strength: false });
    ui = uiReducer(ui, { type: 'page', delta: 5, pages: 2 });
    assert.equal(ui.featureMap.page, 1, 'paging stops at the last page');
    ui = uiReducer(ui, { type: 'sort', on: true });
    assert.equal(ui.featureMap.page, 0, 'sorting starts from the first page');
    ui = uiReducer(ui, { type: 'enlarge', channel: 7 });
    assert.equal(renderOptions(ui).channel, 7);
    ui = uiReducer(ui, { type: 'layerChanged' });
    assert.equal(ui.enlarged, undefined);
    ui = uiReducer(ui, { type: 'visual', visual: 'attention' });
    assert.deepEqual(renderOptions(ui), { head: 'mean' });
    ui = uiReducer(ui, { type: 'head', head: 2 });
    assert.deepEqual(renderOptions(ui), { head: 2 });
    ui = uiReducer(uiReducer(ui, { type: 'visual', visual: 'gradCam' }), { type: 'targetClass', targetClass: 3 });
    assert.deepEqual(renderOptions(ui), { target: 3 });
    assert.equal(pageCount(130), 3);
    assert.equal(pageCount(undefined), 1);
  });

  it('maps a click on the grid to a channel', () => {
    const meta = { grid: { rows: 2, cols: 4 }, channels: [10, 11, 12, 13, 14, 15, 16, 17] };
    assert.equal(channelAt(meta, 5, 5, 400, 200), 10);
    assert.equal(channelAt(meta, 399, 199, 400, 200), 17);
    assert.equal(channelAt(meta, 150, 150, 400, 200), 15);
    assert.equal(channelAt({ grid: { rows: 2, cols: 2 }, channels: [64, 65, 66] }, 150, 150, 200, 200), undefined, 'an empty tile');
    assert.equal(channelAt({ grid: { rows: 2, cols: 2 }, channels: [64, 65, 66] }, 150, 50, 200, 200), 65);
    assert.equal(channelAt({ layout: 'heatmap' }, 1, 1, 10, 10), undefined);
  });
});
