// Break on exploding gradients, set from the status bar item's menu: the threshold typed in the
// menu reaches the program, the stop names the layer and the parameter (a parameter-gradient
// stop, its locals in Variables), and the Tensors panel opens beside the code by itself, turned
// to the gradient-flow view of that step.
import assert from 'node:assert/strict';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { EXAMPLE_LAUNCHES } from '../harness/workspace.ts';

const EXPLODE_PY = `"""Each step's loss is ten times the last: the gradients explode."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
for step in range(40):
    optimizer.zero_grad()
    loss = model(torch.randn(32, 8)).pow(2).mean() * 10.0 ** step
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.3g}", flush=True)
`;

describe('break on exploding gradients', function () {
  const session = sessionSteps(() => startHookscopeRun('gradients', {
    files: { 'explode.py': EXPLODE_PY },
    launches: { targets: [...EXAMPLE_LAUNCHES, { name: 'Hookscope: exploding gradients', script: 'explode.py' }] },
  }));

  it('the menu beside Break on NaN/Inf sets the threshold; the stop names the parameter and shows the profile', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('explode.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.waitForStatusBar('gradients off', /Gradients: off/);

    await workbench.runCommand('Hookscope: Break on NaN/Inf and Exploding/Vanishing Gradients…');
    await workbench.pickQuickPickItem('Break on exploding gradients');
    const proposed = await workbench.answerInputBox('100');
    assert.equal(proposed, '100', 'the input box proposes a threshold');
    await trace.waitForEvent('thresholds sent', isEvent('breakOnGradients', { exploding: 100 }));
    await workbench.waitForStatusBar('gradient norm > 100', /Gradient norm > 100: break/);

    const started = trace.mark();
    await dbg.start('Hookscope: exploding gradients');
    const hit = await trace.waitForEvent('a gradient-health hit', (e) => e.event === 'hit' && e.breakpoint === 'gradients', { after: started, timeoutMs: 120_000 });
    assert.equal(hit.phase, 'param_grad');
    assert.match(String(hit.reason), /^Exploding gradient: [02]\.(weight|bias) gradient norm \S+ > 100/, JSON.stringify(hit));
    await dbg.waitForPaused();
    await dbg.waitForScopeExpandedByItself('Locals'); // the stop's locals in sight, the panel opening beside or not
    assert.match(await dbg.waitForVariable(/^param_name\b/), /weight|bias/);
    assert.match(await dbg.waitForVariable(/^layer\b/), new RegExp(String(hit.layer)));

    // The panel opened by itself beside the code (the side bar's section is a strip at a stop) and
    // turned to the gradient-flow view: that step's per-layer gradient norms, on screen.
    await trace.waitForEvent('the panel opened beside the code', isEvent('panel.shownAtStop', { place: 'editor' }), { after: started });
    const wide = new TensorsPanel(workbench, 'editor');
    await wide.waitForHeadline(new RegExp(`Paused in layer ${hit.layer} \\(param_grad\\)`));
    const select = (await wide.getFrame()).locator('[data-testid=visual-select]');
    await waitFor('the panel to show the gradient-flow view', async () => (await select.inputValue()) === 'gradientFlow', { timeoutMs: 30_000 });
    const image = await wide.showVisual('gradientFlow');
    assert.equal(image.visual, 'gradientFlow');
    const [figure] = await wide.waitForFigures('the gradient-flow figure', (figures) => figures.length === 1);
    assert.ok(figure.drawnWidth > 300, `drawn wide enough to read: ${figure.drawnWidth}px`);
    const inView = await wide.figureInView();
    assert.ok(inView.visible, `the figure is in sight without scrolling: ${JSON.stringify(inView)}`);
    assert.equal((await workbench.editorTabs()).active, 'explode.py', 'the code keeps the focus');
    await workbench.screenshot('paused-at-exploding-gradient');
    // The side bar's section shows the same stop.
    await panel.show();
    await panel.waitForHeadline(new RegExp(`Paused in layer ${hit.layer} \\(param_grad\\)`));

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
