// Messages between the extension host and the Tensors webview (both sides import this file).
// Host -> webview: the whole panel view model, rendered pictures (image, note or error each).
// Webview -> host: render requests, saving, interventions.

import type { GradientFlowOptions, ImageMeta, InterventionInfo, InterventionKind, NoticeLevel, TensorSummary, View } from './messages.gen';

export type PanelStatus = 'notConnected' | 'waiting' | 'paused' | 'live';

/** The views the panel's picture offers (protocol.VIEWS but 'tensor', which the Inspect view draws). */
export type VisualKind = Exclude<View, 'tensor'>;

export interface PanelTarget {
  processId: string;
  processLabel: string;
  model: string;
  layer: string;
  cls?: string;
}

export type PanelIntervention = InterventionInfo;

export interface PanelNotice {
  level: NoticeLevel;
  message: string;
  /** The debug session of the process it is about (a new session drops the ended ones'). */
  session?: string;
}

/** The stop the panel shows (set while a process is paused at a Hookscope hit). */
export interface PanelStop {
  processId: string;
  model: string;
  layer: string;
  phase: string;
  step: number;
  /** Counts stops: two stops of one layer, phase and step are still two pictures. */
  hit: number;
}

/** What a "step N" counts (protocol.STEP_MEANING): the tooltip wherever a step number shows. */
export const STEP_TOOLTIP =
  "step N: the model's (N+1)th forward call since Hookscope found the model (a breakpoint added mid-run " +
  'reads the same step as your loop), counted from 0 like `for step in range(n)`.';

/** Everything the panel shows, recomputed by the host on each change. */
export interface PanelView {
  status: PanelStatus;
  /** "Not connected", "Waiting for the first forward of conv1…", "Paused in layer1.0.conv1 (backward)". */
  headline: string;
  /** The stop reason, step, process. */
  detail: string;
  target?: PanelTarget;
  phase?: string;
  step?: number;
  /** Set while a process is paused in a layer breakpoint. */
  pausedReason?: string;
  /** The stop, while paused (its layer may differ from `target` when the user selected another). */
  stop?: PanelStop;
  /** At a break on NaN/Inf stop: when it stops again after Continue (the hit's `rearm`). */
  rearm?: string;
  /** At a break on NaN/Inf stop: the op and the user's line where the value was born (a link). */
  bornAt?: BornAt;
  /** A view the stop asks for (the hit's `view`/`viewOptions`: a gradient-health stop's gradient-norm
   * profile); the webview switches to it once per stop. */
  suggested?: { visual: VisualKind; options: Partial<GradientFlowOptions> };
  tensors: TensorSummary[];
  interventions: PanelIntervention[];
  notices: PanelNotice[];
  breakOnNonFinite: boolean;
  processes: number;
  /** Increases each time the target, pause or step changes (the webview re-renders its image then). */
  revision: number;
}

/** One picture of a render: an image (with what it is of in `meta.of`), or why there is none. */
export interface PanelFigure {
  /** The tensor asked for ('output', 'grad_output'...; absent for views of the whole layer or model). */
  tensor?: string;
  image?: { dataUrl: string; width: number; height: number; meta: ImageMeta };
  /** Nothing to show, and why ("no forward of X was seen in step 4"): not a failure. */
  note?: string;
  /** The render failed: the panel shows this instead of any image. */
  error?: string;
}

export type ToWebview =
  | { type: 'view'; view: PanelView }
  | { type: 'images'; seq: number; visual: VisualKind; figures: PanelFigure[] }
  | { type: 'saved'; path: string };

/** Where break on NaN/Inf saw the first non-finite value born: the hit's `op` (NanOrigin) when it names a
 * line of the user's code. */
export interface BornAt {
  op: string;
  file: string;
  line: number;
  /** "Standardize.forward" */
  fn?: string;
}

export type FromWebview =
  | { type: 'ready' }
  /** Render `visual` of the target; `tensors`: one picture each (featureMap, histogram), in order. */
  | { type: 'render'; seq: number; visual: VisualKind; options: Record<string, unknown>; tensors?: string[] }
  | { type: 'savePng' }
  | { type: 'addIntervention'; kind: InterventionKind; channels?: number[]; value?: number }
  | { type: 'removeIntervention'; id: string }
  | { type: 'removeAllInterventions' }
  | { type: 'toggleBreakOnNonFinite' }
  /** Open the user's source at the line break on NaN/Inf named. */
  | { type: 'openSource'; file: string; line: number };
