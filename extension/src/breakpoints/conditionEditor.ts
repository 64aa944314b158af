// Editing a layer breakpoint's phases and condition with a QuickPick and an InputBox,
// the way VS Code edits its own conditional breakpoints.

import * as vscode from 'vscode';
import type { BreakpointCondition, LayerBreakpoint, PhaseChoice } from './model';
import { phaseChoiceOf, phasesOf, targetLabel } from './model';

interface ConditionPick extends vscode.QuickPickItem {
  kind2: BreakpointCondition['kind'] | 'hitCount' | 'phase';
}

const PICKS: ConditionPick[] = [
  { kind2: 'always', label: '$(circle-filled) Always', description: 'pause every time the layer runs' },
  { kind2: 'nonfinite', label: '$(error) NaN or Inf', description: 'outputs or gradients contain a non-finite value' },
  { kind2: 'grad_norm_below', label: '$(arrow-down) Gradient norm below…', description: 'vanishing gradients' },
  { kind2: 'grad_norm_above', label: '$(arrow-up) Gradient norm above…', description: 'exploding gradients' },
  { kind2: 'absmax_above', label: '$(flame) Abs-max above…', description: 'fp16/bf16 overflow risk' },
  { kind2: 'expression', label: '$(symbol-variable) Expression…', description: 'Python over the hook locals (output, grad_output, module…)' },
  { kind2: 'hitCount', label: '$(list-ordered) Hit count…', description: 'pause on the Nth hit only' },
  { kind2: 'phase', label: '$(debug-step-over) Phase…', description: 'forward, backward or both' },
];

/** Ask for a new condition (or phases / hit count); returns the patch, or undefined when cancelled. */
export async function editCondition(bp: LayerBreakpoint): Promise<Partial<Omit<LayerBreakpoint, 'id'>> | undefined> {
  const current = bp.condition?.kind ?? 'always';
  const pick = await vscode.window.showQuickPick(
    PICKS.map((p) => ({ ...p, picked: p.kind2 === current, detail: p.kind2 === current ? 'current' : undefined })),
    { title: `Layer breakpoint ${targetLabel(bp) ?? `line ${bp.line + 1}`}`, placeHolder: 'Pause when…' },
  );
  if (!pick) return undefined;
  switch (pick.kind2) {
    case 'always':
      return { condition: undefined };
    case 'nonfinite':
      return { condition: { kind: 'nonfinite' } };
    case 'grad_norm_below':
    case 'grad_norm_above':
    case 'absmax_above': {
      const threshold = await askNumber(pick.label.replace(/^\$\([^)]*\)\s*/, '').replace('…', ''),
        bp.condition?.kind === pick.kind2 ? bp.condition.threshold : pick.kind2 === 'grad_norm_below' ? 1e-6 : 1e3);
      return threshold === undefined ? undefined : { condition: { kind: pick.kind2, threshold } };
    }
    case 'expression': {
      const expression = await vscode.window.showInputBox({
        title: 'Pause when this Python expression is true',
        prompt: 'Evaluated in the hook: output, inputs, grad_output, grad_input, module, layer, stats',
        value: bp.condition?.kind === 'expression' ? bp.condition.expression : 'output.abs().max() > 100',
        validateInput: (v) => (v.trim() ? undefined : 'Enter an expression'),
      });
      return expression === undefined ? undefined : { condition: { kind: 'expression', expression: expression.trim() } };
    }
    case 'hitCount': {
      const value = await vscode.window.showInputBox({
        title: 'Pause on the Nth hit only (empty: every hit)',
        value: bp.hitCount !== undefined ? String(bp.hitCount) : '',
        validateInput: (v) => (v.trim() === '' || /^[1-9]\d*$/.test(v.trim()) ? undefined : 'A positive whole number'),
      });
      if (value === undefined) return undefined;
      return { hitCount: value.trim() === '' ? undefined : Number(value) };
    }
    case 'phase': {
      const choice = await pickPhase(phaseChoiceOf(bp.phases));
      return choice ? { phases: phasesOf(choice) } : undefined;
    }
  }
}

/** Forward, backward or both; `current` (the breakpoint's, or the one suggested) comes first, focused. */
export async function pickPhase(current?: PhaseChoice): Promise<PhaseChoice | undefined> {
  const items: (vscode.QuickPickItem & { value: PhaseChoice })[] = [
    { value: 'forward', label: 'Forward', description: 'after the layer computes its output' },
    { value: 'backward', label: 'Backward', description: 'when its gradients are computed' },
    { value: 'both', label: 'Forward and backward' },
  ];
  const ordered = [...items.filter((i) => i.value === current), ...items.filter((i) => i.value !== current)];
  const pick = await vscode.window.showQuickPick(ordered, { title: 'Layer breakpoint phase' });
  return pick?.value;
}

async function askNumber(title: string, initial: number | undefined): Promise<number | undefined> {
  const value = await vscode.window.showInputBox({
    title,
    value: initial !== undefined ? String(initial) : '',
    validateInput: (v) => (Number.isFinite(Number(v)) && v.trim() !== '' ? undefined : 'Enter a number, e.g. 1e-6'),
  });
  return value === undefined ? undefined : Number(value);
}
