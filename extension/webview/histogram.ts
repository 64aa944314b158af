// Geometry of the small per-tensor histogram (pure; the DOM code draws these rectangles as SVG).

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

/** The histogram of a summary's `hist` field, if it is well-formed. */
export function histOf(hist: unknown): { lo: number; hi: number; counts: number[] } | undefined {
  const h = hist as { lo?: unknown; hi?: unknown; counts?: unknown } | undefined;
  if (!h || typeof h.lo !== 'number' || typeof h.hi !== 'number' || !Array.isArray(h.counts)) return undefined;
  const counts = h.counts.filter((c): c is number => typeof c === 'number');
  return counts.length ? { lo: h.lo, hi: h.hi, counts } : undefined;
}
