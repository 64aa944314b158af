// DebugConfigurationProviders for `debugpy`, `python` and `hookscope`: each Python launch gets
// Hookscope's environment (address, token, session), the bootstrap on PYTHONPATH and the
// debugpy rule that includes the `hookscope` module. An attach gets the rule and a key; the
// tracker then starts the agent in the attached process through DAP `evaluate`.
// The user's launch.json is never written: only the resolved copy VS Code passes on changes.

import * as vscode from 'vscode';
import type { BackendHub } from '../backend/hub';
import type { ExtensionLog } from '../common/log';
import { DEBUG_TYPE } from '../constants';
import {
  SESSION_KEY_PROPERTY,
  configuredPython,
  defaultHookscopeLaunch,
  injectHookscope,
  withHookscopeRule,
  type PythonLaunchConfig,
} from './launchEnv';
import type { PythonEnvironment } from './python';

/** Extra property on an attach configuration: what the tracker needs to start the agent. */
export const ATTACH_PROPERTY = 'hookscopeAttach';

export interface AttachInjection {
  bootstrapDir: string;
  /** The bundled libraries the process may take what it lacks from (bundled hookscope only). */
  libsDir?: string;
  address: string;
  token: string;
}

export class HookscopeConfigurationProvider implements vscode.DebugConfigurationProvider {
  constructor(
    private readonly type: string,
    private readonly hub: BackendHub,
    private readonly python: PythonEnvironment,
    private readonly log: ExtensionLog,
  ) {}

  /** F5 with no launch.json: Hookscope's own type launches the current Python file. */
  resolveDebugConfiguration(
    _folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.ProviderResult<vscode.DebugConfiguration> {
    if (this.type !== DEBUG_TYPE) return config;
    if (!config.type && !config.request && !config.name) {
      const editor = vscode.window.activeTextEditor;
      if (editor?.document.languageId !== 'python') {
        void vscode.window.showInformationMessage('Hookscope: open a Python file to debug, or add a "hookscope" launch configuration.');
        return undefined;
      }
      return defaultHookscopeLaunch(editor.document.uri.fsPath) as vscode.DebugConfiguration;
    }
    if (!config.request) config.request = 'launch';
    if (config.request === 'launch' && !config.program && !config.module && !config.code) config.program = '${file}';
    return config;
  }

  async resolveDebugConfigurationWithSubstitutedVariables(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): Promise<vscode.DebugConfiguration | undefined> {
    const launch = config as unknown as PythonLaunchConfig;
    if (launch.request !== 'launch' && launch.request !== 'attach') return config;
    // debugpy starts child sessions for subprocesses itself; their environment already has ours.
    if (launch.request === 'attach' && (config.subProcessId !== undefined || config.__parentId)) return config;
    try {
      const python = configuredPython(launch) ?? (await this.python.interpreter(folder?.uri));
      const check = await this.python.checkBackend(python);
      if (!check.ok) {
        void this.python.reportProblem(check, config.type === DEBUG_TYPE);
        return config; // debugging goes on without Hookscope
      }
      await this.hub.start();
      const ticket = this.hub.openSession();
      if (launch.request === 'attach') {
        const injection: AttachInjection = {
          bootstrapDir: check.bootstrapDir, libsDir: check.libsDir, address: ticket.address, token: ticket.token,
        };
        this.log.event('session.configured', { type: config.type, request: 'attach', session: ticket.key, python, backend: check.source });
        return { ...config, rules: withHookscopeRule(launch.rules), [SESSION_KEY_PROPERTY]: ticket.key, [ATTACH_PROPERTY]: injection };
      }
      const injected = injectHookscope(launch, {
        env: ticket.env,
        bootstrapDir: check.bootstrapDir,
        libsDir: check.libsDir,
        inheritedPythonPath: process.env.PYTHONPATH,
        pathSeparator: process.platform === 'win32' ? ';' : ':',
        sessionKey: ticket.key,
        tensorPresentation: vscode.workspace.getConfiguration('hookscope').get<boolean>('tensorPresentation', true),
      });
      // Hookscope's own type runs the adapter with this interpreter; debugpy launches the program with it too.
      if (config.type === DEBUG_TYPE && !configuredPython(launch)) injected.python = python;
      this.log.info(`debug session "${config.name}" (${config.type}) will connect with ${python}`);
      this.log.event('session.configured', {
        type: config.type, request: 'launch', session: ticket.key, python, backend: check.source, bootstrapDir: check.bootstrapDir,
      });
      return injected as vscode.DebugConfiguration;
    } catch (err) {
      this.log.error(`could not prepare the debug session for Hookscope: ${(err as Error).message}`);
      return config;
    }
  }
}

/**
 * Hookscope's own debug type runs debugpy's adapter with the chosen interpreter (no Python extension
 * needed): the debugpy bundled in the extension, as `python <adapter folder>` (how the Python
 * debugger extension runs its own copy), so the interpreter needs no debugpy.
 */
export class HookscopeAdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  constructor(private readonly python: PythonEnvironment, private readonly log: ExtensionLog) {}

  async createDebugAdapterDescriptor(session: vscode.DebugSession): Promise<vscode.DebugAdapterDescriptor> {
    const config = session.configuration as unknown as PythonLaunchConfig;
    const connect = config.connect as { host?: string; port?: number } | undefined;
    if (config.request === 'attach' && connect?.port) {
      // Attaching to `python -m debugpy --listen`: talk to that adapter directly.
      return new vscode.DebugAdapterServer(connect.port, connect.host ?? '127.0.0.1');
    }
    const python = configuredPython(config) ?? (await this.python.interpreter(session.workspaceFolder?.uri));
    const args = this.python.adapterArgs();
    this.log.info(`starting the debugpy adapter: ${python} ${args.join(' ')}`);
    return new vscode.DebugAdapterExecutable(python, args);
  }
}
