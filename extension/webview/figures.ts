// The pictures of the Tensors panel: one figure per rendered tensor, each image captioned with
// what the backend says it is of (layer · tensor · step) and how to read it, drawn at the
// panel's width (grids of values crisp, nearest neighbour). Either images (with quiet notes for
// pictures that cannot be made yet) or one error: never an error beside an image.

import type { ImageMeta } from '../src/protocol/messages.gen';
import type { PanelFigure, VisualKind } from '../src/protocol/webview';
import { captionOf, describeImage, isPixelImage } from './caption';

export interface ShownImage {
  meta: ImageMeta;
  width: number;
  height: number;
}

export class Figures {
  readonly element: HTMLElement;
  private readonly list: HTMLElement;
  private readonly error: HTMLElement;
  private readonly status: HTMLElement;
  /** The first image shown (pages, channel clicks and Save PNG refer to it). */
  first: ShownImage | undefined;

  /** `onImageClick(image, x, y, width, height)`: a click on an image, in its drawn coordinates. */
  constructor(private readonly onImageClick: (image: ShownImage, x: number, y: number, w: number, h: number) => void) {
    this.list = document.createElement('div');
    this.list.className = 'figures';
    this.list.setAttribute('data-testid', 'render-figures');
    this.status = document.createElement('div');
    this.status.className = 'render-status';
    this.status.setAttribute('data-testid', 'render-status');
    this.error = document.createElement('div');
    this.error.className = 'error';
    this.error.setAttribute('data-testid', 'render-error');
    this.element = document.createElement('div');
    this.element.append(this.status, this.list, this.error);
  }

  /** Nothing shown (another layer, another stop, the session ended); `status`: what is coming. */
  clear(status = ''): void {
    this.list.replaceChildren();
    this.error.textContent = '';
    this.status.textContent = status;
    this.first = undefined;
  }

  /** Show a render's pictures (replacing what was shown). */
  show(visual: VisualKind, figures: readonly PanelFigure[]): void {
    const failed = figures.find((f) => f.error);
    this.clear();
    if (failed) {
      this.error.textContent = failed.tensor ? `${failed.tensor}: ${failed.error}` : failed.error ?? '';
      return;
    }
    for (const f of figures) {
      if (f.image) {
        this.list.append(this.figure(visual, f.tensor, f.image));
        this.first ??= { meta: f.image.meta, width: f.image.width, height: f.image.height };
      } else if (f.note) {
        const note = document.createElement('div');
        note.className = 'note';
        note.setAttribute('data-testid', 'render-note');
        note.textContent = f.tensor ? `${f.tensor}: ${f.note}` : f.note;
        this.list.append(note);
      }
    }
  }

  private figure(visual: VisualKind, tensor: string | undefined, image: NonNullable<PanelFigure['image']>): HTMLElement {
    const figure = document.createElement('figure');
    figure.className = 'figure';
    figure.setAttribute('data-testid', 'render-figure');
    const of = image.meta.of;
    figure.dataset.layer = of?.layer ?? '';
    figure.dataset.tensor = of?.tensor ?? tensor ?? '';
    if (of?.step !== undefined) figure.dataset.step = String(of.step);
    if (of?.phase) figure.dataset.phase = of.phase;

    const img = document.createElement('img');
    img.setAttribute('data-testid', 'render-image');
    img.alt = captionOf(image.meta) || visual;
    img.dataset.visual = visual;
    img.dataset.width = String(image.width);
    img.dataset.height = String(image.height);
    img.className = isPixelImage(image.meta) ? 'pixels' : 'chart';
    if (image.height > 2 * image.width) img.classList.add('tall');
    img.src = image.dataUrl;
    const shown: ShownImage = { meta: image.meta, width: image.width, height: image.height };
    img.addEventListener('click', (ev) => {
      // The drawn picture: the element's box, less the margins `object-fit: contain` leaves (tall images).
      const rect = img.getBoundingClientRect();
      const scale = Math.min(rect.width / image.width, rect.height / image.height);
      this.onImageClick(shown, ev.clientX - rect.left, ev.clientY - rect.top, image.width * scale, image.height * scale);
    });

    const caption = document.createElement('figcaption');
    caption.setAttribute('data-testid', 'render-caption');
    caption.textContent = captionOf(image.meta);
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.setAttribute('data-testid', 'render-meta');
    meta.textContent = describeImage(image.meta);
    figure.append(caption, img, meta);
    return figure;
  }
}
