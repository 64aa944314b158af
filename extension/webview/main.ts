// The Tensors panel front end: draws the view model the host posts (header, summary table
// with histograms, interventions) and the visual section (feature maps, attention, Grad-CAM,
// gradient flow, histograms) whose images it asks the host to render. The same page runs in
// the side bar's view and in the editor-area panel. Pictures are of the layer and stop shown:
// they are cleared the moment either changes, and a late reply for an earlier one is dropped.
// Elements carry `data-testid` attributes that the end-to-end tests rely on (see
// extension/README-dev.md). Built by esbuild into dist/webview.js; all DOM is made with
// createElement (the CSP allows no inline script or style).

import './styles.css';
import { STEP_TOOLTIP, type FromWebview, type PanelFigure, type PanelView, type ToWebview, type VisualKind } from '../src/protocol/webview';
import type { InterventionKind } from '../src/protocol/messages.gen';
import { parseChannels } from './format';
import { Figures, type ShownImage } from './figures';
import {
  channelAt, figureTensors, initialUiState, pictureKey, renderOptions, uiReducer, type UiAction, type UiState,
} from './state';
import { tableHead, tensorRows } from './table';
import { isInspectToWebview, type InspectFromWebview, type InspectToWebview } from '../src/views/inspectProtocol';
import { InspectView } from './inspectView';

