// What the Tensors panel looks at and the requests behind it: the selected (or paused) layer,
// the `watch` that streams its summaries at a readable rate (only that layer: pay only for
// what is shown), `getSummaries` on selection, `render` for images and the interventions.
// Holds the PanelState (panelState.ts) and emits its view. No `vscode` import.
// Two webviews may show the panel (the side bar and the editor area): the same render asked
// by both for the same state is one backend request.

import { Emitter } from '../common/events';
import type { Logger, Tracer } from '../common/logger';
import { RequestError } from '../backend/connection';
import type { BackendHub } from '../backend/hub';
import type { ImageMeta, InterventionKind } from '../protocol/messages.gen';
import type { PanelTarget, PanelView, VisualKind } from '../protocol/webview';
import { initialPanelState, panelReducer, panelView, type PanelAction, type PanelState } from './panelState';

export interface RenderedImage {
  visual: VisualKind;
  png: Uint8Array;
  width: number;
  height: number;
  meta: ImageMeta;
  layer: string;
}

/** One picture of a render: an image, or a note (nothing to show, and why), or an error. */
export interface RenderedFigure {
  tensor?: string;
  image?: RenderedImage;
  note?: string;
  error?: string;
}

/** Views that picture one tensor of the layer: those take `tensors`. */
const PER_TENSOR_VIEWS: ReadonlySet<VisualKind> = new Set(['featureMap', 'histogram']);
const MAX_FIGURES = 4;

export class PanelController {
  private state: PanelState = initialPanelState();
  private readonly viewEmitter = new Emitter<PanelView>();
  /** The panel's view model changed. */
  readonly onDidChange = this.viewEmitter.event;
  /** Which layer each process currently streams ("" when none). */
  private readonly watched = new Map<string, string>();
  private readonly subscriptions: { dispose(): void }[] = [];
  /** Renders of the current state (target, stop, step), shared by the webviews showing the panel. */
  private readonly renders = new Map<string, Promise<RenderedImage>>();
  lastImage: RenderedImage | undefined;

  constructor(
    private readonly hub: BackendHub,
    private readonly log: Logger,
    private readonly trace: Tracer,
    private readonly rateHz: () => number,
  ) {
    this.subscriptions.push(
      hub.onDidChangeProcesses(() => this.dispatch({
        type: 'processes', processes: hub.processes().map((p) => ({ id: p.id, label: p.label, session: p.sessionKey })),
      })),
      hub.onHit(({ process, hit }) => {
        const cls = process.models.get(hit.model)?.tree.modules.find((m) => m.name === hit.layer)?.cls;
        this.dispatch({ type: 'hit', processId: process.id, processLabel: process.label, hit, cls });
        void this.fillFromBackend(process.id, hit.model, hit.layer);
      }),
      hub.onResumed(({ process }) => this.dispatch({ type: 'resumed', processId: process.id })),
      hub.onSummaries(({ process, event }) =>
        this.dispatch({ type: 'summaries', processId: process.id, model: event.model, layer: event.layer, phase: event.phase, step: event.step, tensors: event.tensors })),
      hub.onDidChangeInterventions((process) =>
        this.dispatch({ type: 'interventions', processId: process.id, interventions: process.interventions })),
      hub.onNotice(({ process, notice }) => {
        const level = notice.level === 'error' || notice.level === 'warning' ? notice.level : 'info';
        this.dispatch({ type: 'notice', notice: { level, message: notice.message, session: process.sessionKey } });
      }),
      hub.onDidExit(({ process, reason }) => {
        this.watched.delete(process.id);
        this.dispatch({ type: 'exited', processId: process.id, label: process.label, reason, session: process.sessionKey });
      }),
      hub.onDidConnect((process) => void hub.refreshInterventions(process.id).catch(() => undefined)),
    );
  }

  get view(): PanelView {
    return panelView(this.state);
  }

  get target(): PanelTarget | undefined {
    return this.state.target;
  }

  setBreakOnNonFinite(enabled: boolean): void {
    this.dispatch({ type: 'breakOnNonFinite', enabled });
  }

  /** Show a layer: stream its summaries and fetch what the backend already has. */
  async select(processId: string, model: string, layer: string): Promise<void> {
    const process = this.hub.process(processId);
    if (!process) return;
    const cls = process.models.get(model)?.tree.modules.find((m) => m.name === layer)?.cls;
    this.dispatch({ type: 'select', target: { processId, processLabel: process.label, model, layer, cls } });
    this.trace.event('panel.selected', { process: processId, model, layer });
    await Promise.all([this.updateWatches(), this.fillFromBackend(processId, model, layer)]);
  }

  /** Ask the backend for the last summaries of a layer (and its parameters' gradients). */
  private async fillFromBackend(processId: string, model: string, layer: string): Promise<void> {
    try {
      const result = await this.hub.request(processId, 'getSummaries', { layer, model });
      this.dispatch({
        type: 'summaries', processId, model, layer, step: result.step, tensors: result.tensors,
      });
    } catch (err) {
      this.log.debug(`getSummaries ${layer}: ${(err as Error).message}`);
    }
    if (this.state.paused?.processId === processId) await this.updateWatches();
  }

