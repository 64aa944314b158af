// One debuggee process connected to the extension's server: handshake, typed requests, events.
//
// The first frame must be a valid `hello` with a known token and our protocol version,
// within HELLO_DEADLINE_MS, or the connection is closed with a clear reason. After that,
// replies are matched to requests by id (with a timeout), events are validated and
// emitted, and a message that breaks the protocol gets an error reply instead of
// crashing anything. No `vscode` import: the integration test drives this directly.

import { timingSafeEqual } from 'node:crypto';
import type { Socket } from 'node:net';
import { Emitter } from '../common/events';
import type { Logger } from '../common/logger';
import { FrameReader, ProtocolError, frameMessage, validate } from '../protocol/codec';
import {
  HELLO_DEADLINE_MS,
  MESSAGE_SPECS,
  PROTOCOL_VERSION,
  type FromBackend,
  type HelloMessage,
  type ReplyMessage,
  type RequestMap,
} from '../protocol/messages.gen';

/** A backend event (everything the backend sends except `hello` and replies). */
export type BackendEvent = Exclude<FromBackend, HelloMessage | ReplyMessage>;

/** An error reply from the backend, or a request that could not complete. */
export class RequestError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = 'RequestError';
  }
}

export type ConnectionState = 'handshake' | 'ready' | 'closed';

export interface ConnectionOptions {
  /** Session key for a token the server handed out, undefined for an unknown token. */
  sessionForToken(token: string): string | undefined;
  log: Logger;
  helloDeadlineMs?: number;
  requestTimeoutMs?: number;
}

interface Pending {
  type: string;
  resolve(body: unknown): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

let nextConnectionNumber = 1;

/** Constant-time comparison of two tokens (the length itself is not secret). */
export function tokensEqual(a: string, b: string): boolean {
  const x = Buffer.from(a, 'utf8');
  const y = Buffer.from(b, 'utf8');
  return x.length === y.length && timingSafeEqual(x, y);
}

export class BackendConnection {
  readonly id = `c${nextConnectionNumber++}`;
  state: ConnectionState = 'handshake';
  hello: HelloMessage | undefined;
  sessionKey: string | undefined;
  /** Why the connection closed, once it has. */
  closeReason: string | undefined;

  private readonly reader = new FrameReader();
  private readonly pending = new Map<number, Pending>();
  private nextRequestId = 1;
  private helloTimer: NodeJS.Timeout | undefined;

  private readonly readyEmitter = new Emitter<BackendConnection>();
  private readonly eventEmitter = new Emitter<BackendEvent>();
  private readonly closeEmitter = new Emitter<{ reason: string; handshake: boolean }>();
  /** The hello was accepted. */
  readonly onReady = this.readyEmitter.event;
  readonly onEvent = this.eventEmitter.event;
  /** The socket closed; `handshake` says it never got past the hello. */
  readonly onClose = this.closeEmitter.event;

