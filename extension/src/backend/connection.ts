// One debuggee process connected to the extension's server: handshake, typed requests, events.
//
// The handshake comes first (mirror of backend/hookscope/link/handshake.py): the backend's `hello`
// carries a fresh nonce, we answer with ours (`challenge`), the backend proves it holds one of
// our session tokens (`proof`, an HMAC over both nonces: the token never crosses the socket),
// we find which one in constant time and prove it back, and only then does the backend say
// who it is (`process`) and may requests flow. Until the backend has proved the token, each
// frame may be at most HANDSHAKE_FRAME_BYTES (refused from its header, before its body is
// buffered) and nothing beyond one frame is held; the whole handshake has HELLO_DEADLINE_MS.
// After that, replies are matched to requests by id (with a timeout), events are validated
// and emitted, and a message that breaks the protocol gets an error reply instead of
// crashing anything. No `vscode` import: the integration test drives this directly.

import type { Socket } from 'node:net';
import { Emitter } from '../common/events';
import type { Logger } from '../common/logger';
import { FrameReader, HEADER_BYTES, ProtocolError, frameMessage, validate, validateReply } from '../protocol/codec';
import { newNonce, proof, proofMatches } from '../protocol/handshake';
import {
  HANDSHAKE_FRAME_BYTES,
  HELLO_DEADLINE_MS,
  MAX_FRAME_BYTES,
  MAX_REQUEST_FRAME_BYTES,
  MESSAGE_SPECS,
  NONCE_BYTES,
  PROTOCOL_VERSION,
  type FromBackend,
  type HelloMessage,
  type ProcessMessage,
  type ReplyMessage,
  type RequestMap,
} from '../protocol/messages.gen';

/** A backend event (everything the backend sends after the handshake except replies). */
export type BackendEvent = Exclude<FromBackend, HelloMessage | ProcessMessage | ReplyMessage>;

/** An error reply from the backend, or a request that could not complete. */
export class RequestError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = 'RequestError';
  }
}

export type ConnectionState = 'handshake' | 'ready' | 'closed';

/** Where the handshake stands: waiting for the backend's hello, its proof, then its process message. */
type HandshakeStep = 'hello' | 'proof' | 'process';

export interface ConnectionOptions {
  /** The live sessions as [token, session key]: the backend must prove one of these tokens. */
  sessions(): Iterable<[string, string]>;
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

export class BackendConnection {
  readonly id = `c${nextConnectionNumber++}`;
  state: ConnectionState = 'handshake';
  /** What the process said about itself, once both sides proved the token. */
  process: ProcessMessage | undefined;
  sessionKey: string | undefined;
  /** Why the connection closed, once it has. */
  closeReason: string | undefined;

  private readonly reader = new FrameReader();
  private readonly pending = new Map<number, Pending>();
  private nextRequestId = 1;
  private helloTimer: NodeJS.Timeout | undefined;
  private step: HandshakeStep = 'hello';
  private backendNonce: Uint8Array | undefined;
  private editorNonce: Buffer | undefined;

  private readonly readyEmitter = new Emitter<BackendConnection>();
  private readonly eventEmitter = new Emitter<BackendEvent>();
  private readonly closeEmitter = new Emitter<{ reason: string; handshake: boolean }>();
  /** Both sides proved the token and the process described itself. */
  readonly onReady = this.readyEmitter.event;
  readonly onEvent = this.eventEmitter.event;
  /** The socket closed; `handshake` says it never got past the handshake. */
  readonly onClose = this.closeEmitter.event;

  constructor(private readonly socket: Socket, private readonly options: ConnectionOptions) {
    this.reader.limit = HANDSHAKE_FRAME_BYTES;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => this.options.log.debug(`[${this.label}] socket error: ${err.message}`));
    socket.on('close', () => this.finish(this.closeReason ?? 'the process closed the connection'));
    this.helloTimer = setTimeout(
      () => this.close(`the handshake (hello, proofs) was not over within ${options.helloDeadlineMs ?? HELLO_DEADLINE_MS} ms`),
      options.helloDeadlineMs ?? HELLO_DEADLINE_MS,
    );
  }

