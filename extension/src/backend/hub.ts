// The window's Hookscope server and what it knows about every connected process.
//
// One TCP server per window on 127.0.0.1 (ephemeral port). Each debug session gets
// its own random token; any number of processes (workers, DDP ranks) may connect
// with it, each proving it holds the token (and the hub proving it back) in the
// handshake (connection.ts); at most MAX_PENDING_HANDSHAKES connections may be in
// the handshake at once. The hub keeps each process's models, shapes, pause state and
// interventions, sends the current layer breakpoints and break-on-NaN switch to
// every process when it connects (and again when it finds a model, so that
// breakpoints given by file/line resolve), and re-emits the backend's events.
// No `vscode` import: the Node-level integration test drives this directly.

import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { Emitter } from '../common/events';
import { nullTracer, type Logger, type Tracer } from '../common/logger';
import {
  MAX_PENDING_HANDSHAKES,
  type BreakpointSpec,
  type HitMessage,
  type ModelTree,
  type NoticeMessage,
  type RequestMap,
  type SummariesMessage,
  type TensorSummary,
  type InterventionInfo as ProtocolInterventionInfo,
  type Resolution as ProtocolResolution,
} from '../protocol/messages.gen';
import { BackendConnection, RequestError, type BackendEvent } from './connection';

/** Break on exploding / vanishing gradients: the thresholds (undefined: that switch is off). */
export interface GradientThresholds {
  exploding?: number;
  vanishing?: number;
}

export interface ModelState {
  tree: ModelTree;
  /** Last output shape of each layer (from `shapes` events). */
  shapes: Record<string, number[]>;
}

/** An active intervention, with the model it is on when the process has several. */
export interface InterventionInfo extends ProtocolInterventionInfo {
  model?: string;
}

/** What one breakpoint resolved to in one process. */
export type Resolution = ProtocolResolution;

export interface ProcessState {
  /** Connection id, unique in this window. */
  id: string;
  label: string;
  pid: number;
  rank: number;
  worldSize: number;
  sessionKey: string;
  python: string;
  torch: string;
  hookscope: string;
  argv: string[];
  debugger: boolean;
  models: Map<string, ModelState>;
  /** The hit this process is paused in, if any. */
  paused: HitMessage | undefined;
  interventions: InterventionInfo[];
  resolutions: Resolution[];
  /** Bumped when a model is added or removed: resolutions asked for before then may miss its layers. */
  modelsVersion: number;
  /** `modelsVersion` when the current `resolutions` were asked for (-1: never). */
  resolvedVersion: number;
  dropped: number;
}

/**
 * Whether a breakpoint that resolved to no layer in this process really matches none: the process
 * has models and its resolutions were asked for with all of them. Right after `modelAdded` they are
 * the older set's until the resend (150 ms later) answers, and a breakpoint is not judged on those.
 */
export function resolutionsJudgeable(p: Pick<ProcessState, 'models' | 'modelsVersion' | 'resolvedVersion'>): boolean {
  return p.models.size > 0 && p.resolvedVersion === p.modelsVersion;
}

export interface SessionTicket {
  key: string;
  token: string;
  /** host:port for HOOKSCOPE_ADDR */
  address: string;
  /** The environment variables the backend reads. */
  env: Record<string, string>;
}

export interface HubOptions {
  log: Logger;
  trace?: Tracer;
  requestTimeoutMs?: number;
  helloDeadlineMs?: number;
}

export class BackendHub {
  private server: Server | undefined;
  private port = 0;
  private readonly tokens = new Map<string, string>(); // token -> session key
  private handshaking = 0;
  private readonly connections = new Map<string, BackendConnection>();
  private readonly states = new Map<string, ProcessState>();
  private breakpoints: BreakpointSpec[] = [];
  private breakOnNonFinite = false;
  private gradientThresholds: GradientThresholds = {};
  private compiledEager = false;
  private readonly resendTimers = new Map<string, NodeJS.Timeout>();
  private readonly trace: Tracer;

  private readonly processesEmitter = new Emitter<void>();
  private readonly connectedEmitter = new Emitter<ProcessState>();
  private readonly exitedEmitter = new Emitter<{ process: ProcessState; reason: string }>();
  private readonly rejectedEmitter = new Emitter<{ reason: string }>();
  private readonly modelsEmitter = new Emitter<ProcessState>();
  private readonly hitEmitter = new Emitter<{ process: ProcessState; hit: HitMessage }>();
  private readonly resumedEmitter = new Emitter<{ process: ProcessState; layer: string }>();
  private readonly summariesEmitter = new Emitter<{ process: ProcessState; event: SummariesMessage }>();
  private readonly noticeEmitter = new Emitter<{ process: ProcessState; notice: NoticeMessage }>();
  private readonly resolvedEmitter = new Emitter<ProcessState>();
  private readonly interventionsEmitter = new Emitter<ProcessState>();

