// Layer breakpoints as the editor keeps them: pure data and operations, no `vscode`.
//
// A breakpoint sits on a source line (a layer's definition `self.conv1 = nn.Conv2d(...)`,
// a call site `x = self.conv1(x)` or an `nn.Sequential` entry), on a layer name (made from
// the Layers tree), or on layers named by a glob or a class ("Add Layer Breakpoint by Name…").
// It follows edits that move its line, turns into the protocol's BreakpointSpec, and carries
// what each connected process resolved it to.

import type { BreakpointSpec, Condition, Phase } from '../protocol/messages.gen';
import type { LayerTarget } from './layerTargets';

export type PhaseChoice = 'forward' | 'backward' | 'both';

/** The protocol's condition (its kinds are protocol.CONDITIONS). */
export type BreakpointCondition = Condition;

export interface LayerBreakpoint {
  id: string;
  /** Document URI (string form) of the line. */
  uri: string;
  /** File system path of that document, sent to the backend. */
  file: string;
  /** 0-based line, as the editor counts. */
  line: number;
  /**
   * Set when the breakpoint names a layer rather than a line: a qualified name (made from the
   * Layers tree, or typed) or a glob over qualified names (`*`, `blocks.*.attn`). A named
   * breakpoint without a line has an empty `uri` and `file`.
   */
  layer?: string;
  /** Set when the breakpoint names a class (`Linear`): every layer of that class. */
  cls?: string;
  /**
   * A line that makes or calls several layers (a definition used by every block): the one layer
   * the user chose to stop in. Sent with the line, so the backend selects it alone.
   */
  instance?: string;
  /** The user chose to stop in every layer the line stands for (not asked again). */
  allInstances?: boolean;
  phases: Phase[];
  condition?: BreakpointCondition;
  /** Pause on the Nth hit only. */
  hitCount?: number;
  enabled: boolean;
}

/** What the connected processes made of a breakpoint (not persisted). */
export interface BreakpointStatus {
  /** Layers matched, over all processes. */
  layers: string[];
  /** Set when at least one process had models and none matched: shown with a warning. */
  problem?: string;
}

export function phasesOf(choice: PhaseChoice): Phase[] {
  return choice === 'both' ? ['forward', 'backward'] : [choice];
}

export function phaseChoiceOf(phases: readonly Phase[]): PhaseChoice {
  const f = phases.includes('forward') || phases.includes('forward_pre');
  const b = phases.includes('backward') || phases.includes('param_grad');
  return f && b ? 'both' : b ? 'backward' : 'forward';
}

/** "grad norm < 1e-6", "NaN/Inf", "hit 3"... for labels and tooltips. */
export function describeCondition(bp: Pick<LayerBreakpoint, 'condition' | 'hitCount'>): string {
  const parts: string[] = [];
  const c = bp.condition;
  if (c && c.kind !== 'always') {
    switch (c.kind) {
      case 'nonfinite': parts.push('NaN/Inf'); break;
      case 'grad_norm_below': parts.push(`grad norm < ${c.threshold}`); break;
      case 'grad_norm_above': parts.push(`grad norm > ${c.threshold}`); break;
      case 'absmax_above': parts.push(`|x|max > ${c.threshold}`); break;
      case 'expression': parts.push(`if ${c.expression}`); break;
    }
  }
  if (bp.hitCount !== undefined) parts.push(`hit ${bp.hitCount}`);
  return parts.join(', ');
}

/**
 * Whether to ask which layer a line breakpoint should stop in: the processes resolved it to
 * several layers (every instance of a block class, say) and the user has not answered yet.
 */
export function needsInstanceChoice(bp: LayerBreakpoint, status: BreakpointStatus | undefined): boolean {
  return !bp.layer && !bp.cls && bp.enabled && bp.instance === undefined && !bp.allInstances && (status?.layers.length ?? 0) > 1;
}

