// Where the Tensors panel shows itself when the program pauses: the Run and Debug view's
// Tensors section, or the panel in the editor area beside the code. At a stop the side bar
// is shared with Variables, Watch, Call Stack and Breakpoints, which leaves the section a
// strip too short for a figure; a stop that comes with one (a gradient-health stop's
// per-layer gradient-norm profile) opens the wide panel, as the setting says. Pure.

import type { HitMessage } from '../protocol/messages.gen';

/** The `hookscope.openTensorsBesideAtStop` setting's values. */
export type BesideAtStop = 'figures' | 'always' | 'never';

export const BESIDE_AT_STOP_VALUES: readonly BesideAtStop[] = ['figures', 'always', 'never'];

export function besideAtStop(value: unknown): BesideAtStop {
  return BESIDE_AT_STOP_VALUES.includes(value as BesideAtStop) ? (value as BesideAtStop) : 'figures';
}

/** Where a pausing hit shows the panel: 'side' reveals the Run and Debug view's section; 'editor'
 * reveals it too and opens (or brings forward) the wide panel beside the code. */
export function placeAtStop(setting: BesideAtStop, hit: Pick<HitMessage, 'view'>): 'editor' | 'side' {
  if (setting === 'always') return 'editor';
  if (setting === 'figures' && hit.view !== undefined) return 'editor';
  return 'side';
}
