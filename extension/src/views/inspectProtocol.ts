// Messages between the extension host and the Tensors webview for the "Inspect" view
// ("Show in Hookscope"); both sides import this file. Kept apart from protocol/webview.ts so
// the layer panel's messages stay as they are.

import type { ImageMeta, TensorSummary } from '../protocol/messages.gen';

/** A tensor published from a paused frame. */
export interface InspectedTensor {
  handle: string;
  /** The expression the user picked (`batch['image']`, `x`...). */
  label: string;
  /** Where the tensor sits inside the value, when the value was a container. */
  path: string;
  processLabel: string;
  /** Debugger's own line for it (`tensor[2, 3] f32 cpu μ=…`). */
  line: string;
  summary: TensorSummary;
}

export type InspectToWebview =
  | { type: 'inspect'; tensor: InspectedTensor }
  | {
    type: 'inspectImage'; seq: number; handle: string; dataUrl: string; width: number; height: number;
    meta: ImageMeta; summary?: TensorSummary;
    /** float32 little-endian values of the displayed slice, base64. */
    values?: string; valuesShape?: number[]; valuesStep?: number[];
  }
  | { type: 'inspectError'; seq: number; handle: string; message: string }
  | { type: 'inspectReleased'; handle: string };

export type InspectFromWebview =
  | { type: 'inspectRender'; seq: number; handle: string; options: Record<string, unknown> }
  | { type: 'inspectClose' };

export function isInspectFromWebview(m: { type: string }): m is InspectFromWebview {
  return m.type === 'inspectRender' || m.type === 'inspectClose';
}

export function isInspectToWebview(m: { type: string }): m is InspectToWebview {
  return m.type === 'inspect' || m.type === 'inspectImage' || m.type === 'inspectError' || m.type === 'inspectReleased';
}
