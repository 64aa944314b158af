// Debugging as a user does it in the workbench: start a launch configuration
// from the palette, see the session paused (debug toolbar, Call Stack), read the
// Call Stack and Variables views, evaluate in the Debug Console, continue, stop.
import type { Locator } from 'playwright-core';
import { waitFor, type WaitOptions } from './wait.ts';
import type { Workbench } from './workbench.ts';

export class Debugger {
  constructor(readonly workbench: Workbench) {}

  private get page() {
    return this.workbench.page;
  }

  /** Palette: "Debug: Select and Start Debugging", then the configuration by name. */
  async start(configurationName: string): Promise<void> {
    await this.workbench.runCommand('Debug: Select and Start Debugging');
    await this.workbench.pickQuickPickItem(configurationName);
    await this.waitForSession();
  }

  /** A debug toolbar action (floating or docked toolbar, wherever VS Code shows it). */
  private action(codicon: string): Locator {
    return this.page.locator(`.monaco-workbench .action-label.codicon-${codicon}`).filter({ visible: true }).first();
  }

  private async visible(codicon: string): Promise<boolean> {
    return (await this.action(codicon).count()) > 0;
  }

  /** Waits until a debug session runs (its Stop or Disconnect action is shown). */
  async waitForSession(options: WaitOptions = {}): Promise<void> {
    await waitFor('a debug session (debug toolbar shown)', async () => (await this.visible('debug-stop')) || this.visible('debug-disconnect'), { timeoutMs: 60_000, ...options });
  }

  async isPaused(): Promise<boolean> {
    return this.visible('debug-continue');
  }

  /** Waits until the session is paused: the toolbar offers Continue. */
  async waitForPaused(options: WaitOptions = {}): Promise<void> {
    await waitFor('the debugger to pause', () => this.isPaused(), { timeoutMs: 90_000, ...options });
  }

  async waitForSessionEnd(options: WaitOptions = {}): Promise<void> {
    await waitFor('the debug session to end (debug toolbar gone)', async () => !(await this.visible('debug-stop')) && !(await this.visible('debug-disconnect')), { timeoutMs: 120_000, ...options });
  }

  /**
   * Clicks Continue on the debug toolbar and, unless `untilResumed` is false, waits until it is no
   * longer paused. Pass false when the program may pause again at once (the next layer breakpoint
   * in the same step): the resumed state can be too short to see; wait on the trace instead.
   */
  async continue(untilResumed = true): Promise<void> {
    await this.action('debug-continue').click();
    if (untilResumed) await waitFor('the debugger to resume', async () => !(await this.isPaused()), { timeoutMs: 30_000 });
  }

  /** Clicks Stop (or Disconnect) on the debug toolbar. */
  async stop(): Promise<void> {
    if (await this.visible('debug-stop')) await this.action('debug-stop').click();
    else await this.action('debug-disconnect').click();
  }

  /** The "Paused on …" label of the Call Stack's paused thread/session. */
  async pausedLabel(): Promise<string | undefined> {
    await this.workbench.expandView('Call Stack');
    // With one thread the header carries the state; with several, each thread row does.
    const labels = await this.workbench.viewPane('Call Stack').locator('.call-stack-state-message, .monaco-list-row .state').allInnerTexts();
    return labels.map((l) => l.trim()).find((l) => /paused/i.test(l));
  }

  /** Text of the Call Stack rows (thread, "Paused on …", frames with file:line). */
  async callStack(): Promise<string[]> {
    await this.workbench.expandView('Call Stack');
    return this.workbench.treeRows('Call Stack');
  }

  /**
   * The Call Stack once a row matches `pattern`. VS Code first shows the top frame and loads the
   * rest a moment later (or offers "Load More Stack Frames", which is clicked here).
   */
  async waitForStackFrame(pattern: RegExp, options: WaitOptions = {}): Promise<string[]> {
    let rows: string[] = [];
    try {
      return await waitFor(`a Call Stack frame matching ${pattern}`, async () => {
        rows = await this.callStack();
        if (rows.some((r) => pattern.test(r))) return rows;
        const pane = this.workbench.viewPane('Call Stack');
        const more = pane.locator('.monaco-list-row', { hasText: 'Load More Stack Frames' });
        if ((await more.count()) > 0) {
          // A bounded click (an overlay such as a hover can make Playwright wait for the row to be
          // clickable for the whole deadline). The list opens a row on a real click or on Enter, not
          // on a synthetic click event: the fallback focuses the list, goes to its last row (this
          // one) and presses Enter.
          await more.first().click({ timeout: 2_000 }).catch(async () => {
            await pane.locator('.monaco-list').first().focus().catch(() => undefined);
            await this.workbench.page.keyboard.press('End');
            await this.workbench.page.keyboard.press('Enter');
          });
        }
        return false;
      }, { timeoutMs: 30_000, ...options });
    } catch (err) {
      throw new Error(`${(err as Error).message}; the Call Stack shows: ${rows.join(' | ')}`);
    }
  }

  /** Text of the Variables rows ("name: value", scopes expanded as VS Code expands them). */
  async variables(scope = 'Locals'): Promise<string[]> {
    await this.workbench.expandView('Variables');
    await this.workbench.expandTreeRow('Variables', scope);
    return this.workbench.treeRows('Variables');
  }

  /** Waits until VS Code expands `scope` in Variables by itself, as it does at a stop (no click: `variables()` clicks). */
  async waitForScopeExpandedByItself(scope = 'Locals', options: WaitOptions = {}): Promise<void> {
    const row = this.workbench.viewPane('Variables').locator('.monaco-list-row').filter({ hasText: new RegExp(`^\\s*${scope}\\b`) }).first();
    await waitFor(`VS Code to expand ${scope} in Variables`, async () => (await row.count()) > 0 && (await row.getAttribute('aria-expanded')) === 'true', { timeoutMs: 15_000, ...options });
  }

  async waitForVariable(pattern: RegExp, options: WaitOptions = {}): Promise<string> {
    return waitFor(`a variable matching ${pattern}`, async () => (await this.variables()).find((v) => pattern.test(v)), { timeoutMs: 30_000, ...options });
  }

  async openDebugConsole(): Promise<void> {
    await this.workbench.runCommand('Focus on Debug Console View');
  }

  /** Opens the Debug Console, types `expression`, Enter; returns the first new output line after it. */
  async evaluate(expression: string, options: WaitOptions = {}): Promise<string> {
    await this.openDebugConsole();
    const input = this.page.locator('.repl .repl-input-wrapper .monaco-editor textarea, .repl .repl-input-wrapper .monaco-editor .native-edit-context').first();
    await input.waitFor({ timeout: 20_000 });
    const rowsBefore = await this.replRows();
    await input.focus();
    await this.page.keyboard.type(expression);
    await this.page.keyboard.press('Enter');
    return waitFor(`the Debug Console to answer ${expression}`, async () => {
      const rows = await this.replRows();
      const fresh = rows.slice(rowsBefore.length);
      const echoed = fresh.findIndex((r) => r.includes(expression));
      const answer = echoed >= 0 ? fresh[echoed + 1] : undefined;
      return answer ?? false;
    }, { timeoutMs: 30_000, ...options });
  }

  /** Text of the Debug Console rows, oldest first. */
  async replRows(): Promise<string[]> {
    return this.page.locator('.repl .monaco-list-row').evaluateAll((rows) =>
      rows.map((r) => (r as HTMLElement).innerText.replace(/\s+/g, ' ').trim()),
    );
  }
}
