// The status bar menu of the per-step switches: Break on NaN/Inf, and break on exploding / vanishing
// gradients with their thresholds (an input box each; empty turns the switch off). The settings
// are the source of truth: this writes them and extension.ts applies them.

import * as vscode from 'vscode';
import type { GradientThresholds } from '../backend/hub';
import { parseThreshold } from '../common/thresholds';

export interface GradientMenuActions {
  breakOnNonFinite(): boolean;
  setBreakOnNonFinite(on: boolean): Promise<void>;
  thresholds(): GradientThresholds;
  setThreshold(which: 'exploding' | 'vanishing', value: number | undefined): Promise<void>;
}

const ABOUT = {
  exploding: { label: 'Break on exploding gradients', what: "a parameter's gradient norm goes above", sign: '>' },
  vanishing: { label: 'Break on vanishing gradients', what: "a layer's gradient norm goes below", sign: '<' },
} as const;

export async function showGradientMenu(actions: GradientMenuActions): Promise<void> {
  const t = actions.thresholds();
  const nan = actions.breakOnNonFinite();
  type Item = vscode.QuickPickItem & { run: () => Promise<void> };
  const items: Item[] = [
    { label: `$(error) Break on NaN/Inf`, description: nan ? 'on' : 'off', detail: 'Pause at the first layer that produces NaN or Inf.',
      run: () => actions.setBreakOnNonFinite(!nan) },
    ...(['exploding', 'vanishing'] as const).map((which) => ({
      label: `$(pulse) ${ABOUT[which].label}`,
      description: t[which] !== undefined ? `gradient norm ${ABOUT[which].sign} ${t[which]}` : 'off',
      detail: `Pause once per step when ${ABOUT[which].what} the threshold (checked at the end of the backward).`,
      run: () => askThreshold(which, t[which], actions),
    })),
  ];
  const pick = await vscode.window.showQuickPick(items, { title: 'Hookscope: break on NaN/Inf and on gradient norms' });
  await pick?.run();
}

async function askThreshold(which: 'exploding' | 'vanishing', current: number | undefined, actions: GradientMenuActions): Promise<void> {
  const text = await vscode.window.showInputBox({
    title: ABOUT[which].label,
    prompt: `Pause when ${ABOUT[which].what} this. Leave empty to turn it off.`,
    value: current !== undefined ? String(current) : which === 'exploding' ? '100' : '1e-7',
    validateInput: (value) => {
      const parsed = parseThreshold(value);
      return typeof parsed === 'string' ? parsed : undefined;
    },
  });
  if (text === undefined) return;  // dismissed
  const parsed = parseThreshold(text);
  if (typeof parsed !== 'string') await actions.setThreshold(which, parsed);
}
