// Drives the VS Code workbench the way a user does — the command palette and
// quick open by keyboard, Ctrl+G, clicks — and reads what it shows: status bar,
// notifications, tree rows, debug views and webviews (nested iframes). Every
// step can be screenshotted into the test's artifact folder.
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Frame, Locator, Page } from 'playwright-core';
import { waitFor, type WaitOptions } from './wait.ts';

export class Workbench {
  private step = 0;

  constructor(
    readonly page: Page,
    readonly artifactsDir: string,
  ) {
    fs.mkdirSync(artifactsDir, { recursive: true });
  }

  /** Saves `NN-<name>.png` in the test's artifact folder and returns its path. */
  async screenshot(name: string): Promise<string> {
    this.step += 1;
    const file = path.join(this.artifactsDir, `${String(this.step).padStart(2, '0')}-${name.replace(/[^\w.-]+/g, '-')}.png`);
    await this.page.screenshot({ path: file });
    return file;
  }

  /** Opens the workbench on `folder` and waits until the workbench and its status bar are shown. */
  async open(baseUrl: string, folder: string): Promise<void> {
    await this.page.goto(`${baseUrl}/?folder=${encodeURIComponent(folder)}`);
    await this.page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
    await this.page.locator('#workbench\\.parts\\.statusbar').waitFor({ timeout: 60_000 });
    // The explorer shows the folder once the remote file system answered.
    await this.page.locator('.explorer-folders-view .monaco-list-row').first().waitFor({ timeout: 60_000 });
  }

  // --- keyboard: palette, quick open, go to line -----------------------------------------------

  private quickInput(): Locator {
    return this.page.locator('.quick-input-widget');
  }

