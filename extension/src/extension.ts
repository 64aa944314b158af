// Hookscope's entry point: wires the services together and hands every disposable to VS Code.
// No logic of its own beyond the wiring and the user-facing reactions to backend events.

import * as vscode from 'vscode';
import { BackendHub } from './backend/hub';
import { InstancePicker } from './breakpoints/instancePicker';
import { LayerBreakpointManager } from './breakpoints/manager';
import { LayerBreakpointsView } from './breakpoints/treeView';
import { registerCommands, registerReporting } from './commands';
import { ExtensionLog } from './common/log';
import {
  affects, besideAtStopSetting, breakOnNonFiniteSetting, gradientThresholdsSetting, runCompiledEagerlySetting, setRunCompiledEagerlySetting, summaryRateHz, traceFileSetting,
} from './common/settings';
import { Commands, ContextKeys, DEBUG_TYPE, PYTHON_DEBUG_TYPES, Settings, Views } from './constants';
import { HookscopeAdapterFactory, HookscopeConfigurationProvider } from './debug/configurationProvider';
import { bundledPython } from './debug/bundle';
import { PythonEnvironment } from './debug/python';
import { DebugSessionTracker } from './debug/tracker';
import { LayersView } from './views/layersTree';
import { LanguageServerService } from './lsp/service';
import { PanelController } from './views/panelController';
import { InspectController } from './views/inspectController';
import { HookscopeStatusBar } from './views/statusBar';
import { placeAtStop } from './common/stopPlacement';
import { TensorsViewProvider } from './views/tensorsView';

