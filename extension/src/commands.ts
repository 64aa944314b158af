// Every `hookscope.*` command. Each works from the command palette with no argument (using the
// cursor, or asking with a QuickPick) and from views, menus and code lenses with one.

import * as vscode from 'vscode';
import type { BackendHub } from './backend/hub';
import { editCondition, pickPhase } from './breakpoints/conditionEditor';
import type { LayerBreakpointManager } from './breakpoints/manager';
import { proposedTarget, type KnownLayer } from './breakpoints/layerTargets';
import { targetLabel, type LayerBreakpoint, type PhaseChoice } from './breakpoints/model';
import { askNamedBreakpoint } from './breakpoints/namedBreakpoint';
import type { ExtensionLog } from './common/log';
import {
  breakOnNonFiniteSetting, gradientThresholdsSetting, setBreakOnNonFiniteSetting, setGradientThresholdSetting,
} from './common/settings';
import { showGradientMenu } from './views/gradientMenu';
import { Commands } from './constants';
import type { PythonEnvironment } from './debug/python';
import type { LayerNode } from './views/layersModel';
import type { LayersView } from './views/layersTree';
import type { PanelController } from './views/panelController';
import type { TensorsViewProvider } from './views/tensorsView';

export interface CommandServices {
  hub: BackendHub;
  breakpoints: LayerBreakpointManager;
  layers: LayersView;
  panel: PanelController;
  tensors: TensorsViewProvider;
  python: PythonEnvironment;
  log: ExtensionLog;
}

/** The argument the language server's code lenses pass: `{uri, line (0-based), phase}`. */
interface LineArgument {
  uri: string | vscode.Uri;
  line: number;
  phase?: PhaseChoice;
}

function isLineArgument(arg: unknown): arg is LineArgument {
  const a = arg as LineArgument;
  return !!a && typeof a === 'object' && (typeof a.uri === 'string' || a.uri instanceof vscode.Uri) && Number.isInteger(a.line);
}

function isLayerNode(arg: unknown): arg is LayerNode {
  const n = arg as LayerNode;
  return !!n && typeof n === 'object' && typeof n.key === 'string' && (n.kind === 'module' || n.kind === 'model');
}

function isBreakpoint(arg: unknown): arg is LayerBreakpoint {
  const b = arg as LayerBreakpoint;
  return !!b && typeof b === 'object' && typeof b.id === 'string' && Array.isArray(b.phases);
}

function toUri(uri: string | vscode.Uri): vscode.Uri {
  return typeof uri === 'string' ? vscode.Uri.parse(uri) : uri;
}

const PHASE_CHOICES = new Set(['forward', 'backward', 'both']);

