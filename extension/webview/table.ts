// The summary table of the Tensors panel. It fits the width it is given: in a wide panel every
// column shows; in a normal side bar (~300-400 px) the columns that do not fit fold into a second
// line under the row (the whole table's width) and into the row's tooltip, while the norm and the
// histogram keep their columns (styles.css picks the columns per width with a container query).
// Each cell keeps its `data-col` whether shown or folded, so tests and tools read the same cells
// at any width.

import type { TensorSummary } from '../src/protocol/messages.gen';
import { formatNonFinite, formatNumber, formatPercent, formatShape, hasNonFinite } from './format';
import { histOf, histogramSvg } from './histogram';

/** The columns, in order; `fold`: from which width class on it folds ('medium': below ~760 px, 'narrow': below ~480 px). */
export const COLUMNS: readonly { col: string; title: string; fold?: 'medium' | 'narrow' }[] = [
  { col: 'path', title: 'tensor' },
  { col: 'shape', title: 'shape', fold: 'narrow' },
  { col: 'dtype', title: 'dtype', fold: 'medium' },
  { col: 'device', title: 'device', fold: 'medium' },
  { col: 'mean', title: 'mean', fold: 'narrow' },
  { col: 'std', title: 'std', fold: 'medium' },
  { col: 'min', title: 'min', fold: 'medium' },
  { col: 'max', title: 'max', fold: 'medium' },
  { col: 'nonfinite', title: 'NaN/Inf', fold: 'medium' },
  { col: 'zeros', title: 'zeros', fold: 'medium' },
  { col: 'norm', title: 'norm' },
  { col: 'hist', title: 'histogram' },
];

/** The text of each cell of a row (the histogram is drawn, not written). */
export function cellTexts(t: TensorSummary): Record<string, string> {
  return {
    path: t.path, shape: formatShape(t.shape ?? []), dtype: t.dtype, device: t.device,
    mean: formatNumber(t.mean), std: formatNumber(t.std), min: formatNumber(t.min), max: formatNumber(t.max),
    nonfinite: formatNonFinite(t), zeros: formatPercent(t.zeroFrac), norm: formatNumber(t.norm),
  };
}

/** The folded line's parts: `[text, fold class]` — each shows only where its column is folded. */
export function foldedParts(t: TensorSummary): [string, 'medium' | 'narrow'][] {
  const c = cellTexts(t);
  const parts: [string, 'medium' | 'narrow'][] = [
    [c.shape, 'narrow'],
    [`${shortDtype(c.dtype)} ${c.device}`, 'medium'],
    [`μ ${c.mean}`, 'narrow'],
    [`σ ${c.std}`, 'medium'],
    [`[${c.min}, ${c.max}]`, 'medium'],
    [`${c.zeros} zeros`, 'medium'],
  ];
  if (hasNonFinite(t)) parts.push([c.nonfinite, 'medium']);
  return parts;
}

/** Every column in words, for the row's tooltip (what a narrow panel folds away is all there). */
export function rowTooltip(t: TensorSummary): string {
  const c = cellTexts(t);
  const lines = [
    `${c.path} ${c.shape} ${c.dtype} ${c.device}`,
    `mean ${c.mean} · std ${c.std} · min ${c.min} · max ${c.max}`,
    `NaN/Inf ${c.nonfinite} · zeros ${c.zeros} · norm ${c.norm}`,
  ];
  if (t.sampled) lines.push('summarised from a sample of the values');
  if (t.note) lines.push(t.note);
  return lines.join('\n');
}

function shortDtype(dtype: string): string {
  const m = /^(float|bfloat|int|uint)(\d+)$/.exec(dtype);
  if (!m) return dtype;
  return `${{ float: 'f', bfloat: 'bf', int: 'i', uint: 'u' }[m[1]]}${m[2]}`;
}

// ---- DOM ----------------------------------------------------------------------------------------

export function tableHead(): HTMLTableSectionElement {
  const head = document.createElement('thead');
  const row = document.createElement('tr');
  for (const { col, title, fold } of COLUMNS) {
    const th = document.createElement('th');
    th.textContent = title;
    th.dataset.col = col;
    if (fold) th.dataset.fold = fold;
    row.append(th);
  }
  head.append(row);
  return head;
}

/** A tensor's row, and the line under it that holds its folded columns (shown only when some fold). */
export function tensorRows(t: TensorSummary): HTMLTableRowElement[] {
  const row = tensorRow(t);
  const fold = document.createElement('tr');
  fold.className = 'fold-row';
  fold.dataset.path = t.path;
  fold.title = row.title;
  const cell = document.createElement('td');
  cell.colSpan = COLUMNS.length;
  cell.append(foldedLine(t));
  fold.append(cell);
  if (row.classList.contains('nonfinite')) fold.classList.add('nonfinite');
  return [row, fold];
}

function tensorRow(t: TensorSummary): HTMLTableRowElement {
  const texts = cellTexts(t);
  const row = document.createElement('tr');
  row.setAttribute('data-testid', 'tensor-row');
  row.dataset.path = t.path;
  if (hasNonFinite(t)) row.classList.add('nonfinite');
  if (t.sampled) row.classList.add('sampled');
  row.title = rowTooltip(t);
  for (const { col, fold } of COLUMNS) {
    const td = document.createElement('td');
    td.dataset.col = col;
    if (fold) td.dataset.fold = fold;
    if (col === 'path') {
      const name = document.createElement('span');
      name.className = 'path-name';
      name.textContent = texts.path;
      td.append(name);
    } else if (col === 'hist') {
      const hist = histOf(t.hist);
      if (hist) td.append(histogramSvg(hist, 120, 28, 'tensor-hist', true)); // stretched to the column
    } else {
      td.textContent = texts[col];
    }
    row.append(td);
  }
  return row;
}

function foldedLine(t: TensorSummary): HTMLElement {
  const line = document.createElement('div');
  line.className = 'fold';
  line.setAttribute('data-testid', 'tensor-fold');
  for (const [text, fold] of foldedParts(t)) {
    const part = document.createElement('span');
    part.dataset.fold = fold;
    part.textContent = text;
    line.append(part);
  }
  return line;
}
