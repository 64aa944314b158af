// Starts, restarts and stops the Hookscope language server (`python -m hookscope.lsp`, pygls over stdio)
// and forwards live layer summaries to it. Kept free of other extension internals: extension.ts wires it.
//
// Code lens commands the server emits (the extension implements them with exactly these arguments):
//   hookscope.toggleLayerBreakpoint  [LayerLensArgument & { phase: 'forward' | 'backward' }]
//   hookscope.watchLayer             [LayerLensArgument]
// See README.md in this folder for the full contract.

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import type { Readable } from 'node:stream';
import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  RevealOutputChannelOn,
  State,
  TransportKind,
  type LanguageClientOptions,
  type ServerOptions,
} from 'vscode-languageclient/node';
import { logServerLine, ServerLogLevels } from './serverLog';

export const LANGUAGE_SERVER_ID = 'hookscope.lsp';
export const LIVE_SUMMARIES_NOTIFICATION = 'hookscope/liveSummaries';
/** The settings section synchronised to the server (severity or 'off' per diagnostic code). */
export const DIAGNOSTICS_SETTINGS_SECTION = 'hookscope.diagnostics';

/** Argument of the layer code lenses' commands. Lines are 0-based. */
export interface LayerLensArgument {
  /** Document URI (as the editor sent it to the server). */
  uri: string;
  /** Line the lens sits on: the definition or the call site. */
  line: number;
  /** Only for hookscope.toggleLayerBreakpoint. */
  phase?: 'forward' | 'backward';
  /** Whether `line` is where the layer is constructed or where it is called (`self.conv1(x)`). */
  site: 'definition' | 'call';
  /** Line of the layer's constructor call (equals `line` for a definition). */
  definitionLine: number;
  /** Path relative to the owning class or variable: 'conv1', 'features.0', 'heads.cls', 'blocks.*', '' for a variable root. */
  layer: string;
  /** Class as written: 'Conv2d', or a user-defined module class. */
  cls: string;
  /** The nn.Module subclass that owns the attribute; absent for module-level variables. */
  owner?: string;
  /** A line with several layers: each of them (the fields above are the first one's). */
  layers?: Array<Pick<LayerLensArgument, 'site' | 'definitionLine' | 'layer' | 'cls' | 'owner'>>;
}

/** One module's last summary, as the server expects it. `line` is 1-based (as ModuleInfo.line). */
export interface LiveLayerSummary {
  shape?: number[] | string | null;
  mean?: number | null;
  std?: number | null;
  nan?: number | null;
  gradNorm?: number | null;
  /** Source file (path or URI) of the line that created the module. */
  file?: string | null;
  line?: number | null;
}

/**
 * Without `uri`, replaces every summary the server holds; with one, replaces those of that document.
 * An empty `layers` clears them (send it when the debug session ends).
 */
export interface LiveSummariesPayload {
  uri?: string;
  /** Keyed by qualified module name ('encoder.conv1', '' for a root). */
  layers: Record<string, LiveLayerSummary>;
}

/** Thrown by startLanguageServer when the server cannot run; the message says why and what to do. */
export class LanguageServerUnavailableError extends Error {
  constructor(
    message: string,
    /** 'not-installed': the interpreter lacks the hookscope it was asked to use; 'no-interpreter': pythonPath does not run; 'failed': it started and died. */
    readonly reason: 'not-installed' | 'no-interpreter' | 'failed',
  ) {
    super(message);
    this.name = 'LanguageServerUnavailableError';
  }
}

const MAX_RESTARTS = 3;
const PROBE_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 2_000;

/**
 * Starts the language server with `pythonPath` (the interpreter the debug sessions use).
 * Rejects with LanguageServerUnavailableError (after logging why) when the interpreter lacks hookscope
 * or the server cannot start; nothing else in the extension depends on it running.
 */
export async function startLanguageServer(
  context: vscode.ExtensionContext,
  pythonPath: string,
  log: vscode.LogOutputChannel,
  searchPath: readonly string[] = [],
): Promise<LanguageClient> {
  const env = serverEnv(searchPath);
  await probeInterpreter(pythonPath, log, env);

  const serverOptions: ServerOptions = {
    command: pythonPath,
    args: ['-m', 'hookscope.lsp'],
    transport: TransportKind.stdio,
    options: { env },
  };
  let crashes = 0;
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'python' },
      { scheme: 'untitled', language: 'python' },
    ],
    synchronize: { configurationSection: DIAGNOSTICS_SETTINGS_SECTION },
    initializationOptions: initializationOptions(context),
    outputChannel: log,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    // The client's default logs every stderr line as an error; the server's own records say their level.
    stdioOptions: { stdout: (input, channel) => eachLine(input, (line) => channel.info(line)), stderr: logStderr },
    // The server is a helper: its failures are logged, never shown as modal errors.
    initializationFailedHandler: (error) => {
      log.error(`Hookscope language server failed to initialize: ${String(error)}`);
      return false;
    },
    errorHandler: {
      error: (error, _message, count) => {
        log.warn(`Hookscope language server connection error (${count ?? 1}): ${error.message}`);
        return { action: (count ?? 1) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true };
      },
      closed: () => {
        crashes += 1;
        if (crashes > MAX_RESTARTS) {
          log.error(`Hookscope language server stopped ${crashes} times; not restarting it. Run "Developer: Reload Window" to try again.`);
          return { action: CloseAction.DoNotRestart, handled: true };
        }
        log.warn(`Hookscope language server stopped unexpectedly; restarting (${crashes}/${MAX_RESTARTS}).`);
        return { action: CloseAction.Restart, handled: true };
      },
    },
  };

  const client = new LanguageClient(LANGUAGE_SERVER_ID, 'Hookscope Language Server', serverOptions, clientOptions);
  client.onDidChangeState((event) => log.debug(`Hookscope language server: ${State[event.oldState]} -> ${State[event.newState]}`));
  try {
    await client.start();
  } catch (err) {
    await stopLanguageServer(client, log);
    const message = `Hookscope language server did not start with ${pythonPath}: ${(err as Error).message ?? String(err)}`;
    log.error(message);
    throw new LanguageServerUnavailableError(message, 'failed');
  }
  log.info(`Hookscope language server started (${pythonPath} -m hookscope.lsp).`);
  return client;
}