/** A command whose failure is logged with its stack and shown to the user, not lost in a rejected promise. */
export function registerReporting(id: string, fn: (...args: unknown[]) => unknown, log: ExtensionLog): vscode.Disposable {
  return vscode.commands.registerCommand(id, async (...args: unknown[]) => {
    try {
      await fn(...args);
    } catch (err) {
      log.error(`${id} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      void vscode.window.showErrorMessage(`Hookscope: ${err instanceof Error ? err.message : String(err)}`);
    }
  });
}

export function registerCommands(s: CommandServices): vscode.Disposable[] {
  const { hub, breakpoints, layers, panel, tensors, python, log } = s;

  const cursorLine = (): { uri: vscode.Uri; line: number } | undefined => {
    const editor = vscode.window.activeTextEditor;
    if (!editor) {
      void vscode.window.showInformationMessage('Hookscope: put the cursor on a layer line in a Python editor first.');
      return undefined;
    }
    return { uri: editor.document.uri, line: editor.selection.active.line };
  };

  const pickModule = async (title: string): Promise<LayerNode | undefined> => {
    const modules = layers.allModules();
    if (modules.length === 0) {
      void vscode.window.showInformationMessage('Hookscope: no model is connected yet. Start debugging a PyTorch script.');
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(
      modules.map((n) => ({ label: n.layer ?? n.label, description: n.cls, detail: n.description, node: n })),
      { title, matchOnDescription: true },
    );
    return pick?.node;
  };

  /** The layer a command argument or the cursor line stands for. */
  const layerFrom = async (arg: unknown, title: string): Promise<LayerNode | undefined> => {
    if (isLayerNode(arg)) return arg;
    const where = isLineArgument(arg) ? { uri: toUri(arg.uri), line: arg.line } : arg === undefined ? cursorLine() : undefined;
    if (!where) return pickModule(title);
    const document = await vscode.workspace.openTextDocument(where.uri);
    const refs = await breakpoints.layersAt(document, where.line);
    const nodes = refs.map((r) => layers.node(`${r.process}/${r.model}/${r.layer}`)).filter((n): n is LayerNode => !!n);
    if (nodes.length === 1) return nodes[0];
    if (nodes.length === 0) {
      void vscode.window.showInformationMessage(
        hub.processes().length
          ? `Hookscope: line ${where.line + 1} does not define or call a layer of the connected models.`
          : 'Hookscope: no process is connected yet. Start debugging the script first.',
      );
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(nodes.map((n) => ({ label: n.layer ?? '', description: n.cls, node: n })), { title });
    return pick?.node;
  };

  const setBreakOnNonFinite = async (on: boolean) => {
    await setBreakOnNonFiniteSetting(on); // the configuration listener in extension.ts applies it
  };

  const cmd = (id: string, fn: (...args: unknown[]) => unknown) => registerReporting(id, fn, log);

  const toggleLayerPhase = (node: LayerNode, phase: 'forward' | 'backward') => {
    if (node.layer === undefined) return;
    const on = phase === 'forward' ? !node.forward : !node.backward;
    breakpoints.setLayerPhase(node.layer, layers.locationOf(node), phase, on);
  };

  return [
    cmd(Commands.toggleLayerBreakpoint, async (arg) => {
      if (isLineArgument(arg)) {
        const phase = arg.phase && PHASE_CHOICES.has(arg.phase) ? arg.phase : 'forward';
        breakpoints.toggleAt(toUri(arg.uri), arg.line, phase);
        return;
      }
      if (isLayerNode(arg)) {
        toggleLayerPhase(arg, 'forward');
        return;
      }
      const where = cursorLine();
      if (!where) return;
      const existing = breakpoints.model.atLine(where.uri.toString(), where.line);
      if (existing) {
        breakpoints.remove(existing.id);
        return;
      }
      const phase = await pickPhase();
      if (phase) breakpoints.toggleAt(where.uri, where.line, phase);
    }),
    cmd(Commands.toggleForwardBreakpoint, (arg) => {
      if (isLayerNode(arg)) return toggleLayerPhase(arg, 'forward');
      const where = isLineArgument(arg) ? { uri: toUri(arg.uri), line: arg.line } : cursorLine();
      if (where) breakpoints.toggleAt(where.uri, where.line, 'forward');
    }),
    cmd(Commands.toggleBackwardBreakpoint, (arg) => {
      if (isLayerNode(arg)) return toggleLayerPhase(arg, 'backward');
      const where = isLineArgument(arg) ? { uri: toUri(arg.uri), line: arg.line } : cursorLine();
      if (where) breakpoints.toggleAt(where.uri, where.line, 'backward');
    }),
    cmd(Commands.watchLayer, async (arg) => {
      const node = await layerFrom(arg, 'Show which layer in the Tensors panel?');
      if (!node || !node.model) return;
      await tensors.reveal();
      await panel.select(node.processId, node.model, node.layer ?? '');
    }),
    cmd(Commands.toggleBreakOnNonFinite, () => setBreakOnNonFinite(!breakOnNonFiniteSetting())),
    cmd(Commands.breakOnNonFiniteOn, () => setBreakOnNonFinite(true)),
    cmd(Commands.breakOnNonFiniteOff, () => setBreakOnNonFinite(false)),
    cmd(Commands.gradientHealthMenu, () => showGradientMenu({
      breakOnNonFinite: breakOnNonFiniteSetting,
      setBreakOnNonFinite,
      thresholds: gradientThresholdsSetting,
      setThreshold: setGradientThresholdSetting,
    })),
    cmd(Commands.editLayerBreakpointCondition, async (arg) => {
      let bp = isBreakpoint(arg) ? breakpoints.model.get(arg.id) : undefined;
      if (!bp) {
        const where = vscode.window.activeTextEditor ? cursorLine() : undefined;
        bp = where ? breakpoints.model.atLine(where.uri.toString(), where.line) : undefined;
      }
      if (!bp) {
        const all = breakpoints.all();
        if (all.length === 0) {
          void vscode.window.showInformationMessage('Hookscope: there is no layer breakpoint to edit.');
          return;
        }
        const pick = await vscode.window.showQuickPick(
          all.map((b) => ({ label: targetLabel(b) ?? `${vscode.workspace.asRelativePath(b.file)}:${b.line + 1}`, description: b.phases.join(', '), bp: b })),
          { title: 'Edit which layer breakpoint?' },
        );
        bp = pick?.bp;
      }
      if (!bp) return;
      const patch = await editCondition(bp);
      if (patch) {
        breakpoints.update(bp.id, patch);
        log.event('breakpoint.edited', { id: bp.id, patch });
      }
    }),
    cmd(Commands.addLayerBreakpointByName, async (arg) => {
      const initial = proposedTarget(isLayerNode(arg) ? arg : undefined);
      const known = (): KnownLayer[] =>
        hub.processes().flatMap((p) => [...p.models.values()].flatMap((m) => m.tree.modules.map((x) => ({ layer: x.name, cls: x.cls }))));
      const request = await askNamedBreakpoint(initial, known);
      if (request) breakpoints.setNamed(request.target, request.settings);
    }),
    cmd(Commands.removeLayerBreakpoint, (arg) => {
      if (isBreakpoint(arg)) breakpoints.remove(arg.id);
    }),
    cmd(Commands.removeAllLayerBreakpoints, () => {
      const n = breakpoints.removeAll();
      vscode.window.setStatusBarMessage(`Hookscope: removed ${n} layer breakpoint${n === 1 ? '' : 's'}`, 3000);
    }),
    cmd(Commands.revealBreakpoint, async (arg) => {
      if (!isBreakpoint(arg) || !arg.uri) return;
      const editor = await vscode.window.showTextDocument(vscode.Uri.parse(arg.uri), { preview: true });
      const pos = new vscode.Position(arg.line, 0);
      editor.selection = new vscode.Selection(pos, pos);
      editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
    }),
    cmd(Commands.showTensors, () => tensors.reveal()),
    cmd(Commands.openTensorsInEditor, () => tensors.openInEditor()),
    cmd(Commands.revealLayer, async (arg) => {
      const node = isLayerNode(arg) ? arg : await pickModule('Reveal which layer in the editor?');
      if (!node) return;
      const location = layers.locationOf(node);
      if (!location) {
        void vscode.window.showInformationMessage(`Hookscope: the line that defined ${node.layer || node.label} is not known.`);
        return;
      }
      const editor = await vscode.window.showTextDocument(location.uri, { preview: true });
      const pos = new vscode.Position(location.line, 0);
      editor.selection = new vscode.Selection(pos, pos);
      editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      log.event('layer.revealed', { layer: node.layer ?? null, file: location.uri.fsPath, line: location.line });
    }),
    cmd(Commands.removeAllHooks, async () => {
      const processes = hub.processes();
      if (processes.length === 0) {
        void vscode.window.showInformationMessage('Hookscope: no process is connected.');
        return;
      }
      let removed = 0;
      for (const p of processes) removed += (await hub.request(p.id, 'removeHooks', {})).removed;
      log.event('hooks.removed', { removed });
      await layers.refreshHooks();
      void vscode.window.showInformationMessage(
        `Hookscope: removed ${removed} hook${removed === 1 ? '' : 's'}. Layer breakpoints stay in the editor; toggle one to hook again.`,
      );
    }),
    cmd(Commands.listHooks, async () => {
      const lines: string[] = [];
      for (const p of hub.processes()) {
        const result = await hub.request(p.id, 'listHooks', {});
        for (const h of result.hooks) {
          lines.push(`${p.label}  ${h.module}  ${h.kind}  ${h.owner}  ${h.function}  ${h.file ? `${h.file}:${String(h.line)}` : ''}`);
        }
        for (const l of result.leaks) {
          lines.push(`${p.label}  LEAK? ${l.module} ${l.kind} ${l.function} counts ${JSON.stringify(l.counts)}`);
        }
      }
      log.info(`hooks:\n${lines.join('\n') || '(none)'}`);
      log.show();
    }),
    cmd(Commands.addIntervention, async (arg) => {
      const node = isLayerNode(arg) ? arg : panel.target?.layer
        ? layers.node(`${panel.target.processId}/${panel.target.model}/${panel.target.layer}`)
        : await pickModule('Add an intervention on which layer?');
      if (!node || !node.model || !node.layer) return;
      const kind = await vscode.window.showQuickPick([
        { label: 'Zero channels', description: 'set chosen output channels (or heads) to 0', value: 'zero_channels' as const },
        { label: 'Scale output', description: 'multiply the output by a factor', value: 'scale' as const },
        { label: 'Mean-ablate', description: 'replace the output by its mean', value: 'mean_ablate' as const },
        { label: 'Input noise', description: 'add Gaussian noise of a given std to the inputs', value: 'input_noise' as const },
      ], { title: `Intervention on ${node.layer}` });
      if (!kind) return;
      let channels: number[] | undefined;
      let value: number | undefined;
      if (kind.value === 'zero_channels') {
        const text = await vscode.window.showInputBox({
          title: 'Channels to zero', prompt: 'e.g. 0, 3, 5-7',
          validateInput: (v) => (/^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$/.test(v) ? undefined : 'Channel numbers, e.g. 0, 3, 5-7'),
        });
        if (text === undefined) return;
        channels = text.split(',').flatMap((part) => {
          const [a, b] = part.split('-').map((x) => Number(x.trim()));
          return b === undefined ? [a] : Array.from({ length: Math.max(0, b - a + 1) }, (_, i) => a + i);
        });
      } else if (kind.value === 'scale' || kind.value === 'input_noise') {
        const text = await vscode.window.showInputBox({
          title: kind.value === 'scale' ? 'Scale factor' : 'Noise standard deviation',
          value: kind.value === 'scale' ? '0.5' : '0.1',
          validateInput: (v) => (Number.isFinite(Number(v)) && v.trim() !== '' ? undefined : 'A number'),
        });
        if (text === undefined) return;
        value = Number(text);
      }
      await panel.addIntervention(kind.value, channels, value, { processId: node.processId, model: node.model, layer: node.layer });
    }),
    cmd(Commands.removeAllInterventions, async () => {
      const removed = await panel.removeIntervention(undefined);
      vscode.window.setStatusBarMessage(`Hookscope: removed ${removed} intervention${removed === 1 ? '' : 's'}`, 3000);
    }),
    cmd(Commands.selectInterpreter, () => python.selectInterpreter()),
    cmd(Commands.showLog, () => log.show()),
  ];
}
