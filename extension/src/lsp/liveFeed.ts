// What the language server is told about a running session: per layer, the last output shape and
// summary (mean, std, NaN count, gradient norm) with the file/line that created it. Pure: no `vscode`.
//
// Fed from the hub's model trees and shapes and from the summaries of hits and watched layers;
// `payload()` builds the `hookscope/liveSummaries` notification (see README.md in this folder).

import type { ModelTree, TensorSummary } from '../protocol/messages.gen';
import type { LiveLayerSummary, LiveSummariesPayload } from './client';

/** The part of a connected process the feed reads (a subset of the hub's ProcessState). */
export interface FeedProcess {
  id: string;
  models: ReadonlyMap<string, { tree: ModelTree; shapes: Record<string, number[]> }>;
}

interface LayerStats {
  mean?: number;
  std?: number;
  nan?: number;
  gradNorm?: number;
}

export class LiveLayerFeed {
  /** `process/model` -> layer -> the latest stats seen in a hit or a watched layer's summaries. */
  private readonly stats = new Map<string, Map<string, LayerStats>>();

  /** Remember what these summaries say of `layer` (output stats from forward, gradient norm from backward). */
  record(process: string, model: string, layer: string, tensors: readonly TensorSummary[]): void {
    const key = `${process}/${model}`;
    let layers = this.stats.get(key);
    if (!layers) {
      layers = new Map();
      this.stats.set(key, layers);
    }
    const entry = { ...layers.get(layer) };
    const output = tensors.find((t) => t.path === 'output' || t.path.startsWith('output'));
    if (output) {
      entry.mean = output.mean;
      entry.std = output.std;
      entry.nan = output.nan;
    }
    const grad = tensors.find((t) => t.path.startsWith('grad_output'));
    if (grad && grad.norm !== undefined) entry.gradNorm = grad.norm;
    layers.set(layer, entry);
  }

  /** Forget everything (the session ended). */
  clear(): void {
    this.stats.clear();
  }

  /**
   * One summary per module that has something to say, keyed by qualified name. With several
   * processes (DDP ranks, workers) the first one that knows a layer wins: ranks run the same model.
   */
  payload(processes: readonly FeedProcess[]): LiveSummariesPayload {
    const layers: Record<string, LiveLayerSummary> = {};
    for (const process of processes) {
      for (const [modelId, { tree, shapes }] of process.models) {
        const stats = this.stats.get(`${process.id}/${modelId}`);
        for (const module of tree.modules) {
          if (module.name in layers || !module.file || !module.line) continue;
          const shape = shapes[module.name];
          const seen = stats?.get(module.name);
          if (!shape && !seen) continue;
          layers[module.name] = { file: module.file, line: module.line, ...(shape ? { shape } : {}), ...seen };
        }
      }
    }
    return { layers };
  }
}
