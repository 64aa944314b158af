// The Markdown of a layer breakpoint's gutter hover and of its tree row's warning tooltip.
// Layer names, conditions and problems come from the user or the running model (a ModuleDict
// key can be any string): they go in with appendText, which escapes Markdown and theme icons,
// never with appendMarkdown. Kept apart from vscode so unit tests can check the value.

import { describeCondition, phaseChoiceOf, targetLabel, type BreakpointStatus, type LayerBreakpoint } from './model';

/** The part of vscode.MarkdownString written here. */
export interface MarkdownSink {
  appendMarkdown(value: string): MarkdownSink;
  appendText(value: string): MarkdownSink;
}

/** The gutter hover (a MarkdownString with theme icons on). */
export function writeBreakpointHover(md: MarkdownSink, bp: LayerBreakpoint, status: BreakpointStatus | undefined): void {
  const condition = describeCondition(bp);
  md.appendMarkdown(`**Layer breakpoint** (${phaseChoiceOf(bp.phases)})`);
  if (condition) md.appendMarkdown(' — ').appendText(condition);
  const target = targetLabel(bp);
  if (target) md.appendMarkdown('\n\nlayer ').appendText(target);
  if (bp.instance) {
    md.appendMarkdown('\n\nstops only in ').appendText(bp.instance);
    md.appendMarkdown(' (the instance chosen among the layers this line stands for)');
  }
  if (status?.layers.length) md.appendMarkdown('\n\nmatches: ').appendText(status.layers.join(', '));
  if (status?.problem) md.appendMarkdown('\n\n$(warning) ').appendText(status.problem);
}

/** The tree row's tooltip when the breakpoint has a problem (a MarkdownString with theme icons on). */
export function writeProblemTooltip(md: MarkdownSink, bp: LayerBreakpoint, problem: string): void {
  md.appendMarkdown('$(warning) **').appendText(problem);
  md.appendMarkdown('**\n\n').appendText(bp.file ? `${bp.file}:${bp.line + 1}` : targetLabel(bp) ?? '');
}