  /** The set of processes changed (connected, exited, paused, resumed). */
  readonly onDidChangeProcesses = this.processesEmitter.event;
  readonly onDidConnect = this.connectedEmitter.event;
  readonly onDidExit = this.exitedEmitter.event;
  /** A connection was refused (wrong token, protocol mismatch, no hello). */
  readonly onDidReject = this.rejectedEmitter.event;
  /** A process's models or shapes changed. */
  readonly onDidChangeModels = this.modelsEmitter.event;
  readonly onHit = this.hitEmitter.event;
  readonly onResumed = this.resumedEmitter.event;
  readonly onSummaries = this.summariesEmitter.event;
  readonly onNotice = this.noticeEmitter.event;
  /** A process answered setBreakpoints; see `process.resolutions`. */
  readonly onDidResolveBreakpoints = this.resolvedEmitter.event;
  readonly onDidChangeInterventions = this.interventionsEmitter.event;

  constructor(private readonly options: HubOptions) {
    this.trace = options.trace ?? nullTracer;
  }

  /** Listen on 127.0.0.1 on an ephemeral port; returns the port. */
  async start(): Promise<number> {
    if (this.server) return this.port;
    const server = createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.options.log.error(`server error: ${err.message}`));
    this.server = server;
    const address = server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
    this.options.log.info(`listening on 127.0.0.1:${this.port}`);
    this.trace.event('server.listening', { port: this.port });
    return this.port;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** A new debug session: a fresh key and token, and the environment its processes need. */
  openSession(): SessionTicket {
    const key = randomUUID();
    const token = randomBytes(24).toString('hex');
    this.tokens.set(token, key);
    return {
      key,
      token,
      address: this.address,
      env: { HOOKSCOPE_ADDR: this.address, HOOKSCOPE_TOKEN: token, HOOKSCOPE_SESSION: key },
    };
  }

  /** The debug session ended: its token stops working and its processes are told goodbye. */
  closeSession(key: string, reason: string): void {
    for (const [token, session] of this.tokens) {
      if (session === key) this.tokens.delete(token);
    }
    for (const connection of [...this.connections.values()]) {
      if (connection.sessionKey === key) connection.sayGoodbye(reason);
    }
  }

  processes(): ProcessState[] {
    return [...this.states.values()];
  }

  process(id: string): ProcessState | undefined {
    return this.states.get(id);
  }

  processesOfSession(key: string): ProcessState[] {
    return this.processes().filter((p) => p.sessionKey === key);
  }

  modelCount(): number {
    return this.processes().reduce((n, p) => n + p.models.size, 0);
  }

  /** Typed request to one process. */
  request<K extends keyof RequestMap>(
    processId: string,
    type: K,
    params: RequestMap[K]['params'],
    timeoutMs?: number,
  ): Promise<RequestMap[K]['result']> {
    const connection = this.connections.get(processId);
    if (!connection) return Promise.reject(new RequestError('notAvailable', 'that process is no longer connected'));
    return connection.request(type, params, timeoutMs);
  }

  /** Replace the layer breakpoints everywhere (and in every process that connects later). */
  async setBreakpoints(specs: BreakpointSpec[]): Promise<void> {
    this.breakpoints = specs;
    await Promise.all(this.processes().map((p) => this.sendBreakpoints(p)));
  }

  async setBreakOnNonFinite(enabled: boolean): Promise<void> {
    this.breakOnNonFinite = enabled;
    this.trace.event('breakOnNonFinite', { enabled });
    await Promise.all(this.processes().map((p) => this.sendSwitch(p, 'setBreakOnNonFinite', enabled)));
  }

  /** Break on exploding/vanishing gradients in every process (and those that connect later). */
  async setBreakOnGradients(thresholds: GradientThresholds): Promise<void> {
    this.gradientThresholds = { ...thresholds };
    this.trace.event('breakOnGradients', { ...thresholds });
    await Promise.all(this.processes().map((p) => this.sendGradients(p)));
  }

  private async sendGradients(state: ProcessState): Promise<void> {
    const { exploding, vanishing } = this.gradientThresholds;
    try {
      await this.request(state.id, 'setBreakOnGradients', {
        ...(exploding !== undefined ? { exploding } : {}), ...(vanishing !== undefined ? { vanishing } : {}),
      });
    } catch (err) {
      this.options.log.warn(`[${state.label}] setBreakOnGradients failed: ${(err as Error).message}`);
    }
  }

  /** Run torch.compile'd code eagerly in every process (and those that connect later), so hooks inside fire. */
  async setCompiledEager(enabled: boolean): Promise<void> {
    this.compiledEager = enabled;
    this.trace.event('compiledEager', { enabled });
    await Promise.all(this.processes().map((p) => this.sendSwitch(p, 'setCompiledEager', enabled)));
  }

