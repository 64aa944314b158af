// Workflow 8 of issue 6, faults:
// (a) stopping the debug session mid-run leaves no process and a clean
//     extension state (status bar and panel back to "not connected");
// (b) an interpreter without the hookscope package (a bare venv, which also
//     lacks debugpy) gets the actionable notification naming the interpreter
//     and offering the install.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { RUNS_DIR } from '../harness/paths.ts';
import { findRunProcesses } from '../harness/processes.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';

describe('faults: stopping mid-run', function () {
  const session = sessionSteps(() => startHookscopeRun('fault-stop'));

  it('8a. stopping the debug session mid-run leaves no process and a clean state', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('cnn.py');
    const started = trace.mark();
    await dbg.start('Hookscope: CNN (long run)');
    const hello = await trace.waitForEvent('backend hello', isEvent('hello'), { after: started, timeoutMs: 90_000 });
    await trace.waitForEvent('model found', isEvent('modelAdded'), { after: started, timeoutMs: 90_000 });
    await workbench.waitForStatusBar('connected', /Hookscope: 1 process · 1 model/);
    await panel.show();
    await workbench.screenshot('running');

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('process exited', isEvent('process.exited'), { after: stoppedAt, timeoutMs: 60_000 });
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
    const run = session.run();
    await waitFor('the debuggee and the debug adapter to exit', () => {
      const left = findRunProcesses(run.codeServer!.marks()).filter((p) => /cnn\.py|debugpy/.test(p.cmdline) || p.pid === hello.pid);
      return left.length === 0;
    }, { timeoutMs: 30_000 });
    await workbench.waitForStatusBar('not connected', /Hookscope: not connected/);
    await panel.waitForHeadline(/Not connected/);
    await workbench.screenshot('stopped-clean');
  });
});

describe('faults: backend missing from the interpreter', function () {
  let bareVenv = '';
  const session = sessionSteps(() => {
    bareVenv = path.join(RUNS_DIR, `bare-venv-${Date.now()}`);
    execFileSync('python3', ['-m', 'venv', '--without-pip', bareVenv]);
    return startHookscopeRun('fault-missing-backend', { pythonPath: path.join(bareVenv, 'bin', 'python') });
  });

  it('8b. shows the actionable notification naming the interpreter', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const python = path.join(bareVenv, 'bin', 'python');
    await workbench.openFile('cnn.py');
    await workbench.runCommand('Debug: Select and Start Debugging');
    await workbench.pickQuickPickItem('Hookscope: CNN');
    const missing = await trace.waitForEvent('backend missing', isEvent('backend.missing'), { timeoutMs: 90_000 });
    assert.equal(missing.python, python);
    const toast = await workbench.waitForNotification(/does not have the hookscope package/);
    const text = await toast.innerText();
    assert.ok(text.includes(python), `the notification names the interpreter: ${text}`);
    const buttons = await toast.locator('.monaco-button').allInnerTexts();
    assert.ok(buttons.some((b) => /Install hookscope/.test(b)), `it offers the install: ${buttons.join(', ')}`);
    await workbench.screenshot('backend-missing-notification');
    // Whatever VS Code did with the session (the bare venv has no debugpy either), none is left running.
    await dbg.waitForSessionEnd({ timeoutMs: 60_000 }).catch(async () => dbg.stop());
  });
});