export interface InstanceChoice {
  label: string;
  description?: string;
  /** The layer to stop in; undefined: all of them. */
  instance?: string;
}

/** The QuickPick's items: "All N layers" first, then each layer (with its class when known). */
export function instanceChoices(layers: readonly string[], classOf: (layer: string) => string | undefined = () => undefined): InstanceChoice[] {
  const all: InstanceChoice = { label: `All ${layers.length} layers`, description: layers.join(', ') };
  return [all, ...layers.map((layer) => ({ label: layer, description: classOf(layer), instance: layer }))];
}

/** What a line breakpoint stops in, for its row and hover: "→ blocks.1.mix (chosen of 3)", "→ all 3 layers". */
export function describeInstances(bp: Pick<LayerBreakpoint, 'instance' | 'allInstances' | 'layer'>, layers: readonly string[]): string {
  if (bp.instance) return `→ only ${bp.instance}`;
  if (layers.length === 0) return '';
  if (bp.allInstances && layers.length > 1) return `→ all ${layers.length} layers`;
  return `→ ${layers.length <= 2 ? layers.join(', ') : `${layers.length} layers`}`;
}

/** How a breakpoint names its layers in rows, hovers and titles: the layer or glob, `class Linear`, else undefined (a line). */
export function targetLabel(bp: Pick<LayerBreakpoint, 'layer' | 'cls'>): string | undefined {
  return bp.layer ?? (bp.cls !== undefined ? `class ${bp.cls}` : undefined);
}

/** The protocol form of a breakpoint. */
export function toSpec(bp: LayerBreakpoint): BreakpointSpec {
  const spec: BreakpointSpec = { id: bp.id, phases: [...bp.phases], enabled: bp.enabled };
  if (bp.layer || bp.cls) {
    if (bp.layer) spec.layer = bp.layer;
    if (bp.cls) spec.cls = bp.cls;
  } else {
    spec.file = bp.file;
    spec.line = bp.line + 1;
    if (bp.instance) spec.layer = bp.instance; // the backend intersects: that layer, at that line
  }
  if (bp.condition && bp.condition.kind !== 'always') {
    const condition: Condition = { kind: bp.condition.kind };
    if (bp.condition.threshold !== undefined) condition.threshold = bp.condition.threshold;
    if (bp.condition.expression !== undefined) condition.expression = bp.condition.expression;
    spec.condition = condition;
  }
  if (bp.hitCount !== undefined) spec.hitCount = bp.hitCount;
  return spec;
}

/** One edit of a document, in the coordinates before the edit. */
export interface LineChange {
  startLine: number;
  endLine: number;
  /** Number of line breaks in the inserted text. */
  insertedLines: number;
  /** The edit starts at or before the first non-blank character of its start line. */
  atLineStart: boolean;
}

/**
 * Where a breakpoint on `line` goes after `change`, like a sticky editor decoration:
 * lines above stay, lines below shift, a line whose text was pushed down by an insertion
 * at its start moves with it, and a line deleted by the change collapses onto its start.
 */
export function mapLine(line: number, change: LineChange): number {
  const delta = change.insertedLines - (change.endLine - change.startLine);
  if (line < change.startLine) return line;
  if (line > change.endLine) return line + delta;
  if (line === change.startLine) {
    const pureInsertion = change.startLine === change.endLine;
    return pureInsertion && change.atLineStart ? line + change.insertedLines : line;
  }
  // Inside the replaced range: its text is gone; keep the breakpoint on the first line of the edit.
  return change.startLine;
}

let idCounter = 0;
export function newBreakpointId(): string {
  idCounter += 1;
  return `lbp-${Date.now().toString(36)}-${idCounter}`;
}

/** The list of layer breakpoints of one workspace, with the operations the commands need. */
export class BreakpointModel {
  private items: LayerBreakpoint[];

  constructor(initial: LayerBreakpoint[] = []) {
    this.items = initial.filter(isLayerBreakpoint).map((bp) => ({ ...bp }));
  }

