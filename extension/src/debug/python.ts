// Which Python interpreter a session uses, whether it has the hookscope package, and the
// one-click install when it does not.
//
// Interpreter: the launch configuration's own `python`, else the `hookscope.pythonPath`
// setting, else the Python extension's selected interpreter (when that extension is
// installed), else `python3`. The package check runs the interpreter once and caches the
// bootstrap directory it prints; a failure shows a notification naming the interpreter.

import { execFile } from 'node:child_process';
import * as vscode from 'vscode';
import { Commands } from '../constants';
import type { ExtensionLog } from '../common/log';
import { backendPathSetting, pythonPathSetting } from '../common/settings';

const CHECK_SCRIPT = 'import hookscope.bootstrap, os; print(os.path.dirname(hookscope.bootstrap.__file__))';

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?(resource?: vscode.Uri): { path: string } | undefined;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand: string[] | undefined };
  };
}

export type BackendCheck = { ok: true; bootstrapDir: string } | { ok: false; python: string; reason: string };

export class PythonEnvironment {
  private readonly checks = new Map<string, Promise<BackendCheck>>();

  constructor(private readonly log: ExtensionLog) {}

  /** The interpreter to use for a resource when the launch configuration names none. */
  async interpreter(resource?: vscode.Uri): Promise<string> {
    const fromSetting = pythonPathSetting(resource);
    if (fromSetting) return fromSetting;
    const fromExtension = await this.pythonExtensionInterpreter(resource);
    return fromExtension ?? 'python3';
  }

  private async pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
    const extension = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
    if (!extension) return undefined;
    try {
      const api = extension.isActive ? extension.exports : await extension.activate();
      const path = api?.environments?.getActiveEnvironmentPath?.(resource)?.path;
      if (path) return path;
      const exec = api?.settings?.getExecutionDetails?.(resource)?.execCommand;
      return exec?.[0];
    } catch (err) {
      this.log.warn(`could not ask the Python extension for its interpreter: ${(err as Error).message}`);
      return undefined;
    }
  }

  /** Whether `python` can import hookscope, and where its bootstrap directory is. Cached per interpreter while it succeeds. */
  checkBackend(python: string): Promise<BackendCheck> {
    let check = this.checks.get(python);
    if (!check) {
      check = runCheck(python);
      this.checks.set(python, check);
      void check.then((result) => {
        if (!result.ok) this.checks.delete(python); // try again next time: the user may have installed it
      });
    }
    return check;
  }

  /** Forget cached checks (after an install, or when the interpreter setting changes). */
  reset(): void {
    this.checks.clear();
  }

  /** The actionable notification for an interpreter without the hookscope package. */
  async offerInstall(python: string, reason: string): Promise<void> {
    this.log.event('backend.missing', { python, reason });
    this.log.warn(`hookscope is not importable by ${python}: ${reason}`);
    const install = 'Install hookscope';
    const backendPath = backendPathSetting();
    const installDev = backendPath ? 'Install from backendPath' : undefined;
    const showLog = 'Show Log';
    const choice = await vscode.window.showWarningMessage(
      `Hookscope: the Python interpreter "${python}" does not have the hookscope package, so layer breakpoints ` +
        'and tensor summaries are off for this debug session.',
      ...[install, installDev, showLog].filter((x): x is string => !!x),
    );
    if (choice === install) await vscode.commands.executeCommand(Commands.installBackend, python);
    else if (choice === installDev && installDev) await vscode.commands.executeCommand(Commands.installBackend, python, backendPath);
    else if (choice === showLog) this.log.show();
  }

  /** Run pip in a terminal the user can watch: `<python> -m pip install hookscope` (or `-e <path>`). */
  installInTerminal(python: string, editablePath?: string): void {
    const terminal = vscode.window.createTerminal({ name: 'Hookscope: install' });
    const target = editablePath ? `-e ${shellQuote(editablePath)}` : 'hookscope';
    terminal.show();
    terminal.sendText(`${shellQuote(python)} -m pip install ${target}`);
    this.log.event('backend.install', { python, editable: editablePath ?? null });
    this.reset();
  }
}

function runCheck(python: string): Promise<BackendCheck> {
  return new Promise((resolve) => {
    execFile(python, ['-c', CHECK_SCRIPT], { timeout: 30000, windowsHide: true }, (error, stdout, stderr) => {
      const dir = stdout.trim().split(/\r?\n/).pop() ?? '';
      if (!error && dir) {
        resolve({ ok: true, bootstrapDir: dir });
        return;
      }
      const lastLine = stderr.trim().split(/\r?\n/).pop() ?? '';
      const reason = (error as NodeJS.ErrnoException | null)?.code === 'ENOENT'
        ? 'the interpreter was not found'
        : lastLine || error?.message || 'no bootstrap directory printed';
      resolve({ ok: false, python, reason });
    });
  });
}

/** Quote for POSIX shells and PowerShell alike when a path has spaces or quotes. */
export function shellQuote(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `"${text.replace(/(["\\$`])/g, '\\$1')}"`;
}
