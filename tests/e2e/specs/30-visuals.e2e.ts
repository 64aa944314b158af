// Workflows 5 and 6 of issue 6, one debug session of the CNN example:
// Steps run in the order 5a, 5b, 6.
// (5) paused in a conv layer (forward), the Tensors panel renders the feature-map
//     grid (the image's natural size matches what was rendered, and it is not
//     blank); later, paused in a backward pass, the gradient-flow view;
// (6) an intervention (zero channels 0 and 1 of conv2) shows up in the next
//     summary (the output's zero fraction jumps to >= 2/32) and disappears when
//     it is removed.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { TensorsPanel, type TensorRow } from '../harness/tensorsPanel.ts';
import { isEvent, type TraceEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';

const zeroFraction = (row: TensorRow) => Number.parseFloat(row.cells.zeros) / (row.cells.zeros.includes('%') ? 100 : 1);

describe('feature maps, gradient flow and interventions', function () {
  const session = sessionSteps(() => startHookscopeRun('visuals'));
  const cnn = () => path.join(session.run().workspaceDir, 'cnn.py');
  let lastHit: TraceEvent;

  /** Continue and wait for the next pausing hit in `layer`, then for the panel to show its step. */
  async function continueToNextHit(layer: string, phase: string): Promise<TraceEvent> {
    const { trace } = session.run();
    const dbg = new Debugger(session.run().workbench);
    // Other layer breakpoints may pause first: continue past them (a few at most).
    for (let i = 0; i < 4; i++) {
      const after = trace.mark();
      await dbg.continue(false);
      const hit = await trace.waitForEvent('the next pausing hit', isEvent('hit', { pausing: true }), { after, timeoutMs: 60_000 });
      // The debugger's own stop after that hit (so the paused state seen next is the new one).
      await trace.waitForEvent('the debugger stopped', isEvent('dap.stopped'), { after, timeoutMs: 60_000 });
      await dbg.waitForPaused();
      if (hit.layer === layer && hit.phase === phase) return hit;
    }
    throw new Error(`no hit in ${layer} (${phase}) within 4 continues`);
  }

  it('5a. paused in conv2 (forward): the feature-map grid image is rendered and not blank', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('cnn.py');
    await workbench.goToLine(Workbench.lineOf(cnn(), 'self.conv2 = nn.Conv2d('));
    await workbench.runCommand('Hookscope: Toggle Forward Layer Breakpoint');
    await trace.waitForEvent('forward breakpoint on conv2', isEvent('breakpoint.toggled', { present: true, phase: 'forward' }));
    const started = trace.mark();
    await dbg.start('Hookscope: CNN');
    lastHit = await trace.waitForEvent('hit in conv2 (forward)', isEvent('hit', { layer: 'conv2', phase: 'forward', pausing: true }), { after: started, timeoutMs: 90_000 });
    await dbg.waitForPaused();

    await panel.show();
    // Room for the panel, as a user would make it: fold the views not needed here, widen the side bar.
    for (const view of ['Watch', 'Breakpoints', 'Layers', 'Layer Breakpoints']) await workbench.collapseView(view);
    await workbench.setSideBarWidth(760);
    await panel.waitForHeadline(/Paused in layer conv2 \(forward\)/);
    const image = await panel.showVisual('featureMap');
    // The panel may have rendered by itself as soon as it paused: any feature map since the start counts
    // (counting back a few trace lines broke once the trace also recorded the debugger's DAP traffic).
    const render = await trace.waitForEvent('feature map rendered', isEvent('render', { visual: 'featureMap' }), { after: started });
    assert.equal(image.naturalWidth, render.width, `natural width ${image.naturalWidth} = rendered ${render.width}`);
    assert.equal(image.naturalHeight, render.height);
    assert.ok(image.naturalWidth >= 64 && image.naturalHeight >= 64, `a grid of 32 channels is not tiny: ${image.naturalWidth}x${image.naturalHeight}`);
    assert.ok(image.distinctColors > 16, `the feature map is not blank: ${image.distinctColors} colours`);
    await workbench.screenshot('feature-map-conv2');
  });

  it('5b. paused in a backward pass: the gradient-flow view', async function () {
    const { workbench, trace } = session.run();
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('cnn.py');
    await workbench.goToLine(Workbench.lineOf(cnn(), 'self.conv1 = nn.Conv2d('));
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    await trace.waitForEvent('backward breakpoint on conv1', isEvent('breakpoint.toggled', { present: true, phase: 'backward' }));

    lastHit = await continueToNextHit('conv1', 'backward');
    await panel.waitForHeadline(/Paused in layer conv1 \(backward\)/);
    const image = await panel.showVisual('gradientFlow');
    assert.ok(image.naturalWidth > 100 && image.naturalHeight > 50, `a gradient-flow figure: ${image.naturalWidth}x${image.naturalHeight}`);
    assert.ok(image.distinctColors > 4, `the gradient-flow figure is not blank: ${image.distinctColors} colours`);
    await workbench.screenshot('gradient-flow');
    // Back to conv2's forward pass for the intervention.
    lastHit = await continueToNextHit('conv2', 'forward');
  });
  it('6. zeroing two channels of conv2 shows in the next summary and goes away when removed', async function () {
    const { workbench, trace } = session.run();
    const panel = new TensorsPanel(workbench);
    const before = await panel.waitForRow(/^output$/);
    assert.ok(zeroFraction(before) < 0.02, `conv2's output has (almost) no exact zeros before: ${before.cells.zeros}`);

    const addedAt = trace.mark();
    await panel.addIntervention('zero_channels', '0, 1');
    const added = await trace.waitForEvent('intervention added', isEvent('intervention.added'), { after: addedAt });
    assert.equal(added.layer, 'conv2');
    assert.deepEqual(added.channels, [0, 1]);
    await waitFor('the intervention listed in the panel', async () => (await panel.interventionItems()).some((t) => /conv2/.test(t)), { timeoutMs: 30_000 });
    await workbench.waitForStatusBar('1 intervention', /1 intervention/);
    await workbench.screenshot('intervention-added');

    lastHit = await continueToNextHit('conv2', 'forward');
    const withIntervention = await panel.waitForRow(/^output$/, (r) => zeroFraction(r) >= 2 / 32 - 0.001, { timeoutMs: 30_000 });
    assert.ok(zeroFraction(withIntervention) < 0.5, `only two of 32 channels are zeroed: ${withIntervention.cells.zeros}`);
    await workbench.screenshot('summary-with-zeroed-channels');

    const removedAt = trace.mark();
    const frame = await panel.getFrame();
    await frame.locator('[data-testid=iv-remove]').first().click();
    await trace.waitForEvent('intervention removed', isEvent('intervention.removed', { removed: true }), { after: removedAt }).catch(async () =>
      trace.waitForEvent('intervention removed', isEvent('intervention.removed'), { after: removedAt }));
    await waitFor('no intervention listed', async () => (await panel.interventionItems()).length === 0, { timeoutMs: 30_000 });

    lastHit = await continueToNextHit('conv2', 'forward');
    const after = await panel.waitForRow(/^output$/, (r) => zeroFraction(r) < 0.02, { timeoutMs: 30_000 });
    assert.ok(zeroFraction(after) < 0.02, `zeros gone after removal: ${after.cells.zeros}`);
    const dbg = new Debugger(workbench);
    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
  });

});
