// "Show in Hookscope": from a variable in the Variables view (or a selected expression in the
// editor) while paused, in the frame the user is looking at, to the Tensors panel.
//
// 1. DAP `evaluate` in that frame runs `hookscope.debugger.inspector.publish('<expr>', '<handle>')`
//    (inspectExpression.ts), which keeps the tensor in the debuggee and answers with its pid.
// 2. The connected process with that pid (in this debug session) answers `inspectValue`
//    requests with the handle: summary, and the slice or feature-map image the panel asks for.
// 3. When the debugger resumes, the held values are released (`releaseInspected`).

import * as vscode from 'vscode';
import type { BackendHub, ProcessState } from '../backend/hub';
import type { ExtensionLog } from '../common/log';
import { PYTHON_DEBUG_TYPES } from '../constants';
import type { DebugSessionTracker } from '../debug/tracker';
import { checkExpression, newHandle, parsePublishResult, publishExpression, variableExpression } from './inspectExpression';
import type { InspectFromWebview, InspectToWebview } from './inspectProtocol';

const RESUMING_REQUESTS = new Set(['continue', 'next', 'stepIn', 'stepOut', 'reverseContinue', 'stepBack', 'goto', 'restartFrame']);

/** VS Code's argument to a `debug/variables/context` command. */
interface VariableContext {
  sessionId?: string;
  container?: unknown;
  variable?: { name?: string; evaluateName?: string; value?: string };
}

interface Held {
  processId: string;
  handle: string;
  sessionId: string;
  label: string;
}

export interface InspectSink {
  reveal(): Promise<void>;
  postInspect(message: InspectToWebview): Thenable<boolean>;
}

/** The parts of DAP's `threads` and `stackTrace` replies this controller reads (customRequest returns any). */
interface DapThreads { threads?: { id: number }[] }
interface DapStackTrace { stackFrames?: { id: number }[] }

