// The webview's own UI state (which visual, its options, the enlarged channel) and the
// render options it turns into (persisted with getState/setState); which tensors a view
// pictures, and what makes pictures stale. Pure; unit-tested.
// Option names are those of the backend's renderers (hookscope.visuals: feature_map's
// page/per_page/batch/shared_scale/sort_by_strength/channel, attention_map's head,
// grad_cam's target, histogram's log), which the engine passes through as keywords.

import type { GradientFlowOptions, ImageMeta } from '../src/protocol/messages.gen';
import type { PanelView, VisualKind } from '../src/protocol/webview';

export const CHANNELS_PER_PAGE = 64;

export interface UiState {
  visual: VisualKind;
  featureMap: { page: number; batch: number; sharedScale: boolean; sort: boolean };
  attention: { head: number | 'mean' };
  gradCam: { targetClass?: number };
  histogram: { log: boolean };
  /** The gradient-flow view's options a gradient-health stop asked for (metric, thresholds, the layer). */
  gradientFlow?: Partial<GradientFlowOptions>;
  /** The stop whose suggested view was taken (each stop switches the view once, then the user decides). */
  suggestedFor?: string;
  /** Channel shown large (feature map), if any. */
  enlarged?: number;
  showVisual: boolean;
}

export function initialUiState(): UiState {
  return {
    visual: 'featureMap',
    featureMap: { page: 0, batch: 0, sharedScale: false, sort: false },
    attention: { head: 'mean' },
    gradCam: {},
    histogram: { log: false },
    showVisual: true,
  };
}

export type UiAction =
  | { type: 'visual'; visual: VisualKind }
  | { type: 'page'; delta: number; pages?: number }
  | { type: 'batch'; batch: number }
  | { type: 'sharedScale'; on: boolean }
  | { type: 'sort'; on: boolean }
  | { type: 'head'; head: number | 'mean' }
  | { type: 'targetClass'; targetClass?: number }
  | { type: 'histogramLog'; log: boolean }
  | { type: 'enlarge'; channel?: number }
  | { type: 'showVisual'; on: boolean }
  | { type: 'suggested'; stop: string; visual: VisualKind; options: Partial<GradientFlowOptions> }
  | { type: 'layerChanged' };

export function uiReducer(state: UiState, action: UiAction): UiState {
  switch (action.type) {
    case 'visual':  // picked by hand: the plain view (a stop's thresholds and layer no longer apply)
      return { ...state, visual: action.visual, enlarged: undefined, gradientFlow: undefined };
    case 'suggested':
      if (state.suggestedFor === action.stop) return state;
      return {
        ...state, visual: action.visual, enlarged: undefined, suggestedFor: action.stop,
        gradientFlow: action.visual === 'gradientFlow' ? action.options : state.gradientFlow,
      };
    case 'page': {
      const last = action.pages !== undefined ? Math.max(0, action.pages - 1) : Number.MAX_SAFE_INTEGER;
      const page = Math.min(last, Math.max(0, state.featureMap.page + action.delta));
      return { ...state, featureMap: { ...state.featureMap, page }, enlarged: undefined };
    }
    case 'batch':
      return { ...state, featureMap: { ...state.featureMap, batch: Math.max(0, Math.floor(action.batch) || 0) } };
    case 'sharedScale':
      return { ...state, featureMap: { ...state.featureMap, sharedScale: action.on } };
    case 'sort':
      return { ...state, featureMap: { ...state.featureMap, sort: action.on, page: 0 }, enlarged: undefined };
    case 'head':
      return { ...state, attention: { head: action.head } };
    case 'targetClass':
      return { ...state, gradCam: { targetClass: action.targetClass } };
    case 'histogramLog':
      return { ...state, histogram: { log: action.log } };
    case 'enlarge':
      return { ...state, enlarged: action.channel };
    case 'showVisual':
      return { ...state, showVisual: action.on };
    case 'layerChanged':
      // A new layer has other channels: start from the first page again.
      return { ...state, featureMap: { ...state.featureMap, page: 0 }, enlarged: undefined };
  }
}

/** The `options` map of the backend's `render` request for the current UI state. */
export function renderOptions(state: UiState): Record<string, unknown> {
  switch (state.visual) {
    case 'featureMap': {
      const fm = state.featureMap;
      const options: Record<string, unknown> = {
        page: fm.page, per_page: CHANNELS_PER_PAGE, batch: fm.batch, shared_scale: fm.sharedScale, sort_by_strength: fm.sort,
      };
      if (state.enlarged !== undefined) options.channel = state.enlarged;
      return options;
    }
    case 'attention':
      return state.attention.head === 'mean' ? { head: 'mean' } : { head: state.attention.head };
    case 'gradCam':
      return state.gradCam.targetClass !== undefined ? { target: state.gradCam.targetClass } : {};
    case 'gradientFlow':
      return { ...(state.gradientFlow ?? {}) };
    case 'histogram':
      return { log: state.histogram.log };
  }
}

/** Number of channel pages for a channel count. */
export function pageCount(channels: number | undefined): number {
  return channels && channels > 0 ? Math.ceil(channels / CHANNELS_PER_PAGE) : 1;
}

/**
 * Which channel a click at (x, y) on the grid image hits, from the image meta the backend
 * returns ({grid: {rows, cols}, channels: [indices in display order]}); undefined off the grid.
 */
export function channelAt(meta: ImageMeta, x: number, y: number, width: number, height: number): number | undefined {
  const { grid, channels } = meta;
  if (!grid || !channels || !(grid.rows > 0 && grid.cols > 0 && width > 0 && height > 0)) return undefined;
  const col = Math.floor((x / width) * grid.cols);
  const row = Math.floor((y / height) * grid.rows);
  if (col < 0 || col >= grid.cols || row < 0 || row >= grid.rows) return undefined;
  return channels[row * grid.cols + col];
}

/** What the panel pictures for a view, in order: at a backward stop in the shown layer the gradient
 * reaching it and its output of the same step; at a parameter-gradient stop the gradient; at a
 * pre-forward stop the inputs; else the output. Undefined for views of the whole layer or model. */
export function figureTensors(visual: VisualKind, view: Pick<PanelView, 'stop' | 'target'>): string[] | undefined {
  if (visual !== 'featureMap' && visual !== 'histogram') return undefined;
  const { stop, target } = view;
  if (!stop || !target || stop.processId !== target.processId || stop.model !== target.model || stop.layer !== target.layer) {
    return ['output'];
  }
  switch (stop.phase) {
    case 'backward':
      return ['grad_output', 'output'];
    case 'param_grad':
      return ['grad'];
    case 'forward_pre':
      return ['inputs'];
    default:
      return ['output'];
  }
}

/** What the pictures on screen are of: when it changes (another layer, another stop, the end of a
 * session, another visual), they are cleared at once, not left standing until new ones come. */
export function pictureKey(visual: VisualKind, view: Pick<PanelView, 'stop' | 'target' | 'status'> | undefined): string {
  const t = view?.target;
  if (!view || !t || view.status === 'notConnected') return '';
  const s = view.stop;
  const moment = s ? `stop:${s.processId}/${s.model}/${s.layer}:${s.phase}:${s.step}:${s.hit}` : 'live';
  return `${t.processId}/${t.model}/${t.layer}|${moment}|${visual}`;
}
