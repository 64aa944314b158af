// Captions for the panel's images, in words (pure; unit-tested). The first line says what the
// image is of — layer, tensor, step — from what the backend rendered (`meta.of`), never from
// what the panel asked for; the second says how to read it (channels, scale, range, NaN/Inf).

import type { ImageMeta, NonFiniteCounts } from '../src/protocol/messages.gen';
import { formatNumber } from './format';

/** "blocks.1.mix · grad_output[0] · step 4" ("model" for views of the whole model), from `meta.of`:
 * what the backend says the image is of. */
export function captionOf(meta: ImageMeta): string {
  const of = meta.of;
  if (!of) return '';
  return [of.layer || 'model', of.tensor, of.step !== undefined ? `step ${of.step}` : ''].filter(Boolean).join(' · ');
}

const num = (v: unknown): string => (typeof v === 'number' ? formatNumber(v) : '—');

/** "lo … hi" of a [lo, hi] range (an end is nil when no value was finite). */
function range(v: (number | null)[] | undefined): string | undefined {
  return v?.length === 2 ? `${num(v[0])} … ${num(v[1])}` : undefined;
}

function shapeText(v: number[] | undefined): string {
  return v ? `[${v.join(', ')}]` : '';
}

/** "2 NaN · 1 +Inf" from {nan, posinf, neginf}, or undefined when there are none. */
export function nonFiniteText(c: NonFiniteCounts | undefined): string | undefined {
  if (!c) return undefined;
  const parts = ([['nan', 'NaN'], ['posinf', '+Inf'], ['neginf', '-Inf']] as const)
    .filter(([k]) => c[k] > 0)
    .map(([k, label]) => `${c[k]} ${label}`);
  return parts.length ? parts.join(' · ') : undefined;
}

/** How to read the image: what is drawn, on which scale, and what is odd about it. */
export function describeImage(meta: ImageMeta): string {
  const parts: string[] = [];
  switch (meta.kind) {
    case 'feature_map':
      parts.push(...featureMapWords(meta));
      break;
    case 'attention': {
      const heads = meta.heads ?? 0;
      parts.push(meta.head !== undefined ? (meta.head === 'avg' ? `average of ${heads} heads` : `head ${meta.head} of ${heads}`)
        : heads > 1 ? `${heads} heads and their average` : 'one head');
      parts.push(`${num(meta.queries)} queries × ${num(meta.keys)} keys`);
      const r = range(meta.range);
      if (r) parts.push(`weights ${r}`);
      break;
    }
    case 'grad_cam':
      parts.push(`class ${num(meta.target)} (predicted ${num(meta.predicted)}, score ${num(meta.score)})`);
      break;
    case 'gradient_flow': {
      const flagged = meta.flagged?.length ?? 0;
      // 'norm' (a gradient-health stop): what its switches compare; else the mean and max |grad|
      parts.push(meta.metric === 'norm' ? "each layer's gradient norm and its largest parameter's, log scale" : 'mean and max |grad| per layer, log scale');
      if (flagged) parts.push(`${flagged} layer${flagged === 1 ? '' : 's'} vanishing or exploding`);
      break;
    }
    case 'histogram':
      parts.push(`${shapeText(meta.shape)} · mean ${num(meta.mean)} · std ${num(meta.std)}${meta.log ? ' · log counts' : ''}`);
      break;
    default: {
      const r = range(meta.range);
      if (r) parts.push(`range ${r}`);
    }
  }
  const bad = nonFiniteText(meta.nonfinite);
  if (bad) parts.push(bad);
  if (meta.of?.note) parts.push(meta.of.note);
  return parts.filter(Boolean).join(' · ');
}

function featureMapWords(meta: ImageMeta): string[] {
  const words: string[] = [];
  const shape = shapeText(meta.shape);
  if (meta.layout === 'grid') {
    const shown = meta.channels?.length ?? 0;
    const pages = meta.pages ?? 1;
    const page = (meta.page ?? 0) + 1;
    words.push(pages > 1 ? `${shape}: channels ${page} of ${pages} pages (${shown} shown)` : `${shape}: ${shown} channels`);
    if (meta.batch !== undefined) words.push(`batch item ${num(meta.batch)}`);
    words.push(meta.shared_scale ? `one scale ${range(meta.scale) ?? ''}`.trim() : 'each channel on its own scale');
    if (meta.sorted_by_strength) words.push('strongest first');
    const constant = meta.constant?.length ?? 0;
    if (constant) words.push(`${constant} constant channel${constant === 1 ? '' : 's'}`);
  } else if (meta.layout === 'single') {
    words.push(`${shape}: channel ${num(meta.channel)}`);
    const r = range(meta.range);
    if (r) words.push(`range ${r}`);
  } else {
    words.push(`${shape} as a heat map${meta.batch !== undefined ? ` (batch item ${num(meta.batch)})` : ''}`);
    const r = range(meta.range);
    if (r) words.push(`range ${r}`);
  }
  return words;
}

/** Whether an image is a grid of values (drawn crisp, nearest neighbour) rather than a figure with text. */
export function isPixelImage(meta: ImageMeta): boolean {
  return meta.layout !== 'figure' && meta.kind !== 'gradient_flow' && meta.kind !== 'histogram' && meta.kind !== 'stats_chart';
}