export class InspectController implements vscode.DebugAdapterTrackerFactory, vscode.Disposable {
  private held: Held[] = [];
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly hub: BackendHub,
    private readonly tracker: DebugSessionTracker,
    private readonly sink: InspectSink,
    private readonly log: ExtensionLog,
  ) {
    for (const type of PYTHON_DEBUG_TYPES) this.disposables.push(vscode.debug.registerDebugAdapterTrackerFactory(type, this));
    this.disposables.push(
      vscode.debug.onDidTerminateDebugSession((s) => { this.held = this.held.filter((h) => h.sessionId !== s.id); }),
      hub.onDidExit(({ process }) => { this.held = this.held.filter((h) => h.processId !== process.id); }),
    );
  }

  /** Release what was published when the user resumes the program (values must not outlive the pause). */
  createDebugAdapterTracker(session: vscode.DebugSession): vscode.DebugAdapterTracker {
    return {
      onWillReceiveMessage: (m: { type?: string; command?: string }) => {
        if (m.type === 'request' && RESUMING_REQUESTS.has(m.command ?? '')) void this.releaseSession(session.id);
      },
    };
  }

  /** `hookscope.showInHookscope` from the Variables view's context menu. */
  async showVariable(arg: unknown): Promise<void> {
    const context = (arg ?? {}) as VariableContext;
    const expression = variableExpression(context.variable);
    if (!expression) {
      void vscode.window.showInformationMessage('Hookscope: this variable has no expression the debugger can evaluate.');
      return;
    }
    const session = (context.sessionId && this.sessionById(context.sessionId)) || vscode.debug.activeDebugSession;
    await this.show(session, expression);
  }

  /** `hookscope.showExpressionInHookscope`: the editor's selection (or the word under the cursor). */
  async showExpression(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor) {
      void vscode.window.showInformationMessage('Hookscope: select an expression in the editor first.');
      return;
    }
    let text = editor.document.getText(editor.selection);
    if (!text.trim()) {
      const word = editor.document.getWordRangeAtPosition(editor.selection.active, /[A-Za-z_][A-Za-z0-9_.]*/);
      text = word ? editor.document.getText(word) : '';
    }
    await this.show(vscode.debug.activeDebugSession, text);
  }

  private sessionById(id: string): vscode.DebugSession | undefined {
    const item = vscode.debug.activeStackItem;
    if (item?.session.id === id) return item.session;
    if (vscode.debug.activeDebugSession?.id === id) return vscode.debug.activeDebugSession;
    return undefined;
  }

  private async show(session: vscode.DebugSession | undefined, raw: string): Promise<void> {
    const check = checkExpression(raw);
    if (!check.ok) {
      void vscode.window.showInformationMessage(`Hookscope: ${check.reason}.`);
      return;
    }
    if (!session) {
      void vscode.window.showInformationMessage('Hookscope: pause a debug session first.');
      return;
    }
    const frameId = await this.focusedFrame(session);
    if (frameId === undefined) {
      void vscode.window.showInformationMessage('Hookscope: the program is not paused.');
      return;
    }
    const handle = newHandle();
    let answer: { result?: string };
    try {
      answer = (await session.customRequest('evaluate', { expression: publishExpression(check.expression, handle), frameId, context: 'repl' })) as { result?: string };
    } catch (err) {
      return this.fail(check.expression, `the debugger could not evaluate it: ${(err as Error).message}`);
    }
    const published = parsePublishResult(String(answer?.result ?? ''));
    if (!published.ok) return this.fail(check.expression, published.message);
    const process = this.processFor(session, published.pid);
    if (!process) {
      return this.fail(check.expression, `Hookscope is not connected to process ${published.pid} (start it with a Hookscope-enabled launch)`);
    }
    this.held.push({ processId: process.id, handle, sessionId: session.id, label: check.expression });
    try {
      const body = await this.hub.request(process.id, 'inspectValue', { expression: check.expression, handle, options: { view: 'summary' } });
      await this.sink.reveal();
      await this.sink.postInspect({
        type: 'inspect',
        tensor: {
          handle, label: check.expression, path: body.path ?? check.expression, processLabel: process.label,
          line: published.line, summary: body.summary,
        },
      });
      this.log.event('inspect.shown', {
        expression: check.expression, process: process.id, pid: published.pid, frameId, shape: body.summary.shape,
      });
    } catch (err) {
      this.fail(check.expression, (err as Error).message);
    }
  }

  /** Render request from the panel: the backend answers with the image and the slice's values. */
  async onWebviewMessage(message: InspectFromWebview): Promise<void> {
    if (message.type === 'inspectClose') {
      await this.releaseAll();
      return;
    }
    const held = this.held.find((h) => h.handle === message.handle);
    if (!held) {
      await this.sink.postInspect({ type: 'inspectError', seq: message.seq, handle: message.handle, message: 'That tensor is no longer held: show it again while paused.' });
      return;
    }
    const started = Date.now();
    try {
      const body = await this.hub.request(held.processId, 'inspectValue', { expression: held.label, handle: held.handle, options: message.options }, 60000);
      if (!body.png) throw new Error('the backend sent no image for this tensor');
      const png = Buffer.from(body.png);
      await this.sink.postInspect({
        type: 'inspectImage', seq: message.seq, handle: held.handle,
        dataUrl: `data:image/png;base64,${png.toString('base64')}`, width: body.width ?? 0, height: body.height ?? 0,
        meta: body.meta ?? {}, summary: body.summary,
        values: body.values ? Buffer.from(body.values).toString('base64') : undefined,
        valuesShape: body.valuesShape, valuesStep: body.valuesStep,
      });
      this.log.event('inspect.render', {
        view: typeof message.options.view === 'string' ? message.options.view : 'slice', width: body.width ?? 0, height: body.height ?? 0, bytes: png.byteLength, ms: Date.now() - started,
      });
    } catch (err) {
      this.log.event('inspect.failed', { message: (err as Error).message });
      await this.sink.postInspect({ type: 'inspectError', seq: message.seq, handle: message.handle, message: (err as Error).message });
    }
  }

  private fail(expression: string, message: string): void {
    this.log.event('inspect.failed', { expression, message });
    void vscode.window.showWarningMessage(`Hookscope: cannot show ${expression.length > 60 ? `${expression.slice(0, 57)}…` : expression}: ${message}`);
  }

  /** The frame the user looks at: the focused stack frame of that session, else the top frame of a stopped thread. */
  private async focusedFrame(session: vscode.DebugSession): Promise<number | undefined> {
    const item = vscode.debug.activeStackItem;
    if (item instanceof vscode.DebugStackFrame && item.session.id === session.id) return item.frameId;
    const threadIds: number[] = item instanceof vscode.DebugThread && item.session.id === session.id
      ? [item.threadId]
      : (((await session.customRequest('threads')) as DapThreads | undefined)?.threads ?? []).map((t) => t.id);
    for (const threadId of threadIds) {
      try {
        const trace = (await session.customRequest('stackTrace', { threadId, startFrame: 0, levels: 1 })) as DapStackTrace | undefined;
        const frame = trace?.stackFrames?.[0];
        if (frame) return frame.id;
      } catch {
        // a running thread has no stack: try the next one
      }
    }
    return undefined;
  }

  private processFor(session: vscode.DebugSession, pid: number): ProcessState | undefined {
    const key = this.tracker.keyOf(session);
    const ofSession = key ? this.hub.processesOfSession(key) : [];
    return ofSession.find((p) => p.pid === pid) ?? this.hub.processes().find((p) => p.pid === pid);
  }

  private async releaseSession(sessionId: string): Promise<void> {
    const mine = this.held.filter((h) => h.sessionId === sessionId);
    if (!mine.length) return;
    this.held = this.held.filter((h) => h.sessionId !== sessionId);
    await this.release(mine);
  }

  private async releaseAll(): Promise<void> {
    const all = this.held;
    this.held = [];
    await this.release(all);
  }

  private async release(items: Held[]): Promise<void> {
    const byProcess = new Map<string, string[]>();
    for (const h of items) byProcess.set(h.processId, [...(byProcess.get(h.processId) ?? []), h.handle]);
    for (const [processId, handles] of byProcess) {
      try {
        const { released } = await this.hub.request(processId, 'releaseInspected', { handles });
        this.log.event('inspect.released', { process: processId, released });
      } catch (err) {
        this.log.debug(`releaseInspected: ${(err as Error).message}`);
      }
      for (const handle of handles) void this.sink.postInspect({ type: 'inspectReleased', handle });
    }
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