  /** Stream the target layer in its process, and nothing elsewhere. */
  async updateWatches(): Promise<void> {
    const target = this.state.target;
    await Promise.all(this.hub.processes().map(async (p) => {
      const want = target && target.processId === p.id && target.layer ? `${target.model}\u0000${target.layer}` : '';
      if ((this.watched.get(p.id) ?? '') === want) return;
      this.watched.set(p.id, want);
      try {
        if (want && target) {
          await this.hub.request(p.id, 'watch', { layers: [target.layer], model: target.model, rateHz: this.rateHz() });
        } else {
          await this.hub.request(p.id, 'watch', { layers: [] });
        }
      } catch (err) {
        this.watched.delete(p.id);
        this.log.debug(`[${p.label}] watch: ${(err as Error).message}`);
      }
    }));
  }

  /**
   * The pictures of `visual` for the current target: one per tensor asked for (feature maps and
   * histograms: at a backward stop the gradient and the layer's output), else one. A picture the
   * backend cannot make yet ('notAvailable') is a note, any other failure an error.
   */
  async renderFigures(visual: VisualKind, options: Record<string, unknown>, tensors?: readonly string[]): Promise<RenderedFigure[]> {
    const wanted: (string | undefined)[] = PER_TENSOR_VIEWS.has(visual) && tensors?.length ? tensors.slice(0, MAX_FIGURES) : [undefined];
    const figures: RenderedFigure[] = [];
    for (const tensor of wanted) {
      try {
        figures.push({ tensor, image: await this.render(visual, options, tensor) });
      } catch (err) {
        const message = (err as Error).message;
        figures.push(err instanceof RequestError && err.code === 'notAvailable' ? { tensor, note: message } : { tensor, error: message });
      }
    }
    const shown = figures.find((f) => f.image)?.image;
    if (shown) this.lastImage = shown;
    return figures;
  }

  /** Render one image of the current target. Throws RequestError with the backend's message on failure. */
  async render(visual: VisualKind, options: Record<string, unknown>, tensor?: string): Promise<RenderedImage> {
    const target = this.state.target;
    if (!target) throw new Error('Select a layer in the Layers view first.');
    const key = JSON.stringify([target.processId, target.model, target.layer, this.state.revision, this.state.hits, visual, tensor ?? null, options]);
    let pending = this.renders.get(key);
    if (!pending) {
      pending = this.requestRender(target, visual, options, tensor);
      this.renders.set(key, pending);
      pending.catch(() => this.renders.delete(key)); // a failure is asked again next time
    }
    return pending;
  }

  private async requestRender(target: PanelTarget, visual: VisualKind, options: Record<string, unknown>, tensor?: string): Promise<RenderedImage> {
    const started = Date.now();
    const result = await this.hub.request(target.processId, 'render', {
      view: visual, layer: target.layer || undefined, model: target.model, options, tensor,
    }, 60000);
    const image: RenderedImage = {
      visual, png: result.png, width: result.width, height: result.height, meta: result.meta, layer: target.layer,
    };
    const of = image.meta.of;
    this.trace.event('render', {
      visual, layer: target.layer, width: image.width, height: image.height, bytes: image.png.byteLength, ms: Date.now() - started,
      tensor: of?.tensor ?? null, step: of?.step ?? null, phase: of?.phase ?? null,
    });
    return image;
  }

  async addIntervention(kind: InterventionKind, channels?: number[], value?: number, where?: { processId: string; model: string; layer: string }): Promise<string> {
    const t = where ?? this.state.target;
    if (!t || !t.layer) throw new Error('Select a layer first.');
    const result = await this.hub.request(t.processId, 'addIntervention', { layer: t.layer, kind, model: t.model, channels, value });
    this.trace.event('intervention.added', { process: t.processId, layer: t.layer, kind, channels: channels ?? null, value: value ?? null, id: result.id });
    await this.hub.refreshInterventions(t.processId);
    return result.id;
  }

  async removeIntervention(id: string | undefined, processId?: string): Promise<number> {
    const targets = processId ? [processId] : id ? this.processesWithIntervention(id) : this.hub.processes().map((p) => p.id);
    let removed = 0;
    for (const p of targets) {
      const result = await this.hub.request(p, 'removeIntervention', id ? { intervention: id } : {});
      removed += result.removed;
      await this.hub.refreshInterventions(p);
    }
    this.trace.event('intervention.removed', { id: id ?? null, removed });
    return removed;
  }

  private processesWithIntervention(id: string): string[] {
    return this.hub.processes().filter((p) => p.interventions.some((i) => i.id === id)).map((p) => p.id);
  }

  private dispatch(action: PanelAction): void {
    const before = this.state;
    this.state = panelReducer(this.state, action);
    if (this.state === before) return;
    if (this.state.revision !== before.revision || this.state.hits !== before.hits) this.renders.clear(); // of another state
    if (action.type !== 'summaries') {
      const v = this.view;
      this.trace.event('panel.state', {
        status: v.status, headline: v.headline, layer: v.target?.layer ?? null, tensors: v.tensors.map((t) => t.path),
      });
    }
    this.viewEmitter.fire(this.view);
  }

  dispose(): void {
    for (const s of this.subscriptions.splice(0)) s.dispose();
    this.viewEmitter.dispose();
  }
}
