// Messages between the extension host and the Tensors webview (both sides import this file).
// Host -> webview: the whole panel view model, rendered images, errors.
// Webview -> host: render requests, saving, interventions.

import type { TensorSummary } from './messages.gen';

export type PanelStatus = 'notConnected' | 'waiting' | 'paused' | 'live';

export type VisualKind = 'featureMap' | 'attention' | 'gradCam' | 'gradientFlow' | 'histogram';

export interface PanelTarget {
  processId: string;
  processLabel: string;
  model: string;
  layer: string;
  cls?: string;
}

export interface PanelIntervention {
  id: string;
  layer: string;
  kind: string;
  channels?: number[];
  value?: number;
}

export interface PanelNotice {
  level: 'info' | 'warning' | 'error';
  message: string;
}

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
  tensors: TensorSummary[];
  interventions: PanelIntervention[];
  notices: PanelNotice[];
  breakOnNonFinite: boolean;
  processes: number;
  /** Increases each time the target, pause or step changes (the webview re-renders its image then). */
  revision: number;
}

export type ToWebview =
  | { type: 'view'; view: PanelView }
  | { type: 'image'; seq: number; visual: VisualKind; dataUrl: string; width: number; height: number; meta: Record<string, unknown> }
  | { type: 'imageError'; seq: number; visual: VisualKind; message: string }
  | { type: 'saved'; path: string };

export type FromWebview =
  | { type: 'ready' }
  | { type: 'render'; seq: number; visual: VisualKind; options: Record<string, unknown> }
  | { type: 'savePng' }
  | { type: 'addIntervention'; kind: string; channels?: number[]; value?: number }
  | { type: 'removeIntervention'; id: string }
  | { type: 'removeAllInterventions' }
  | { type: 'toggleBreakOnNonFinite' };
