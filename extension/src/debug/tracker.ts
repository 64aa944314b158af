// Follows the Python debug sessions Hookscope joined: which session owns which backend
// processes, when the debugger stops, continues or ends. A `stopped` event that follows a
// layer-breakpoint hit gets the hit's reason as its description ("Layer breakpoint:
// layer1.0.conv1 (backward)"), which the Call Stack view shows. When a session ends its
// processes are told goodbye and their state is cleared.

import * as vscode from 'vscode';
import type { BackendHub, ProcessState } from '../backend/hub';
import type { HitMessage } from '../protocol/messages.gen';
import type { ExtensionLog } from '../common/log';
import { PYTHON_DEBUG_TYPES } from '../constants';
import { ATTACH_PROPERTY, type AttachInjection } from './configurationProvider';
import { SESSION_KEY_PROPERTY } from './launchEnv';

/** A hit is matched to the debugger's next `stopped` event when it came at most this long before. */
const HIT_MATCH_WINDOW_MS = 10000;
/** A hit arriving this soon after a stop no hit named is that stop's (it was overtaken), not the next's. */
const LATE_HIT_WINDOW_MS = 2000;

const RESUMING_REQUESTS = new Set(['continue', 'next', 'stepIn', 'stepOut', 'reverseContinue', 'stepBack', 'goto']);
/** The requests and replies that fill the Call Stack and Variables views after a stop: when each
 * passes is traced (opt-in trace only), so a stop's time to a filled Variables view splits into the
 * adapter's part and the workbench's (bench/editor/latency.bench.ts). */
const VIEW_FILLING_REPLIES = new Set(['stackTrace', 'scopes', 'variables']);

interface DapMessage {
  type: string;
  event?: string;
  command?: string;
  success?: boolean;
  arguments?: Record<string, unknown>;
  body?: Record<string, unknown>;
}

/** What a stackTrace request asks and its reply gives (which frames, how many): the Call Stack's "Load More" depends on it. */
function stackTraceDetail(message: DapMessage): Record<string, unknown> {
  if (message.command !== 'stackTrace') return {};
  if (message.type === 'request') return { startFrame: message.arguments?.startFrame ?? null, levels: message.arguments?.levels ?? null };
  const frames = message.body?.stackFrames;
  return { success: message.success ?? null, frames: Array.isArray(frames) ? frames.length : null, totalFrames: message.body?.totalFrames ?? null };
}

export class DebugSessionTracker implements vscode.DebugAdapterTrackerFactory, vscode.Disposable {
  private readonly sessions = new Map<string, vscode.DebugSession>(); // hookscope key -> session
  /** Processes debugged by a child session of their own (debugpy followed them as subprocesses). */
  private readonly subprocessPids = new Set<number>();
  private readonly recentHits = new Map<string, { hit: HitMessage; process: ProcessState; at: number }>(); // key -> last hit
  /** key -> when the debugger stopped with no hit to name it (the hit may still be on its way). */
  private readonly unnamedStops = new Map<string, number>();
  private readonly disposables: vscode.Disposable[] = [];
  private readonly stoppedEmitter = new vscode.EventEmitter<{ session: vscode.DebugSession; reason: string; description?: string }>();
  private readonly continuedEmitter = new vscode.EventEmitter<vscode.DebugSession>();
  /** The debugger stopped in a session Hookscope joined. */
  readonly onDidStop = this.stoppedEmitter.event;
  readonly onDidContinue = this.continuedEmitter.event;

  constructor(private readonly hub: BackendHub, private readonly log: ExtensionLog) {
    this.disposables.push(
      this.stoppedEmitter,
      this.continuedEmitter,
      vscode.debug.onDidStartDebugSession((s) => this.onStart(s)),
      vscode.debug.onDidTerminateDebugSession((s) => this.onEnd(s)),
      hub.onHit(({ process, hit }) => {
        if (!hit.pausing) return;
        const unnamed = this.unnamedStops.get(process.sessionKey);
        this.unnamedStops.delete(process.sessionKey);
        // The debugger's stop overtook this hit (two sockets, no order between them): it belongs
        // to the stop already shown, and must not name the next one.
        if (unnamed !== undefined && Date.now() - unnamed < LATE_HIT_WINDOW_MS) return;
        this.recentHits.set(process.sessionKey, { hit, process, at: Date.now() });
      }),
    );
    for (const type of PYTHON_DEBUG_TYPES) {
      this.disposables.push(vscode.debug.registerDebugAdapterTrackerFactory(type, this));
    }
  }

  /** Hookscope's key of a VS Code debug session (child sessions share their parent's). */
  keyOf(session: vscode.DebugSession | undefined): string | undefined {
    for (let s = session; s; s = s.parentSession) {
      const key: unknown = s.configuration[SESSION_KEY_PROPERTY];
      if (typeof key === 'string') return key;
    }
    return undefined;
  }

  sessionFor(key: string): vscode.DebugSession | undefined {
    return this.sessions.get(key);
  }

