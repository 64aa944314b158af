// The Markdown of a layer breakpoint's gutter hover and of its tree row's warning tooltip.
// Kept apart from vscode (it only writes into a MarkdownString) so unit tests can check it.

import type * as vscode from 'vscode';
import { describeCondition, phaseChoiceOf, type BreakpointStatus, type LayerBreakpoint } from './model';

/** The part of vscode.MarkdownString written here. */
export type MarkdownSink = Pick<vscode.MarkdownString, 'appendMarkdown' | 'appendText'>;

/** The gutter hover (a MarkdownString with theme icons on). */
export function writeBreakpointHover(md: MarkdownSink, bp: LayerBreakpoint, status: BreakpointStatus | undefined): void {
  const condition = describeCondition(bp);
  md.appendMarkdown(
    `**Layer breakpoint** (${phaseChoiceOf(bp.phases)})${condition ? ` — ${condition}` : ''}` +
      (bp.layer ? `\n\nlayer \`${bp.layer}\`` : '') +
      (bp.instance ? `\n\nstops only in \`${bp.instance}\` (the instance chosen among the layers this line stands for)` : '') +
      (status?.layers.length ? `\n\nmatches: ${status.layers.map((l) => `\`${l}\``).join(', ')}` : '') +
      (status?.problem ? `\n\n$(warning) ${status.problem}` : ''),
  );
}

/** The tree row's tooltip when the breakpoint has a problem (a MarkdownString with theme icons on). */
export function writeProblemTooltip(md: MarkdownSink, bp: LayerBreakpoint, problem: string): void {
  md.appendMarkdown(`$(warning) **${problem}**\n\n${bp.file ? `${bp.file}:${bp.line + 1}` : bp.layer ?? ''}`);
}