const RUN_EAGERLY = 'Run Compiled Code Eagerly While Debugging';

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const push = <T extends vscode.Disposable>(d: T): T => {
    context.subscriptions.push(d);
    return d;
  };
  const log = push(new ExtensionLog(traceFileSetting()));
  log.event('activated', { version: (context.extension.packageJSON as { version: string }).version, vscode: vscode.version });

  const hub = new BackendHub({ log, trace: log });
  push({ dispose: () => hub.dispose() });
  const python = new PythonEnvironment(log, bundledPython(context.extensionPath));

  for (const type of PYTHON_DEBUG_TYPES) {
    push(vscode.debug.registerDebugConfigurationProvider(type, new HookscopeConfigurationProvider(type, hub, python, log)));
  }
  push(vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new HookscopeAdapterFactory(python, log)));
  const tracker = push(new DebugSessionTracker(hub, log));

  const breakpoints = push(new LayerBreakpointManager(context, hub, log));
  push(new LayerBreakpointsView(breakpoints));
  push(new InstancePicker(breakpoints, hub, log));
  const layers = push(new LayersView(hub, breakpoints, log));
  const panel = new PanelController(hub, log, log, summaryRateHz);
  push({ dispose: () => panel.dispose() });
  const tensors = push(new TensorsViewProvider(context.extensionUri, panel, log));
  push(vscode.window.registerWebviewViewProvider(Views.tensors, tensors, { webviewOptions: { retainContextWhenHidden: true } }));
  const statusBar = push(new HookscopeStatusBar(hub));

  for (const d of registerCommands({ hub, breakpoints, layers, panel, tensors, python, log })) push(d);

  // "Show in Hookscope": a tensor of any paused frame in the Tensors panel.
  const inspect = push(new InspectController(hub, tracker, tensors, log));
  tensors.setInspectHandler((m) => inspect.onWebviewMessage(m));
  const inspectCommand = (id: string, fn: (arg: unknown) => Promise<void>) => push(registerReporting(id, fn, log));
  inspectCommand(Commands.showInHookscope, (arg) => inspect.showVariable(arg));
  inspectCommand(Commands.showExpressionInHookscope, () => inspect.showExpression());

  // Code lenses, hook-hygiene diagnostics and live hovers (hookscope.lsp, same interpreter as debug sessions).
  const languageServer = push(new LanguageServerService(context, hub, python, log));
  push(vscode.commands.registerCommand(Commands.restartLanguageServer, () => languageServer.restart()));
  void languageServer.restart();

  // Break on NaN/Inf: the setting is the source of truth (status bar, view title and panel flip it).
  const applyBreakOnNonFinite = () => {
    const on = breakOnNonFiniteSetting();
    statusBar.setBreakOnNonFinite(on);
    panel.setBreakOnNonFinite(on);
    void vscode.commands.executeCommand('setContext', ContextKeys.breakOnNonFinite, on);
    void hub.setBreakOnNonFinite(on);
  };
  applyBreakOnNonFinite();

  // Break on exploding/vanishing gradients: the settings hold the thresholds (the status bar menu writes them).
  const applyGradients = () => {
    const thresholds = gradientThresholdsSetting();
    statusBar.setGradientThresholds(thresholds);
    void hub.setBreakOnGradients(thresholds);
  };
  applyGradients();

  // Eager torch.compile while debugging: the opt-in of the `compiled` notice.
  const applyRunCompiledEagerly = () => void hub.setCompiledEager(runCompiledEagerlySetting());
  applyRunCompiledEagerly();

  push(vscode.workspace.onDidChangeConfiguration((e) => {
    if (affects(e, Settings.breakOnNonFinite)) applyBreakOnNonFinite();
    if (affects(e, Settings.breakOnExplodingGradients) || affects(e, Settings.breakOnVanishingGradients)) applyGradients();
    if (affects(e, Settings.runCompiledEagerly)) applyRunCompiledEagerly();
    if (affects(e, Settings.traceFile)) log.setTraceFile(traceFileSetting());
    if (affects(e, Settings.pythonPath) || affects(e, Settings.backend)) {
      python.reset();
      void languageServer.restart();
    }
    if (affects(e, Settings.summaryRateHz)) void panel.updateWatches();
  }));

  // Clear messages for what goes wrong, without flooding the user.
  const shownNotices = new Set<string>();
  push(hub.onDidReject(({ reason }) => {
    if (reason.startsWith('protocol version mismatch')) {
      void vscode.window.showErrorMessage(`Hookscope: ${reason}`);
    } else if (reason === 'token refused') {
      void vscode.window.showWarningMessage(
        'Hookscope refused a connection with a wrong token (a process from another window or an old session).');
    } else {
      log.warn(`a connection was closed before its hello: ${reason}`);
    }
  }));
  push(hub.onDidConnect((p) => {
    void vscode.commands.executeCommand('setContext', ContextKeys.connected, true);
    if (!p.debugger) log.info(`${p.label} runs without a debugger: layer breakpoints will be logged, not paused`);
  }));
  push(hub.onDidExit(({ process, reason }) => {
    vscode.window.setStatusBarMessage(`Hookscope: ${process.label} exited (${reason})`, 5000);
    if (hub.processes().length === 0) void vscode.commands.executeCommand('setContext', ContextKeys.connected, false);
  }));
  push(hub.onNotice(({ process, notice }) => {
    const key = `${process.sessionKey}/${notice.code ?? notice.message}`;
    if (notice.level === 'info' || shownNotices.has(key)) return;
    shownNotices.add(key);
    const show = notice.level === 'error' ? vscode.window.showErrorMessage : vscode.window.showWarningMessage;
    const message = `Hookscope (${process.label}): ${notice.message}`;
    if (notice.code === 'compiled' && !runCompiledEagerlySetting()) {
      void show(message, RUN_EAGERLY).then((choice) => {
        if (choice === RUN_EAGERLY) void setRunCompiledEagerlySetting(true);
      });
      return;
    }
    void show(message);
  }));
  push(hub.onHit(({ hit }) => {
    void vscode.commands.executeCommand('setContext', ContextKeys.paused, hit.pausing);
    if (hit.pausing) void tensors.showAtStop(placeAtStop(besideAtStopSetting(), hit));
  }));
  push(hub.onResumed(() => void vscode.commands.executeCommand('setContext', ContextKeys.paused, false)));
  push(tracker.onDidStop(({ description }) => {
    if (description) log.info(`stopped: ${description}`);
  }));

  try {
    await hub.start();
  } catch (err) {
    log.error(`could not listen on 127.0.0.1: ${(err as Error).message}`);
    void vscode.window.showErrorMessage(`Hookscope could not open its local port: ${(err as Error).message}`);
  }
}

export function deactivate(): void {
  // Everything is in context.subscriptions: the hub says goodbye to each process there.
}
