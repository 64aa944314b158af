// The "Hookscope" log channel (a LogOutputChannel: levels, timestamps) and the opt-in trace file,
// behind the Logger/Tracer interfaces the host-independent modules use.

import * as vscode from 'vscode';
import type { Logger, Tracer } from './logger';
import { FileTracer } from './trace';

export class ExtensionLog implements Logger, Tracer, vscode.Disposable {
  readonly channel = vscode.window.createOutputChannel('Hookscope', { log: true });
  private readonly tracer: FileTracer;

  constructor(traceFile: string | undefined) {
    this.tracer = new FileTracer(traceFile);
  }

  setTraceFile(path: string | undefined): void {
    this.tracer.setPath(path);
    if (path) this.info(`writing the trace to ${path}`);
  }

  debug(message: string): void {
    this.channel.debug(message);
  }
  info(message: string): void {
    this.channel.info(message);
  }
  warn(message: string): void {
    this.channel.warn(message);
  }
  error(message: string): void {
    this.channel.error(message);
  }

  event(name: string, data?: Record<string, unknown>): void {
    this.tracer.event(name, data);
  }

  show(): void {
    this.channel.show(true);
  }

  dispose(): void {
    this.channel.dispose();
  }
}
