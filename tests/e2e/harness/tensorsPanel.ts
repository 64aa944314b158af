// Reads and drives Hookscope's Tensors webview (a view in Run and Debug, or the same
// panel opened in the editor area) through the `data-testid`s documented in
// extension/README-dev.md: headline and status, the summary table and its histograms,
// the visual (feature map, gradient flow) images and their captions, and the
// intervention form.
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

/** One picture in the panel: what its caption and data say it is of, and how it is drawn. */
export interface PanelFigure {
  layer: string;
  tensor: string;
  step: number | null;
  phase: string;
  caption: string;
  description: string;
  naturalWidth: number;
  /** Its width on screen (getBoundingClientRect). */
  drawnWidth: number;
  /** The width its figure takes (one column of the pictures). */
  figureWidth: number;
  /** The width the pictures may take (the figure list's). */
  boxWidth: number;
}

export class TensorsPanel {
  private frame?: Frame;

  /** `host`: the side bar's view ('side') or the panel opened in the editor area ('editor'). */
  constructor(readonly workbench: Workbench, readonly host: 'side' | 'editor' = 'side') {}

  /** Reveals the panel ("Hookscope: Show Tensors Panel") and finds its frame. */
  async show(): Promise<Frame> {
    await this.workbench.runCommand('Hookscope: Show Tensors Panel');
    return this.getFrame();
  }

  async getFrame(): Promise<Frame> {
    if (this.frame && !this.frame.isDetached()) return this.frame;
    this.frame = await this.workbench.webviewFrame(`body[data-host=${this.host}] [data-testid=tensors-root]`, { timeoutMs: 30_000 });
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

  /** The pictures shown, in order (none while a render is pending or after an error). */
  async figures(): Promise<PanelFigure[]> {
    const frame = await this.getFrame();
    return frame.locator('[data-testid=render-figure]').evaluateAll((figures) => figures.map((f) => {
      const img = f.querySelector('img') as HTMLImageElement;
      const box = f.parentElement as HTMLElement;
      return {
        layer: f.getAttribute('data-layer') ?? '',
        tensor: f.getAttribute('data-tensor') ?? '',
        step: f.hasAttribute('data-step') ? Number(f.getAttribute('data-step')) : null,
        phase: f.getAttribute('data-phase') ?? '',
        caption: (f.querySelector('[data-testid=render-caption]') as HTMLElement | null)?.innerText.trim() ?? '',
        description: (f.querySelector('[data-testid=render-meta]') as HTMLElement | null)?.innerText.trim() ?? '',
        naturalWidth: img.naturalWidth,
        drawnWidth: img.getBoundingClientRect().width,
        figureWidth: f.getBoundingClientRect().width,
        boxWidth: box.getBoundingClientRect().width,
      };
    }));
  }

  /** How much of the first picture is inside the webview's viewport as it is scrolled now (0..1). */
  async figureInView(): Promise<{ visible: boolean; visibleFraction: number; top: number; bottom: number; viewport: number }> {
    const frame = await this.getFrame();
    return frame.locator('[data-testid=render-figure] img').first().evaluate((img) => {
      const { top, bottom, height } = img.getBoundingClientRect();
      const viewport = window.innerHeight;
      const shown = Math.max(0, Math.min(bottom, viewport) - Math.max(top, 0));
      const visibleFraction = height > 0 ? shown / height : 0;
      return { visible: visibleFraction >= 0.5, visibleFraction, top, bottom, viewport };
    });
  }

  /** Waits until the loaded pictures satisfy `check` (and there is no render error); returns them. */
  async waitForFigures(what: string, check: (figures: PanelFigure[]) => boolean, options: WaitOptions = {}): Promise<PanelFigure[]> {
    try {
      return await waitFor(what, async () => {
        this.frame = undefined;
        const error = await this.text('render-error');
        if (error) throw new Error(`render error: ${error}`);
        const figures = await this.figures();
        return figures.length > 0 && figures.every((f) => f.naturalWidth > 0) && check(figures) ? figures : undefined;
      }, { timeoutMs: 60_000, ...options });
    } catch (error) {
      const seen = await this.figures().catch(() => []);
      throw new Error(`${(error as Error).message}\n  pictures shown: ${JSON.stringify(seen)}`);
    }
  }

  /** Picks a visual in the select (without waiting for its image). */
  async selectVisual(visual: string): Promise<void> {
    const frame = await this.getFrame();
    const select = frame.locator('[data-testid=visual-select]');
    if ((await select.inputValue()) !== visual) await select.selectOption(visual);
  }

  /** The notes shown instead of pictures ("no forward of X was seen in step 4"). */
  async notes(): Promise<string[]> {
    const frame = await this.getFrame();
    return (await frame.locator('[data-testid=render-note]').allInnerTexts()).map((t) => t.trim());
  }

  async notices(): Promise<string[]> {
    const frame = await this.getFrame();
    return (await frame.locator('[data-testid=notice]').allInnerTexts()).map((t) => t.trim());
  }

  /** How the summary table fits: its section's scroll and client widths, and whether the norm and histogram cells are inside it. */
  async tableFit(): Promise<{ scrollWidth: number; clientWidth: number; tableWidth: number; normInside: boolean; histInside: boolean; rows: number }> {
    const frame = await this.getFrame();
    return frame.locator('[data-testid=tensors-section]').evaluate((section) => {
      const box = section.getBoundingClientRect();
      // (no named functions in here: the test runner's transform would wrap them in a helper the page lacks)
      const [normInside, histInside] = ['norm', 'hist'].map((col) => [...section.querySelectorAll(`tr[data-testid=tensor-row] td[data-col=${col}]`)]
        .every((td) => {
          const r = td.getBoundingClientRect();
          return r.width > 0 && r.left >= box.left - 1 && r.right <= box.right + 1;
        }));
      return {
        scrollWidth: section.scrollWidth, clientWidth: section.clientWidth,
        tableWidth: (section.querySelector('table') as HTMLElement).getBoundingClientRect().width,
        normInside, histInside,
        rows: section.querySelectorAll('tr[data-testid=tensor-row]').length,
      };
    });
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
