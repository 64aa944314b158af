// The Tensors panel's "Inspect" section: a tensor shown with "Show in Hookscope" from any
// paused frame. Summary line and histogram; for 2-D and higher an image of one slice with
// the two displayed axes chosen in selects and a slider per other axis; the feature-map grid
// for (N, C, H, W); the value under the pointer; NaN/Inf in their marker colours. DOM only:
// the state lives in inspectState.ts. Test ids are listed in extension/README-dev.md.

import type { ImageMeta, TensorSummary } from '../src/protocol/messages.gen';
import type { InspectFromWebview, InspectToWebview, InspectedTensor } from '../src/views/inspectProtocol';
import { formatNonFinite, formatNumber, formatShape, hasNonFinite } from './format';
import { histOf, histogramSvg } from './histogram';
import {
  canFeatureMap, decodeValues, formatValue, initialInspectUi, inspectOptions, inspectReducer, otherAxes, sliceShape,
  valueAt, type InspectAction, type InspectUi, type SliceValues,
} from './inspectState';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: (Node | string)[]): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

export class InspectView {
  readonly element: HTMLElement;
  private tensor: InspectedTensor | undefined;
  private ui: InspectUi | undefined;
  private seq = 0;
  private inFlight = false;
  private queued = false;
  private released = false;
  private values: SliceValues | undefined;
  private meta: ImageMeta = {};
  private readonly parts: Record<string, HTMLElement> = {};

  constructor(private readonly post: (message: InspectFromWebview) => void) {
    const part = <T extends HTMLElement>(id: string, node: T): T => {
      node.setAttribute('data-testid', id);
      this.parts[id] = node;
      return node;
    };
    const close = part('inspect-close', el('button', { title: 'Close', text: '✕' }));
    close.addEventListener('click', () => {
      this.clear();
      this.post({ type: 'inspectClose' });
    });
    const mode = part('inspect-mode', el('select', { 'aria-label': 'Inspect view' },
      el('option', { value: 'slice', text: 'Slice' }), el('option', { value: 'featureMap', text: 'Feature maps (N, C, H, W)' })));
    mode.addEventListener('change', () => this.dispatch({ type: 'mode', mode: (mode).value as 'slice' | 'featureMap' }));
    const rowAxis = part('inspect-axis-row', el('select', { 'aria-label': 'Rows axis' }));
    const colAxis = part('inspect-axis-col', el('select', { 'aria-label': 'Columns axis' }));
    rowAxis.addEventListener('change', () => this.dispatch({ type: 'axis', which: 0, axis: Number((rowAxis).value) }));
    colAxis.addEventListener('change', () => this.dispatch({ type: 'axis', which: 1, axis: Number((colAxis).value) }));
    const batch = part('inspect-fm-batch', el('input', { type: 'number', min: '0', value: '0', title: 'Batch item' }));
    batch.addEventListener('change', () => this.dispatch({ type: 'batch', batch: Number((batch).value) }));
    const prev = part('inspect-fm-prev', el('button', { title: 'Previous channels', text: '‹' }));
    const next = part('inspect-fm-next', el('button', { title: 'Next channels', text: '›' }));
    prev.addEventListener('click', () => this.dispatch({ type: 'page', delta: -1, pages: this.pages() }));
    next.addEventListener('click', () => this.dispatch({ type: 'page', delta: 1, pages: this.pages() }));
    const image = part('inspect-image', el('img', { alt: '' }));
    image.addEventListener('mousemove', (ev) => this.readout(ev));
    image.addEventListener('mouseleave', () => { this.parts['inspect-readout'].textContent = ''; });
    image.addEventListener('click', (ev) => this.clickChannel(ev));

    this.element = el('section', { class: 'inspect', 'data-testid': 'inspect-section' },
      el('div', { class: 'inspect-head' },
        part('inspect-title', el('span', { class: 'inspect-title' })), close),
      part('inspect-line', el('div', { class: 'inspect-line' })),
      part('inspect-summary', el('div', { class: 'meta' })),
      part('inspect-hist-box', el('div', {})),
      el('div', { class: 'controls' },
        mode,
        part('inspect-axes', el('span', { class: 'opts' }, 'rows ', rowAxis, ' cols ', colAxis)),
        part('inspect-fm', el('span', { class: 'opts' }, prev, part('inspect-fm-page', el('span', {})), next, el('label', {}, 'batch ', batch)))),
      part('inspect-sliders', el('div', { class: 'inspect-sliders' })),
      el('div', { class: 'image-box' }, image),
      part('inspect-readout', el('div', { class: 'inspect-readout' })),
      part('inspect-meta', el('div', { class: 'meta' })),
      part('inspect-error', el('div', { class: 'error' })));
    this.element.hidden = true;
  }