  createDebugAdapterTracker(session: vscode.DebugSession): vscode.DebugAdapterTracker | undefined {
    const key = this.keyOf(session);
    if (!key) return undefined;
    return {
      onDidSendMessage: (message: DapMessage) => this.onAdapterMessage(session, key, message),
      onWillReceiveMessage: (message: DapMessage) => {
        if (message.type === 'request' && VIEW_FILLING_REPLIES.has(message.command ?? '')) {
          this.log.event('dap.request', { session: key, command: message.command, ...stackTraceDetail(message) });
        }
        // The user pressed Continue/Step: the paused process runs again (debugpy may not send `continued`).
        if (message.type === 'request' && RESUMING_REQUESTS.has(message.command ?? '')) {
          this.recentHits.delete(key);
          this.unnamedStops.delete(key);
          this.resumeProcesses(key, session);
        }
      },
      onExit: (code, signal) => this.log.debug(`debug adapter of "${session.name}" exited (${code ?? signal})`),
    };
  }

  private onAdapterMessage(session: vscode.DebugSession, key: string, message: DapMessage): void {
    if (message.type === 'response' && message.command === 'configurationDone' && message.success) {
      const injection = session.configuration[ATTACH_PROPERTY] as AttachInjection | undefined;
      if (injection) void this.startAgentInAttachedProcess(session, injection);
      return;
    }
    if (message.type === 'response' && VIEW_FILLING_REPLIES.has(message.command ?? '')) {
      this.log.event('dap.reply', { session: key, command: message.command, ...stackTraceDetail(message) });
      return;
    }
    if (message.type !== 'event') return;
    switch (message.event) {
      case 'stopped': {
        const body = (message.body ??= {});
        const recent = this.recentHits.get(key);
        let description: string | undefined;
        if (recent && Date.now() - recent.at < HIT_MATCH_WINDOW_MS && recent.process.paused) {
          // The hit came over Hookscope's socket just before debugpy paused: name the layer.
          description = recent.hit.reason;
          body.description = description;
          this.recentHits.delete(key);
        } else {
          this.unnamedStops.set(key, Date.now());
        }
        const reason = typeof body.reason === 'string' ? body.reason : '';
        this.log.event('dap.stopped', { session: key, reason, description: description ?? null, threadId: body.threadId });
        this.stoppedEmitter.fire({ session, reason, description });
        return;
      }
      case 'continued':
        // Not a reason to mark Hookscope's processes resumed: debugpy may send this after the
        // thread has already paused again at the next hit. The continue request (above) and the
        // backend's own `resumed` event are what end a pause.
        this.log.event('dap.continued', { session: key });
        this.continuedEmitter.fire(session);
        return;
      case 'terminated':
      case 'exited':
        this.log.event(`dap.${message.event}`, { session: key });
        return;
    }
  }

  /**
   * DAP `continue` resumes every thread of one debugged process: a subprocess's own session resumes
   * that process only; the launched program's session, the processes no child session owns.
   */
  private resumeProcesses(key: string, session: vscode.DebugSession): void {
    const pid: unknown = session.configuration.subProcessId;
    for (const p of this.hub.processesOfSession(key)) {
      const own = typeof pid === 'number' ? p.pid === pid : !this.subprocessPids.has(p.pid);
      if (own) this.hub.markResumed(p);
    }
  }

  private onStart(session: vscode.DebugSession): void {
    const key = this.keyOf(session);
    if (!key) return;
    if (session.parentSession) {
      // A subprocess debugpy follows (a DDP rank, a child script): VS Code opened this session when
      // debugpy asked (DAP startDebugging); its configuration passed through the provider untouched.
      const pid: unknown = session.configuration.subProcessId;
      if (typeof pid === 'number') this.subprocessPids.add(pid);
      this.log.event('session.child', { session: key, name: session.name, subProcessId: pid ?? null });
      return;
    }
    this.sessions.set(key, session);
    this.log.event('session.started', { session: key, name: session.name, type: session.type });
  }

  private onEnd(session: vscode.DebugSession): void {
    const pid: unknown = session.configuration.subProcessId;
    if (session.parentSession && typeof pid === 'number') this.subprocessPids.delete(pid);
    const key = this.keyOf(session);
    if (!key || this.sessions.get(key) !== session) return;
    this.sessions.delete(key);
    this.recentHits.delete(key);
    const processes = this.hub.processesOfSession(key).length;
    this.log.info(`debug session "${session.name}" ended; ${processes ? `disconnecting ${processes} process(es)` : 'no process left'}`);
    this.log.event('session.ended', { session: key, processes });
    this.hub.closeSession(key, 'the debug session ended');
  }

  /** Attach: start the agent in the running process through DAP evaluate (debugpy runs it on its own thread). */
  private async startAgentInAttachedProcess(session: vscode.DebugSession, injection: AttachInjection): Promise<void> {
    // The bootstrap's hookscope_boot starts the hookscope it belongs to (the bundled one, or the interpreter's).
    const expression =
      `__import__('sys').path.insert(0, ${JSON.stringify(injection.bootstrapDir)}) or ` +
      `__import__('hookscope_boot').connect(${JSON.stringify(injection.address)}, ${JSON.stringify(injection.token)}, ` +
      `${injection.libsDir ? JSON.stringify(injection.libsDir) : 'None'})`;
    try {
      await session.customRequest('evaluate', { expression, context: 'repl' });
      this.log.info(`started the Hookscope agent in the attached process of "${session.name}"`);
    } catch (err) {
      this.log.warn(`could not start the Hookscope agent in the attached process: ${(err as Error).message}`);
    }
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
