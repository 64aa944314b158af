// A stranger with only hookscope.vsix and a torch environment (issue 19): the .vsix is installed
// into code-server, and the interpreter is a fresh venv holding torch only — no hookscope, no
// debugpy, no msgpack, no pygls, no NumPy, no matplotlib. Everything Hookscope runs in Python
// comes out of the .vsix:
// (a) the language server (bundled pygls) puts code lenses on the CNN's layer lines, and one
//     sets a backward layer breakpoint;
// (b) debugging with Hookscope's own debug type (bundled debugpy adapter, bundled hookscope,
//     msgpack's pure-Python fallback) stops in that layer with grad_output, the Tensors panel
//     shows its summaries, and a feature map says which packages it would need;
// (c) break on NaN/Inf stops in the layer where the NaN is born.
import assert from 'node:assert/strict';
import type { Locator } from 'playwright-core';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { REPO_ROOT } from '../harness/paths.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { torchOnlyPython } from '../harness/torchOnly.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';

/** The code lens titled `title` drawn right above editor line `line` (1-based), once it is there. */
async function lensAbove(workbench: Workbench, line: number, title: string): Promise<Locator | false> {
  const number = workbench.page.locator('.monaco-editor .margin-view-overlays .line-numbers', { hasText: new RegExp(`^${line}$`) });
  const lineBox = await number.first().boundingBox();
  if (!lineBox) return false;
  const lenses = workbench.page.locator('.monaco-editor .codelens-decoration a', { hasText: title });
  // A line's lenses sit in the zone right above it: the nearest lens above the line, if close.
  let nearest: { index: number; y: number } | undefined;
  for (let i = 0; i < await lenses.count(); i++) {
    const box = await lenses.nth(i).boundingBox();
    if (box && box.y < lineBox.y && (!nearest || box.y > nearest.y)) nearest = { index: i, y: box.y };
  }
  return nearest && lineBox.y - nearest.y < 2 * lineBox.height ? lenses.nth(nearest.index) : false;
}

describe('only the .vsix and a torch-only interpreter', function () {
  let python = '';
  const session = sessionSteps(() => {
    python = torchOnlyPython();
    return startHookscopeRun('vsix-only', { pythonPath: python });
  });
  const cnn = () => path.join(session.run().workspaceDir, 'cnn.py');

  it('a. the installed extension carries the Python side; code lenses come from its language server', async function () {
    const run = session.run();
    const { workbench, trace } = run;
    const installed = fs.readdirSync(path.join(run.runDir, 'extensions')).find((d) => d.startsWith('hookscope.hookscope-'));
    assert.ok(installed, 'hookscope.vsix is installed');
    const bundled = path.join(run.runDir, 'extensions', installed, 'bundled');
    for (const part of ['tool/hookscope/bootstrap/sitecustomize.py', 'libs/debugpy/adapter', 'libs/msgpack/fallback.py', 'libs/pygls']) {
      assert.ok(fs.existsSync(path.join(bundled, part)), `the .vsix carries bundled/${part}`);
    }

    await workbench.openFile('cnn.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    const lsp = await trace.waitForEvent('language server started', isEvent('lsp.started'), { timeoutMs: 90_000 });
    assert.equal(lsp.python, python, 'the server runs with the torch-only interpreter');
    const conv2Line = Workbench.lineOf(cnn(), 'self.conv2 = nn.Conv2d(');
    await workbench.goToLine(conv2Line);
    const lens = await waitFor('the Break on backward lens over the conv2 line', () => lensAbove(workbench, conv2Line, 'Break on backward'),
      { timeoutMs: 90_000 });
    await workbench.screenshot('code-lenses-from-the-vsix');
    const toggledAt = trace.mark();
    await lens.click();
    const toggled = await trace.waitForEvent('breakpoint toggled from a lens', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });
    assert.equal(toggled.phase, 'backward');
    assert.equal(toggled.line, conv2Line - 1);
  });

  it('b. a backward layer breakpoint stops in conv2 through the bundled debugpy and hookscope', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    const started = trace.mark();
    await dbg.start('Hookscope: CNN');
    const configured = await trace.waitForEvent('session configured', isEvent('session.configured', { type: 'hookscope' }), { after: started });
    assert.equal(configured.backend, 'bundled');
    assert.equal(configured.python, python);
    assert.match(String(configured.bootstrapDir), /extensions[\\/]hookscope\.hookscope-[^\\/]+[\\/]bundled[\\/]tool[\\/]hookscope[\\/]bootstrap$/);
    const hello = await trace.waitForEvent('backend hello', isEvent('hello'), { after: started, timeoutMs: 120_000 });
    assert.equal(hello.hookscope, JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')).version);
    const hit = await trace.waitForEvent('hit in conv2 (backward)', isEvent('hit', { layer: 'conv2', phase: 'backward', pausing: true }),
      { after: started, timeoutMs: 120_000 });
    assert.match(String(hit.reason), /conv2/);
    await dbg.waitForPaused();
    await workbench.waitForActiveEditor('cnn.py', Workbench.lineOf(cnn(), 'self.conv2(x)'));
    const stack = await dbg.waitForStackFrame(/conv2 · backward/);
    assert.deepEqual(stack.filter((r) => /bundled[\\/]|[\\/]hookscope[\\/]/.test(r)), [], `no Hookscope frame: ${stack.join(' | ')}`);
    assert.match(await dbg.waitForVariable(/^grad_output\b/), /grad_output/);

    await panel.show();
    await panel.waitForHeadline(/Paused in layer conv2 \(backward\)/);
    const row = await panel.waitForRow(/^grad_output\[0\]$/, (r) => r.histogramBars > 0);
    assert.match(row.cells.shape, /16.*32.*16.*16/);
    // Pictures need NumPy and matplotlib, which this interpreter lacks: the panel says so, by name.
    await panel.selectVisual('featureMap');
    const notes = await waitFor('a note instead of the feature map', async () => {
      const shown = await panel.notes();
      return shown.some((n) => /Feature maps need numpy and matplotlib/.test(n)) ? shown : false;
    }, { timeoutMs: 60_000 });
    assert.ok(notes.some((n) => n.includes(python) && n.includes('-m pip install numpy matplotlib')), notes.join(' | '));
    await workbench.screenshot('paused-in-conv2-torch-only');

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });

  it('c. break on NaN/Inf stops in the layer where the NaN is born', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('nan.py');
    await workbench.runCommand('Hookscope: Toggle Break on NaN/Inf');
    await trace.waitForEvent('break on NaN/Inf on', isEvent('breakOnNonFinite', { enabled: true }));
    const started = trace.mark();
    await dbg.start('Hookscope: NaN');
    const hit = await trace.waitForEvent('a non-finite hit', (e) => e.event === 'hit' && e.pausing === true, { after: started, timeoutMs: 120_000 });
    assert.equal(hit.layer, 'head.standardize', JSON.stringify(hit));
    await dbg.waitForPaused();
    assert.match(await dbg.waitForVariable(/^layer\b/), /head\.standardize/);
    await workbench.screenshot('paused-on-nan-torch-only');
    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
