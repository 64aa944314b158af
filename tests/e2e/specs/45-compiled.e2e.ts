// Issue 8, torch.compile: the program runs a torch.compile'd model; a forward
// layer breakpoint set on fc1 while it runs does not fire (dynamo inlined fc1
// before the hook existed). The Layers tree marks the layer compiled and the
// notice offers the opt-in; clicking it turns on `hookscope.runCompiledEagerly`
// for the running process: the next step runs eagerly and VS Code stops in fc1.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';

/** The last "step N loss" the program printed in the Debug Console. */
async function lastStep(dbg: Debugger): Promise<number> {
  const steps = (await dbg.replRows()).map((r) => /step (\d+) loss/.exec(r)).filter((m) => m !== null);
  return steps.length ? Number(steps[steps.length - 1]![1]) : -1;
}

describe('torch.compile: told, then opted in from the notice', function () {
  const session = sessionSteps(() => startHookscopeRun('compiled'));

  it('1. a breakpoint inside the running compiled model is flagged; "run eagerly" makes it stop there', async function () {
    const { workbench, trace, workspaceDir } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('compiled.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });

    const started = trace.mark();
    await dbg.start('Hookscope: compiled (long run)');
    await trace.waitForEvent('the compiled model found', isEvent('modelAdded', { cls: 'OptimizedModule' }), { after: started, timeoutMs: 120_000 });
    await dbg.openDebugConsole();
    await waitFor('compiled steps running', async () => (await lastStep(dbg)) >= 3, { timeoutMs: 60_000 });

    // The model is compiled and running: set the breakpoint now.
    await workbench.goToLine(Workbench.lineOf(path.join(workspaceDir, 'compiled.py'), 'self.fc1 = nn.Linear('));
    const toggledAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Forward Layer Breakpoint');
    await trace.waitForEvent('breakpoint on fc1', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });
    const notice = await trace.waitForEvent('the compiled notice', isEvent('notice', { code: 'compiled' }), { after: toggledAt, timeoutMs: 30_000 });
    assert.match(String(notice.message), /_orig_mod\.fc1/);
    // Compiled: the hook is in place but does not fire, step after step (what the notice says).
    const stepAtNotice = await lastStep(dbg);
    await waitFor('more compiled steps', async () => (await lastStep(dbg)) >= stepAtNotice + 5, { timeoutMs: 60_000 });
    assert.equal(trace.find(isEvent('hit'), toggledAt), undefined, 'no hit while compiled');

    await workbench.runCommand('View: Show Run and Debug');
    await workbench.expandView('Layers');
    const rows = await waitFor('the Layers tree to mark fc1 compiled', async () => {
      await workbench.expandAllTreeRows('Layers');
      const text = (await workbench.allTreeRows('Layers')).join('\n');
      return /fc1[^\n]*compiled/.test(text) ? text : false;
    }, { timeoutMs: 30_000 });
    assert.match(rows, /fc2[^\n]*compiled/);

    const toast = await workbench.waitForNotification(/torch\.compile'd module/);
    await workbench.screenshot('compiled-notice');
    const optedAt = trace.mark();
    await toast.locator('.monaco-button', { hasText: 'Run Compiled Code Eagerly While Debugging' }).click();
    await trace.waitForEvent('eager opt-in sent', isEvent('compiledEager', { enabled: true }), { after: optedAt, timeoutMs: 30_000 });
    const hit = await trace.waitForEvent('the fc1 hit', isEvent('hit', { pausing: true }), { after: optedAt, timeoutMs: 60_000 });
    assert.equal(hit.layer, '_orig_mod.fc1');
    assert.equal(hit.phase, 'forward');
    await dbg.waitForPaused();
    assert.match(await dbg.waitForVariable(/^layer\b/), /_orig_mod\.fc1/);
    await workbench.screenshot('compiled-fc1-paused-eagerly');

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
