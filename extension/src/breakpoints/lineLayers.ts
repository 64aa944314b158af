// Which layers a source line means, asked of every connected process: the backend's one resolver
// (`resolveLayers`, backend/hookscope/engine/model_index.py: definition lines, container entries and
// call sites, also through local names), so a cursor command means the layers a breakpoint on that
// line would hook. No `vscode` import.

import type { BackendHub } from '../backend/hub';

export interface LayerRef {
  process: string;
  model: string;
  layer: string;
  cls: string;
}

/** Layers `file`:`line1` (1-based) means in each connected process; a process that cannot answer yet adds none. */
export async function layersAtLine(hub: Pick<BackendHub, 'processes' | 'request'>, file: string, line1: number): Promise<LayerRef[]> {
  const answers = await Promise.all(hub.processes().map(async (p) => {
    try {
      const { layers } = await hub.request(p.id, 'resolveLayers', { spec: { file, line: line1 } }, 10_000);
      return layers.map((l) => ({ process: p.id, model: l.model, layer: l.layer, cls: l.cls }));
    } catch {
      return []; // not started yet (no torch imported) or gone: it means no layer yet
    }
  }));
  return answers.flat();
}