  constructor(private readonly socket: Socket, private readonly options: ConnectionOptions) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => this.options.log.debug(`[${this.label}] socket error: ${err.message}`));
    socket.on('close', () => this.finish(this.closeReason ?? 'the process closed the connection'));
    this.helloTimer = setTimeout(
      () => this.close(`no valid hello within ${options.helloDeadlineMs ?? HELLO_DEADLINE_MS} ms`),
      options.helloDeadlineMs ?? HELLO_DEADLINE_MS,
    );
  }

  /** "pid 1234 · rank 0" once known. */
  get label(): string {
    if (!this.hello) return `connection ${this.id}`;
    const rank = this.hello.worldSize > 1 ? ` · rank ${this.hello.rank}/${this.hello.worldSize}` : '';
    return `pid ${this.hello.pid}${rank}`;
  }

  /** Send a request and wait for its reply body. Rejects with RequestError on an error reply, timeout or close. */
  request<K extends keyof RequestMap>(
    type: K,
    params: RequestMap[K]['params'],
    timeoutMs = this.options.requestTimeoutMs ?? 15000,
  ): Promise<RequestMap[K]['result']> {
    if (this.state !== 'ready') {
      return Promise.reject(new RequestError('notAvailable', `${this.label} is not connected`));
    }
    const id = this.nextRequestId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RequestError('timeout', `${type} to ${this.label} got no reply within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { type, resolve: resolve as (b: unknown) => void, reject, timer });
      try {
        this.write({ ...params, type, id });
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  /** Tell the backend the editor is leaving (it removes every hook and resumes), then close. */
  sayGoodbye(reason: string): void {
    if (this.state === 'ready') {
      try {
        this.write({ type: 'bye' });
      } catch {
        // closing anyway
      }
    }
    this.close(reason, true);
  }

  /** Close the connection; `graceful` lets written frames drain first. */
  close(reason: string, graceful = false): void {
    if (this.state === 'closed') return;
    this.closeReason ??= reason;
    if (graceful) {
      this.socket.end();
      setTimeout(() => this.socket.destroy(), 1000).unref();
    } else {
      this.socket.destroy();
    }
    this.finish(reason);
  }

  private isClosed(): boolean {
    return this.state === 'closed';
  }

  private write(message: object): void {
    this.socket.write(frameMessage(message));
  }

  private onData(chunk: Buffer): void {
    if (this.state === 'closed') return;
    let messages: unknown[];
    try {
      messages = this.reader.feed(chunk);
    } catch (err) {
      // A broken frame leaves the stream unusable: say why and close.
      const error = err instanceof ProtocolError ? err : new ProtocolError('badMessage', String(err));
      this.options.log.warn(`[${this.label}] ${error.message}; closing the connection`);
      this.sendError(-1, error);
      this.close(`protocol error: ${error.message}`, true);
      return;
    }
    for (const message of messages) {
      if (this.isClosed()) return;
      this.onMessage(message);
    }
  }

  private onMessage(message: unknown): void {
    if (this.state === 'handshake' && this.refusedBeforeValidation(message)) return;
    try {
      validate(message);
    } catch (err) {
      const error = err as ProtocolError;
      const re = typeof (message as { id?: unknown })?.id === 'number' ? (message as { id: number }).id : -1;
      this.options.log.warn(`[${this.label}] refused a message: ${error.message}`);
      this.sendError(re, error);
      if (this.state === 'handshake') this.close(`the first message was not a valid hello: ${error.message}`, true);
      return;
    }
    const msg = message as FromBackend;
    if (this.state === 'handshake') {
      this.onHandshake(msg);
      return;
    }
    if (msg.type === 'reply') {
      this.onReply(msg);
    } else if (msg.type === 'heartbeat') {
      // The backend checks we are alive; once we have answered one, ~2 s of silence from us
      // makes it remove every hook (a hung editor must not keep hooks in a training run).
      this.write({ type: 'reply', re: msg.id, body: {} });
    } else if (msg.type === 'hello') {
      this.sendError(-1, new ProtocolError('badMessage', 'hello was already received'));
    } else if (isToBackend(msg.type)) {
      // Answer a misdirected request under its own id, so the sender can match the error.
      const id = (msg as { id?: unknown }).id;
      const re = typeof id === 'number' && Number.isInteger(id) ? id : -1;
      this.sendError(re, new ProtocolError('badMessage', `'${msg.type}' is not sent to the editor`));
    } else {
      this.eventEmitter.fire(msg);
    }
  }

  /**
   * Token and version come before the full field check, so that a backend of another
   * protocol version (whose hello may have other fields) still gets the clear message.
   */
  private refusedBeforeValidation(message: unknown): boolean {
    const hello = message as Partial<HelloMessage> | undefined;
    if (typeof hello !== 'object' || hello === null || hello.type !== 'hello') return false;
    if (typeof hello.token === 'string' && this.options.sessionForToken(hello.token) === undefined) {
      this.refuseToken(hello.pid);
      return true;
    }
    if (typeof hello.protocol === 'number' && hello.protocol !== PROTOCOL_VERSION) {
      this.refuseVersion(hello.pid, hello.protocol, hello.hookscope);
      return true;
    }
    return false;
  }

  private refuseToken(pid: unknown): void {
    // Never echo the token: it may be a secret of another window.
    this.options.log.warn(`refused a connection from pid ${String(pid)}: wrong token`);
    this.sendError(-1, new ProtocolError('badToken', 'the token does not match any Hookscope debug session of this window'));
    this.close('token refused', true);
  }

  private refuseVersion(pid: unknown, protocol: number, version: unknown): void {
    const text =
      `protocol version mismatch: the hookscope package in pid ${String(pid)} (version ${String(version ?? '?')}) ` +
      `speaks protocol ${protocol}, this extension speaks ${PROTOCOL_VERSION}. ` +
      (protocol < PROTOCOL_VERSION ? 'Upgrade the Python package (pip install -U hookscope).' : 'Update the Hookscope extension.');
    this.options.log.error(text);
    this.sendError(-1, new ProtocolError('protocolMismatch', text));
    this.close(text, true);
  }

  private onHandshake(msg: FromBackend): void {
    if (msg.type !== 'hello') {
      this.sendError(-1, new ProtocolError('badMessage', `expected hello first, got '${msg.type}'`));
      this.close(`the first message was '${msg.type}', not hello`, true);
      return;
    }
    const session = this.options.sessionForToken(msg.token);
    if (session === undefined) {
      this.refuseToken(msg.pid);
      return;
    }
    clearTimeout(this.helloTimer);
    this.hello = msg;
    this.sessionKey = session;
    this.state = 'ready';
    this.readyEmitter.fire(this);
  }

  private onReply(msg: ReplyMessage): void {
    const pending = this.pending.get(msg.re);
    if (!pending) {
      if (msg.error) {
        // An error about something we sent without an id (or an event of ours the backend refused).
        this.options.log.warn(`[${this.label}] backend error: ${String(msg.error.message ?? JSON.stringify(msg.error))}`);
      } else {
        this.options.log.debug(`[${this.label}] reply to unknown request ${msg.re}`);
      }
      return;
    }
    this.pending.delete(msg.re);
    clearTimeout(pending.timer);
    if (msg.error) {
      const code = typeof msg.error.code === 'string' ? msg.error.code : 'internal';
      const text = typeof msg.error.message === 'string' ? msg.error.message : `${pending.type} failed`;
      pending.reject(new RequestError(code, text));
    } else {
      pending.resolve(msg.body ?? {});
    }
  }

  private sendError(re: number, error: ProtocolError): void {
    try {
      this.write({ type: 'reply', re, error: { code: error.code, message: error.message } });
    } catch {
      // the socket is gone; nothing to tell
    }
  }

  private finish(reason: string): void {
    if (this.state === 'closed') return;
    const handshake = this.state === 'handshake';
    this.state = 'closed';
    this.closeReason ??= reason;
    clearTimeout(this.helloTimer);
    for (const [id, pending] of this.pending) {
      clearTimeout(pending.timer);
      pending.reject(new RequestError('closed', `${this.label} disconnected before answering ${pending.type}`));
      this.pending.delete(id);
    }
    this.closeEmitter.fire({ reason: this.closeReason, handshake });
    this.readyEmitter.dispose();
    this.eventEmitter.dispose();
    this.closeEmitter.dispose();
  }
}

function isToBackend(type: string): boolean {
  return MESSAGE_SPECS[type]?.direction === 'toBackend';
}
