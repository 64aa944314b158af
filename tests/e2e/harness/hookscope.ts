// What every Hookscope spec shares: a run with hookscope.vsix installed, the
// examples workspace (with its launch.json) open, Hookscope's settings (the
// repo's venv, the trace file), and mocha plumbing for a file whose tests are
// consecutive steps of one user session in one code-server.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { EXAMPLES_DIR, HOOKSCOPE_VSIX, RUNS_DIR } from './paths.ts';
import { E2ERun } from './session.ts';
import { hookscopeSettings, launchJson, type LaunchTarget } from './workspace.ts';

let vsixCopy: string | undefined;

/** A private copy of hookscope.vsix for this test process (a rebuild meanwhile cannot mix versions). */
export function hookscopeVsix(): string {
  if (vsixCopy) return vsixCopy;
  if (!fs.existsSync(HOOKSCOPE_VSIX)) throw new Error(`${HOOKSCOPE_VSIX} not found: run 'make package' first`);
  fs.mkdirSync(RUNS_DIR, { recursive: true });
  vsixCopy = path.join(fs.mkdtempSync(path.join(RUNS_DIR, 'vsix-')), 'hookscope.vsix');
  fs.copyFileSync(HOOKSCOPE_VSIX, vsixCopy);
  return vsixCopy;
}

export interface HookscopeRunOptions {
  /** Interpreter for `hookscope.pythonPath` (default: the repo's .venv). */
  pythonPath?: string;
  /** More .vsix files (e.g. the debugpy stand-in). */
  extraExtensions?: string[];
  /** Launch configurations (default: the examples' with the `hookscope` type). */
  launches?: { targets?: LaunchTarget[]; type?: string };
  /** More user settings. */
  settings?: Record<string, unknown>;
  /** More workspace files (relative path → text), e.g. a model the examples do not have. */
  files?: Record<string, string>;
}

export function startHookscopeRun(name: string, options: HookscopeRunOptions = {}): Promise<E2ERun> {
  return E2ERun.start({
    name,
    extensions: [hookscopeVsix(), ...(options.extraExtensions ?? [])],
    workspaceSource: EXAMPLES_DIR,
    workspaceFiles: { ...options.files, '.vscode/launch.json': launchJson(options.launches?.targets, options.launches?.type) },
    settings: ({ traceFile }) => ({ ...hookscopeSettings({ traceFile, pythonPath: options.pythonPath }), ...options.settings }),
  });
}

/**
 * Mocha hooks for a describe block whose tests are steps of one session: one
 * run for the block (started by `start`), later steps skipped once one failed,
 * a screenshot and logs on failure, and the leftover-process check at the end.
 */
export function sessionSteps(start: () => Promise<E2ERun>): { run: () => E2ERun } {
  let current: E2ERun | undefined;
  let failed = false;
  before(async function () {
    current = await start();
  });
  beforeEach(function () {
    if (failed) this.skip();
  });
  afterEach(async function () {
    if (this.currentTest?.state === 'failed') {
      failed = true;
      await current?.workbench?.screenshot(`failed-${this.currentTest.title.slice(0, 40)}`).catch(() => undefined);
    }
  });
  after(async function () {
    await current?.stop();
    current = undefined;
  });
  return {
    run: () => {
      if (!current) throw new Error('the run did not start');
      return current;
    },
  };
}
