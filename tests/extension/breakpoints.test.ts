// Layer breakpoint model: toggling, following edits, protocol specs, resolution statuses, line mapping,
// and breakpoints named by a layer, a glob or a class.
import { strict as assert } from 'node:assert';
import {
  BreakpointModel,
  breakpointStatuses,
  describeCondition,
  describeInstances,
  instanceChoices,
  isLayerBreakpoint,
  needsInstanceChoice,
  mapLine,
  targetLabel,
  toSpec,
  type LayerBreakpoint,
} from '../../extension/src/breakpoints/model';
import { layersAtLine } from '../../extension/src/breakpoints/lineLayers';

const URI = 'file:///w/cnn.py';
const FILE = '/w/cnn.py';

describe('breakpoints: model', () => {
  it('toggles on a line: add, switch phase, remove', () => {
    const m = new BreakpointModel();
    const bp = m.toggleLine(URI, FILE, 11, 'backward')!;
    assert.deepEqual(bp.phases, ['backward']);
    assert.equal(m.all().length, 1);
    const switched = m.toggleLine(URI, FILE, 11, 'both')!;
    assert.equal(switched.id, bp.id);
    assert.deepEqual(switched.phases, ['forward', 'backward']);
    assert.equal(m.toggleLine(URI, FILE, 11, 'both'), undefined);
    assert.equal(m.all().length, 0);
  });

  it('turns into the protocol spec with a 1-based line or a layer name', () => {
    const m = new BreakpointModel();
    const bp = m.toggleLine(URI, FILE, 11, 'backward')!;
    m.update(bp.id, { condition: { kind: 'grad_norm_below', threshold: 1e-6 }, hitCount: 3 });
    assert.deepEqual(toSpec(m.get(bp.id)!), {
      id: bp.id, phases: ['backward'], enabled: true, file: FILE, line: 12,
      condition: { kind: 'grad_norm_below', threshold: 1e-6 }, hitCount: 3,
    });
    m.update(bp.id, { condition: undefined, hitCount: undefined });
    assert.equal('hitCount' in m.get(bp.id)!, false);
    const layerBp = m.setLayerPhase('layer1.0.conv1', { uri: '', file: '', line: 0 }, 'forward', true)!;
    assert.deepEqual(toSpec(layerBp), { id: layerBp.id, phases: ['forward'], enabled: true, layer: 'layer1.0.conv1' });
  });

  it('switches layer phases on and off and removes the breakpoint with the last phase', () => {
    const m = new BreakpointModel();
    const loc = { uri: URI, file: FILE, line: 4 };
    m.setLayerPhase('fc', loc, 'backward', true);
    m.setLayerPhase('fc', loc, 'forward', true);
    assert.deepEqual(m.forLayer('fc')!.phases, ['forward', 'backward']);
    m.setLayerPhase('fc', loc, 'forward', false);
    assert.deepEqual(m.forLayer('fc')!.phases, ['backward']);
    m.setLayerPhase('fc', loc, 'backward', false);
    assert.equal(m.forLayer('fc'), undefined);
  });

  it('unchecking a layer removes the source-line breakpoints that resolved to it, and only those', () => {
    const m = new BreakpointModel();
    const covering = m.add({ uri: URI, file: FILE, line: 4, phases: ['forward'], enabled: true });
    const elsewhere = m.add({ uri: URI, file: FILE, line: 9, phases: ['backward'], enabled: true });
    const layerBp = m.setLayerPhase('fc', { uri: URI, file: FILE, line: 4 }, 'forward', true)!;
    const resolved: Record<string, string[]> = { [covering.id]: ['fc', 'blocks.1.fc'], [elsewhere.id]: ['head'] };
    const removed = m.removeLineBreakpointsCovering('fc', (id) => resolved[id] ?? []);
    assert.deepEqual(removed.map((b) => b.id), [covering.id]);
    assert.deepEqual(m.all().map((b) => b.id).sort(), [elsewhere.id, layerBp.id].sort(), 'layer breakpoints are setLayerPhase\'s to change');
    assert.deepEqual(m.removeLineBreakpointsCovering('fc', (id) => resolved[id] ?? []), []);
  });

  it('describes conditions for labels', () => {
    assert.equal(describeCondition({ condition: { kind: 'nonfinite' } }), 'NaN/Inf');
    assert.equal(describeCondition({ condition: { kind: 'grad_norm_above', threshold: 100 }, hitCount: 2 }), 'grad norm > 100, hit 2');
    assert.equal(describeCondition({}), '');
  });

  it('drops malformed persisted entries', () => {
    const good = { id: 'a', uri: URI, file: FILE, line: 3, phases: ['forward'], enabled: true };
    assert.equal(isLayerBreakpoint(good), true);
    assert.equal(isLayerBreakpoint({ ...good, line: -1 }), false);
    assert.equal(isLayerBreakpoint({ ...good, phases: [] }), false);
    const m = new BreakpointModel([good, { id: 5 }] as never);
    assert.equal(m.all().length, 1);
  });
});

