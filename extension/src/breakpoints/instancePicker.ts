// Asks which layer a line breakpoint should stop in when the connected processes resolved it to
// several: a definition line used by every block (`self.mix = Mix()` in a Block class, three
// blocks) would otherwise stop three times per step. The QuickPick offers "All 3 layers" and each
// layer; the answer is kept on the breakpoint (`instance` / `allInstances`), sent with its line,
// and shown by its row in Layer Breakpoints. "Choose Instance…" on the row asks again.

import * as vscode from 'vscode';
import type { BackendHub } from '../backend/hub';
import type { ExtensionLog } from '../common/log';
import { Commands } from '../constants';
import type { LayerBreakpointManager } from './manager';
import { instanceChoices, needsInstanceChoice, type LayerBreakpoint } from './model';

export class InstancePicker implements vscode.Disposable {
  private readonly disposables: vscode.Disposable[] = [];
  /** Breakpoints whose question was dismissed (Escape) in this window: not asked again until re-chosen. */
  private readonly dismissed = new Set<string>();
  private asking = false;

  constructor(
    private readonly manager: LayerBreakpointManager,
    private readonly hub: BackendHub,
    private readonly log: ExtensionLog,
  ) {
    this.disposables.push(
      manager.onDidChange(() => void this.askNext()),
      vscode.commands.registerCommand(Commands.chooseBreakpointInstance, (arg: unknown) => this.chooseAgain(arg)),
    );
    void this.askNext();
  }

  /** Ask about the first breakpoint that needs it, one QuickPick at a time. */
  private async askNext(): Promise<void> {
    if (this.asking) return;
    const bp = this.manager.all().find((b) => !this.dismissed.has(b.id) && needsInstanceChoice(b, this.manager.status(b.id)));
    if (!bp) return;
    this.asking = true;
    try {
      await this.ask(bp);
    } finally {
      this.asking = false;
    }
    void this.askNext();
  }

  private async ask(bp: LayerBreakpoint): Promise<void> {
    const layers = this.manager.status(bp.id)?.layers ?? [];
    const where = `${vscode.workspace.asRelativePath(bp.file)}:${bp.line + 1}`;
    this.log.event('breakpoint.instanceAsked', { id: bp.id, layers });
    const pick = await vscode.window.showQuickPick(instanceChoices(layers, (layer) => this.classOf(layer)), {
      title: `Layer breakpoint at ${where}: this line stands for ${layers.length} layers`,
      placeHolder: 'Stop in which layer?',
      matchOnDescription: false,
      ignoreFocusOut: true,
    });
    const current = this.manager.model.get(bp.id);
    if (!current) return; // removed while the question was open
    if (!pick) {
      this.dismissed.add(bp.id);
      this.log.event('breakpoint.instanceDismissed', { id: bp.id });
      return;
    }
    this.log.event('breakpoint.instanceChosen', { id: bp.id, instance: pick.instance ?? null });
    this.manager.update(bp.id, pick.instance ? { instance: pick.instance, allInstances: undefined } : { instance: undefined, allInstances: true });
  }

  private classOf(layer: string): string | undefined {
    for (const process of this.hub.processes()) {
      for (const model of process.models.values()) {
        const cls = model.tree.modules.find((m) => m.name === layer)?.cls;
        if (cls) return cls;
      }
    }
    return undefined;
  }

  /** "Choose Instance…": forget the answer; the next resolution (every layer of the line again) asks. */
  private chooseAgain(arg: unknown): void {
    const bp = isBreakpoint(arg) ? this.manager.model.get(arg.id) : undefined;
    if (!bp || bp.layer || bp.cls) return;
    this.dismissed.delete(bp.id);
    this.manager.update(bp.id, { instance: undefined, allInstances: undefined });
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}

function isBreakpoint(arg: unknown): arg is LayerBreakpoint {
  return !!arg && typeof arg === 'object' && typeof (arg as LayerBreakpoint).id === 'string';
}
