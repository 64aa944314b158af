// What the language server is told about a running session (extension/src/lsp/liveFeed.ts).
import { strict as assert } from 'node:assert';
import { LiveLayerFeed } from '../../extension/src/lsp/liveFeed';
import type { ModelTree, TensorSummary } from '../../extension/src/protocol/messages.gen';

const tree: ModelTree = {
  id: 'm1', name: 'model', cls: 'SmallCNN', params: 10,
  modules: [
    { name: '', cls: 'SmallCNN', params: 0, totalParams: 10, leaf: false },
    { name: 'conv1', cls: 'Conv2d', params: 5, totalParams: 5, leaf: true, file: '/w/cnn.py', line: 18 },
    { name: 'fc', cls: 'Linear', params: 5, totalParams: 5, leaf: true, file: '/w/cnn.py', line: 20 },
  ],
};

function summary(path: string, fields: Partial<TensorSummary>): TensorSummary {
  return { path, shape: [2, 3], dtype: 'float32', device: 'cpu', numel: 6, nan: 0, posinf: 0, neginf: 0, ...fields };
}

describe('language server feed: live layer summaries', () => {
  it('sends shapes with the creating file and line, and skips layers nothing is known of', () => {
    const feed = new LiveLayerFeed();
    const payload = feed.payload([{ id: 'c1', models: new Map([['m1', { tree, shapes: { conv1: [8, 16, 32, 32] } }]]) }]);
    assert.deepEqual(payload, { layers: { conv1: { file: '/w/cnn.py', line: 18, shape: [8, 16, 32, 32] } } });
  });

  it('keeps output stats from forward and the gradient norm from backward', () => {
    const feed = new LiveLayerFeed();
    feed.record('c1', 'm1', 'fc', [summary('inputs[0]', { mean: 9 }), summary('output', { mean: 0.5, std: 2, nan: 3 })]);
    feed.record('c1', 'm1', 'fc', [summary('grad_input[0]', { norm: 7 }), summary('grad_output[0]', { norm: 0.25 })]);
    const payload = feed.payload([{ id: 'c1', models: new Map([['m1', { tree, shapes: { fc: [8, 2] } }]]) }]);
    assert.deepEqual(payload.layers.fc, { file: '/w/cnn.py', line: 20, shape: [8, 2], mean: 0.5, std: 2, nan: 3, gradNorm: 0.25 });
  });

  it('does not mix processes whose model ids collide; the first process wins a layer', () => {
    const feed = new LiveLayerFeed();
    feed.record('c2', 'm1', 'fc', [summary('output', { mean: 42 })]);
    const processes = [
      { id: 'c1', models: new Map([['m1', { tree, shapes: { fc: [1, 2] } }]]) },
      { id: 'c2', models: new Map([['m1', { tree, shapes: { fc: [1, 2] } }]]) },
    ];
    assert.equal(feed.payload(processes).layers.fc.mean, undefined);
    feed.clear();
    assert.deepEqual(feed.payload([processes[1]]).layers.fc, { file: '/w/cnn.py', line: 20, shape: [1, 2] });
  });
});
