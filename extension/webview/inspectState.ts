// State of the panel's "Inspect" view (a tensor shown with "Show in Hookscope"): which two
// axes are displayed, the position on every other axis (sliders), the feature-map grid's
// batch item and page, and the value readout under the pointer. Pure; unit-tested.

export type InspectMode = 'slice' | 'featureMap';

export const FM_PER_PAGE = 64;

export interface InspectUi {
  /** Handle of the tensor these settings belong to (a new tensor starts afresh). */
  handle: string;
  shape: number[];
  mode: InspectMode;
  /** [row axis, column axis] of the displayed slice. */
  axes: [number, number];
  /** Position on each axis that is not displayed. */
  index: Record<number, number>;
  batch: number;
  page: number;
  channel?: number;
}

export type InspectAction =
  | { type: 'axis'; which: 0 | 1; axis: number }
  | { type: 'position'; axis: number; position: number }
  | { type: 'mode'; mode: InspectMode }
  | { type: 'batch'; batch: number }
  | { type: 'page'; delta: number; pages?: number }
  | { type: 'channel'; channel?: number };

/** Whether the feature-map grid applies: (N, C, H, W). */
export function canFeatureMap(shape: readonly number[]): boolean {
  return shape.length === 4;
}

export function initialInspectUi(handle: string, shape: readonly number[]): InspectUi {
  const nd = shape.length;
  const axes: [number, number] = nd >= 2 ? [nd - 2, nd - 1] : [0, 1];
  const ui: InspectUi = { handle, shape: [...shape], mode: 'slice', axes, index: {}, batch: 0, page: 0 };
  return withIndex(ui);
}

/** The axes not displayed, in order. */
export function otherAxes(ui: Pick<InspectUi, 'shape' | 'axes'>): number[] {
  if (ui.shape.length < 2) return [];
  return ui.shape.map((_, a) => a).filter((a) => a !== ui.axes[0] && a !== ui.axes[1]);
}

function clamp(value: number, size: number): number {
  const v = Math.floor(Number.isFinite(value) ? value : 0);
  return Math.min(Math.max(0, v), Math.max(0, size - 1));
}

/** Keep a position for exactly the non-displayed axes (0 for a newly hidden one). */
function withIndex(ui: InspectUi): InspectUi {
  const index: Record<number, number> = {};
  for (const a of otherAxes(ui)) index[a] = clamp(ui.index[a] ?? 0, ui.shape[a]);
  return { ...ui, index };
}

export function inspectReducer(ui: InspectUi, action: InspectAction): InspectUi {
  const nd = ui.shape.length;
  switch (action.type) {
    case 'axis': {
      if (nd < 2 || !Number.isInteger(action.axis) || action.axis < 0 || action.axis >= nd) return ui;
      const axes: [number, number] = [...ui.axes];
      const other = action.which === 0 ? 1 : 0;
      if (axes[other] === action.axis) axes[other] = axes[action.which]; // choosing the other one swaps them
      axes[action.which] = action.axis;
      return withIndex({ ...ui, axes });
    }
    case 'position':
      if (!(action.axis in ui.index)) return ui;
      return { ...ui, index: { ...ui.index, [action.axis]: clamp(action.position, ui.shape[action.axis]) } };
    case 'mode':
      if (action.mode === 'featureMap' && !canFeatureMap(ui.shape)) return ui;
      return { ...ui, mode: action.mode, channel: undefined };
    case 'batch':
      return { ...ui, batch: clamp(action.batch, ui.shape[0] ?? 1) };
    case 'page': {
      const pages = action.pages ?? Math.max(1, Math.ceil((ui.shape[1] ?? 1) / FM_PER_PAGE));
      return { ...ui, page: Math.min(Math.max(0, ui.page + action.delta), pages - 1), channel: undefined };
    }
    case 'channel':
      return { ...ui, channel: action.channel === undefined ? undefined : clamp(action.channel, ui.shape[1] ?? 1) };
  }
}

/** The `options` of the backend's `inspectValue` for this state. */
export function inspectOptions(ui: InspectUi): Record<string, unknown> {
  if (ui.mode === 'featureMap') {
    const options: Record<string, unknown> = { view: 'featureMap', batch: ui.batch, page: ui.page, per_page: FM_PER_PAGE };
    if (ui.channel !== undefined) options.channel = ui.channel;
    return options;
  }
  const index: Record<string, number> = {};
  for (const [axis, position] of Object.entries(ui.index)) index[axis] = position;
  return ui.shape.length >= 2 ? { view: 'slice', axes: [...ui.axes], index } : { view: 'slice' };
}

/** Rows and columns of the displayed slice. */
export function sliceShape(ui: Pick<InspectUi, 'shape' | 'axes'>): [number, number] {
  if (ui.shape.length === 0) return [1, 1];
  if (ui.shape.length === 1) return [1, ui.shape[0]];
  return [ui.shape[ui.axes[0]], ui.shape[ui.axes[1]]];
}

export interface SliceValues {
  values: Float32Array;
  shape: [number, number];
  step: [number, number];
}

export interface Readout {
  row: number;
  col: number;
  value: number;
  /** False when the slice is large and the value is that of the nearest sent element. */
  exact: boolean;
}

/** Decode the backend's float32 little-endian `values` (base64 in the webview message). */
export function decodeValues(base64: string, shape: readonly number[], step: readonly number[]): SliceValues | undefined {
  if (shape.length !== 2 || step.length !== 2) return undefined;
  const binary = atob(base64);
  const n = shape[0] * shape[1];
  if (binary.length !== n * 4) return undefined;
  const view = new DataView(new ArrayBuffer(binary.length));
  for (let i = 0; i < binary.length; i++) view.setUint8(i, binary.charCodeAt(i));
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = view.getFloat32(i * 4, true);
  return { values, shape: [shape[0], shape[1]], step: [Math.max(1, step[0]), Math.max(1, step[1])] };
}

/**
 * The value under the pointer at fractions (fx, fy) of the image's width and height, for a
 * slice of `rows` x `cols` elements: the exact element when every value was sent, else the
 * nearest sent one (and its own index).
 */
export function valueAt(v: SliceValues, rows: number, cols: number, fx: number, fy: number): Readout | undefined {
  if (!(fx >= 0 && fx < 1 && fy >= 0 && fy < 1)) return undefined;
  const row = Math.min(rows - 1, Math.floor(fy * rows));
  const col = Math.min(cols - 1, Math.floor(fx * cols));
  const i = Math.min(v.shape[0] - 1, Math.round(row / v.step[0]));
  const j = Math.min(v.shape[1] - 1, Math.round(col / v.step[1]));
  return { row: i * v.step[0], col: j * v.step[1], value: v.values[i * v.shape[1] + j], exact: v.step[0] === 1 && v.step[1] === 1 };
}

/** "NaN", "+Inf", or the number with 6 significant digits. */
export function formatValue(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '+Inf' : '-Inf';
  return String(Number(x.toPrecision(6)));
}
