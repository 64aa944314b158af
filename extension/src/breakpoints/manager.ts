// Layer breakpoints in the editor: persisted per workspace, drawn in the gutter with
// Hookscope's own icon, moved with the text when lines are inserted or deleted, sent to
// every connected process, and marked with what the processes resolved them to (layers,
// or a warning when a breakpoint matches no layer).

import * as vscode from 'vscode';
import { resolutionsJudgeable, type BackendHub } from '../backend/hub';
import type { ExtensionLog } from '../common/log';
import { StateKeys } from '../constants';
import { writeBreakpointHover } from './hoverText';
import type { LayerTarget } from './layerTargets';
import { layersAtLine, type LayerRef } from './lineLayers';
import {
  BreakpointModel,
  breakpointStatuses,
  phaseChoiceOf,
  type BreakpointStatus,
  type LayerBreakpoint,
  type LineChange,
  type PhaseChoice,
} from './model';

export class LayerBreakpointManager implements vscode.Disposable {
  readonly model: BreakpointModel;
  private statuses = new Map<string, BreakpointStatus>();
  private readonly disposables: vscode.Disposable[] = [];
  private readonly changeEmitter = new vscode.EventEmitter<void>();
  /** The breakpoints or their statuses changed. */
  readonly onDidChange = this.changeEmitter.event;
  private readonly decoration: vscode.TextEditorDecorationType;
  private readonly disabledDecoration: vscode.TextEditorDecorationType;
  private readonly warningDecoration: vscode.TextEditorDecorationType;
  private syncTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly hub: BackendHub,
    private readonly log: ExtensionLog,
  ) {
    this.model = new BreakpointModel(context.workspaceState.get<LayerBreakpoint[]>(StateKeys.layerBreakpoints, []));
    const icon = (name: string) => vscode.Uri.joinPath(context.extensionUri, 'media', name);
    const ruler = new vscode.ThemeColor('debugIcon.breakpointForeground');
    this.decoration = vscode.window.createTextEditorDecorationType({
      gutterIconPath: icon('layer-breakpoint.svg'), gutterIconSize: 'contain',
      overviewRulerColor: ruler, overviewRulerLane: vscode.OverviewRulerLane.Left,
      rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
    });
    this.disabledDecoration = vscode.window.createTextEditorDecorationType({
      gutterIconPath: icon('layer-breakpoint-disabled.svg'), gutterIconSize: 'contain',
    });
    this.warningDecoration = vscode.window.createTextEditorDecorationType({
      gutterIconPath: icon('layer-breakpoint-unverified.svg'), gutterIconSize: 'contain',
      overviewRulerColor: new vscode.ThemeColor('editorWarning.foreground'), overviewRulerLane: vscode.OverviewRulerLane.Left,
    });
    this.disposables.push(
      this.changeEmitter, this.decoration, this.disabledDecoration, this.warningDecoration,
      vscode.workspace.onDidChangeTextDocument((e) => this.onDocumentChanged(e)),
      vscode.window.onDidChangeVisibleTextEditors(() => this.decorateAll()),
      hub.onDidResolveBreakpoints(() => this.recomputeStatuses()),
      hub.onDidChangeProcesses(() => this.recomputeStatuses()),
    );
    this.decorateAll();
    this.scheduleSync();
  }

  all(): readonly LayerBreakpoint[] {
    return this.model.all();
  }

  status(id: string): BreakpointStatus | undefined {
    return this.statuses.get(id);
  }

  /** Toggle a breakpoint on a line (the command, the code lens, the context menu). */
  toggleAt(uri: vscode.Uri, line: number, choice: PhaseChoice): LayerBreakpoint | undefined {
    const bp = this.model.toggleLine(uri.toString(), uri.fsPath, line, choice);
    this.log.event('breakpoint.toggled', { uri: uri.toString(), line, phase: choice, present: !!bp, id: bp?.id ?? null });
    this.changed();
    return bp;
  }

  /** The Layers tree's forward/backward switches: a breakpoint on a layer name. */
  setLayerPhase(layer: string, location: { uri: vscode.Uri; line: number } | undefined, phase: 'forward' | 'backward', on: boolean): void {
    const loc = location
      ? { uri: location.uri.toString(), file: location.uri.fsPath, line: location.line }
      : { uri: '', file: '', line: 0 };
    const bp = this.model.setLayerPhase(layer, loc, phase, on);
    const removed = on ? [] : this.model.removeLineBreakpointsCovering(layer, (id) => this.statuses.get(id)?.layers ?? []);
    this.log.event('breakpoint.layerPhase', { layer, phase, on, id: bp?.id ?? null, removedLineBreakpoints: removed.map((b) => b.id) });
    this.changed();
  }

  /** "Add Layer Breakpoint by Name…": layers named by a name, glob or class (one breakpoint per target). */
  setNamed(target: LayerTarget, settings: Pick<LayerBreakpoint, 'phases' | 'condition' | 'hitCount'>): LayerBreakpoint {
    const bp = this.model.setNamed(target, settings);
    this.log.event('breakpoint.named', { id: bp.id, layer: bp.layer ?? null, cls: bp.cls ?? null, phases: bp.phases, condition: bp.condition ?? null });
    this.changed();
    return bp;
  }

  update(id: string, patch: Partial<Omit<LayerBreakpoint, 'id'>>): void {
    if (this.model.update(id, patch)) this.changed();
  }

  remove(id: string): void {
    if (this.model.remove(id)) {
      this.log.event('breakpoint.removed', { id });
      this.changed();
    }
  }

  removeAll(): number {
    const n = this.model.clear();
    if (n) {
      this.log.event('breakpoint.removedAll', { count: n });
      this.changed();
    }
    return n;
  }

  /** Layers a line (0-based) of a document stands for, in every connected process's models. */
  layersAt(document: vscode.TextDocument, line: number): Promise<LayerRef[]> {
    return layersAtLine(this.hub, document.uri.fsPath, line + 1);
  }

  /** Phases set on a layer by breakpoints that resolved to it (or name it). */
  phasesOnLayer(layer: string): { forward: boolean; backward: boolean } {
    let forward = false;
    let backward = false;
    for (const bp of this.model.all()) {
      if (!bp.enabled) continue;
      const matches = bp.layer === layer || (this.statuses.get(bp.id)?.layers ?? []).includes(layer);
      if (!matches) continue;
      const choice = phaseChoiceOf(bp.phases);
      forward ||= choice !== 'backward';
      backward ||= choice !== 'forward';
    }
    return { forward, backward };
  }

  private changed(): void {
    void this.context.workspaceState.update(StateKeys.layerBreakpoints, this.model.toJSON());
    this.recomputeStatuses(false);
    this.decorateAll();
    this.changeEmitter.fire();
    this.scheduleSync();
  }

  /** Send the whole set to every process, coalescing bursts of edits. */
  private scheduleSync(): void {
    clearTimeout(this.syncTimer);
    this.syncTimer = setTimeout(() => {
      const specs = this.model.specs();
      this.log.event('breakpoints.sent', { count: specs.length, processes: this.hub.processes().length, specs });
      void this.hub.setBreakpoints(specs);
    }, 50);
  }

  private recomputeStatuses(fire = true): void {
    const perProcess = this.hub.processes().map((p) => ({ hasModels: resolutionsJudgeable(p), resolutions: p.resolutions }));
    this.statuses = breakpointStatuses(this.model.all().map((bp) => bp.id), perProcess);
    for (const bp of this.model.all()) {
      const problem = this.statuses.get(bp.id)?.problem;
      if (problem) this.log.event('breakpoint.unresolved', { id: bp.id, file: bp.file, line: bp.line, layer: bp.layer ?? null, problem });
    }
    if (fire) {
      this.decorateAll();
      this.changeEmitter.fire();
    }
  }

  private onDocumentChanged(event: vscode.TextDocumentChangeEvent): void {
    const uri = event.document.uri.toString();
    if (event.contentChanges.length === 0 || this.model.inDocument(uri).length === 0) return;
    const changes: LineChange[] = event.contentChanges.map((c) => {
      const startLine = c.range.start.line;
      // After the edit, the start line begins with the text that stood before the edit's start column.
      const prefix = event.document.lineAt(Math.min(startLine, event.document.lineCount - 1)).text.slice(0, c.range.start.character);
      return {
        startLine,
        endLine: c.range.end.line,
        insertedLines: (c.text.match(/\n/g) ?? []).length,
        atLineStart: prefix.trim() === '',
      };
    });
    if (this.model.applyEdits(uri, changes)) this.changed();
  }

  private decorateAll(): void {
    for (const editor of vscode.window.visibleTextEditors) this.decorate(editor);
  }

  private decorate(editor: vscode.TextEditor): void {
    const uri = editor.document.uri.toString();
    const normal: vscode.DecorationOptions[] = [];
    const disabled: vscode.DecorationOptions[] = [];
    const warning: vscode.DecorationOptions[] = [];
    for (const bp of this.model.inDocument(uri)) {
      if (bp.line >= editor.document.lineCount) continue;
      const status = this.statuses.get(bp.id);
      const hover = new vscode.MarkdownString('', true);
      writeBreakpointHover(hover, bp, status);
      const option = { range: new vscode.Range(bp.line, 0, bp.line, 0), hoverMessage: hover };
      (!bp.enabled ? disabled : status?.problem ? warning : normal).push(option);
    }
    editor.setDecorations(this.decoration, normal);
    editor.setDecorations(this.disabledDecoration, disabled);
    editor.setDecorations(this.warningDecoration, warning);
  }

  dispose(): void {
    clearTimeout(this.syncTimer);
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
