// The language server's life in this window: started at activation with the debug sessions'
// interpreter, restarted when that interpreter changes or on request, told what the running
// session sees (shapes and summaries per layer, at a readable rate), stopped with the window.

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { BackendHub } from '../backend/hub';
import type { ExtensionLog } from '../common/log';
import type { PythonEnvironment } from '../debug/python';
import {
  LanguageServerUnavailableError,
  restartLanguageServer,
  sendLiveSummaries,
  startLanguageServer,
  stopLanguageServer,
} from './client';
import { LiveLayerFeed } from './liveFeed';

/** Lenses and hovers refresh at most this often while a session streams shapes and summaries. */
const FEED_INTERVAL_MS = 500;

export class LanguageServerService implements vscode.Disposable {
  private client: LanguageClient | undefined;
  /** The start or restart in progress; restarts queue behind it. */
  private pending: Promise<void> = Promise.resolve();
  private readonly feed = new LiveLayerFeed();
  private feedTimer: NodeJS.Timeout | undefined;
  /** Whether the server was last told about a session (so the end of it is sent once). */
  private toldLive = false;
  private readonly subscriptions: vscode.Disposable[] = [];
  private disposed = false;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly hub: BackendHub,
    private readonly python: PythonEnvironment,
    private readonly log: ExtensionLog,
  ) {
    this.subscriptions.push(
      hub.onHit(({ process, hit }) => {
        this.feed.record(process.id, hit.model, hit.layer, hit.summaries);
        this.scheduleFeed();
      }),
      hub.onSummaries(({ process, event }) => {
        this.feed.record(process.id, event.model, event.layer, event.tensors);
        this.scheduleFeed();
      }),
      hub.onDidChangeModels(() => this.scheduleFeed()),
      hub.onDidChangeProcesses(() => this.scheduleFeed()),
    );
  }

  /** Start (or restart) the server with the current interpreter; failures are logged, never thrown. */
  restart(): Promise<void> {
    this.pending = this.pending.then(() => this.startNow());
    return this.pending;
  }

  private async startNow(): Promise<void> {
    if (this.disposed) return;
    const pythonPath = await this.python.interpreter();
    const searchPath = this.python.languageServerPath(); // the bundled hookscope and pygls, unless the interpreter's are chosen
    try {
      this.client = this.client
        ? await restartLanguageServer(this.client, this.context, pythonPath, this.log.channel, searchPath)
        : await startLanguageServer(this.context, pythonPath, this.log.channel, searchPath);
      this.log.event('lsp.started', { python: pythonPath });
      this.toldLive = false;
      this.scheduleFeed();
    } catch (err) {
      this.client = undefined;
      const reason = err instanceof LanguageServerUnavailableError ? err.reason : 'failed';
      // Code lenses and diagnostics are a convenience: no pop-up (a debug session says what is missing).
      this.log.event('lsp.unavailable', { python: pythonPath, reason, message: (err as Error).message });
    }
  }

  private scheduleFeed(): void {
    if (this.feedTimer || this.disposed) return;
    this.feedTimer = setTimeout(() => {
      this.feedTimer = undefined;
      void this.sendFeed();
    }, FEED_INTERVAL_MS);
  }

  private async sendFeed(): Promise<void> {
    const processes = this.hub.processes();
    if (processes.length === 0) {
      this.feed.clear();
      if (!this.toldLive) return;
    }
    const payload = this.feed.payload(processes);
    this.toldLive = Object.keys(payload.layers).length > 0;
    try {
      await sendLiveSummaries(this.client, payload);
    } catch (err) {
      this.log.debug(`live summaries not delivered to the language server: ${(err as Error).message}`);
    }
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.feedTimer);
    for (const d of this.subscriptions) d.dispose();
    void stopLanguageServer(this.client, this.log.channel);
    this.client = undefined;
  }
}
