// Reads the opt-in JSON-lines trace file the extension writes (setting
// `hookscope.traceFile`) and waits for events in it. The file grows while the
// test runs; every read parses only what was appended since the last one.
import * as fs from 'node:fs';
import { waitFor, type WaitOptions } from './wait.ts';

export type TraceEvent = Record<string, unknown> & { event?: string };

export class TraceLog {
  private offset = 0;
  private partial = '';
  readonly events: TraceEvent[] = [];

  constructor(readonly file: string) {}

  /** Parses lines appended since the last call; returns all events seen so far. */
  read(): TraceEvent[] {
    let fd: number;
    try {
      fd = fs.openSync(this.file, 'r');
    } catch {
      return this.events; // not written yet
    }
    try {
      const size = fs.fstatSync(fd).size;
      if (size > this.offset) {
        const buffer = Buffer.alloc(size - this.offset);
        fs.readSync(fd, buffer, 0, buffer.length, this.offset);
        this.offset = size;
        const text = this.partial + buffer.toString('utf8');
        const lines = text.split('\n');
        this.partial = lines.pop() ?? '';
        for (const line of lines) {
          if (line.trim()) this.events.push(JSON.parse(line) as TraceEvent);
        }
      }
    } finally {
      fs.closeSync(fd);
    }
    return this.events;
  }

  /** Index just past the last event seen: pass it as `after` to wait only for newer events. */
  mark(): number {
    return this.read().length;
  }

  find(predicate: (e: TraceEvent) => boolean, after = 0): TraceEvent | undefined {
    return this.read().slice(after).find(predicate);
  }

  /** Waits for the first event (at index >= `after`) that matches. */
  async waitForEvent(
    description: string,
    predicate: (e: TraceEvent) => boolean,
    { after = 0, ...options }: WaitOptions & { after?: number } = {},
  ): Promise<TraceEvent> {
    try {
      return await waitFor(`trace event: ${description}`, () => this.find(predicate, after), options);
    } catch (error) {
      const tail = this.read().slice(-15).map((e) => '    ' + JSON.stringify(e).slice(0, 300)).join('\n');
      throw new Error(`${(error as Error).message}\n  last trace events:\n${tail || '    (none)'}`);
    }
  }
}

/** Matches an event by its name and, optionally, a few fields with equal values. */
export function isEvent(name: string, fields: Record<string, unknown> = {}): (e: TraceEvent) => boolean {
  return (e) => e.event === name && Object.entries(fields).every(([k, v]) => e[k] === v);
}