  all(): readonly LayerBreakpoint[] {
    return this.items;
  }

  get(id: string): LayerBreakpoint | undefined {
    return this.items.find((bp) => bp.id === id);
  }

  atLine(uri: string, line: number): LayerBreakpoint | undefined {
    return this.items.find((bp) => bp.uri === uri && bp.line === line && !bp.layer);
  }

  forLayer(layer: string): LayerBreakpoint | undefined {
    return this.items.find((bp) => bp.layer === layer);
  }

  /** The breakpoint that names exactly these layers (the same name, glob or class), if any. */
  forTarget(target: LayerTarget): LayerBreakpoint | undefined {
    return target.cls !== undefined ? this.items.find((bp) => bp.cls === target.cls) : this.forLayer(target.layer);
  }

  /**
   * A breakpoint on layers named by a name, glob or class, with its phases and condition; one
   * that names the same layers already is changed instead, so a target has one breakpoint.
   */
  setNamed(target: LayerTarget, settings: Pick<LayerBreakpoint, 'phases' | 'condition' | 'hitCount'>): LayerBreakpoint {
    const existing = this.forTarget(target);
    if (existing) {
      return this.update(existing.id, { ...settings, enabled: true }) ?? existing;
    }
    const named = target.cls !== undefined ? { cls: target.cls } : { layer: target.layer };
    return this.add({ uri: '', file: '', line: 0, ...named, ...settings, enabled: true });
  }

  inDocument(uri: string): LayerBreakpoint[] {
    return this.items.filter((bp) => bp.uri === uri);
  }

  add(bp: Omit<LayerBreakpoint, 'id'> & { id?: string }): LayerBreakpoint {
    const created: LayerBreakpoint = { ...bp, id: bp.id ?? newBreakpointId() };
    this.items.push(created);
    return created;
  }

  /**
   * Toggle on a line: add one with `choice` phases; if one exists with the same phases
   * remove it; with other phases, change them (so "toggle backward" on a forward
   * breakpoint switches it rather than deleting it). Returns what is there now.
   */
  toggleLine(uri: string, file: string, line: number, choice: PhaseChoice): LayerBreakpoint | undefined {
    const existing = this.atLine(uri, line);
    if (!existing) return this.add({ uri, file, line, phases: phasesOf(choice), enabled: true });
    if (phaseChoiceOf(existing.phases) === choice) {
      this.remove(existing.id);
      return undefined;
    }
    existing.phases = phasesOf(choice);
    existing.enabled = true;
    return existing;
  }

  /**
   * Remove the source-line breakpoints that resolved to `layer` (`layersOf` gives a breakpoint's
   * resolved layers). They check that layer's box in the Layers tree too, so unchecking the box
   * removes them — with every instance the line covers, as the gutter mark shows.
   */
  removeLineBreakpointsCovering(layer: string, layersOf: (id: string) => readonly string[]): LayerBreakpoint[] {
    const covering = this.items.filter((bp) => !bp.layer && layersOf(bp.id).includes(layer));
    for (const bp of covering) this.remove(bp.id);
    return covering;
  }

  /** Turn one phase of a layer breakpoint on or off (the Layers tree's forward/backward switches). */
  setLayerPhase(layer: string, location: { uri: string; file: string; line: number }, phase: 'forward' | 'backward', on: boolean): LayerBreakpoint | undefined {
    const existing = this.forLayer(layer);
    if (!existing) {
      if (!on) return undefined;
      return this.add({ ...location, layer, phases: [phase], enabled: true });
    }
    const phases = new Set(existing.phases);
    if (on) phases.add(phase);
    else phases.delete(phase);
    if (phases.size === 0) {
      this.remove(existing.id);
      return undefined;
    }
    existing.phases = [...phases].sort((a, b) => phaseOrder(a) - phaseOrder(b));
    existing.enabled = true;
    return existing;
  }