describe('breakpoints: named by a layer, a glob or a class', () => {
  it('keeps one breakpoint per target, sends a glob as layer and a class as cls, and never asks for an instance', () => {
    const m = new BreakpointModel();
    const every = m.setNamed({ layer: '*' }, { phases: ['forward', 'backward'], condition: { kind: 'absmax_above', threshold: 1e4 } });
    assert.deepEqual(toSpec(every), {
      id: every.id, phases: ['forward', 'backward'], enabled: true, layer: '*', condition: { kind: 'absmax_above', threshold: 1e4 },
    });
    const again = m.setNamed({ layer: '*' }, { phases: ['backward'], condition: { kind: 'grad_norm_above', threshold: 100 } });
    assert.equal(again.id, every.id);
    assert.equal(m.all().length, 1);
    assert.deepEqual(toSpec(again).condition, { kind: 'grad_norm_above', threshold: 100 });
    const linear = m.setNamed({ cls: 'Linear' }, { phases: ['forward'] });
    assert.deepEqual(toSpec(linear), { id: linear.id, phases: ['forward'], enabled: true, cls: 'Linear' });
    assert.equal(targetLabel(linear), 'class Linear');
    assert.equal(targetLabel(every), '*');
    assert.equal(m.all().length, 2);
    assert.equal(needsInstanceChoice(linear, { layers: ['a', 'b'] }), false);
    assert.equal(needsInstanceChoice(every, { layers: ['a', 'b'] }), false);
    // Persisted and read back (workspaceState), a class breakpoint survives; a malformed one does not.
    const restored = new BreakpointModel(JSON.parse(JSON.stringify(m.toJSON())) as LayerBreakpoint[]);
    assert.deepEqual(restored.specs(), m.specs());
    assert.equal(isLayerBreakpoint({ ...linear, cls: 7 }), false);
  });
});

describe('breakpoints: one instance of a line that stands for several layers', () => {
  const mix = ['blocks.0.branches.mix', 'blocks.1.branches.mix', 'blocks.2.branches.mix'];

  it('asks once the processes resolved the line to several layers, until answered', () => {
    const m = new BreakpointModel();
    const bp = m.toggleLine(URI, FILE, 30, 'forward')!;
    assert.equal(needsInstanceChoice(bp, undefined), false, 'not before any process resolved it');
    assert.equal(needsInstanceChoice(bp, { layers: ['fc1'] }), false, 'one layer: nothing to choose');
    assert.equal(needsInstanceChoice(bp, { layers: mix }), true);
    assert.equal(needsInstanceChoice({ ...bp, instance: mix[1] }, { layers: [mix[1]] }), false);
    assert.equal(needsInstanceChoice({ ...bp, allInstances: true }, { layers: mix }), false);
    assert.equal(needsInstanceChoice({ ...bp, enabled: false }, { layers: mix }), false);
    assert.equal(needsInstanceChoice({ ...bp, layer: 'blocks' }, { layers: mix }), false, 'a Layers-tree breakpoint names its layer');
  });

  it('offers "All N layers" first, then each layer with its class', () => {
    const items = instanceChoices(mix, (l) => (l.endsWith('mix') ? 'Linear' : undefined));
    assert.deepEqual(items.map((i) => [i.label, i.instance, i.description]), [
      ['All 3 layers', undefined, mix.join(', ')],
      ...mix.map((l) => [l, l, 'Linear']),
    ]);
  });

  it('sends the chosen instance with the line; the backend selects that layer at that line', () => {
    const m = new BreakpointModel();
    const bp = m.toggleLine(URI, FILE, 30, 'forward')!;
    m.update(bp.id, { instance: mix[2] });
    assert.deepEqual(toSpec(m.get(bp.id)!), { id: bp.id, phases: ['forward'], enabled: true, file: FILE, line: 31, layer: mix[2] });
    m.update(bp.id, { instance: undefined, allInstances: true });
    assert.deepEqual(toSpec(m.get(bp.id)!), { id: bp.id, phases: ['forward'], enabled: true, file: FILE, line: 31 });
    // Still the line's breakpoint: toggling the line removes it, and it is kept across reloads.
    assert.equal(m.atLine(URI, 30)?.id, bp.id);
    assert.ok(isLayerBreakpoint({ ...bp, instance: mix[0] }) && !isLayerBreakpoint({ ...bp, instance: 3 }));
  });

  it('says what the row stops in', () => {
    assert.equal(describeInstances({ instance: mix[1] }, [mix[1]]), '→ only blocks.1.branches.mix');
    assert.equal(describeInstances({ allInstances: true }, mix), '→ all 3 layers');
    assert.equal(describeInstances({}, mix), '→ 3 layers');
    assert.equal(describeInstances({}, ['fc1']), '→ fc1');
    assert.equal(describeInstances({}, []), '');
  });
});

