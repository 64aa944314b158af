// "Add Layer Breakpoint by Name…": layers named by a qualified name, a glob (`*` for every layer)
// or a class, then the condition and the phase — the way VS Code adds a function breakpoint.
// While typing, the input box says which layers of the connected models the text selects.

import * as vscode from 'vscode';
import { editCondition, pickPhase } from './conditionEditor';
import { describeMatches, parseLayerTarget, suggestedPhase, type KnownLayer, type LayerTarget } from './layerTargets';
import { phaseChoiceOf, phasesOf, type LayerBreakpoint } from './model';

/** What the user asked for: the layers, and the breakpoint's phases and condition. */
export interface NamedBreakpointRequest {
  target: LayerTarget;
  settings: Pick<LayerBreakpoint, 'phases' | 'condition' | 'hitCount'>;
}

/** Ask for the layers, the condition and the phase; undefined when the user cancels any step. */
export async function askNamedBreakpoint(initial: string, known: () => readonly KnownLayer[]): Promise<NamedBreakpointRequest | undefined> {
  const target = await askTarget(initial, known);
  if (!target) return undefined;
  const draft: LayerBreakpoint = { id: '', uri: '', file: '', line: 0, ...target, phases: ['forward'], enabled: true };
  const patch = await editCondition(draft);
  if (!patch) return undefined;
  const condition = patch.condition;
  const phase = patch.phases ? phaseChoiceOf(patch.phases) : await pickPhase(suggestedPhase(condition));
  if (!phase) return undefined;
  return { target, settings: { phases: phasesOf(phase), condition, hitCount: patch.hitCount } };
}

function askTarget(initial: string, known: () => readonly KnownLayer[]): Promise<LayerTarget | undefined> {
  const box = vscode.window.createInputBox();
  box.title = 'Add Layer Breakpoint by Name';
  box.prompt = 'A layer (encoder.layers.0), a glob (* is every layer; blocks.*.attn), or a class (Linear)';
  box.value = initial;
  const preview = () => {
    const parsed = parseLayerTarget(box.value);
    box.validationMessage = 'error' in parsed
      ? { message: parsed.error, severity: vscode.InputBoxValidationSeverity.Error }
      : { message: describeMatches(parsed, known()), severity: vscode.InputBoxValidationSeverity.Info };
  };
  preview();
  return new Promise((resolve) => {
    let answer: LayerTarget | undefined;
    box.onDidChangeValue(preview);
    box.onDidAccept(() => {
      const parsed = parseLayerTarget(box.value);
      if ('error' in parsed) return;
      answer = parsed;
      box.hide();
    });
    box.onDidHide(() => {
      box.dispose();
      resolve(answer);
    });
    box.show();
  });
}
