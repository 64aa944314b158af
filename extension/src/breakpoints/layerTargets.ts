// Layers named by what a user types ("Add Layer Breakpoint by Name…"): a qualified name, a glob
// over qualified names or a class, read and matched as the backend reads and matches them
// (hookscope run's --break parser, model_index's fnmatch), for the input box's preview.
// Pure functions, no `vscode`.

import type { LayerBreakpoint, PhaseChoice } from './model';

/** The layers a breakpoint made by name stands for: a qualified name or a glob, or a class. */
export type LayerTarget = { layer: string; cls?: undefined } | { cls: string; layer?: undefined };

const CLASS_NAME = /^[A-Z][A-Za-z0-9_]*$/;
const GLOB_CHARS = /[*?[]/;

/**
 * What was typed into "Add Layer Breakpoint by Name…", read as `hookscope run --break` reads it:
 * a capitalized name without a dot or glob character is a class (`Linear`); anything else is a
 * qualified name or a glob over qualified names (`*` crosses dots: `encoder.*` is everything
 * inside the encoder). Returns the reason when the text cannot be a target.
 */
export function parseLayerTarget(text: string): LayerTarget | { error: string } {
  const target = text.trim();
  if (!target) return { error: 'Enter a layer name (encoder.layers.0), a glob (*, blocks.*.attn) or a class (Linear)' };
  return CLASS_NAME.test(target) ? { cls: target } : { layer: target };
}

/**
 * Whether a qualified layer name matches a glob, as Python's `fnmatch.fnmatchcase` (the backend's
 * test) decides: `*` any run of characters, dots included; `?` one; `[seq]` and `[!seq]` sets.
 * Only the editor's preview of the matches depends on it: the backend resolves the breakpoint.
 */
export function globMatches(name: string, glob: string): boolean {
  let source = '';
  for (let i = 0; i < glob.length; i += 1) {
    const c = glob[i];
    if (c === '*') source += '.*';
    else if (c === '?') source += '.';
    else if (c === '[') {
      let j = i + 1;
      if (glob[j] === '!') j += 1;
      if (glob[j] === ']') j += 1; // a ']' first in the set is one of its characters
      const end = glob.indexOf(']', j);
      if (end < 0) {
        source += '\\['; // no closing ']': a literal '['
        continue;
      }
      let set = glob.slice(i + 1, end).replace(/[\\\]^]/g, '\\$&');
      if (set.startsWith('!')) set = `^${set.slice(1)}`;
      source += `[${set}]`;
      i = end;
    } else source += c.replace(/[.+^${}()|\\[\]]/g, '\\$&');
  }
  try {
    return new RegExp(`^(?:${source})$`, 's').test(name);
  } catch {
    return false; // a set Python reads as empty (a reversed range such as [z-a])
  }
}

/** A layer of a connected model, as the preview of a named breakpoint matches it. */
export interface KnownLayer {
  layer: string;
  cls?: string;
}

/** The layers among `layers` that a target selects (the backend's model_index.resolve, for the editor's preview). */
export function layersMatching(target: LayerTarget, layers: readonly KnownLayer[]): string[] {
  if (target.cls !== undefined) return layers.filter((l) => l.cls === target.cls).map((l) => l.layer);
  const glob = GLOB_CHARS.test(target.layer);
  return layers.filter((l) => (glob ? globMatches(l.layer, target.layer) : l.layer === target.layer)).map((l) => l.layer);
}

/** A gradient-norm condition looks at gradients (backward); NaN/Inf and abs-max at both passes. */
export function suggestedPhase(condition: LayerBreakpoint['condition']): PhaseChoice {
  if (condition?.kind === 'grad_norm_above' || condition?.kind === 'grad_norm_below') return 'backward';
  if (condition?.kind === 'nonfinite' || condition?.kind === 'absmax_above') return 'both';
  return 'forward';
}

/** The preview under the input box: how many layers the text selects now, and which. */
export function describeMatches(target: LayerTarget, known: readonly KnownLayer[]): string {
  if (known.length === 0) return 'No model is connected yet: the layers are matched when the program runs.';
  const names = [...new Set(layersMatching(target, known))];
  if (names.length === 0) return 'Matches no layer of the connected models yet (it stays, and applies when one appears).';
  const shown = names.slice(0, 6).map((n) => n || '(the model)').join(', ');
  const more = names.length > 6 ? `, … ${names.length - 6} more` : '';
  const many = names.length > 1 ? ' A value condition on these is checked once per step.' : '';
  return `Matches ${names.length} layer${names.length === 1 ? '' : 's'}: ${shown}${more}.${many}`;
}

/**
 * What "Add Layer Breakpoint by Name…" proposes for a Layers tree row: the layers inside a
 * container (`encoder.*`), a leaf itself, every layer for the model's row (no name) or no row.
 */
export function proposedTarget(row?: { layer?: string; children: readonly unknown[] }): string {
  if (!row?.layer) return '*';
  return row.children.length ? `${row.layer}.*` : row.layer;
}
