// The "Layers" view: the live named_modules() of every model in every connected process, with
// class, last output shape, parameter count, hook badge, intervention marker and a checkbox
// for a layer breakpoint (inline actions switch forward/backward). Selecting a layer shows it
// in the Tensors panel; "Reveal in Editor" opens the line that defined it.

import * as vscode from 'vscode';
import type { BackendHub } from '../backend/hub';
import type { LayerBreakpointManager } from '../breakpoints/manager';
import type { ExtensionLog } from '../common/log';
import { Commands, Views } from '../constants';
import { buildLayerTree, findNode, pathTo, type HookCount, type LayerNode } from './layersModel';

export class LayersView implements vscode.TreeDataProvider<LayerNode>, vscode.Disposable {
  private readonly changeEmitter = new vscode.EventEmitter<LayerNode | undefined>();
  readonly onDidChangeTreeData = this.changeEmitter.event;
  readonly view: vscode.TreeView<LayerNode>;
  private roots: LayerNode[] = [];
  /** Hook counts per "<process>/<model>/<layer>" from listHooks. */
  private hooks = new Map<string, HookCount>();
  private readonly disposables: vscode.Disposable[] = [];
  private refreshTimer: NodeJS.Timeout | undefined;
  private hooksTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly hub: BackendHub,
    private readonly breakpoints: LayerBreakpointManager,
    private readonly log: ExtensionLog,
  ) {
    this.view = vscode.window.createTreeView(Views.layers, { treeDataProvider: this, showCollapseAll: true });
    this.disposables.push(
      this.view,
      this.changeEmitter,
      hub.onDidChangeProcesses(() => this.scheduleRefresh()),
      hub.onDidChangeModels(() => {
        this.scheduleRefresh();
        this.scheduleHookRefresh();
      }),
      hub.onDidChangeInterventions(() => this.scheduleRefresh()),
      hub.onHit(({ process, hit }) => {
        this.scheduleHookRefresh();
        if (hit.pausing) void this.revealLayer(`${process.id}/${hit.model}/${hit.layer}`);
      }),
      breakpoints.onDidChange(() => this.scheduleRefresh()),
      this.view.onDidChangeCheckboxState((e) => {
        for (const [node, state] of e.items) {
          if (node.kind !== 'module' || node.layer === undefined) continue;
          const on = state === vscode.TreeItemCheckboxState.Checked;
          const location = this.locationOf(node);
          breakpoints.setLayerPhase(node.layer, location, 'forward', on);
          if (!on) breakpoints.setLayerPhase(node.layer, location, 'backward', false);
        }
      }),
    );
    this.refresh();
  }

  /** Where a layer was defined, as an editor location (0-based line). */
  locationOf(node: LayerNode): { uri: vscode.Uri; line: number } | undefined {
    return node.file && node.line ? { uri: vscode.Uri.file(node.file), line: node.line - 1 } : undefined;
  }

  node(key: string): LayerNode | undefined {
    return findNode(this.roots, key);
  }

  /** Every module row, for pickers. */
  allModules(): LayerNode[] {
    const out: LayerNode[] = [];
    const walk = (nodes: LayerNode[]) => nodes.forEach((n) => {
      if (n.kind === 'module') out.push(n);
      walk(n.children);
    });
    walk(this.roots);
    return out;
  }

  private scheduleRefresh(): void {
    if (this.refreshTimer) return;
    // Coalesce bursts (shapes arrive for many layers at once).
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = undefined;
      this.refresh();
    }, 100);
  }

  private refresh(): void {
    this.roots = buildLayerTree({
      processes: this.hub.processes(),
      breakpointPhases: (_p, _m, layer) => this.breakpoints.phasesOnLayer(layer),
      hooks: (p, m, layer) => this.hooks.get(`${p}/${m}/${layer}`),
    });
    const models = this.hub.modelCount();
    this.view.description = models ? `${models} model${models === 1 ? '' : 's'}` : undefined;
    this.view.message = this.hub.processes().length === 0
      ? 'Not connected. Start debugging a PyTorch script: its models appear here.'
      : models === 0 ? 'Connected. Waiting for a model (an nn.Module) to be created…' : undefined;
    this.changeEmitter.fire(undefined);
  }

  private scheduleHookRefresh(): void {
    clearTimeout(this.hooksTimer);
    this.hooksTimer = setTimeout(() => void this.refreshHooks(), 500);
  }

  /** Ask each process which hooks its models carry (Hookscope's and the user's). */
  async refreshHooks(): Promise<void> {
    const counts = new Map<string, HookCount>();
    await Promise.all(this.hub.processes().map(async (p) => {
      for (const modelId of p.models.keys()) {
        try {
          const result = await this.hub.request(p.id, 'listHooks', { model: modelId });
          for (const h of result.hooks) {
            const key = `${p.id}/${modelId}/${h.module}`;
            const c = counts.get(key) ?? { ours: 0, user: 0 };
            if (h.owner === 'hookscope') c.ours += 1;
            else c.user += 1;
            counts.set(key, c);
          }
        } catch (err) {
          this.log.debug(`[${p.label}] listHooks: ${(err as Error).message}`);
        }
      }
    }));
    this.hooks = counts;
    this.refresh();
  }

  async revealLayer(key: string): Promise<void> {
    // The tree may not have the new node yet: rebuild first.
    this.refresh();
    const path = pathTo(this.roots, key);
    if (!path || !this.view.visible) return;
    try {
      await this.view.reveal(path[path.length - 1], { select: false, focus: false, expand: false });
    } catch {
      // the view was collapsed or hidden meanwhile
    }
  }

  getChildren(element?: LayerNode): LayerNode[] {
    return element ? element.children : this.roots;
  }

  getParent(element: LayerNode): LayerNode | undefined {
    const path = pathTo(this.roots, element.key);
    return path && path.length > 1 ? path[path.length - 2] : undefined;
  }

  getTreeItem(node: LayerNode): vscode.TreeItem {
    const collapsible = node.children.length === 0
      ? vscode.TreeItemCollapsibleState.None
      : node.kind === 'module' ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.Expanded;
    const item = new vscode.TreeItem(node.label, collapsible);
    item.id = node.key;
    item.description = node.description;
    item.tooltip = node.tooltip;
    const context: string[] = [node.kind];
    if (node.kind === 'module') {
      context.push(node.forward ? 'fwd' : 'nofwd', node.backward ? 'bwd' : 'nobwd');
      if (node.file) context.push('hasSource');
      if (node.interventions) context.push('intervened');
      item.checkboxState = node.forward || node.backward
        ? vscode.TreeItemCheckboxState.Checked : vscode.TreeItemCheckboxState.Unchecked;
      item.iconPath = node.paused
        ? new vscode.ThemeIcon('debug-stackframe', new vscode.ThemeColor('debugIcon.pauseForeground'))
        : node.interventions
          ? new vscode.ThemeIcon('beaker', new vscode.ThemeColor('charts.orange'))
          : new vscode.ThemeIcon(node.children.length ? 'symbol-namespace' : 'symbol-field');
      item.command = { command: Commands.watchLayer, title: 'Show in Tensors', arguments: [node] };
    } else if (node.kind === 'model') {
      item.iconPath = new vscode.ThemeIcon('symbol-class');
      if (node.file) context.push('hasSource');
      item.command = { command: Commands.watchLayer, title: 'Show in Tensors', arguments: [node] };
    } else {
      item.iconPath = new vscode.ThemeIcon(node.paused ? 'debug-pause' : 'server-process');
    }
    item.contextValue = context.join('.');
    return item;
  }

  dispose(): void {
    clearTimeout(this.refreshTimer);
    clearTimeout(this.hooksTimer);
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