  private async openQuickInput(): Promise<Locator> {
    await this.page.keyboard.press('F1');
    const input = this.quickInput().locator('input.input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    return input;
  }

  /** F1, type the command's title, wait until the focused entry is that command, Enter. */
  async runCommand(title: string, options: WaitOptions = {}): Promise<void> {
    const input = await this.openQuickInput();
    await input.fill(`>${title}`);
    await this.waitForFocusedQuickPick(title, options);
    await this.page.keyboard.press('Enter');
    await this.waitUntilAccepted(input, `>${title}`);
  }

  /**
   * The quick input lingers a moment after Enter with what was typed: a quick pick or input box
   * the accepted entry opens must not be mistaken for it.
   */
  private async waitUntilAccepted(input: Locator, typed: string): Promise<void> {
    await waitFor(`the quick input to take "${typed}"`, async () =>
      !(await input.isVisible()) || (await input.inputValue()) !== typed, { timeoutMs: 15_000 });
  }

  /**
   * Moves the quick pick's focus to the row whose label is exactly `label`
   * (case-insensitive; a palette label may carry a "Category: " prefix): fuzzy
   * matching can rank a longer title ("Show Layer in Tensors Panel") first.
   */
  async waitForFocusedQuickPick(label: string, { timeoutMs = 20_000 }: WaitOptions = {}): Promise<void> {
    const wanted = label.toLowerCase();
    const matches = (text: string) => {
      const t = text.replace(/\s+/g, ' ').trim().toLowerCase();
      return t === wanted || t.endsWith(`: ${wanted}`) || wanted.endsWith(`: ${t}`);
    };
    const rows = this.quickInput().locator('.monaco-list-row .label-name');
    const index = await waitFor(`quick pick entry "${label}"`, async () => {
      const labels = await rows.allInnerTexts();
      const i = labels.findIndex(matches);
      return i >= 0 ? i + 1 : false; // 1-based so that 0 is not "not found"
    }, { timeoutMs });
    for (let i = 0; i < index + 5; i++) {
      const focused = this.quickInput().locator('.monaco-list-row.focused .label-name').first();
      if ((await focused.count()) > 0 && matches(await focused.innerText())) return;
      await this.page.keyboard.press('ArrowDown');
    }
    throw new Error(`could not focus the quick pick entry "${label}"`);
  }

  /** In an open quick pick (e.g. one an extension shows), type to filter and pick `label`. */
  async pickQuickPickItem(label: string): Promise<void> {
    const input = this.quickInput().locator('input.input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    // Quick access modes keep their prefix in the input ("debug " for Select and Start Debugging).
    const prefix = /^(debug |>|:|@|#|%)/.exec(await input.inputValue())?.[0] ?? '';
    await input.fill(prefix + label);
    await this.waitForFocusedQuickPick(label);
    await this.page.keyboard.press('Enter');
    await this.waitUntilAccepted(input, prefix + label);
  }

  /** An input box an extension shows (showInputBox): its current value, then `value` typed in and Enter. */
  async answerInputBox(value: string): Promise<string> {
    const input = this.quickInput().locator('input.input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    const shown = await input.inputValue();
    await input.fill(value);
    await this.page.keyboard.press('Enter');
    return shown;
  }

  /** An input box an extension shows: `value` typed in (no Enter), then the message under it once it reads `expected`. */
  async typeInInputBox(value: string, expected: RegExp, options: WaitOptions = {}): Promise<string> {
    const input = this.quickInput().locator('input.input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    await input.fill(value);
    const message = this.quickInput().locator('.quick-input-message');
    return waitFor(`the input box to say ${expected}`, async () => {
      const text = ((await message.count()) > 0 ? await message.first().innerText() : '').replace(/\s+/g, ' ').trim();
      return expected.test(text) ? text : false;
    }, { timeoutMs: 15_000, ...options });
  }

  /** Quick open (the palette without '>'): opens `relativePath` and waits for its tab to be active. */
  async openFile(relativePath: string): Promise<void> {
    const input = await this.openQuickInput();
    await input.fill(relativePath);
    const base = path.basename(relativePath);
    await waitFor(`quick open to offer ${relativePath}`, async () => {
      const focused = this.quickInput().locator('.monaco-list-row.focused .label-name').first();
      return (await focused.count()) > 0 && (await focused.innerText()).trim() === base;
    }, { timeoutMs: 20_000 });
    await this.page.keyboard.press('Enter');
    await this.page.locator(`.tabs-container .tab.active[aria-label^="${base}"]`).waitFor({ timeout: 20_000 });
    await this.page.locator('.monaco-editor.focused, .editor-instance .monaco-editor').first().waitFor({ timeout: 20_000 });
  }

  /** Ctrl+G, the line number, Enter; waits until the status bar says the cursor is on that line. */
  async goToLine(line: number): Promise<void> {
    await this.focusEditor();
    await this.page.keyboard.press('Control+G');
    const input = this.quickInput().locator('input.input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    await input.fill(`:${line}`);
    await this.page.keyboard.press('Enter');
    await waitFor(`cursor on line ${line}`, async () => (await this.cursorLine()) === line, { timeoutMs: 10_000 });
  }

  async focusEditor(): Promise<void> {
    await this.page.locator('.editor-group-container.active .monaco-editor .view-lines').first().click({ position: { x: 400, y: 5 } }).catch(async () => {
      await this.runCommand('View: Focus Active Editor Group');
    });
  }

  /** The cursor's line from the status bar ("Ln 12, Col 5"). */
  async cursorLine(): Promise<number | undefined> {
    const item = this.page.locator('[id="status.editor.selection"]');
    if ((await item.count()) === 0) return undefined;
    const match = /Ln (\d+)/.exec(await item.innerText());
    return match ? Number(match[1]) : undefined;
  }

  /** Labels of the open editor tabs, the active one first ("model.py", …). */
  async editorTabs(): Promise<{ active: string | undefined; all: string[] }> {
    const label = (l: string | null) => (l ?? '').split(',')[0].trim();
    const all = (await this.page.locator('.tabs-container .tab').evaluateAll((tabs) => tabs.map((t) => t.getAttribute('aria-label'))))
      .map(label);
    const active = this.page.locator('.editor-group-container.active .tabs-container .tab.active');
    return { active: (await active.count()) > 0 ? label(await active.first().getAttribute('aria-label')) : undefined, all };
  }

  /** Waits until the active editor is `fileName` with the cursor on `line` (as a debugger stop reveals it). */
  async waitForActiveEditor(fileName: string, line: number, options: WaitOptions = {}): Promise<void> {
    let seen = '';
    try {
      await waitFor(`the editor to show ${fileName}:${line}`, async () => {
        const tabs = await this.editorTabs();
        const cursor = await this.cursorLine();
        seen = `${tabs.active}:${cursor} (tabs: ${tabs.all.join(', ')})`;
        return tabs.active === fileName && cursor === line;
      }, { timeoutMs: 20_000, ...options });
    } catch (err) {
      throw new Error(`${(err as Error).message}; the editor shows ${seen}`);
    }
  }

  /** Line number of the first line whose text matches `pattern` in `file` (1-based), read from disk. */
  static lineOf(file: string, pattern: RegExp | string): number {
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    const index = lines.findIndex((l) => (typeof pattern === 'string' ? l.includes(pattern) : pattern.test(l)));
    if (index < 0) throw new Error(`no line matching ${pattern} in ${file}`);
    return index + 1;
  }

  // --- what the workbench shows --------------------------------------------------------------------

  /** Text of every status bar item. */
  async statusBarTexts(): Promise<string[]> {
    return this.page.locator('#workbench\\.parts\\.statusbar .statusbar-item').evaluateAll((items) =>
      items.map((i) => `${(i as HTMLElement).innerText} ${i.getAttribute('aria-label') ?? ''}`.replace(/\s+/g, ' ').trim()),
    );
  }

  async waitForStatusBar(description: string, pattern: RegExp, options: WaitOptions = {}): Promise<string> {
    return waitFor(`status bar: ${description}`, async () => (await this.statusBarTexts()).find((t) => pattern.test(t)), { timeoutMs: 60_000, ...options });
  }

  /** Messages of the notification toasts on screen. */
  async notifications(): Promise<string[]> {
    return this.page.locator('.notifications-toasts .notification-list-item').evaluateAll((items) =>
      items.map((i) => (i as HTMLElement).innerText.replace(/\s+/g, ' ').trim()),
    );
  }

  async waitForNotification(pattern: RegExp, options: WaitOptions = {}): Promise<Locator> {
    await waitFor(`a notification matching ${pattern}`, async () => (await this.notifications()).some((t) => pattern.test(t)), { timeoutMs: 60_000, ...options });
    return this.page.locator('.notifications-toasts .notification-list-item').filter({ hasText: pattern }).first();
  }

  /** Rows (text) of the tree inside the view whose pane header is titled `viewTitle`. */
  async treeRows(viewTitle: string): Promise<string[]> {
    const pane = this.viewPane(viewTitle);
    return pane.locator('.monaco-list-row').evaluateAll((rows) =>
      rows.map((r) => `${(r as HTMLElement).innerText} ${r.getAttribute('aria-label') ?? ''}`.replace(/\s+/g, ' ').trim()),
    );
  }

  /** The pane (view) with this title in any sidebar or panel. */
  viewPane(viewTitle: string): Locator {
    return this.page.locator('.pane').filter({ has: this.page.locator('.pane-header', { hasText: new RegExp(`^\\s*${escapeRegExp(viewTitle)}`, 'i') }) }).first();
  }

  /** Expands the collapsed tree row whose label starts with `label` in the view `viewTitle` (no-op when open). */
  async expandTreeRow(viewTitle: string, label: string): Promise<boolean> {
    const row = this.viewPane(viewTitle).locator('.monaco-list-row').filter({ hasText: new RegExp(`^\\s*${escapeRegExp(label)}`) }).first();
    if ((await row.count()) === 0) return false;
    if ((await row.getAttribute('aria-expanded')) === 'false') await row.click();
    return true;
  }

  /**
   * Every row of a tree view, scrolling through it: tree rows are virtualised,
   * only those on screen exist in the DOM.
   */
  async allTreeRows(viewTitle: string): Promise<string[]> {
    const list = this.viewPane(viewTitle).locator('.monaco-list').first();
    const seen: string[] = [];
    await list.hover();
    for (let i = 0; i < 40; i++) {
      const before = seen.length;
      for (const row of await this.treeRows(viewTitle)) if (!seen.includes(row)) seen.push(row);
      if (i > 0 && seen.length === before) break;
      await this.page.mouse.wheel(0, 120);
    }
    await this.page.mouse.move(0, 0); // leave no hover over the tree
    return seen;
  }

  /** Drags the sash on the primary side bar's right edge so the side bar is `width` pixels wide. */
  async setSideBarWidth(width: number): Promise<void> {
    const box = await this.page.locator('[id="workbench.parts.sidebar"]').boundingBox();
    if (!box) return;
    const y = box.y + box.height / 2;
    await this.page.mouse.move(box.x + box.width + 1, y);
    await this.page.mouse.down();
    await this.page.mouse.move(box.x + width, y, { steps: 8 });
    await this.page.mouse.up();
    await this.page.mouse.move(0, 0);
  }

  /** Collapses an expanded view pane (to make room for others). */
  async collapseView(viewTitle: string): Promise<void> {
    const header = this.viewPane(viewTitle).locator('.pane-header').first();
    if ((await header.count()) && (await header.getAttribute('aria-expanded')) === 'true') await header.click();
  }

  /** Expands every collapsed row of a tree view (a few rounds, as children appear). */
  async expandAllTreeRows(viewTitle: string, rounds = 30): Promise<void> {
    const pane = this.viewPane(viewTitle);
    for (let i = 0; i < rounds; i++) {
      const collapsed = pane.locator('.monaco-list-row[aria-expanded="false"]');
      if ((await collapsed.count()) === 0) return;
      await collapsed.first().locator('.monaco-tl-twistie').click();
    }
    await this.page.mouse.move(0, 0);
  }

  /** Expands a collapsed view pane by clicking its header. */
  async expandView(viewTitle: string): Promise<void> {
    const header = this.viewPane(viewTitle).locator('.pane-header').first();
    await header.waitFor({ timeout: 30_000 });
    if ((await header.getAttribute('aria-expanded')) === 'false') await header.click();
  }

  // --- webviews --------------------------------------------------------------------------------------

  /**
   * The innermost frame of a webview that contains `selector` (webviews are an
   * iframe holding another iframe with the extension's HTML).
   */
  async webviewFrame(selector: string, options: WaitOptions = {}): Promise<Frame> {
    return waitFor(`a webview frame containing ${selector}`, async () => {
      for (const frame of this.page.frames()) {
        if (frame === this.page.mainFrame()) continue;
        try {
          if ((await frame.locator(selector).count()) > 0) return frame;
        } catch {
          /* frame navigated or detached while we looked */
        }
      }
      return undefined;
    }, { timeoutMs: 30_000, ...options });
  }
}

export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