function eachLine(input: Readable, onLine: (line: string) => void): void {
  readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', onLine);
}

function logStderr(input: Readable, channel: vscode.LogOutputChannel): void {
  const levels = new ServerLogLevels(); // one per server process: a record never spans two
  eachLine(input, (line) => logServerLine(levels, channel, line));
}

/** Stops the server if it runs; never throws (logs instead). */
export async function stopLanguageServer(client: LanguageClient | undefined, log?: vscode.LogOutputChannel): Promise<void> {
  if (!client) return;
  try {
    if (client.needsStop()) await client.stop(STOP_TIMEOUT_MS);
  } catch (err) {
    log?.warn(`Hookscope language server did not stop cleanly: ${String(err)}`);
  }
  try {
    await client.dispose(STOP_TIMEOUT_MS);
  } catch {
    // already stopped: nothing left to release
  }
}

/** Stops `previous` (if any) and starts a fresh server, e.g. after the Python interpreter changed. */
export async function restartLanguageServer(
  previous: LanguageClient | undefined,
  context: vscode.ExtensionContext,
  pythonPath: string,
  log: vscode.LogOutputChannel,
  searchPath: readonly string[] = [],
): Promise<LanguageClient> {
  log.info('Restarting the Hookscope language server.');
  await stopLanguageServer(previous, log);
  return startLanguageServer(context, pythonPath, log, searchPath);
}

/**
 * The server's environment: `searchPath` (the bundled hookscope and its libraries) first on
 * PYTHONPATH, so the server runs the extension's own copy with any interpreter (it never imports torch).
 */
function serverEnv(searchPath: readonly string[]): NodeJS.ProcessEnv {
  const inherited = process.env.PYTHONPATH ? [process.env.PYTHONPATH] : [];
  const pythonPath = [...searchPath, ...inherited].join(path.delimiter);
  return { ...process.env, PYTHONUNBUFFERED: '1', ...(pythonPath ? { PYTHONPATH: pythonPath } : {}) };
}

/**
 * Sends the latest layer summaries; the server refreshes lenses and hovers.
 * Does nothing while the server is not running (the summaries are a convenience, never worth an error).
 */
export async function sendLiveSummaries(client: LanguageClient | undefined, payload: LiveSummariesPayload): Promise<void> {
  if (!client || client.state !== State.Running) return;
  await client.sendNotification(LIVE_SUMMARIES_NOTIFICATION, payload);
}

function initializationOptions(context: vscode.ExtensionContext): Record<string, unknown> {
  const options: Record<string, unknown> = {
    hookscope: { diagnostics: vscode.workspace.getConfiguration('hookscope').get<Record<string, string>>('diagnostics') ?? {} },
  };
  // Link each diagnostic's code to its explanation when the docs ship with the extension.
  const docs = context.asAbsolutePath('docs/diagnostics.md');
  if (existsSync(docs)) options.diagnosticsDocUrl = vscode.Uri.file(docs).toString();
  return options;
}

/** Fails fast, with an actionable message, when `pythonPath` cannot import hookscope.lsp. */
function probeInterpreter(pythonPath: string, log: vscode.LogOutputChannel, env: NodeJS.ProcessEnv): Promise<void> {
  const script = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('hookscope.lsp') else 3)";
  return new Promise((resolve, reject) => {
    execFile(pythonPath, ['-c', script], { timeout: PROBE_TIMEOUT_MS, env }, (error) => {
      if (!error) {
        resolve();
        return;
      }
      // execFile reports the exit status as a number in `code` (ENOENT & co. as strings).
      const code: unknown = (error as { code?: unknown }).code;
      let failure: LanguageServerUnavailableError;
      if (code === 3) {
        failure = new LanguageServerUnavailableError(
          `hookscope.backend is "environment", but the Python interpreter ${pythonPath} has no hookscope package, so code lenses ` +
            'and diagnostics are off. Install the hookscope wheel there, or set hookscope.backend to "bundled".',
          'not-installed',
        );
      } else {
        failure = new LanguageServerUnavailableError(
          `Could not run the Python interpreter ${pythonPath} to start the Hookscope language server: ${error.message}`,
          'no-interpreter',
        );
      }
      log.warn(failure.message);
      reject(failure);
    });
  });
}
