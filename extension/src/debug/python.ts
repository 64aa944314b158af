// Which Python interpreter a session uses, which hookscope package runs in it, and what to say
// when the interpreter lacks something.
//
// Interpreter: the launch configuration's own `python`, else the `hookscope.pythonPath` setting,
// else the Python extension's selected interpreter (when that extension is installed), else
// `python3`. Package (`hookscope.backend`): the one bundled in the extension by default (its
// protocol always matches), or the interpreter's own when the user asks for it. One probe run of
// the interpreter per choice, cached while it succeeds; what is missing (torch, a recent enough
// Python, the interpreter's hookscope when chosen) is said in a notification naming the
// interpreter, with a button to pick another. Nothing is ever installed for the user.

import { execFile } from 'node:child_process';
import * as vscode from 'vscode';
import { Commands } from '../constants';
import type { ExtensionLog } from '../common/log';
import { backendSourceSetting, pythonPathSetting, setBackendSourceSetting, setPythonPathSetting } from '../common/settings';
import { languageServerPath, type BundledPython } from './bundle';
import {
  parseProbe, probeScript, problemDetail, problemMessage, problemOf,
  type BackendSource, type InterpreterProblem,
} from './interpreterCheck';

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?(resource?: vscode.Uri): { path: string } | undefined;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand: string[] | undefined };
  };
}

/** What a debug session needs to run Hookscope in an interpreter. */
export interface BackendRuntime {
  source: BackendSource;
  /** Prepended to the debuggee's PYTHONPATH: it starts the hookscope package it belongs to. */
  bootstrapDir: string;
  /** The bundled libraries the debuggee may take what it lacks from (HOOKSCOPE_LIBS); bundled source only. */
  libsDir?: string;
}

export type BackendCheck =
  | ({ ok: true } & BackendRuntime)
  | { ok: false; python: string; problem: InterpreterProblem; detail: string };

const PROBE_TIMEOUT_MS = 30_000;
const SELECT_INTERPRETER = 'Select Interpreter';
const USE_BUNDLED = 'Use Bundled hookscope';
const SHOW_LOG = 'Show Log';

export class PythonEnvironment {
  private readonly checks = new Map<string, Promise<BackendCheck>>();
  /** Problems already shown for sessions of the Python extension's types (once per window). */
  private readonly toldAbout = new Set<string>();

  constructor(private readonly log: ExtensionLog, private readonly bundle: BundledPython | undefined) {
    if (!bundle) log.warn('this build of the extension carries no Python side (run `make bundle`): using the interpreter\'s own hookscope');
  }

  /** The interpreter to use for a resource when the launch configuration names none. */
  async interpreter(resource?: vscode.Uri): Promise<string> {
    const fromSetting = pythonPathSetting(resource);
    if (fromSetting) return fromSetting;
    const fromExtension = await this.pythonExtensionInterpreter(resource);
    return fromExtension ?? 'python3';
  }

  /** Which hookscope runs: the setting's choice, the interpreter's own where this build has no bundle. */
  source(): BackendSource {
    return this.bundle ? backendSourceSetting() : 'environment';
  }

  /** `python <adapter>` for Hookscope's own debug type: the bundled debugpy, else the interpreter's. */
  adapterArgs(): string[] {
    return this.bundle ? [this.bundle.debugpyAdapter] : ['-m', 'debugpy.adapter'];
  }

  /** PYTHONPATH entries the language server starts with (the bundled package and libraries, or none). */
  languageServerPath(): string[] {
    return this.source() === 'bundled' ? languageServerPath(this.bundle) : [];
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

  /** Whether Hookscope can run in `python`, and how. Cached per interpreter and source while it succeeds. */
  checkBackend(python: string): Promise<BackendCheck> {
    const source = this.source();
    const key = `${source}\u0000${python}`;
    let check = this.checks.get(key);
    if (!check) {
      check = this.runCheck(python, source);
      this.checks.set(key, check);
      void check.then((result) => {
        if (!result.ok) this.checks.delete(key); // ask again next time: the user may have fixed it
      });
    }
    return check;
  }

  /** Forget cached checks (the interpreter or the source setting changed). */
  reset(): void {
    this.checks.clear();
    this.toldAbout.clear();
  }

  private runCheck(python: string, source: BackendSource): Promise<BackendCheck> {
    return new Promise((resolve) => {
      execFile(python, ['-c', probeScript(source)], { timeout: PROBE_TIMEOUT_MS, windowsHide: true }, (error, stdout, stderr) => {
        const answer = parseProbe(stdout);
        if (!answer) {
          const detail = (error as NodeJS.ErrnoException | null)?.code === 'ENOENT'
            ? 'not found'
            : stderr.trim().split(/\r?\n/).pop() || error?.message || 'it printed no answer';
          resolve({ ok: false, python, problem: 'no-interpreter', detail });
          return;
        }
        const problem = problemOf(answer, source);
        if (problem) {
          resolve({ ok: false, python, problem, detail: problemDetail(answer, problem) });
        } else if (source === 'bundled' && this.bundle) {
          resolve({ ok: true, source, bootstrapDir: this.bundle.bootstrapDir, libsDir: this.bundle.libsDir });
        } else {
          resolve({ ok: true, source: 'environment', bootstrapDir: answer.bootstrap ?? '' });
        }
      });
    });
  }

  /**
   * Say what the interpreter lacks, naming it, with a button to pick another. For the Python
   * extension's debug types (`everySession` false) once per interpreter and problem in a window:
   * those sessions may debug scripts that never meant to use torch.
   */
  async reportProblem(check: Extract<BackendCheck, { ok: false }>, everySession: boolean): Promise<void> {
    const { python, problem, detail } = check;
    const message = problemMessage(problem, python, detail);
    this.log.event('python.unsuitable', { python, problem, detail });
    this.log.warn(message);
    const key = `${problem}\u0000${python}`;
    if (!everySession && this.toldAbout.has(key)) return;
    this.toldAbout.add(key);
    const buttons = [problem === 'no-hookscope' ? USE_BUNDLED : undefined, SELECT_INTERPRETER, SHOW_LOG].filter((b): b is string => !!b);
    const choice = await vscode.window.showWarningMessage(`Hookscope: ${message}`, ...buttons);
    if (choice === SELECT_INTERPRETER) await vscode.commands.executeCommand(Commands.selectInterpreter);
    else if (choice === USE_BUNDLED) await setBackendSourceSetting('bundled');
    else if (choice === SHOW_LOG) this.log.show();
  }

  /**
   * Pick the interpreter Hookscope uses: the Python extension's picker when it is installed and no
   * `hookscope.pythonPath` overrides it, else a path typed in (saved as `hookscope.pythonPath`).
   */
  async selectInterpreter(): Promise<void> {
    const python = vscode.extensions.getExtension('ms-python.python');
    if (python && !pythonPathSetting()) {
      await vscode.commands.executeCommand('python.setInterpreter');
      this.reset();
      return;
    }
    const current = await this.interpreter();
    const chosen = await vscode.window.showInputBox({
      title: 'Hookscope: Python interpreter',
      prompt: 'Path of the Python interpreter your training runs in (it needs torch; saved as hookscope.pythonPath)',
      value: current,
      ignoreFocusOut: true,
      validateInput: (text) => (text.trim() ? undefined : 'An interpreter path, e.g. /home/me/venv/bin/python'),
    });
    if (chosen === undefined) return;
    await setPythonPathSetting(chosen.trim());
    this.log.event('python.selected', { python: chosen.trim() });
    this.reset();
  }
}