  update(id: string, patch: Partial<Omit<LayerBreakpoint, 'id'>>): LayerBreakpoint | undefined {
    const bp = this.get(id);
    if (!bp) return undefined;
    Object.assign(bp, patch);
    for (const [key, value] of Object.entries(patch)) {
      if (value === undefined) delete (bp as unknown as Record<string, unknown>)[key];
    }
    return bp;
  }

  remove(id: string): boolean {
    const before = this.items.length;
    this.items = this.items.filter((bp) => bp.id !== id);
    return this.items.length !== before;
  }

  clear(): number {
    const n = this.items.length;
    this.items = [];
    return n;
  }

  /**
   * Apply a document's edits (each in pre-edit coordinates) to its line breakpoints.
   * Returns true when any moved. Breakpoints that land on the same line are merged.
   */
  applyEdits(uri: string, changes: readonly LineChange[]): boolean {
    // Bottom-up, so that each change's coordinates are still valid when it is applied.
    const ordered = [...changes].sort((a, b) => b.startLine - a.startLine);
    let moved = false;
    for (const bp of this.items) {
      if (bp.uri !== uri) continue;
      let line = bp.line;
      for (const change of ordered) line = mapLine(line, change);
      if (line !== bp.line) {
        bp.line = line;
        moved = true;
      }
    }
    if (moved) {
      const seen = new Set<string>();
      this.items = this.items.filter((bp) => {
        if (bp.uri !== uri || bp.layer) return true;
        const key = `${bp.line}`;
        if (seen.has(key)) return false;
        seen.add(key);
        return true;
      });
    }
    return moved;
  }

  specs(): BreakpointSpec[] {
    return this.items.map(toSpec);
  }

  toJSON(): LayerBreakpoint[] {
    return this.items.map((bp) => ({ ...bp }));
  }
}

function phaseOrder(phase: Phase): number {
  return ['forward_pre', 'forward', 'backward', 'param_grad'].indexOf(phase);
}

/** Guards what comes back from workspaceState (an older or corrupted entry is dropped, not trusted). */
export function isLayerBreakpoint(value: unknown): value is LayerBreakpoint {
  const v = value as LayerBreakpoint;
  return (
    !!v && typeof v === 'object' && typeof v.id === 'string' && typeof v.uri === 'string' &&
    typeof v.file === 'string' && Number.isInteger(v.line) && v.line >= 0 && Array.isArray(v.phases) &&
    v.phases.length > 0 && typeof v.enabled === 'boolean' &&
    (v.layer === undefined || typeof v.layer === 'string') &&
    (v.cls === undefined || typeof v.cls === 'string') &&
    (v.instance === undefined || typeof v.instance === 'string') &&
    (v.allInstances === undefined || typeof v.allInstances === 'boolean')
  );
}

/**
 * What the processes made of each breakpoint: layers matched, or a problem when some
 * process knows models and none matched. `perProcess` is each process's resolution list
 * and whether it has any model yet.
 */
export function breakpointStatuses(
  ids: readonly string[],
  perProcess: readonly { hasModels: boolean; resolutions: readonly { id: string; layers: readonly string[]; error?: string }[] }[],
): Map<string, BreakpointStatus> {
  const out = new Map<string, BreakpointStatus>();
  for (const id of ids) {
    const layers = new Set<string>();
    let judged = false;
    let error: string | undefined;
    for (const p of perProcess) {
      const r = p.resolutions.find((x) => x.id === id);
      if (!r) continue;
      r.layers.forEach((l) => layers.add(l));
      if (r.error) error ??= r.error;
      if (p.hasModels || r.error) judged = true;
    }
    const status: BreakpointStatus = { layers: [...layers].sort() };
    if (layers.size === 0 && judged) status.problem = error ?? 'matches no layer of the models found';
    out.set(id, status);
  }
  return out;
}
