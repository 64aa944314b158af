// "Add Layer Breakpoint by Name…": typed text read as a class or a layer name, globs matched, the
// preview's wording, the phase suggested — against the shared vectors the backend's fnmatch wrote.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  describeMatches,
  globMatches,
  layersMatching,
  parseLayerTarget,
  proposedTarget,
  suggestedPhase,
} from '../../extension/src/breakpoints/layerTargets';

describe('layer targets: what a name, a glob or a class selects', () => {
  interface LayerTargetVectors {
    globs: { glob: string; name: string; match: boolean }[];
    targets: { text: string; kind: 'cls' | 'layer' }[];
  }
  const vectors = JSON.parse(readFileSync(join(__dirname, '..', 'vectors', 'layer_targets.json'), 'utf8')) as LayerTargetVectors;

  it('matches layer names against globs exactly as the backend (Python fnmatch.fnmatchcase) does', () => {
    assert.ok(vectors.globs.some((v) => v.match) && vectors.globs.some((v) => !v.match));
    const wrong = vectors.globs.filter((v) => globMatches(v.name, v.glob) !== v.match);
    assert.deepEqual(wrong, [], 'the editor preview and the backend disagree');
  });

  it('reads typed text as a class or a layer name the way hookscope run --break does', () => {
    for (const { text, kind } of vectors.targets) {
      const target = parseLayerTarget(text);
      assert.ok(!('error' in target), text);
      assert.equal(target.cls !== undefined ? 'cls' : 'layer', kind, text);
    }
    assert.match((parseLayerTarget('  ') as { error: string }).error, /glob/);
    assert.deepEqual(parseLayerTarget(' encoder.* '), { layer: 'encoder.*' });
  });

  const known = [
    { layer: '', cls: 'Tower' },
    { layer: 'embed', cls: 'Embedding' },
    { layer: 'mixers.0.attn', cls: 'MultiheadAttention' },
    { layer: 'mixers.0.attn.out_proj', cls: 'NonDynamicallyQuantizableLinear' },
    { layer: 'mixers.1.attn', cls: 'MultiheadAttention' },
    { layer: 'readout', cls: 'Linear' },
  ];

  it('previews the layers a target selects: every layer, a subtree, a class, one name', () => {
    assert.deepEqual(layersMatching({ layer: '*' }, known), known.map((k) => k.layer));
    assert.deepEqual(layersMatching({ layer: 'mixers.*' }, known), ['mixers.0.attn', 'mixers.0.attn.out_proj', 'mixers.1.attn']);
    assert.deepEqual(layersMatching({ cls: 'MultiheadAttention' }, known), ['mixers.0.attn', 'mixers.1.attn']);
    assert.deepEqual(layersMatching({ layer: 'mixers.0.attn' }, known), ['mixers.0.attn']);
    assert.deepEqual(layersMatching({ layer: 'mixers.[' }, known), [], 'an unclosed set is a literal [ to fnmatch');
    assert.equal(
      describeMatches({ layer: '*' }, known),
      'Matches 6 layers: (the model), embed, mixers.0.attn, mixers.0.attn.out_proj, mixers.1.attn, readout. A value condition on these is checked once per step.',
    );
    assert.equal(describeMatches({ cls: 'Linear' }, known), 'Matches 1 layer: readout.');
    assert.match(describeMatches({ cls: 'Conv2d' }, known), /^Matches no layer of the connected models yet/);
    assert.match(describeMatches({ layer: '*' }, []), /^No model is connected yet/);
    const many = Array.from({ length: 9 }, (_, i) => ({ layer: `l${i}` }));
    assert.match(describeMatches({ layer: 'l*' }, many), /^Matches 9 layers: l0, l1, l2, l3, l4, l5, … 3 more\./);
  });

  it('proposes every layer, the layers inside a container, or a leaf itself', () => {
    assert.equal(proposedTarget(), '*');
    assert.equal(proposedTarget({ layer: '', children: [{}] }), '*'); // the model's row
    assert.equal(proposedTarget({ layer: 'encoder', children: [{}, {}] }), 'encoder.*');
    assert.equal(proposedTarget({ layer: 'encoder.layers.0.linear1', children: [] }), 'encoder.layers.0.linear1');
  });

  it('suggests the phase a condition looks at', () => {
    assert.equal(suggestedPhase({ kind: 'grad_norm_above', threshold: 100 }), 'backward');
    assert.equal(suggestedPhase({ kind: 'grad_norm_below', threshold: 1e-7 }), 'backward');
    assert.equal(suggestedPhase({ kind: 'absmax_above', threshold: 1e4 }), 'both');
    assert.equal(suggestedPhase({ kind: 'nonfinite' }), 'both');
    assert.equal(suggestedPhase(undefined), 'forward');
  });
});