describe('breakpoints: following edits', () => {
  it('maps lines like a sticky decoration', () => {
    // Two lines inserted above: the breakpoint moves down.
    assert.equal(mapLine(10, { startLine: 3, endLine: 3, insertedLines: 2, atLineStart: false }), 12);
    // An edit below does not move it.
    assert.equal(mapLine(10, { startLine: 12, endLine: 14, insertedLines: 0, atLineStart: true }), 10);
    // Enter pressed at the start of its own line pushes the code (and the breakpoint) down.
    assert.equal(mapLine(10, { startLine: 10, endLine: 10, insertedLines: 1, atLineStart: true }), 11);
    // Enter at the end of its line: the code stays.
    assert.equal(mapLine(10, { startLine: 10, endLine: 10, insertedLines: 1, atLineStart: false }), 10);
    // Lines 5..8 deleted (joined onto 5): a breakpoint at 7 collapses to 5, one at 9 moves to 6.
    const del = { startLine: 5, endLine: 8, insertedLines: 0, atLineStart: false };
    assert.equal(mapLine(7, del), 5);
    assert.equal(mapLine(9, del), 6);
  });

  it('applies several edits of one event bottom-up and merges breakpoints landing on one line', () => {
    const m = new BreakpointModel();
    m.toggleLine(URI, FILE, 5, 'forward');
    m.toggleLine(URI, FILE, 6, 'backward');
    m.toggleLine(URI, FILE, 20, 'forward');
    m.toggleLine('file:///w/other.py', '/w/other.py', 20, 'forward');
    // One event: 3 lines inserted at line 2, and line 6 deleted onto line 5.
    const moved = m.applyEdits(URI, [
      { startLine: 2, endLine: 2, insertedLines: 3, atLineStart: false },
      { startLine: 5, endLine: 6, insertedLines: 0, atLineStart: false },
    ]);
    assert.equal(moved, true);
    const lines = m.inDocument(URI).map((b) => b.line).sort((a, b) => a - b);
    assert.deepEqual(lines, [8, 22]);
    assert.equal(m.inDocument('file:///w/other.py')[0].line, 20);
  });
});

describe('breakpoints: resolution statuses', () => {
  it('lists matched layers over processes and flags a breakpoint no model matched', () => {
    const statuses = breakpointStatuses(['a', 'b', 'c'], [
      { hasModels: true, resolutions: [{ id: 'a', layers: ['conv1'] }, { id: 'b', layers: [] }] },
      { hasModels: true, resolutions: [{ id: 'a', layers: ['conv1', 'layer1.conv1'] }, { id: 'b', layers: [], error: "no layer at cnn.py:99" }] },
    ]);
    assert.deepEqual(statuses.get('a'), { layers: ['conv1', 'layer1.conv1'] });
    assert.equal(statuses.get('b')!.problem, 'no layer at cnn.py:99');
    assert.deepEqual(statuses.get('c'), { layers: [] });
  });

  it('does not warn before any model is known', () => {
    const statuses = breakpointStatuses(['a'], [{ hasModels: false, resolutions: [{ id: 'a', layers: [] }] }]);
    assert.equal(statuses.get('a')!.problem, undefined);
  });
});

describe('breakpoints: line -> layers (asked of the backend)', () => {
  type Asked = { process: string; type: string; params: unknown };

  function fakeHub(answers: Record<string, { layers: unknown[] } | Error>, asked: Asked[]) {
    return {
      processes: () => Object.keys(answers).map((id) => ({ id })),
      request: (process: string, type: string, params: unknown) => {
        asked.push({ process, type, params });
        const answer = answers[process];
        return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
      },
    } as unknown as Parameters<typeof layersAtLine>[0];
  }

  it('asks every connected process resolveLayers for the file and 1-based line, and names the process', async () => {
    const asked: Asked[] = [];
    const hub = fakeHub({
      c1: { layers: [{ model: 'm1', layer: 'fc1', cls: 'Linear' }, { model: 'm1', layer: 'act', cls: 'GELU' }] },
      c2: { layers: [{ model: 'm1', layer: 'fc1', cls: 'Linear' }] },
    }, asked);
    const refs = await layersAtLine(hub, FILE, 31);
    assert.deepEqual(asked.map((a) => [a.process, a.type, a.params]), [
      ['c1', 'resolveLayers', { spec: { file: FILE, line: 31 } }],
      ['c2', 'resolveLayers', { spec: { file: FILE, line: 31 } }],
    ]);
    assert.deepEqual(refs.map((r) => `${r.process}/${r.model}/${r.layer}`), ['c1/m1/fc1', 'c1/m1/act', 'c2/m1/fc1']);
  });

  it('a process that cannot answer yet (no engine, gone) adds no layer', async () => {
    const hub = fakeHub({ c1: new Error('notAvailable'), c2: { layers: [{ model: 'm1', layer: 'conv1', cls: 'Conv2d' }] } }, []);
    assert.deepEqual((await layersAtLine(hub, FILE, 12)).map((r) => r.layer), ['conv1']);
  });
});