  /** Handle a host message meant for this view; false when it is not one. */
  handle(message: InspectToWebview): void {
    switch (message.type) {
      case 'inspect':
        this.show(message.tensor);
        return;
      case 'inspectImage': {
        if (message.seq !== this.seq || message.handle !== this.tensor?.handle) return;
        const image = this.parts['inspect-image'] as HTMLImageElement;
        image.src = message.dataUrl;
        image.dataset.width = String(message.width);
        image.dataset.height = String(message.height);
        image.dataset.mode = this.ui?.mode ?? '';
        this.meta = message.meta;
        this.values = message.values && message.valuesShape && message.valuesStep
          ? decodeValues(message.values, message.valuesShape, message.valuesStep) : undefined;
        this.parts['inspect-meta'].textContent = describeMeta(message.meta);
        this.parts['inspect-error'].textContent = '';
        this.drawControls();
        this.done();
        return;
      }
      case 'inspectError':
        if (message.seq !== this.seq) return;
        this.parts['inspect-error'].textContent = message.message;
        this.done();
        return;
      case 'inspectReleased':
        if (message.handle !== this.tensor?.handle) return;
        this.released = true;
        this.parts['inspect-error'].textContent = 'The program resumed: the image stays, show the tensor again to slice it.';
        this.drawControls();
        return;
    }
  }

  private show(tensor: InspectedTensor): void {
    this.tensor = tensor;
    this.released = false;
    this.values = undefined;
    this.ui = initialInspectUi(tensor.handle, tensor.summary.shape ?? []);
    this.element.hidden = false;
    this.element.dataset.handle = tensor.handle;
    const where = tensor.path && tensor.path !== tensor.label ? ` → ${tensor.path}` : '';
    this.parts['inspect-title'].textContent = `${tensor.label}${where} · ${tensor.processLabel}`;
    this.parts['inspect-line'].textContent = tensor.line;
    this.drawSummary(tensor.summary);
    this.drawControls();
    (this.parts['inspect-image'] as HTMLImageElement).removeAttribute('src');
    this.parts['inspect-readout'].textContent = '';
    this.parts['inspect-meta'].textContent = '';
    this.parts['inspect-error'].textContent = '';
    this.element.scrollIntoView?.({ block: 'nearest' });
    this.request();
  }

  private clear(): void {
    this.tensor = undefined;
    this.ui = undefined;
    this.element.hidden = true;
  }

  private dispatch(action: InspectAction): void {
    if (!this.ui) return;
    const before = this.ui;
    this.ui = inspectReducer(this.ui, action);
    this.drawControls();
    if (this.ui !== before) this.request();
  }

  private request(): void {
    if (!this.tensor || !this.ui || this.released || (this.tensor.summary.shape ?? []).length === 0) return;
    if (this.inFlight) {
      this.queued = true;
      return;
    }
    this.inFlight = true;
    this.queued = false;
    this.seq += 1;
    this.post({ type: 'inspectRender', seq: this.seq, handle: this.tensor.handle, options: inspectOptions(this.ui) });
  }

  private done(): void {
    this.inFlight = false;
    if (this.queued) this.request();
  }

  private pages(): number | undefined {
    return this.meta.pages;
  }

  private drawSummary(s: TensorSummary): void {
    const bad = hasNonFinite(s);
    const parts = [
      `${formatShape(s.shape ?? [])} ${s.dtype} ${s.device}`,
      `mean ${formatNumber(s.mean)}`, `std ${formatNumber(s.std)}`, `min ${formatNumber(s.min)}`, `max ${formatNumber(s.max)}`,
      `NaN/Inf ${formatNonFinite(s)}`, `norm ${formatNumber(s.norm)}`,
    ];
    if (s.sampled) parts.push('(sampled)');
    if (s.note) parts.push(s.note);
    const summary = this.parts['inspect-summary'];
    summary.textContent = parts.join(' · ');
    summary.classList.toggle('nonfinite', bad);
    summary.dataset.nonfinite = String(bad);
    const box = this.parts['inspect-hist-box'];
    const hist = histOf(s.hist);
    box.replaceChildren(...(hist ? [histogramSvg(hist, 240, 40, 'inspect-hist')] : []));
  }