  /** Whether the backend has yet to prove the token (its frames are held to the handshake limit). */
  private get unproven(): boolean {
    return this.state === 'handshake' && this.step !== 'process';
  }

  /** "pid 1234 · rank 0" once known. */
  get label(): string {
    if (!this.process) return `connection ${this.id}`;
    const rank = this.process.worldSize > 1 ? ` · rank ${this.process.rank}/${this.process.worldSize}` : '';
    return `pid ${this.process.pid}${rank}`;
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
      this.pending.set(id, { type, resolve: resolve, reject, timer });
      try {
        this.write({ ...params, type, id }, MAX_REQUEST_FRAME_BYTES);
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
      // Nothing more is read (a peer that keeps sending is not read for a second more);
      // what we wrote drains, then the socket goes.
      this.socket.pause();
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

  private write(message: object, limit = MAX_FRAME_BYTES): void {
    this.socket.write(frameMessage(message, limit));
  }

  private onData(chunk: Buffer): void {
    if (this.state === 'closed') return;
    if (this.unproven && this.reader.pendingBytes + chunk.byteLength > HEADER_BYTES + HANDSHAKE_FRAME_BYTES) {
      // A backend sends one small frame and waits for our answer: more is refused unread.
      const error = new ProtocolError('badMessage', `more than ${HANDSHAKE_FRAME_BYTES} bytes before the token was proved`);
      this.options.log.warn(`[${this.label}] ${error.message}; closing the connection`);
      this.sendError(-1, error);
      this.close(`protocol error: ${error.message}`, true);
      return;
    }
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
    if (this.state === 'handshake') {
      this.onHandshake(message);
      return;
    }
    try {
      validate(message);
    } catch (err) {
      const error = err as ProtocolError;
      const re = typeof (message as { id?: unknown })?.id === 'number' ? (message as { id: number }).id : -1;
      this.options.log.warn(`[${this.label}] refused a message: ${error.message}`);
      this.sendError(re, error);
      this.failPendingOn(message, error);
      return;
    }
    const msg = message as FromBackend;
    if (msg.type === 'reply') {
      this.onReply(msg);
    } else if (msg.type === 'heartbeat') {
      // The backend checks we are alive; once we have answered one, ~2 s of silence from us
      // makes it remove every hook (a hung editor must not keep hooks in a training run).
      this.write({ type: 'reply', re: msg.id, body: {} });
    } else if (msg.type === 'hello' || msg.type === 'process' || (msg.type as string) === 'proof') {
      this.sendError(-1, new ProtocolError('badMessage', `'${msg.type}' belongs to the handshake, which is over`));
    } else if (isToBackend(msg.type)) {
      // Answer a misdirected request under its own id, so the sender can match the error.
      const id = (msg as { id?: unknown }).id;
      const re = typeof id === 'number' && Number.isInteger(id) ? id : -1;
      this.sendError(re, new ProtocolError('badMessage', `'${msg.type}' is not sent to the editor`));
    } else {
      this.eventEmitter.fire(msg);
    }
  }

  /** One step of the handshake; anything unexpected closes the connection with a clear reason. */
  private onHandshake(message: unknown): void {
    const msg = message as Record<string, unknown> | undefined;
    if (this.step === 'hello' && typeof msg === 'object' && msg !== null && msg.type === 'hello' &&
        typeof msg.protocol === 'number' && msg.protocol !== PROTOCOL_VERSION) {
      // The version first: a backend of another protocol may say hello with other fields.
      this.refuseVersion(msg.pid, msg.protocol, msg.hookscope);
      return;
    }
    if (typeof msg === 'object' && msg !== null && msg.type === 'reply' && typeof msg.error === 'object' && msg.error) {
      const error = msg.error as { code?: unknown; message?: unknown };
      this.close(`the process refused the handshake (${String(error.code)}): ${String(error.message).slice(0, 300)}`);
      return;
    }
    const expected = this.step;
    try {
      validate(message);
      if (msg?.type !== expected) {
        throw new ProtocolError('badMessage', `expected ${expected} in the handshake, got '${String(msg?.type).slice(0, 32)}'`);
      }
    } catch (err) {
      const error = err as ProtocolError;
      this.options.log.warn(`[${this.label}] refused a connection: ${error.message}`);
      this.sendError(-1, error);
      this.close(expected === 'hello' ? `the first message was not a valid hello: ${error.message}` : `handshake: ${error.message}`, true);
      return;
    }
    if (expected === 'hello') this.onHello(msg as unknown as HelloMessage);
    else if (expected === 'proof') this.onBackendProof((msg as { proof: Uint8Array }).proof);
    else this.onProcess(msg as unknown as ProcessMessage);
  }

  private onHello(hello: HelloMessage): void {
    if (hello.nonce.byteLength !== NONCE_BYTES) {
      this.sendError(-1, new ProtocolError('badMessage', `a challenge must be ${NONCE_BYTES} random bytes`));
      this.close('the hello carried no usable challenge', true);
      return;
    }
    this.backendNonce = hello.nonce;
    this.editorNonce = newNonce();
    this.step = 'proof';
    this.write({ type: 'challenge', protocol: PROTOCOL_VERSION, nonce: this.editorNonce });
  }

  private onBackendProof(claimed: Uint8Array): void {
    const [nb, ne] = [this.backendNonce!, this.editorNonce!];
    let found: [string, string] | undefined;
    // Every live token is tried, each compared in constant time.
    for (const [token, key] of this.options.sessions()) {
      if (proofMatches(proof(token, 'backend', nb, ne), claimed) && !found) found = [token, key];
    }
    if (!found) {
      this.refuseToken();
      return;
    }
    this.sessionKey = found[1];
    // The backend proved the token: from now on its frames may be as large as the protocol allows.
    this.reader.limit = MAX_FRAME_BYTES;
    this.step = 'process';
    this.write({ type: 'proof', proof: proof(found[0], 'editor', nb, ne) });
  }

  private onProcess(process: ProcessMessage): void {
    clearTimeout(this.helloTimer);
    this.process = process;
    this.state = 'ready';
    this.readyEmitter.fire(this);
  }

  private refuseToken(): void {
    // Never echo anything secret: the proof is all we have, and it says nothing.
    this.options.log.warn(`refused a connection (${this.id}): wrong token (it could not prove a session token of this window)`);
    this.sendError(-1, new ProtocolError('badToken', 'the process could not prove a token of any Hookscope debug session of this window'));
    this.close('token refused', true);
  }

  private refuseVersion(pid: unknown, protocol: number, version: unknown): void {
    const who = typeof pid === 'number' ? ` in pid ${pid}` : '';
    const text =
      `protocol version mismatch: the hookscope package${who} (version ${(typeof version === 'string' || typeof version === 'number' ? String(version) : '?').slice(0, 32)}) ` +
      `speaks protocol ${protocol}, this extension speaks ${PROTOCOL_VERSION}. ` +
      'Use the hookscope bundled with the extension (hookscope.backend: "bundled"), or install the wheel that matches this extension.';
    this.options.log.error(text);
    this.sendError(-1, new ProtocolError('protocolMismatch', text));
    this.close(text, true);
  }

  /** A malformed reply to a pending request fails that request now (not by its timeout). */
  private failPendingOn(message: unknown, error: ProtocolError): void {
    const msg = message as { type?: unknown; re?: unknown } | null;
    if (msg?.type !== 'reply' || typeof msg.re !== 'number') return;
    const pending = this.pending.get(msg.re);
    if (!pending) return;
    this.pending.delete(msg.re);
    clearTimeout(pending.timer);
    pending.reject(new RequestError('badMessage', `malformed reply to ${pending.type}: ${error.message}`));
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
      // A reply whose body does not have the declared shape fails its request with the field named,
      // instead of reaching the caller as a cast it does not hold.
      try {
        pending.resolve(validateReply(pending.type, msg.body ?? {}));
      } catch (err) {
        this.options.log.warn(`[${this.label}] refused a reply: ${(err as Error).message}`);
        pending.reject(new RequestError('badMessage', (err as Error).message));
      }
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