interface VsCodeApi {
  postMessage(message: FromWebview | InspectFromWebview): void;
  getState(): unknown;
  setState(state: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
/** While the program runs, images refresh at most this often (rendering costs the debuggee time). */
const LIVE_RENDER_INTERVAL_MS = 1000;
/** Once a live refresh is due it waits for the next sample (a new revision of the view), so the image
 * is of the step just summarised rather than of a sample up to a period old; this long at most. */
const FRESH_SAMPLE_WAIT_MS = 500;

let ui: UiState = { ...initialUiState(), ...((vscode.getState() as { ui?: UiState } | undefined)?.ui ?? {}) };
let view: PanelView | undefined;
let lastRenderedRevision = -1;
let lastTargetKey = '';
/** What the pictures on screen are of (state.ts pictureKey). */
let shownKey = '';
let renderSeq = 0;
/** The request in flight: its number and what it was for (a reply for anything else is dropped). */
let pending: { seq: number; key: string } | undefined;
let renderQueued = false;
let lastRenderAt = 0;
/** The live refresh that runs if no fresh sample arrives after the interval (FRESH_SAMPLE_WAIT_MS). */
let liveFallback: ReturnType<typeof setTimeout> | undefined;
const figures = new Figures(onImageClick);

function post(message: FromWebview): void {
  vscode.postMessage(message);
}

/** "Show in Hookscope": a tensor from any paused frame (inspectView.ts). */
const inspectView = new InspectView((message) => vscode.postMessage(message));

function dispatch(action: UiAction, rerender = true): void {
  ui = uiReducer(ui, action);
  vscode.setState({ ui });
  drawVisualControls();
  syncPictures();
  if (rerender) requestRender(true);
}

// ---- tiny DOM helpers -------------------------------------------------------------

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function byTestId<T extends HTMLElement>(id: string): T {
  return document.querySelector(`[data-testid="${id}"]`) as T;
}

// ---- static layout ------------------------------------------------------------------

function buildLayout(): void {
  const root = document.getElementById('root')!;
  root.replaceChildren(
    el('header', { class: 'header', 'data-testid': 'panel-header' },
      el('div', { class: 'status-line' },
        el('span', { class: 'status-dot', 'data-testid': 'panel-status' }),
        el('span', { class: 'headline', 'data-testid': 'panel-headline', text: 'Not connected' })),
      el('div', { class: 'detail', 'data-testid': 'panel-detail' }),
      el('div', { class: 'paused-reason', 'data-testid': 'panel-paused-reason' }),
      el('a', { class: 'born-at', href: '#', 'data-testid': 'panel-born-at' }),
      el('div', { class: 'rearm', 'data-testid': 'panel-rearm' }),
      el('button', { class: 'toggle', 'data-testid': 'break-nonfinite', title: 'Pause at the first layer that produces NaN/Inf' })),
    el('section', { class: 'notices', 'data-testid': 'notices' }),
    inspectView.element,
    el('section', { class: 'tensors', 'data-testid': 'tensors-section' },
      el('table', { class: 'tensor-table', 'data-testid': 'tensor-table' },
        tableHead(),
        el('tbody', { 'data-testid': 'tensor-rows' })),
      el('div', { class: 'empty', 'data-testid': 'tensor-empty' })),
    buildVisualSection(),
    buildInterventionSection(),
  );
  byTestId<HTMLButtonElement>('break-nonfinite').addEventListener('click', () => post({ type: 'toggleBreakOnNonFinite' }));
}

function buildVisualSection(): HTMLElement {
  const select = el('select', { 'data-testid': 'visual-select', 'aria-label': 'View' });
  const kinds: [VisualKind, string][] = [
    ['featureMap', 'Feature map'], ['attention', 'Attention'], ['gradCam', 'Grad-CAM'],
    ['gradientFlow', 'Gradient flow'], ['histogram', 'Histogram'],
  ];
  for (const [value, label] of kinds) select.append(el('option', { value, text: label }));
  select.addEventListener('change', () => dispatch({ type: 'visual', visual: select.value as VisualKind }));

  const prev = el('button', { 'data-testid': 'fm-prev', title: 'Previous channels', text: '‹' });
  const next = el('button', { 'data-testid': 'fm-next', title: 'Next channels', text: '›' });
  prev.addEventListener('click', () => dispatch({ type: 'page', delta: -1, pages: pagesFromMeta() }));
  next.addEventListener('click', () => dispatch({ type: 'page', delta: 1, pages: pagesFromMeta() }));
  const batch = el('input', { type: 'number', min: '0', value: '0', 'data-testid': 'fm-batch', title: 'Batch item' });
  batch.addEventListener('change', () => dispatch({ type: 'batch', batch: Number(batch.value) }));
  const shared = el('input', { type: 'checkbox', 'data-testid': 'fm-shared-scale' });
  shared.addEventListener('change', () => dispatch({ type: 'sharedScale', on: shared.checked }));
  const sort = el('input', { type: 'checkbox', 'data-testid': 'fm-sort' });
  sort.addEventListener('change', () => dispatch({ type: 'sort', on: sort.checked }));
  const head = el('input', { type: 'text', value: 'mean', size: '5', 'data-testid': 'attn-head', title: "Head index or 'mean'" });
  head.addEventListener('change', () => {
    const n = Number(head.value);
    dispatch({ type: 'head', head: head.value.trim() === '' || head.value.trim() === 'mean' || !Number.isInteger(n) ? 'mean' : n });
  });
  const cls = el('input', { type: 'text', size: '5', placeholder: 'predicted', 'data-testid': 'gradcam-class', title: 'Target class' });
  cls.addEventListener('change', () => {
    const n = Number(cls.value);
    dispatch({ type: 'targetClass', targetClass: cls.value.trim() !== '' && Number.isInteger(n) ? n : undefined });
  });
  const logScale = el('input', { type: 'checkbox', 'data-testid': 'hist-log' });
  logScale.addEventListener('change', () => dispatch({ type: 'histogramLog', log: logScale.checked }));

  const refresh = el('button', { 'data-testid': 'visual-render', title: 'Render again', text: 'Render' });
  refresh.addEventListener('click', () => requestRender(true));
  const save = el('button', { 'data-testid': 'save-png', title: 'Save the image as a PNG file', text: 'Save PNG' });
  save.addEventListener('click', () => post({ type: 'savePng' }));

  return el('section', { class: 'visual', 'data-testid': 'visual-section' },
    el('div', { class: 'controls' },
      select,
      el('span', { class: 'opts', 'data-opts': 'featureMap' },
        prev, el('span', { 'data-testid': 'fm-page' }), next,
        el('label', {}, 'batch ', batch),
        el('label', {}, shared, ' shared scale'),
        el('label', {}, sort, ' sort by strength')),
      el('span', { class: 'opts', 'data-opts': 'attention' }, el('label', {}, 'head ', head)),
      el('span', { class: 'opts', 'data-opts': 'gradCam' }, el('label', {}, 'class ', cls)),
      el('span', { class: 'opts', 'data-opts': 'histogram' }, el('label', {}, logScale, ' log scale')),
      refresh, save),
    el('div', { class: 'enlarged', 'data-testid': 'enlarged-channel' }),
    el('div', { class: 'image-box' }, figures.element));
}

/** A click on a feature map: enlarge the channel under it, or go back to the grid. */
function onImageClick(image: ShownImage, x: number, y: number, width: number, height: number): void {
  if (ui.visual !== 'featureMap') return;
  if (ui.enlarged !== undefined) {
    dispatch({ type: 'enlarge', channel: undefined });
    return;
  }
  const channel = channelAt(image.meta, x, y, width, height);
  if (channel !== undefined) dispatch({ type: 'enlarge', channel });
}

function buildInterventionSection(): HTMLElement {
  const kind = el('select', { 'data-testid': 'iv-kind' },
    el('option', { value: 'zero_channels', text: 'zero channels' }),
    el('option', { value: 'scale', text: 'scale output' }),
    el('option', { value: 'mean_ablate', text: 'mean-ablate' }),
    el('option', { value: 'input_noise', text: 'input noise (std)' }));
  const channels = el('input', { type: 'text', placeholder: 'channels: 0, 3-5', 'data-testid': 'iv-channels' });
  const value = el('input', { type: 'number', step: 'any', placeholder: 'value', 'data-testid': 'iv-value' });
  const add = el('button', { 'data-testid': 'iv-add', text: 'Add' });
  const error = el('span', { class: 'error', 'data-testid': 'iv-error' });
  const syncFields = (): void => {
    channels.hidden = kind.value !== 'zero_channels';
    value.hidden = kind.value !== 'scale' && kind.value !== 'input_noise';
  };
  kind.addEventListener('change', syncFields);
  syncFields();
  add.addEventListener('click', () => {
    error.textContent = '';
    const message: FromWebview & { type: 'addIntervention' } = { type: 'addIntervention', kind: kind.value as InterventionKind }; // the select's options are INTERVENTIONS
    if (kind.value === 'zero_channels') {
      const parsed = parseChannels(channels.value);
      if (!parsed) {
        error.textContent = 'Give channel numbers, e.g. "0, 3-5".';
        return;
      }
      message.channels = parsed;
    }
    if (kind.value === 'scale' || kind.value === 'input_noise') {
      const v = Number(value.value);
      if (value.value.trim() === '' || !Number.isFinite(v)) {
        error.textContent = 'Give a number.';
        return;
      }
      message.value = v;
    }
    post(message);
  });
  const removeAll = el('button', { 'data-testid': 'iv-remove-all', text: 'Remove all' });
  removeAll.addEventListener('click', () => post({ type: 'removeAllInterventions' }));
  return el('section', { class: 'interventions', 'data-testid': 'interventions' },
    el('h3', { text: 'Interventions' }),
    el('div', { class: 'controls' }, kind, channels, value, add, removeAll, error),
    el('ul', { 'data-testid': 'iv-list' }));
}

// ---- drawing the view model -----------------------------------------------------------

/** "torch.log → NaN/Inf at model.py:42 in Block.forward", a link that opens that line. */
function drawBornAt(born: PanelView['bornAt']): void {
  const link = byTestId<HTMLAnchorElement>('panel-born-at');
  link.hidden = !born;
  if (!born) {
    link.textContent = '';
    return;
  }
  const file = born.file.split(/[\\/]/).pop() ?? born.file;
  link.textContent = `${born.op} → NaN/Inf at ${file}:${born.line}${born.fn ? ` in ${born.fn}` : ''}`;
  link.title = `${born.file}:${born.line}`;
  link.onclick = (event) => {
    event.preventDefault();
    post({ type: 'openSource', file: born.file, line: born.line });
  };
}

function drawView(v: PanelView): void {
  const status = byTestId('panel-status');
  status.dataset.status = v.status;
  status.className = `status-dot ${v.status}`;
  byTestId('panel-headline').textContent = v.headline;
  byTestId('panel-detail').textContent = v.detail;
  byTestId('panel-detail').title = v.step !== undefined ? STEP_TOOLTIP : '';
  byTestId('panel-paused-reason').textContent = v.pausedReason ?? '';
  byTestId('panel-rearm').textContent = v.rearm ? `After Continue: ${v.rearm}` : '';
  drawBornAt(v.bornAt);
  const toggle = byTestId<HTMLButtonElement>('break-nonfinite');
  toggle.textContent = `Break on NaN/Inf: ${v.breakOnNonFinite ? 'on' : 'off'}`;
  toggle.dataset.on = String(v.breakOnNonFinite);
  document.body.dataset.status = v.status;

  byTestId('notices').replaceChildren(
    ...v.notices.map((n) => el('div', { class: `notice ${n.level}`, 'data-testid': 'notice', text: n.message })));

  const rows = byTestId('tensor-rows');
  rows.replaceChildren(...v.tensors.flatMap(tensorRows));
  byTestId('tensor-empty').textContent =
    v.tensors.length === 0 ? (v.status === 'notConnected' ? '' : 'No summaries yet for this layer.') : '';

  const affected = v.interventions.filter((i) => !v.target || i.layer === v.target.layer);
  byTestId('iv-list').replaceChildren(...v.interventions.map((i) => {
    const remove = el('button', { 'data-testid': 'iv-remove', title: 'Remove this intervention', text: '✕' });
    remove.addEventListener('click', () => post({ type: 'removeIntervention', id: i.id }));
    const what = i.kind === 'zero_channels' ? `zero channels ${(i.channels ?? []).join(', ')}`
      : i.kind === 'scale' ? `scale × ${i.value}` : i.kind === 'input_noise' ? `input noise σ=${i.value}` : 'mean-ablate';
    return el('li', { 'data-testid': 'iv-item', 'data-id': i.id }, `${i.layer}: ${what} `, remove);
  }));
  document.body.dataset.interventions = String(affected.length);
  const hasTarget = !!v.target;
  for (const b of document.querySelectorAll<HTMLButtonElement>('[data-testid="iv-add"], [data-testid="visual-render"]')) {
    b.disabled = !hasTarget;
  }
}

function drawVisualControls(): void {
  byTestId<HTMLSelectElement>('visual-select').value = ui.visual;
  for (const span of document.querySelectorAll<HTMLElement>('[data-opts]')) {
    span.hidden = span.dataset.opts !== ui.visual;
  }
  byTestId('fm-page').textContent = `page ${ui.featureMap.page + 1}/${pagesFromMeta() ?? '?'}`;
  byTestId<HTMLInputElement>('fm-batch').value = String(ui.featureMap.batch);
  byTestId<HTMLInputElement>('fm-shared-scale').checked = ui.featureMap.sharedScale;
  byTestId<HTMLInputElement>('fm-sort').checked = ui.featureMap.sort;
  byTestId('enlarged-channel').textContent =
    ui.enlarged !== undefined ? `Channel ${ui.enlarged} (click the image to go back to the grid)` : '';
}

function pagesFromMeta(): number | undefined {
  return figures.first?.meta.pages;
}

// ---- rendering requests ----------------------------------------------------------------

/** Clear the pictures when what they are of changed (another layer or stop, the session ended,
 * another visual): a stale picture never stays on screen under a new headline. */
function syncPictures(): void {
  const key = pictureKey(ui.visual, view);
  if (key === shownKey) return;
  shownKey = key;
  figures.clear(key && ui.showVisual ? 'Rendering…' : '');
}

/** Ask the host for the current visual; at most one request in flight, live refreshes throttled. */
function requestRender(force: boolean): void {
  if (!view?.target || !ui.showVisual) return;
  if (pending) {
    renderQueued = true;
    return;
  }
  const now = Date.now();
  if (!force && view.status === 'live' && now - lastRenderAt < LIVE_RENDER_INTERVAL_MS) {
    // The next new revision after the interval renders; the fallback, if none comes.
    liveFallback ??= setTimeout(() => {
      liveFallback = undefined;
      requestRender(true);
    }, LIVE_RENDER_INTERVAL_MS - (now - lastRenderAt) + FRESH_SAMPLE_WAIT_MS);
    return;
  }
  clearTimeout(liveFallback);
  liveFallback = undefined;
  renderQueued = false;
  lastRenderAt = now;
  renderSeq += 1;
  pending = { seq: renderSeq, key: pictureKey(ui.visual, view) };
  post({ type: 'render', seq: renderSeq, visual: ui.visual, options: renderOptions(ui), tensors: figureTensors(ui.visual, view) });
}

function onImages(seq: number, visual: VisualKind, shown: PanelFigure[]): void {
  if (!pending || seq !== pending.seq) return; // an older request
  const current = pending.key === pictureKey(ui.visual, view) && visual === ui.visual;
  pending = undefined;
  if (current) {
    figures.show(visual, shown);
    drawVisualControls();
  }
  if (renderQueued || !current) requestRender(true);
}

window.addEventListener('message', (event: MessageEvent<ToWebview | InspectToWebview>) => {
  if (isInspectToWebview(event.data)) {
    inspectView.handle(event.data);
    return;
  }
  const msg = event.data;
  switch (msg.type) {
    case 'view': {
      view = msg.view;
      drawView(view);
      if (view.suggested && view.stop) {  // a gradient-health stop: its gradient-norm profile, once per stop
        const s = view.stop;
        dispatch({ type: 'suggested', stop: `${s.processId}/${s.model}/${s.layer}:${s.phase}:${s.step}:${s.hit}`,
          visual: view.suggested.visual, options: view.suggested.options }, false);
      }
      const targetKey = view.target ? `${view.target.processId}/${view.target.model}/${view.target.layer}` : '';
      if (targetKey !== lastTargetKey) {
        lastTargetKey = targetKey;
        if (targetKey) dispatch({ type: 'layerChanged' }, false);
      }
      syncPictures();
      if (view.revision !== lastRenderedRevision) {
        lastRenderedRevision = view.revision;
        requestRender(view.status === 'paused');
      }
      return;
    }
    case 'images':
      onImages(msg.seq, msg.visual, msg.figures);
      return;
    case 'saved':
      figures.element.dataset.saved = msg.path;
      return;
  }
});

buildLayout();
drawVisualControls();
post({ type: 'ready' });
