// The "Layer Breakpoints" view: one row per breakpoint with an enable checkbox, its location,
// phases and condition, the layers it matched, and a warning icon when it matches none.

import * as path from 'node:path';
import * as vscode from 'vscode';
import { Commands, Views } from '../constants';
import { writeProblemTooltip } from './hoverText';
import type { LayerBreakpointManager } from './manager';
import { describeCondition, describeInstances, phaseChoiceOf, targetLabel, type LayerBreakpoint } from './model';

export class LayerBreakpointsView implements vscode.TreeDataProvider<LayerBreakpoint>, vscode.Disposable {
  private readonly changeEmitter = new vscode.EventEmitter<LayerBreakpoint | undefined>();
  readonly onDidChangeTreeData = this.changeEmitter.event;
  readonly view: vscode.TreeView<LayerBreakpoint>;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly manager: LayerBreakpointManager) {
    this.view = vscode.window.createTreeView(Views.layerBreakpoints, { treeDataProvider: this, showCollapseAll: false });
    this.disposables.push(
      this.view,
      this.changeEmitter,
      manager.onDidChange(() => this.refresh()),
      this.view.onDidChangeCheckboxState((e) => {
        for (const [bp, state] of e.items) manager.update(bp.id, { enabled: state === vscode.TreeItemCheckboxState.Checked });
      }),
    );
    this.refresh();
  }

  refresh(): void {
    const n = this.manager.all().length;
    this.view.description = n ? `${n}` : undefined;
    this.view.message = n
      ? undefined
      : 'No layer breakpoints. Put the cursor on a layer line and run "Hookscope: Toggle Layer Breakpoint" (Ctrl+Alt+F9), or press + to stop in layers by name, glob (*) or class.';
    this.changeEmitter.fire(undefined);
  }

  getChildren(element?: LayerBreakpoint): LayerBreakpoint[] {
    if (element) return [];
    return [...this.manager.all()].sort((a, b) => (a.file + a.line).localeCompare(b.file + b.line) || a.line - b.line);
  }

  getTreeItem(bp: LayerBreakpoint): vscode.TreeItem {
    const status = this.manager.status(bp.id);
    const where = bp.file ? `${path.basename(bp.file)}:${bp.line + 1}` : '';
    const target = targetLabel(bp);
    const item = new vscode.TreeItem(target ?? where, vscode.TreeItemCollapsibleState.None);
    item.id = bp.id;
    const condition = describeCondition(bp);
    const parts: string[] = [phaseChoiceOf(bp.phases)];
    if (target && where) parts.push(where);
    if (condition) parts.push(condition);
    const instances = describeInstances(bp, status?.layers ?? []);
    if (instances) parts.push(instances);
    item.description = parts.join(' · ');
    item.checkboxState = bp.enabled ? vscode.TreeItemCheckboxState.Checked : vscode.TreeItemCheckboxState.Unchecked;
    if (status?.problem) {
      item.iconPath = new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'));
      const tooltip = new vscode.MarkdownString('', true);
      writeProblemTooltip(tooltip, bp, status.problem);
      item.tooltip = tooltip;
    } else {
      item.iconPath = new vscode.ThemeIcon(bp.enabled ? 'debug-breakpoint-data' : 'debug-breakpoint-data-unverified');
      item.tooltip = [
        target ? `layer ${target}` : `${bp.file}:${bp.line + 1}`,
        `phases: ${bp.phases.join(', ')}`,
        condition ? `condition: ${condition}` : '',
        status?.layers.length ? `matches: ${status.layers.join(', ')}` : 'not resolved yet (no process connected)',
        bp.instance || bp.allInstances
          ? `${bp.instance ? 'chosen instance' : 'every instance'} of the layers this line stands for: right-click › Choose Instance… to change`
          : '',
      ].filter(Boolean).join('\n');
    }
    item.contextValue = status?.problem ? 'layerBreakpoint.unresolved' : 'layerBreakpoint';
    if (bp.uri) item.command = { command: Commands.revealBreakpoint, title: 'Go to Breakpoint', arguments: [bp] };
    return item;
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
