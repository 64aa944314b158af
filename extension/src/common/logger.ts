// The logging and tracing interfaces the host-independent modules write to.
// In the editor they are backed by a LogOutputChannel (log.ts) and the opt-in trace file (trace.ts).

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** Opt-in JSON-lines record of what the extension saw (hookscope.traceFile), read by the end-to-end tests. */
export interface Tracer {
  event(name: string, data?: Record<string, unknown>): void;
}

export const nullTracer: Tracer = { event() {} };
