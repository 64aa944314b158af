// A layer breakpoint's gutter hover and tree tooltip keep names and messages from the running
// model as text: a hostile ModuleDict key becomes no link, remote image, HTML, emphasis or icon.
import { strict as assert } from 'node:assert';
import { writeBreakpointHover, writeProblemTooltip, type MarkdownSink } from '../../extension/src/breakpoints/hoverText';
import type { BreakpointStatus, LayerBreakpoint } from '../../extension/src/breakpoints/model';

// markdown-it (a CommonMark renderer, installed with @vscode/vsce) stands in for VS Code's
// renderer; `html: false` is a MarkdownString's default (supportHtml off).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const MarkdownIt = require('markdown-it') as new (options: { html: boolean }) => { render(src: string): string };
const renderer = new MarkdownIt({ html: false });

const HOSTILE = 'evil](https://x.example/a.png) ![img](https://x.example/i.png) <img src=x onerror=alert(1)> **b** `c` $(zap)';

/**
 * vscode.MarkdownString's value building, as VS Code 1.9x does it (src/vs/base/common/htmlContent.ts:
 * appendText escapes Markdown syntax, theme icons when they are on, runs of blanks and `>`).
 */
class FakeMarkdownString implements MarkdownSink {
  value = '';
  constructor(readonly supportThemeIcons: boolean) {}
  appendMarkdown(value: string): this {
    this.value += value;
    return this;
  }
  appendText(value: string): this {
    const icons = this.supportThemeIcons ? value.replace(/(\\)?\$\([a-z0-9-]+?(?:~[a-z0-9-]*?)?\)/gi, (m, escaped) => (escaped ? m : `\\${m}`)) : value;
    this.value += icons
      .replace(/[\\`*_{}[\]()#+!~]/g, '\\$&')
      .replace(/^([ \t]*)-/gm, '$1\\-')
      .replace(/([ \t]+)/g, (_m, blanks: string) => '&nbsp;'.repeat(blanks.length))
      .replace(/>/gm, '\\>')
      .replace(/\n/g, '\n\n');
    return this;
  }
}

/** What the user reads: the rendered HTML's text, after checking it holds no tag a name could have made. */
function renderedText(md: FakeMarkdownString): string {
  assert.doesNotMatch(md.value, /(?<!\\)\$\(zap\)/, 'a theme icon in a name must stay text');
  const html = renderer.render(md.value);
  assert.doesNotMatch(html, /<(a|img|em|code)\b/, `no link, image, emphasis or code from a name: ${html}`);
  assert.equal((html.match(/<strong>/g) ?? []).length, 1, `only Hookscope's own bold text: ${html}`);
  return html
    .replace(/\\\$\(/g, '$(') // VS Code's icon pass shows an escaped icon as the text $(name)
    .replace(/<[^>]+>/g, '')
    .replace(/&nbsp;|\u00a0/g, ' ')
    .replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&amp;/g, '&');
}

const breakpoint: LayerBreakpoint = {
  id: 'b1', uri: 'file:///w/net.py', file: '/w/net.py', line: 4, phases: ['forward'], enabled: true,
  layer: `heads.${HOSTILE}`, instance: `blocks.${HOSTILE}`,
  condition: { kind: 'expression', expression: `output.sum() > 0 and "${HOSTILE}"` },
};

describe('breakpoints: hover and tooltip Markdown', () => {
  it('shows a hostile layer name, match, problem and condition in the gutter hover as text', () => {
    const status: BreakpointStatus = { layers: [`m.${HOSTILE}`], problem: `layer ${HOSTILE} matches no layer` };
    const md = new FakeMarkdownString(true);
    writeBreakpointHover(md, breakpoint, status);
    const text = renderedText(md);
    for (const needle of [`heads.${HOSTILE}`, `blocks.${HOSTILE}`, `m.${HOSTILE}`, `layer ${HOSTILE} matches no layer`, `if output.sum() > 0 and "${HOSTILE}"`]) {
      assert.ok(text.includes(needle), `${needle} shown as written in ${JSON.stringify(text)}`);
    }
    assert.match(md.value, /\$\(warning\)/, "Hookscope's own warning icon stays an icon");
  });

  it('shows a hostile problem and layer in the tree tooltip as text', () => {
    const md = new FakeMarkdownString(true);
    writeProblemTooltip(md, { ...breakpoint, file: '' }, `layer ${HOSTILE} matches no layer`);
    const text = renderedText(md);
    assert.ok(text.includes(`layer ${HOSTILE} matches no layer`), text);
    assert.ok(text.includes(`heads.${HOSTILE}`), text);
    assert.match(md.value, /^\$\(warning\) /);
  });
});
