// Reads and drives Hookscope's Tensors webview (a view in Run and Debug) through
// the `data-testid`s documented in extension/README-dev.md: headline and status,
// the summary table and its histograms, the visual (feature map, gradient flow)
// image, and the intervention form.
import type { Frame } from 'playwright-core';
import { imageStats, type ImageStats } from './images.ts';
import { waitFor, type WaitOptions } from './wait.ts';
import type { Workbench } from './workbench.ts';

export interface TensorRow {
  path: string;
  cells: Record<string, string>;
  histogramBars: number;
  nonFinite: boolean;
}

export class TensorsPanel {
  private frame?: Frame;

  constructor(readonly workbench: Workbench) {}

  /** Reveals the panel ("Hookscope: Show Tensors Panel") and finds its frame. */
  async show(): Promise<Frame> {
    await this.workbench.runCommand('Hookscope: Show Tensors Panel');
    return this.getFrame();
  }

  async getFrame(): Promise<Frame> {
    if (this.frame && !this.frame.isDetached()) return this.frame;
    this.frame = await this.workbench.webviewFrame('[data-testid=tensors-root]', { timeoutMs: 30_000 });
    return this.frame;
  }

  async headline(): Promise<string> {
    const frame = await this.getFrame();
    return (await frame.locator('[data-testid=panel-headline]').innerText()).trim();
  }

  async status(): Promise<string | null> {
    const frame = await this.getFrame();
    return frame.locator('[data-testid=panel-status]').getAttribute('data-status');
  }

  async waitForHeadline(pattern: RegExp, options: WaitOptions = {}): Promise<string> {
    return waitFor(`Tensors panel headline matching ${pattern}`, async () => {
      this.frame = undefined; // the webview may have been re-created (view hidden and shown)
      const text = await this.headline();
      return pattern.test(text) ? text : false;
    }, { timeoutMs: 60_000, ...options });
  }

  async text(testId: string): Promise<string> {
    const frame = await this.getFrame();
    const el = frame.locator(`[data-testid=${testId}]`).first();
    return (await el.count()) ? (await el.innerText()).trim() : '';
  }

  async rows(): Promise<TensorRow[]> {
    const frame = await this.getFrame();
    return frame.locator('[data-testid=tensor-row]').evaluateAll((rows) =>
      rows.map((row) => {
        const cells: Record<string, string> = {};
        for (const td of row.querySelectorAll('td[data-col]')) cells[td.getAttribute('data-col')!] = (td as HTMLElement).innerText.trim();
        return {
          path: row.getAttribute('data-path') ?? '',
          cells,
          histogramBars: row.querySelectorAll('[data-testid=tensor-hist] rect').length,
          nonFinite: row.classList.contains('nonfinite'),
        };
      }),
    );
  }

  /** Waits for a summary row whose path matches, optionally satisfying `check`. */
  async waitForRow(pathPattern: RegExp, check: (row: TensorRow) => boolean = () => true, options: WaitOptions = {}): Promise<TensorRow> {
    try {
      return await waitFor(`a Tensors panel row ${pathPattern}`, async () => {
        this.frame = undefined; // the webview is re-created when its view is hidden and shown again
        return (await this.rows()).find((r) => pathPattern.test(r.path) && check(r));
      }, { timeoutMs: 60_000, ...options });
    } catch (error) {
      const seen = (await this.rows().catch(() => [])).map((r) => `${r.path}: ${JSON.stringify(r.cells)}`).join('\n    ');
      throw new Error(`${(error as Error).message}\n  rows shown:\n    ${seen || '(none)'}`);
    }
  }

  /** Picks a visual (featureMap, gradientFlow, …) and waits until the image shows it (rendered for the current pause). */
  async showVisual(visual: string, options: WaitOptions = {}): Promise<ImageStats & { visual: string | null }> {
    const frame = await this.getFrame();
    const image = frame.locator('[data-testid=render-image]');
    const select = frame.locator('[data-testid=visual-select]');
    // The panel renders the selected visual by itself when it pauses; pick another only if needed.
    if ((await select.inputValue()) !== visual) await select.selectOption(visual);
    await waitFor(`a rendered ${visual} image`, async () => {
      const error = await this.text('render-error');
      if (error) throw new Error(`render error: ${error}`);
      const src = (await image.getAttribute('src')) ?? '';
      return (await image.getAttribute('data-visual')) === visual && src.startsWith('data:image/');
    }, { timeoutMs: 60_000, ...options });
    return { ...(await imageStats(frame, '[data-testid=render-image]')), visual: await image.getAttribute('data-visual') };
  }

  /** Fills the intervention form and presses Add. */
  async addIntervention(kind: string, channels: string): Promise<void> {
    const frame = await this.getFrame();
    await frame.locator('[data-testid=iv-kind]').selectOption(kind);
    await frame.locator('[data-testid=iv-channels]').fill(channels);
    await frame.locator('[data-testid=iv-add]').click();
  }

  async interventionItems(): Promise<string[]> {
    const frame = await this.getFrame();
    return frame.locator('[data-testid=iv-item]').allInnerTexts();
  }
}
