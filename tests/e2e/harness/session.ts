// One test run in a real VS Code: a fresh run folder (workspace copy, HOME, user
// data, extensions, trace file), a fresh code-server with the extension
// installed, a fresh Chromium on the workbench, and a teardown that kills the
// whole process group and asserts that no process of the run is left.
import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { launchBrowser, type BrowserSession } from './browser.ts';
import { runEnvironment, startCodeServer, type CodeServer } from './codeServer.ts';
import { ARTIFACTS_DIR, RUNS_DIR } from './paths.ts';
import { describeProcesses, findRunProcesses } from './processes.ts';
import { TraceLog } from './trace.ts';
import { Workbench } from './workbench.ts';

export interface RunOptions {
  /** Test name: names the run and artifact folders. */
  name: string;
  /** .vsix files (or unpacked extension folders) to install. */
  extensions: string[];
  /** Folder copied into the run as the workspace. */
  workspaceSource: string;
  /** Files written into the workspace copy (relative path → content), e.g. .vscode/launch.json. */
  workspaceFiles?: Record<string, string>;
  /** User settings; `traceFile` (a path in the run folder) is passed to this to fill in. */
  settings: (paths: { traceFile: string; runDir: string; workspaceDir: string }) => Record<string, unknown>;
}

/** Settings every run gets: no port forwarding, no welcome page, tips, telemetry or auto updates. */
export const BASE_SETTINGS: Record<string, unknown> = {
  'remote.autoForwardPorts': false,
  'workbench.startupEditor': 'none',
  'workbench.secondarySideBar.defaultVisibility': 'hidden',
  'workbench.tips.enabled': false,
  'workbench.welcomePage.walkthroughs.openOnInstall': false,
  'workbench.enableExperiments': false,
  'telemetry.telemetryLevel': 'off',
  'extensions.autoUpdate': false,
  'extensions.autoCheckUpdates': false,
  'extensions.ignoreRecommendations': true,
  'update.mode': 'none',
  'security.workspace.trust.enabled': false,
  'git.enabled': false,
  'chat.disableAIFeatures': true,
  'files.autoSave': 'off',
  'editor.minimap.enabled': false,
  'debug.openDebug': 'openOnDebugBreak',
  'debug.internalConsoleOptions': 'neverOpen',
};

export class E2ERun {
  codeServer?: CodeServer;
  browser?: BrowserSession;
  workbench!: Workbench;
  trace!: TraceLog;
  readonly runDir: string;
  readonly workspaceDir: string;
  readonly traceFile: string;
  readonly artifactsDir: string;
  readonly envMarker: string;

  private constructor(readonly options: RunOptions) {
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    this.runDir = path.join(RUNS_DIR, `${options.name}-${stamp}`);
    this.workspaceDir = path.join(this.runDir, 'workspace');
    this.traceFile = path.join(this.runDir, 'trace.jsonl');
    this.artifactsDir = path.join(ARTIFACTS_DIR, options.name);
    this.envMarker = `HOOKSCOPE_E2E_RUN=${randomUUID()}`;
  }

  static async start(options: RunOptions): Promise<E2ERun> {
    const run = new E2ERun(options);
    fs.rmSync(run.artifactsDir, { recursive: true, force: true });
    fs.mkdirSync(run.runDir, { recursive: true });
    fs.cpSync(options.workspaceSource, run.workspaceDir, {
      recursive: true,
      filter: (src) => !/(__pycache__|\.hookscope-report)$/.test(src),
    });
    for (const [relative, content] of Object.entries(options.workspaceFiles ?? {})) {
      const file = path.join(run.workspaceDir, relative);
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, content);
    }
    run.trace = new TraceLog(run.traceFile);
    try {
      run.codeServer = await startCodeServer({
        runDir: run.runDir,
        extensions: options.extensions,
        envMarker: run.envMarker,
        userSettings: {
          ...BASE_SETTINGS,
          ...options.settings({ traceFile: run.traceFile, runDir: run.runDir, workspaceDir: run.workspaceDir }),
        },
      });
      run.browser = await launchBrowser(run.runDir, runEnvironment(run.runDir, run.envMarker));
      run.workbench = new Workbench(run.browser.page, run.artifactsDir);
      await run.workbench.open(run.codeServer.url, run.workspaceDir);
    } catch (error) {
      await run.stop().catch(() => undefined);
      throw error;
    }
    return run;
  }

  /** Screenshot on failure, close the browser, kill code-server's process group, assert nothing is left. */
  async stop(failed = false): Promise<void> {
    if (failed && this.browser) await this.workbench?.screenshot('failure').catch(() => undefined);
    await this.browser?.close();
    this.browser = undefined;
    try {
      await this.codeServer?.stop();
    } finally {
      this.copyLogs();
    }
    const left = findRunProcesses({ pgid: this.codeServer?.pgid, runDir: this.runDir, envMarker: this.envMarker });
    if (left.length > 0) throw new Error(`processes of the run are left after teardown:\n${describeProcesses(left)}`);
  }

  /** code-server, extension host and trace logs next to the screenshots, for a failed run. */
  private copyLogs(): void {
    fs.mkdirSync(this.artifactsDir, { recursive: true });
    const copy = (from: string, to: string) => {
      if (fs.existsSync(from)) fs.cpSync(from, path.join(this.artifactsDir, to), { recursive: true });
    };
    copy(path.join(this.runDir, 'code-server.log'), 'code-server.log');
    copy(this.traceFile, 'trace.jsonl');
    copy(path.join(this.runDir, 'user-data', 'logs'), 'vscode-logs');
  }
}