  private async sendSwitch(p: ProcessState, type: 'setBreakOnNonFinite' | 'setCompiledEager', enabled: boolean): Promise<void> {
    try {
      await this.request(p.id, type, { enabled });
    } catch (err) {
      this.options.log.warn(`[${p.label}] ${type} failed: ${(err as Error).message}`);
    }
  }

  /** Refresh a process's active interventions from the backend. */
  async refreshInterventions(processId: string): Promise<InterventionInfo[]> {
    const state = this.states.get(processId);
    if (!state) return [];
    const result = await this.request(processId, 'listInterventions', {});
    state.interventions = (result.interventions as InterventionInfo[]).filter((i) => i && typeof i.id === 'string');
    this.interventionsEmitter.fire(state);
    return state.interventions;
  }

  /** Say goodbye to every process and stop listening. */
  dispose(): void {
    for (const connection of [...this.connections.values()]) connection.sayGoodbye('the editor window is closing');
    for (const timer of this.resendTimers.values()) clearTimeout(timer);
    this.server?.close();
    this.server = undefined;
  }

  private accept(socket: Socket): void {
    if (this.handshaking >= MAX_PENDING_HANDSHAKES) {
      // Unknown local clients cost the extension host O(1) each, and only so many at once.
      socket.destroy();
      this.trace.event('connection.rejected', { reason: 'too many connections in the handshake' });
      return;
    }
    this.handshaking += 1;
    let handshaking = true;
    const handshakeOver = (): void => {
      if (handshaking) this.handshaking -= 1;
      handshaking = false;
    };
    const connection = new BackendConnection(socket, {
      sessions: () => this.tokens.entries(),
      log: this.options.log,
      helloDeadlineMs: this.options.helloDeadlineMs,
      requestTimeoutMs: this.options.requestTimeoutMs,
    });
    connection.onReady(() => {
      handshakeOver();
      this.onReady(connection);
    });
    connection.onClose(({ reason, handshake }) => {
      handshakeOver();
      if (handshake) {
        this.options.log.warn(`refused a connection: ${reason}`);
        this.trace.event('connection.rejected', { reason });
        this.rejectedEmitter.fire({ reason });
      } else {
        this.onExit(connection, reason);
      }
    });
  }

  private onReady(connection: BackendConnection): void {
    const info = connection.process!;
    const state: ProcessState = {
      id: connection.id,
      label: connection.label,
      pid: info.pid,
      rank: info.rank,
      worldSize: info.worldSize,
      sessionKey: connection.sessionKey!,
      python: info.python,
      torch: info.torch,
      hookscope: info.hookscope,
      argv: info.argv,
      debugger: info.debugger,
      models: new Map(),
      paused: undefined,
      interventions: [],
      resolutions: [],
      modelsVersion: 0,
      resolvedVersion: -1,
      dropped: 0,
    };
    this.connections.set(connection.id, connection);
    this.states.set(connection.id, state);
    connection.onEvent((event) => this.onEvent(state, event));
    this.options.log.info(
      `${state.label} connected (hookscope ${state.hookscope}, torch ${state.torch}, python ${state.python}` +
        `${state.debugger ? ', under the debugger' : ''})`,
    );
    this.trace.event('hello', {
      process: state.id, pid: state.pid, rank: state.rank, worldSize: state.worldSize,
      session: state.sessionKey, hookscope: state.hookscope, debugger: state.debugger,
    });
    this.connectedEmitter.fire(state);
    this.processesEmitter.fire();
    void this.sendBreakpoints(state);
    if (this.breakOnNonFinite) void this.sendSwitch(state, 'setBreakOnNonFinite', true);
    if (this.gradientThresholds.exploding !== undefined || this.gradientThresholds.vanishing !== undefined) {
      void this.sendGradients(state);
    }
    if (this.compiledEager) void this.sendSwitch(state, 'setCompiledEager', true);
  }

  private onExit(connection: BackendConnection, reason: string): void {
    const state = this.states.get(connection.id);
    this.connections.delete(connection.id);
    this.states.delete(connection.id);
    clearTimeout(this.resendTimers.get(connection.id));
    this.resendTimers.delete(connection.id);
    if (!state) return;
    this.options.log.info(`${state.label} disconnected: ${reason}`);
    this.trace.event('process.exited', { process: state.id, pid: state.pid, reason });
    this.exitedEmitter.fire({ process: state, reason });
    this.processesEmitter.fire();
  }

