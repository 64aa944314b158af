// The small per-tensor histogram: its geometry (pure, unit-tested) and the SVG that draws it
// (the summary table's rows and the "Show in Hookscope" section).

import type { TensorHistogram } from '../src/protocol/messages.gen';
import { formatNumber } from './format';

const SVG_NS = 'http://www.w3.org/2000/svg';

export interface Bar {
  x: number;
  y: number;
  width: number;
  height: number;
  count: number;
}

/**
 * Bars for `counts` in a width x height box. Heights use sqrt scaling so small bins stay
 * visible next to a dominant one; any non-empty bin is at least 1px tall.
 */
export function histogramBars(counts: readonly number[], width: number, height: number): Bar[] {
  const n = counts.length;
  if (n === 0 || width <= 0 || height <= 0) return [];
  const max = Math.max(...counts.map((c) => (Number.isFinite(c) && c > 0 ? c : 0)));
  const w = width / n;
  return counts.map((raw, i) => {
    const c = Number.isFinite(raw) && raw > 0 ? raw : 0;
    const h = max > 0 && c > 0 ? Math.max(1, Math.sqrt(c / max) * height) : 0;
    return { x: i * w, y: height - h, width: Math.max(w - (w > 3 ? 1 : 0), 0.5), height: h, count: c };
  });
}

/** The histogram of a summary's `hist` field, when it has bins to draw. */
export function histOf(hist: TensorHistogram | undefined): TensorHistogram | undefined {
  return hist?.counts.length ? hist : undefined;
}

/**
 * The histogram as an SVG drawn in a `width` x `height` box, tagged `testId`. `stretch`: no fixed
 * size, the box scales to whatever width CSS gives it (the table's column); else it is that size.
 */
export function histogramSvg(hist: TensorHistogram, width: number, height: number, testId: string, stretch = false): SVGSVGElement {
  const svg = document.createElementNS(SVG_NS, 'svg');
  if (stretch) {
    svg.setAttribute('preserveAspectRatio', 'none');
  } else {
    svg.setAttribute('width', String(width));
    svg.setAttribute('height', String(height));
  }
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('data-testid', testId);
  svg.setAttribute('class', 'hist');
  const title = document.createElementNS(SVG_NS, 'title');
  title.textContent = `${formatNumber(hist.lo)} … ${formatNumber(hist.hi)} (${hist.counts.length} bins)`;
  svg.append(title);
  for (const bar of histogramBars(hist.counts, width, height)) {
    if (bar.height <= 0) continue;
    const rect = document.createElementNS(SVG_NS, 'rect');
    rect.setAttribute('x', bar.x.toFixed(2));
    rect.setAttribute('y', bar.y.toFixed(2));
    rect.setAttribute('width', bar.width.toFixed(2));
    rect.setAttribute('height', bar.height.toFixed(2));
    svg.append(rect);
  }
  return svg;
}
