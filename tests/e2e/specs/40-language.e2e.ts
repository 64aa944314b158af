// Workflow 7 of issue 6 (Hookscope's language server in the editor): code
// lenses ("Break on forward" / "Break on backward") on the layer lines of the
// CNN example, one set of lenses over a line that makes several layers, and a discarded hook handle in a user file flagged with HS001
// whose quick fix, applied from the Ctrl+. menu, keeps the handle.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { hookscopeVsix, sessionSteps } from '../harness/hookscope.ts';
import { EXAMPLES_DIR } from '../harness/paths.ts';
import { E2ERun } from '../harness/session.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';
import { hookscopeSettings, launchJson } from '../harness/workspace.ts';

const LEAKY_HOOKS = `"""Registers a hook and throws its handle away (the language server flags it)."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())


def log_output(module, inputs, output):
    print(module, output.shape)


model[0].register_forward_hook(log_output)
model(torch.zeros(1, 4))
`;

/** A model the examples do not have: a ModuleDict of two branches made on one line. */
const ROUTER = `"""Two branches in a ModuleDict made on one line."""
import torch
from torch import nn


class Router(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.paths = nn.ModuleDict({"loud": nn.Linear(4, 4), "mute": nn.Linear(4, 4)})

    def forward(self, x):
        return self.paths["loud"](x) + self.paths["mute"](x)
`;

describe('language server: code lenses and diagnostics', function () {
  const session = sessionSteps(() => E2ERun.start({
    name: 'language',
    extensions: [hookscopeVsix()],
    workspaceSource: EXAMPLES_DIR,
    workspaceFiles: { '.vscode/launch.json': launchJson(), 'leaky_hooks.py': LEAKY_HOOKS, 'router.py': ROUTER },
    settings: ({ traceFile }) => hookscopeSettings({ traceFile }),
  }));

  it('7a. code lenses appear on the layer lines', async function () {
    const { workbench, trace } = session.run();
    await workbench.openFile('cnn.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    const conv1Line = Workbench.lineOf(path.join(session.run().workspaceDir, 'cnn.py'), 'self.conv1 = nn.Conv2d(');
    await workbench.goToLine(conv1Line);
    const lenses = await waitFor('code lenses on the layer lines', async () => {
      const texts = await workbench.page.locator('.monaco-editor .codelens-decoration').allInnerTexts();
      // Lenses resolve lazily, a few lines at a time: wait until several layer lines have theirs.
      const layerLines = texts.filter((t) => /Break on forward/.test(t) && /Break on backward/.test(t));
      return layerLines.length >= 3 ? texts : false;
    }, { timeoutMs: 90_000 });
    assert.ok(lenses.filter((t) => /Break on forward/.test(t)).length >= 3, `lenses on several layer lines: ${lenses.join(' | ')}`);
    await workbench.screenshot('code-lenses');

    // Clicking a lens toggles a layer breakpoint on its line.
    const toggledAt = session.run().trace.mark();
    await workbench.page.locator('.monaco-editor .codelens-decoration a', { hasText: 'Break on backward' }).first().click();
    const toggled = await trace.waitForEvent('breakpoint toggled from a lens', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });
    assert.equal(toggled.phase, 'backward');
  });

  it('7a2. a line that makes several layers gets one set of lenses, whose tooltips name them', async function () {
    const { workbench, trace } = session.run();
    await workbench.openFile('router.py');
    const moduleDictLine = Workbench.lineOf(path.join(session.run().workspaceDir, 'router.py'), 'self.paths = nn.ModuleDict(');
    await workbench.goToLine(moduleDictLine);
    // The ModuleDict line and the call line each make or call several layers: each row is one set.
    const rows = workbench.page.locator('.monaco-editor .codelens-decoration', { hasText: 'Watch…' });
    const texts = await waitFor('the lens rows of the two several-layer lines', async () => {
      const all = await rows.allInnerTexts();
      return all.length >= 2 ? all : false;
    }, { timeoutMs: 90_000 });
    for (const text of texts) {
      assert.deepEqual(text.split('|').map((t) => t.replace(/\u00a0/g, ' ').trim()), ['Break on forward', 'Break on backward', 'Watch…'], `one set per line: ${JSON.stringify(texts)}`);
    }
    const forwards = rows.locator('a', { hasText: 'Break on forward' });
    const tooltips = await Promise.all((await forwards.all()).map((a) => a.getAttribute('title')));
    // the rows' DOM order need not be the lines' order: find the ModuleDict line's by its tooltip
    const index = tooltips.findIndex((t) => /^Stop in the forward of paths, paths\['loud'\] or paths\['mute'\] \(a layer breakpoint on this line/.test(t ?? ''));
    assert.ok(index >= 0, `a tooltip naming the ModuleDict line's three layers: ${JSON.stringify(tooltips)}`);
    assert.ok(tooltips.some((t) => /^Stop in the forward of paths\['loud'\] or paths\['mute'\] /.test(t ?? '')), `the call line's: ${JSON.stringify(tooltips)}`);
    const forward = forwards.nth(index);
    await workbench.screenshot('code-lenses-several-layers');
    const at = trace.mark();
    await forward.click();
    const toggled = await trace.waitForEvent('the line breakpoint from the lens', isEvent('breakpoint.toggled', { present: true }), { after: at });
    assert.equal(toggled.line, moduleDictLine - 1);
    assert.equal(toggled.phase, 'forward');
  });

  it('7b. a discarded hook handle shows a diagnostic whose quick fix applies', async function () {
    const { workbench } = session.run();
    const file = path.join(session.run().workspaceDir, 'leaky_hooks.py');
    await workbench.openFile('leaky_hooks.py');
    const line = Workbench.lineOf(file, 'register_forward_hook(log_output)');
    await waitFor('an HS001 warning squiggle', async () => (await workbench.page.locator('.monaco-editor .squiggly-warning, .monaco-editor .squiggly-error').count()) > 0, { timeoutMs: 90_000 });
    await workbench.waitForStatusBar('one problem', /(Warnings?: 1|1 warning|Problems: 1)/i).catch(() => undefined);
    await workbench.screenshot('discarded-handle-diagnostic');

    await workbench.goToLine(line);
    await workbench.page.keyboard.press('End');
    await workbench.page.keyboard.press('Control+.');
    const item = workbench.page.locator('.action-widget .monaco-list-row', { hasText: /HS001/ }).first();
    await item.waitFor({ timeout: 30_000 }).catch(async () => {
      const offered = await workbench.page.locator('.action-widget .monaco-list-row').allInnerTexts();
      throw new Error(`no quick fix for HS001 offered; the menu has: ${JSON.stringify(offered)}`);
    });
    await workbench.screenshot('quick-fix-menu');
    await item.click();
    await workbench.page.keyboard.press('Control+S');
    const fixed = await waitFor('the quick fix to keep the handle', () => {
      const text = fs.readFileSync(file, 'utf8');
      return /^\s*\w+\s*=\s*model\[0\]\.register_forward_hook\(log_output\)/m.test(text) ? text : false;
    }, { timeoutMs: 30_000 });
    assert.doesNotMatch(fixed, /^model\[0\]\.register_forward_hook/m);
    await waitFor('the warning to go away', async () => (await workbench.page.locator('.monaco-editor .squiggly-warning').count()) === 0, { timeoutMs: 60_000 });
    await workbench.screenshot('quick-fix-applied');
  });
});