  private drawControls(): void {
    const ui = this.ui;
    if (!ui) return;
    const nd = ui.shape.length;
    const mode = this.parts['inspect-mode'] as HTMLSelectElement;
    mode.value = ui.mode;
    mode.hidden = !canFeatureMap(ui.shape);
    this.parts['inspect-axes'].hidden = ui.mode !== 'slice' || nd < 3;
    this.parts['inspect-fm'].hidden = ui.mode !== 'featureMap';
    for (const [id, which] of [['inspect-axis-row', 0], ['inspect-axis-col', 1]] as const) {
      const select = this.parts[id] as HTMLSelectElement;
      select.replaceChildren(...ui.shape.map((size, a) => el('option', { value: String(a), text: `${a} (${size})` })));
      select.value = String(ui.axes[which]);
    }
    const sliders = this.parts['inspect-sliders'];
    sliders.hidden = ui.mode !== 'slice';
    sliders.replaceChildren(...otherAxes(ui).map((axis) => {
      const position = ui.index[axis] ?? 0;
      const input = el('input', {
        type: 'range', min: '0', max: String(ui.shape[axis] - 1), value: String(position),
        'data-testid': 'inspect-slider', 'data-axis': String(axis), 'aria-label': `Position on axis ${axis}`,
      });
      const label = el('span', { 'data-testid': 'inspect-slider-value', text: `${position} / ${ui.shape[axis] - 1}` });
      input.addEventListener('input', () => { label.textContent = `${input.value} / ${ui.shape[axis] - 1}`; });
      input.addEventListener('change', () => this.dispatch({ type: 'position', axis, position: Number(input.value) }));
      input.disabled = this.released;
      return el('label', { class: 'inspect-slider' }, `axis ${axis} `, input, ' ', label);
    }));
    (this.parts['inspect-fm-batch'] as HTMLInputElement).value = String(ui.batch);
    this.parts['inspect-fm-page'].textContent = `page ${ui.page + 1}/${this.pages() ?? '?'}${ui.channel !== undefined ? ` · channel ${ui.channel}` : ''}`;
    for (const id of ['inspect-mode', 'inspect-axis-row', 'inspect-axis-col', 'inspect-fm-batch', 'inspect-fm-prev', 'inspect-fm-next']) {
      (this.parts[id] as HTMLInputElement).disabled = this.released;
    }
  }

  private readout(ev: MouseEvent): void {
    const out = this.parts['inspect-readout'];
    const image = this.parts['inspect-image'] as HTMLImageElement;
    if (!this.ui || !this.values || this.ui.mode !== 'slice' || this.meta.layout === 'grid') {
      out.textContent = '';
      return;
    }
    const rect = image.getBoundingClientRect();
    const [rows, cols] = sliceShape(this.ui);
    const r = valueAt(this.values, rows, cols, (ev.clientX - rect.left) / rect.width, (ev.clientY - rect.top) / rect.height);
    if (!r) {
      out.textContent = '';
      return;
    }
    const where = this.ui.shape.map((_, a) => (a === this.ui!.axes[0] ? r.row : a === this.ui!.axes[1] ? r.col : this.ui!.index[a] ?? 0));
    const index = this.ui.shape.length >= 2 ? where : [r.col];
    out.textContent = `[${index.join(', ')}] = ${formatValue(r.value)}${r.exact ? '' : ' (nearest sent value)'}`;
    out.dataset.value = formatValue(r.value);
  }

  private clickChannel(ev: MouseEvent): void {
    if (!this.ui || this.ui.mode !== 'featureMap' || this.released) return;
    if (this.ui.channel !== undefined) {
      this.dispatch({ type: 'channel', channel: undefined });
      return;
    }
    const { grid, channels = [] } = this.meta;
    if (!grid?.rows || !grid.cols) return;
    const rect = (ev.target as HTMLElement).getBoundingClientRect();
    const col = Math.floor(((ev.clientX - rect.left) / rect.width) * grid.cols);
    const row = Math.floor(((ev.clientY - rect.top) / rect.height) * grid.rows);
    const channel = channels[row * grid.cols + col];
    if (typeof channel === 'number') this.dispatch({ type: 'channel', channel });
  }
}

function describeMeta(meta: ImageMeta): string {
  const parts: string[] = [];
  const { range, nonfinite: nf } = meta;
  if (range) parts.push(`range ${formatNumber(range[0] ?? undefined)} … ${formatNumber(range[1] ?? undefined)}`);
  if (nf && (nf.nan || nf.posinf || nf.neginf)) {
    parts.push(`${formatNonFinite(nf)} (NaN magenta, +Inf red, -Inf cyan)`);
  }
  if (meta.downscale !== undefined && meta.downscale > 1) parts.push(`shown 1:${meta.downscale}`);
  if (meta.pages !== undefined && meta.pages > 1) parts.push(`page ${(meta.page ?? 0) + 1}/${meta.pages}`);
  return parts.join(' · ');
}
