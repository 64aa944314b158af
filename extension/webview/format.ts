// Number and tensor formatting for the Tensors panel (pure; unit-tested).

import type { TensorSummary } from '../src/protocol/messages.gen';

/** Compact, readable numbers: 0.000123 -> "1.23e-4", 12.5 -> "12.5", 123456 -> "1.23e+5". */
export function formatNumber(x: number | undefined | null): string {
  if (x === undefined || x === null) return '—';
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '+Inf' : '-Inf';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e-3 && a < 1e5) return String(Number(x.toPrecision(4)));
  return x.toExponential(2).replace(/e([+-])0*(\d)/, 'e$1$2');
}

export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

export function formatPercent(fraction: number | undefined): string {
  if (fraction === undefined || fraction === null || !Number.isFinite(fraction)) return '—';
  const pct = fraction * 100;
  return pct === 0 ? '0%' : pct < 0.1 ? '<0.1%' : `${Number(pct.toPrecision(3))}%`;
}

/** NaN/Inf counts for a row: "0", or "3 NaN · 1 +Inf". */
export function formatNonFinite(t: Pick<TensorSummary, 'nan' | 'posinf' | 'neginf'>): string {
  const parts: string[] = [];
  if (t.nan) parts.push(`${t.nan} NaN`);
  if (t.posinf) parts.push(`${t.posinf} +Inf`);
  if (t.neginf) parts.push(`${t.neginf} -Inf`);
  return parts.length ? parts.join(' · ') : '0';
}

export function hasNonFinite(t: Pick<TensorSummary, 'nan' | 'posinf' | 'neginf'>): boolean {
  return (t.nan ?? 0) + (t.posinf ?? 0) + (t.neginf ?? 0) > 0;
}

/** "[1, 2]" style channel list parsing for the intervention form: "0, 3-5" -> [0, 3, 4, 5]. */
export function parseChannels(text: string): number[] | undefined {
  const out: number[] = [];
  for (const part of text.split(/[\s,]+/).filter(Boolean)) {
    const range = /^(\d+)-(\d+)$/.exec(part);
    if (range) {
      const lo = Number(range[1]);
      const hi = Number(range[2]);
      if (hi < lo || hi - lo > 4096) return undefined;
      for (let c = lo; c <= hi; c++) out.push(c);
    } else if (/^\d+$/.test(part)) {
      out.push(Number(part));
    } else {
      return undefined;
    }
  }
  return out.length ? [...new Set(out)] : undefined;
}
