// Workflow 4 of issue 6: turn on Break on NaN/Inf from the palette and debug
// the NaN example; VS Code stops in the layer where the NaN is born
// (head.standardize, forward), not at the loss, at the line whose op made it
// (Standardize.forward's division), and the Tensors panel names it.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent } from '../harness/trace.ts';
import { Workbench } from '../harness/workbench.ts';

describe('break on NaN/Inf', function () {
  const session = sessionSteps(() => startHookscopeRun('nan'));

  it('4. stops in the planted layer and the panel names it', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('nan.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.waitForStatusBar('NaN/Inf off', /NaN\/Inf: off/);
    await workbench.runCommand('Hookscope: Toggle Break on NaN/Inf');
    await trace.waitForEvent('break on NaN/Inf on', isEvent('breakOnNonFinite', { enabled: true }));
    await workbench.waitForStatusBar('NaN/Inf: break', /NaN\/Inf: break/);

    const started = trace.mark();
    await dbg.start('Hookscope: NaN');
    const hit = await trace.waitForEvent('a non-finite hit', (e) => e.event === 'hit' && e.pausing === true, { after: started, timeoutMs: 120_000 });
    assert.equal(hit.layer, 'head.standardize', `the NaN is born in head.standardize: ${JSON.stringify(hit)}`);
    assert.equal(hit.phase, 'forward');
    await dbg.waitForPaused();
    const stopped = await trace.waitForEvent('DAP stopped', isEvent('dap.stopped'), { after: started });
    assert.match(String(stopped.description ?? hit.reason), /head\.standardize/);
    assert.match(await dbg.waitForVariable(/^layer\b/), /head\.standardize/);
    // The editor shows the op's line, in the user's frame that ran it, with its locals.
    const nanPy = path.join(session.run().workspaceDir, 'nan.py');
    await workbench.waitForActiveEditor('nan.py', Workbench.lineOf(nanPy, '/ x.std(dim=0)'));
    const stack = await dbg.waitForStackFrame(/Tensor\.div → NaN\/Inf/);
    assert.match(stack.find((r) => /\.py/.test(r)) ?? '', /Standardize\.forward · Tensor\.div → NaN\/Inf.*nan\.py/, stack.join(' | '));
    assert.match(await dbg.waitForVariable(/^x\b/), /^x\b/);

    await panel.show();
    await panel.waitForHeadline(/head\.standardize/);
    // The panel names the op and links the line where the NaN was born.
    const divLine = Workbench.lineOf(nanPy, '/ x.std(dim=0)');
    assert.match(await panel.text('panel-born-at'), new RegExp(`Tensor\\.div → NaN/Inf at nan\\.py:${divLine} in Standardize\\.forward`));
    const output = await panel.waitForRow(/^output$/);
    assert.ok(output.nonFinite, `the output row of head.standardize is flagged non-finite: ${JSON.stringify(output)}`);
    assert.notEqual(output.cells.nonfinite, '', 'the NaN/Inf cell counts the NaNs');
    await workbench.screenshot('paused-in-head-standardize');

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
