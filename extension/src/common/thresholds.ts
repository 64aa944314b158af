// The gradient-norm switches' thresholds as the status bar shows them and the menu reads them
// (pure: unit-tested without VS Code).

import type { GradientThresholds } from '../backend/hub';

/** "1e-7" accepted, as are "100" and "2.5e3"; undefined for empty; an error text otherwise. */
export function parseThreshold(text: string): number | undefined | string {
  const trimmed = text.trim();
  if (!trimmed) return undefined;
  const value = Number(trimmed);
  return Number.isFinite(value) && value > 0 ? value : 'a positive number, or empty to turn it off';
}

/** The status bar text of the gradient switches. */
export function gradientStatusText(t: GradientThresholds): string {
  const parts = [t.exploding !== undefined ? `> ${t.exploding}` : '', t.vanishing !== undefined ? `< ${t.vanishing}` : ''].filter(Boolean);
  return parts.length ? `$(pulse) Gradient norm ${parts.join(' · ')}: break` : '$(pulse) Gradients: off';
}