  private onEvent(state: ProcessState, event: BackendEvent): void {
    switch (event.type) {
      case 'modelAdded': {
        const tree = event.model;
        if (!tree || typeof tree.id !== 'string' || !Array.isArray(tree.modules)) {
          this.options.log.warn(`[${state.label}] modelAdded without a usable model tree`);
          return;
        }
        state.models.set(tree.id, { tree, shapes: state.models.get(tree.id)?.shapes ?? {} });
        state.modelsVersion += 1;
        this.trace.event('modelAdded', {
          process: state.id, pid: state.pid, model: tree.id, name: tree.name, cls: tree.cls, modules: tree.modules.length,
        });
        this.modelsEmitter.fire(state);
        this.processesEmitter.fire();
        this.scheduleBreakpointResend(state);
        return;
      }
      case 'modelRemoved':
        state.models.delete(event.id);
        state.modelsVersion += 1;
        this.trace.event('modelRemoved', { process: state.id, model: event.id });
        this.modelsEmitter.fire(state);
        this.processesEmitter.fire();
        return;
      case 'shapes': {
        const model = state.models.get(event.model);
        if (model) {
          model.shapes = { ...model.shapes, ...event.shapes };
          this.modelsEmitter.fire(state);
        }
        return;
      }
      case 'hit':
        state.paused = event.pausing ? event : undefined;
        this.trace.event('hit', {
          process: state.id, pid: state.pid, rank: state.rank, worldSize: state.worldSize,
          breakpoint: event.breakpoint, model: event.model, layer: event.layer, phase: event.phase,
          reason: event.reason, step: event.step, pausing: event.pausing, origin: event.origin,
          tensors: event.summaries.length,
        });
        this.options.log.info(`[${state.label}] ${event.reason}${event.pausing ? '' : ' (no debugger: logged)'}`);
        this.hitEmitter.fire({ process: state, hit: event });
        this.processesEmitter.fire();
        return;
      case 'resumed':
        this.markResumed(state, event.layer);
        return;
      case 'summaries':
        this.summariesEmitter.fire({ process: state, event });
        return;
      case 'notice':
        this.options.log[event.level === 'error' ? 'error' : event.level === 'warning' ? 'warn' : 'info'](
          `[${state.label}] ${event.message}`,
        );
        this.trace.event('notice', { process: state.id, level: event.level, message: event.message, code: event.code });
        this.noticeEmitter.fire({ process: state, notice: event });
        return;
      case 'stats':
        state.dropped = event.dropped;
        this.options.log.debug(`[${state.label}] ${event.dropped} events dropped so far, ${event.queued} queued`);
        return;
    }
  }

  /** The debugger resumed a paused process (backend `resumed` event or DAP `continued`). */
  markResumed(state: ProcessState, layer?: string): void {
    if (!state.paused) return;
    const was = state.paused;
    state.paused = undefined;
    this.trace.event('resumed', { process: state.id, layer: layer ?? was.layer });
    this.resumedEmitter.fire({ process: state, layer: layer ?? was.layer });
    this.processesEmitter.fire();
  }

  private scheduleBreakpointResend(state: ProcessState): void {
    if (this.breakpoints.length === 0) return;
    clearTimeout(this.resendTimers.get(state.id));
    this.resendTimers.set(
      state.id,
      setTimeout(() => {
        this.resendTimers.delete(state.id);
        if (this.states.has(state.id)) void this.sendBreakpoints(state);
      }, 150),
    );
  }

  private async sendBreakpoints(state: ProcessState): Promise<void> {
    const specs = this.breakpoints;
    if (specs.length === 0 && state.resolutions.length === 0) return; // nothing set, nothing to clear
    const modelsVersion = state.modelsVersion;
    try {
      const result = await this.request(state.id, 'setBreakpoints', { breakpoints: specs });
      if (specs !== this.breakpoints) return; // a newer set is on its way
      state.resolutions = normalizeResolutions(result.resolved);
      state.resolvedVersion = modelsVersion;
      this.trace.event('breakpoints.resolved', { process: state.id, pid: state.pid, resolved: state.resolutions });
      this.resolvedEmitter.fire(state);
    } catch (err) {
      this.options.log.warn(`[${state.label}] setBreakpoints failed: ${(err as Error).message}`);
    }
  }
}

/** The backend's `resolved` list, checked field by field (it is typed `unknown[]` on the wire). */
export function normalizeResolutions(resolved: unknown[]): Resolution[] {
  const out: Resolution[] = [];
  for (const entry of resolved ?? []) {
    if (!entry || typeof entry !== 'object') continue;
    const e = entry as Record<string, unknown>;
    if (typeof e.id !== 'string') continue;
    out.push({
      id: e.id,
      layers: Array.isArray(e.layers) ? e.layers.filter((l): l is string => typeof l === 'string') : [],
      error: typeof e.error === 'string' ? e.error : undefined,
    });
  }
  return out;
}

export type { TensorSummary };
