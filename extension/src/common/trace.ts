// Writes the opt-in trace file: one JSON object per line, {"t": ms since epoch, "event": name, ...data}.
// Synchronous appends keep the order exact and make every line visible to a test as soon as it happened.

import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Tracer } from './logger';

export class FileTracer implements Tracer {
  private path: string | undefined;
  private failed = false;

  constructor(path?: string) {
    this.setPath(path);
  }

  /** Start (or stop, with an empty path) writing to `path`. */
  setPath(path: string | undefined): void {
    this.path = path && path.trim() ? path.trim() : undefined;
    this.failed = false;
    if (this.path) {
      try {
        mkdirSync(dirname(this.path), { recursive: true });
      } catch {
        // appendFileSync below reports the problem once.
      }
    }
  }

  get enabled(): boolean {
    return this.path !== undefined;
  }

  event(name: string, data: Record<string, unknown> = {}): void {
    if (!this.path || this.failed) return;
    try {
      appendFileSync(this.path, JSON.stringify({ t: Date.now(), event: name, ...data }, jsonSafe) + '\n');
    } catch (err) {
      this.failed = true;
      console.error(`[hookscope] cannot write the trace file ${this.path}:`, err);
    }
  }
}

function jsonSafe(_key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return `<${value.byteLength} bytes>`;
  if (typeof value === 'bigint') return Number(value);
  return value;
}
