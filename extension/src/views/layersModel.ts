// The Layers tree as plain data: processes -> models -> nested modules, with the labels,
// badges and switches each row shows. Pure (no `vscode`), so the tree's content is unit-tested;
// layersTree.ts only turns these nodes into TreeItems.

import type { ModelTree } from '../protocol/messages.gen';

export interface HookCount {
  /** Hooks Hookscope installed on this module. */
  ours: number;
  /** Hooks the user's own code installed. */
  user: number;
}

export interface LayersInput {
  processes: readonly {
    id: string;
    label: string;
    models: ReadonlyMap<string, { tree: ModelTree; shapes: Record<string, number[]> }>;
    paused?: { model: string; layer: string; phase: string };
    interventions: readonly { layer: string; kind: string; model?: string }[];
  }[];
  /** Phases with a layer breakpoint, per "<processId>/<model>/<layer>" or per bare layer name. */
  breakpointPhases: (processId: string, model: string, layer: string) => { forward: boolean; backward: boolean };
  hooks?: (processId: string, model: string, layer: string) => HookCount | undefined;
}

export type LayerNodeKind = 'process' | 'model' | 'module';

export interface LayerNode {
  kind: LayerNodeKind;
  /** Stable id: "<process>", "<process>/<model>", "<process>/<model>/<layer>". */
  key: string;
  processId: string;
  model?: string;
  /** Qualified module name ('' is the root module, shown as the model row). */
  layer?: string;
  label: string;
  description: string;
  tooltip: string;
  cls?: string;
  file?: string;
  line?: number;
  forward: boolean;
  backward: boolean;
  interventions: number;
  paused: boolean;
  children: LayerNode[];
}

/** 1234 -> "1.2K", 3_400_000 -> "3.4M". */
export function formatCount(n: number): string {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${trim(n / 1e3)}K`;
  if (n < 1e9) return `${trim(n / 1e6)}M`;
  return `${trim(n / 1e9)}B`;
}

function trim(x: number): string {
  return x >= 100 ? x.toFixed(0) : x.toFixed(1).replace(/\.0$/, '');
}

export function formatShape(shape: readonly number[] | undefined): string {
  return shape ? `[${shape.join(', ')}]` : '';
}

/** Build the tree. With a single process its models are the top level; with several, each process is a row. */
export function buildLayerTree(input: LayersInput): LayerNode[] {
  const processNodes = input.processes.map((p) => {
    const models = [...p.models.values()].map((m) => modelNode(input, p, m.tree, m.shapes));
    const node: LayerNode = {
      kind: 'process', key: p.id, processId: p.id, label: p.label,
      description: `${models.length} model${models.length === 1 ? '' : 's'}${p.paused ? ' · paused' : ''}`,
      tooltip: p.label, forward: false, backward: false, interventions: p.interventions.length,
      paused: !!p.paused, children: models,
    };
    return node;
  });
  if (processNodes.length === 1) return processNodes[0].children;
  return processNodes;
}

function modelNode(
  input: LayersInput,
  p: LayersInput['processes'][number],
  tree: ModelTree,
  shapes: Record<string, number[]>,
): LayerNode {
  const byName = new Map<string, LayerNode>();
  const rootInfo = tree.modules.find((m) => m.name === '');
  const root: LayerNode = {
    kind: 'model', key: `${p.id}/${tree.id}`, processId: p.id, model: tree.id, layer: '',
    label: tree.name, description: `${tree.cls} · ${formatCount(tree.params)} params`,
    tooltip: `${tree.name}: ${tree.cls}, ${tree.params.toLocaleString('en-US')} parameters`,
    cls: tree.cls, file: rootInfo?.file, line: rootInfo?.line,
    forward: false, backward: false, interventions: 0, paused: false, children: [],
  };
  byName.set('', root);
  for (const m of tree.modules) {
    if (m.name === '') continue;
    const phases = input.breakpointPhases(p.id, tree.id, m.name);
    const hooks = input.hooks?.(p.id, tree.id, m.name);
    const interventions = p.interventions.filter((i) => i.layer === m.name && (!i.model || i.model === tree.id));
    const paused = !!p.paused && p.paused.model === tree.id && p.paused.layer === m.name;
    const shape = shapes[m.name];
    const parts = [m.cls];
    if (shape) parts.push(formatShape(shape));
    if (m.totalParams > 0) parts.push(`${formatCount(m.totalParams)} params`);
    if (hooks && hooks.ours + hooks.user > 0) parts.push(`⚓${hooks.ours + hooks.user}`);
    if (interventions.length > 0) parts.push(`✎ ${interventions.map((i) => i.kind).join(', ')}`);
    if (phases.forward || phases.backward) parts.push(`● ${[phases.forward ? 'fwd' : '', phases.backward ? 'bwd' : ''].filter(Boolean).join('+')}`);
    if (m.compiled) parts.push('compiled');
    const tooltip = [
      `${m.name} (${m.cls})`,
      shape ? `last output: ${formatShape(shape)}` : 'no forward seen yet',
      `${m.totalParams.toLocaleString('en-US')} parameters (${m.params.toLocaleString('en-US')} own)`,
      m.file ? `defined at ${m.file}:${m.line}` : 'definition line unknown',
      hooks ? `hooks: ${hooks.ours} Hookscope, ${hooks.user} yours` : '',
      interventions.length ? `interventions: ${interventions.map((i) => i.kind).join(', ')}` : '',
      m.compiled ? 'inside a torch.compile’d module: hooks may not fire' : '',
    ].filter(Boolean).join('\n');
    const node: LayerNode = {
      kind: 'module', key: `${p.id}/${tree.id}/${m.name}`, processId: p.id, model: tree.id, layer: m.name,
      label: lastComponent(m.name), description: parts.join(' · '), tooltip, cls: m.cls, file: m.file, line: m.line,
      forward: phases.forward, backward: phases.backward, interventions: interventions.length, paused, children: [],
    };
    byName.set(m.name, node);
    (byName.get(parentName(m.name)) ?? root).children.push(node);
  }
  return root;
}

export function parentName(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot < 0 ? '' : name.slice(0, dot);
}

function lastComponent(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot < 0 ? name : name.slice(dot + 1);
}

/** Depth-first search by key. */
export function findNode(nodes: readonly LayerNode[], key: string): LayerNode | undefined {
  for (const n of nodes) {
    if (n.key === key) return n;
    const found = findNode(n.children, key);
    if (found) return found;
  }
  return undefined;
}

/** The chain of keys from the top to `key` (for revealing a paused layer). */
export function pathTo(nodes: readonly LayerNode[], key: string): LayerNode[] | undefined {
  for (const n of nodes) {
    if (n.key === key) return [n];
    const sub = pathTo(n.children, key);
    if (sub) return [n, ...sub];
  }
  return undefined;
}
